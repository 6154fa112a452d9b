// retry-fetch/server beyond the store scenarios: option checks, `required`, `header`, custom
// stores (the lock take-over path), malformed records, and the node:http adapter.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { idempotency, MemoryStore, toNodeHandler } from 'retry-fetch/server';
import { serve, withServer, send, sleep, newKey } from './support.mjs';

const ok = async () => new Response('ok');
const post = (key, init = {}) =>
  new Request('http://localhost/pay', { method: 'POST', body: 'x', ...init, headers: { ...(key ? { 'Idempotency-Key': key } : {}), ...init.headers } });

test('invalid options are TypeErrors naming the option, the value and what is allowed', () => {
  const cases = [
    [{ ttlMs: 0 }, 'idempotency: invalid option "ttlMs": got 0; expected an integer number of milliseconds from 1 to 31536000000 (365 days)'],
    [{ ttlMs: '1000' }, 'idempotency: invalid option "ttlMs": got "1000"; expected an integer number of milliseconds from 1 to 31536000000 (365 days)'],
    [{ lockTimeoutMs: 1.5 }, 'idempotency: invalid option "lockTimeoutMs": got 1.5; expected an integer number of milliseconds from 1 to 2147483647'],
    [{ waitTimeoutMs: -1 }, 'idempotency: invalid option "waitTimeoutMs": got -1; expected an integer number of milliseconds from 0 to 2147483647'],
    [{ pollMs: 0 }, 'idempotency: invalid option "pollMs": got 0; expected an integer number of milliseconds from 1 to 2147483647'],
    [{ pollMs: NaN }, 'idempotency: invalid option "pollMs": got NaN; expected an integer number of milliseconds from 1 to 2147483647'],
    [{ concurrent: 'queue' }, `idempotency: invalid option "concurrent": got "queue"; expected 'wait' or 'reject'`],
    [{ header: 'Idempotency Key' }, 'idempotency: invalid option "header": got "Idempotency Key"; expected an HTTP header name (letters, digits and !#$%&\'*+-.^_`|~)'],
    [{ required: 'yes' }, 'idempotency: invalid option "required": got "yes"; expected true, false or a function (request) => boolean'],
    [{ identity: 'user' }, 'idempotency: invalid option "identity": got "user"; expected a function'],
    [{ onStoreError: true }, 'idempotency: invalid option "onStoreError": got true; expected a function'],
    [{ store: new Map() }, 'idempotency: invalid option "store": got [object Map]; expected an IdempotencyStore: an object with acquire, reclaim, complete and release methods'],
    [42, 'idempotency: invalid option "options": got 42; expected an object'],
  ];
  for (const [options, message] of cases) {
    assert.throws(() => idempotency(ok, options), { name: 'TypeError', message }, JSON.stringify(options));
  }
  assert.throws(() => idempotency('handler'), { name: 'TypeError', message: 'idempotency: the handler must be a function (request) => Promise<Response>; got "handler"' });
  assert.throws(() => toNodeHandler(undefined), { name: 'TypeError', message: /toNodeHandler: the handler must be a function/ });
  assert.throws(() => toNodeHandler(ok, { onError: 1 }), { name: 'TypeError', message: 'toNodeHandler: invalid option "onError": got 1; expected a function' });
  // undefined means the default; every valid value is accepted.
  idempotency(ok, undefined);
  idempotency(ok, { ttlMs: undefined, concurrent: 'reject', waitTimeoutMs: 0, required: false, header: 'X-Request-Key', store: new MemoryStore() });
});

test('required: a boolean or a function; a function must return a boolean', async () => {
  assert.equal((await idempotency(ok, { required: false })(post())).status, 200);
  assert.equal((await idempotency(ok)(new Request('http://localhost/pay', { method: 'DELETE' }))).status, 200);
  assert.equal((await idempotency(ok, { required: true })(new Request('http://localhost/x'))).status, 400);
  const byPath = idempotency(ok, { required: (request) => new URL(request.url).pathname.startsWith('/pay') });
  assert.equal((await byPath(post())).status, 400);
  assert.equal((await byPath(new Request('http://localhost/search', { method: 'POST', body: 'q' }))).status, 200);
  const async = idempotency(ok, { required: async () => false });
  assert.equal((await async(post())).status, 200);
  await assert.rejects(idempotency(ok, { required: () => 'yes' })(post()), {
    name: 'TypeError',
    message: 'idempotency: option "required" returned "yes"; expected true or false',
  });
});

test('a key on a GET is honoured too; a custom header name works', async () => {
  let runs = 0;
  const h = idempotency(async () => new Response(String(++runs)), { header: 'X-Request-Key' });
  const get = () => new Request('http://localhost/report?id=1', { headers: { 'X-Request-Key': 'r1' } });
  assert.equal(await (await h(get())).text(), '1');
  const again = await h(get());
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(await again.text(), '1');
  const missing = await h(post('ignored-because-other-header'));
  assert.equal(missing.status, 400);
  assert.match((await missing.json()).detail, /requires an X-Request-Key header/);
});

test('identity must return a string or undefined', async () => {
  const h = idempotency(ok, { identity: () => 42 });
  await assert.rejects(h(post(newKey())), { name: 'TypeError', message: 'idempotency: option "identity" returned 42; expected a string or undefined' });
  const asyncIdentity = idempotency(ok, { identity: async () => 'alice' });
  assert.equal((await asyncIdentity(post(newKey()))).status, 200);
});

test('the handler must resolve with a Response; the lock is released when it does not', async () => {
  let calls = 0;
  const h = idempotency(async () => (++calls === 1 ? 'not a response' : new Response('fine')));
  const key = newKey();
  await assert.rejects(h(post(key)), { name: 'TypeError', message: 'idempotency: the handler must resolve with a Response; got "not a response"' });
  assert.equal(await (await h(post(key))).text(), 'fine');
});

// A store like a SQL table: a lock stays until replaced, it never expires by itself, so an
// expired lock reaches the state machine ('lock-expired') and is taken over with reclaim().
class TableStore {
  rows = new Map();
  calls = [];
  acquire(key, lock) {
    this.calls.push('acquire');
    const row = this.rows.get(key);
    if (row) return structuredClone(row);
    this.rows.set(key, structuredClone(lock));
    return null;
  }
  reclaim(key, staleToken, lock) {
    this.calls.push('reclaim');
    const row = this.rows.get(key);
    if (row?.state !== 'in-progress' || row.token !== staleToken) return false;
    this.rows.set(key, structuredClone(lock));
    return true;
  }
  complete(key, token, record) {
    this.calls.push('complete');
    const row = this.rows.get(key);
    if (row?.state !== 'in-progress' || row.token !== token) return false;
    this.rows.set(key, structuredClone(record));
    return true;
  }
  release(key, token) {
    this.calls.push('release');
    const row = this.rows.get(key);
    return row?.state === 'in-progress' && row.token === token && this.rows.delete(key);
  }
}

test('a custom store whose locks do not expire: an expired lock is taken over with reclaim()', async () => {
  const store = new TableStore();
  const key = newKey();
  // A holder that died 1 s ago, with another payload even.
  store.rows.set(`-:${key}`, { state: 'in-progress', token: 'dead', fingerprint: 'other', lockExpiresAt: Date.now() - 1000 });
  let runs = 0;
  const h = idempotency(async () => new Response(`run ${++runs}`), { store });
  const res = await h(post(key));
  assert.equal(await res.text(), 'run 1');
  assert.deepEqual(store.calls, ['acquire', 'reclaim', 'complete']);
  const replay = await h(post(key));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(await replay.text(), 'run 1');
  // A live lock of another request is waited for; of another payload, a 422 at once.
  store.rows.set('-:live', { state: 'in-progress', token: 't', fingerprint: 'other', lockExpiresAt: Date.now() + 60_000 });
  assert.equal((await h(post('live'))).status, 422);
});

test('a store that returns a malformed record fails the request with a TypeError', async () => {
  const store = new TableStore();
  const h = idempotency(ok, { store });
  for (const [row, message] of [
    [{ state: 'done', fingerprint: 'f' }, /state is neither 'in-progress' nor 'completed'/],
    [{ state: 'completed' }, /no string fingerprint/],
    [{ state: 'in-progress', fingerprint: 'f', token: 't' }, /no number lockExpiresAt/],
    [{ state: 'in-progress', fingerprint: 'f', lockExpiresAt: 0 }, /a lock without a string token/],
    ['completed', /not an object/],
  ]) {
    store.rows.set('-:k', row);
    await assert.rejects(h(post('k')), { name: 'TypeError', message }, JSON.stringify(row));
  }
  // A completed record with the right fingerprint but a broken response.
  const fp = await (async () => {
    const s = new TableStore();
    await idempotency(ok, { store: s })(post('k'));
    return s.rows.get('-:k').fingerprint;
  })();
  store.rows.set('-:k', { state: 'completed', fingerprint: fp, response: { status: 'x' } });
  await assert.rejects(h(post('k')), { name: 'TypeError', message: /malformed stored response/ });
});

test('a store failing after the handler ran: the response is still returned, onStoreError is told', async () => {
  const store = new MemoryStore();
  store.complete = async () => {
    throw new Error('redis down');
  };
  const told = [];
  const h = idempotency(async () => new Response('charged'), { store, onStoreError: (error, operation) => told.push([operation, error.message]) });
  const res = await h(post(newKey()));
  assert.equal(await res.text(), 'charged');
  assert.deepEqual(told, [['complete', 'redis down']]);
  // A store failing before the handler ran fails the request: nothing was done.
  store.acquire = async () => {
    throw new Error('redis down');
  };
  let ran = false;
  await assert.rejects(idempotency(async () => ((ran = true), new Response()), { store })(post(newKey())), /redis down/);
  assert.equal(ran, false);
});

test('a waiting request stops polling when its client disconnects', async () => {
  const store = new MemoryStore();
  let acquires = 0;
  const acquire = store.acquire.bind(store);
  store.acquire = (...args) => (acquires++, acquire(...args));
  const h = idempotency(async () => (await sleep(400), new Response('slow')), { store, pollMs: 10 });
  await withServer(h, async (server) => {
    const key = newKey();
    const first = send(server.url, { key });
    await sleep(30);
    const controller = new AbortController();
    const second = send(server.url, { key, signal: controller.signal }).catch((e) => e.name);
    await sleep(60);
    controller.abort();
    assert.equal(await second, 'AbortError');
    await sleep(30);
    const seen = acquires;
    await sleep(100);
    assert.equal(acquires, seen, 'no more polling after the disconnect');
    assert.equal(await (await first).text(), 'slow');
    assert.equal(server.errors.length, 0, 'a disconnect is not reported as an error');
  });
});

test('toNodeHandler: request body and headers in, status, headers and streamed body out', async () => {
  const big = 'x'.repeat(3 * 1024 * 1024);
  const server = await serve(async (request) => {
    const body = await request.text();
    const chunks = [new TextEncoder().encode('first,'), new TextEncoder().encode(`len=${body.length},`), new TextEncoder().encode(request.headers.get('x-in') ?? '')];
    const stream = new ReadableStream({
      pull(controller) {
        const next = chunks.shift();
        if (next) controller.enqueue(next);
        else controller.close();
      },
    });
    const headers = new Headers({ 'X-Url': request.url, 'X-Method': request.method });
    headers.append('Set-Cookie', 'a=1');
    headers.append('Set-Cookie', 'b=2');
    return new Response(stream, { status: 207, statusText: 'Multi', headers });
  });
  try {
    const res = await fetch(`${server.url}/echo?q=1`, { method: 'PUT', body: big, headers: { 'X-In': 'hello' } });
    assert.equal(res.status, 207);
    assert.equal(res.statusText, 'Multi');
    assert.equal(res.headers.get('x-url'), `${server.url}/echo?q=1`);
    assert.equal(res.headers.get('x-method'), 'PUT');
    assert.deepEqual(res.headers.getSetCookie(), ['a=1', 'b=2']);
    assert.equal(await res.text(), `first,len=${big.length},hello`);
    const head = await fetch(`${server.url}/echo`, { method: 'HEAD' });
    assert.equal(head.status, 207);
    assert.equal(await head.text(), '');
  } finally {
    await server.close();
  }
});

test('toNodeHandler: a throwing handler, or one that does not return a Response, is a 500', async () => {
  let call = 0;
  const server = await serve(async () => {
    call++;
    if (call === 1) throw new Error('boom');
    return { status: 'nope' };
  });
  try {
    const thrown = await fetch(server.url);
    assert.equal(thrown.status, 500);
    assert.equal(await thrown.text(), 'Internal Server Error\n');
    const wrong = await fetch(server.url);
    assert.equal(wrong.status, 500);
    await wrong.text();
    assert.equal(server.errors.length, 2);
    assert.equal(server.errors[0].message, 'boom');
    assert.match(server.errors[1].message, /toNodeHandler: the handler must resolve with a Response/);
  } finally {
    await server.close();
  }
});

test('toNodeHandler: the listener resolves once the response is written; a throwing onError is contained', async () => {
  const listener = toNodeHandler(async () => {
    throw new Error('boom');
  }, { onError: () => {
    throw new Error('onError broke too');
  } });
  const written = [];
  let finished = false;
  const res = {
    headersSent: false, destroyed: false, writableFinished: false,
    on() {}, once() {}, off() {},
    writeHead(status) { written.push(status); this.headersSent = true; },
    write() { return true; },
    end(body) { written.push(body); finished = true; },
    destroy() {},
  };
  const req = { method: 'GET', url: '/', headers: { host: 'localhost' }, rawHeaders: ['Host', 'localhost'] };
  const result = listener(req, res);
  assert.ok(result instanceof Promise);
  assert.equal(await result, undefined);
  assert.ok(finished);
  assert.deepEqual(written, [500, 'Internal Server Error\n']);
});
