// retry-fetch/server beyond the store scenarios: option checks, `required`, `header`,
// `maxBodyBytes`, custom stores (the lock take-over path), a store that is down or returns
// malformed records, and the node:http adapter.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { idempotency, idempotent, MemoryStore, toNodeHandler } from 'retry-fetch/server';
import { serve, withServer, send, sleep, newKey, deferred, problemOf, failing, fingerprintOf, spyStore } from './support.mjs';

const ok = async () => new Response('ok');
const post = (key, init = {}) =>
  new Request('http://localhost/pay', { method: 'POST', body: 'x', ...init, headers: { ...(key ? { 'Idempotency-Key': key } : {}), ...init.headers } });

test('invalid options are TypeErrors naming the option, the value and what is allowed', () => {
  const ms = 'an integer number of milliseconds from 1 to 2147483647';
  const lock = 'an integer number of milliseconds from 1000 to 2147483647 (a live holder renews its lock every third of it)';
  const secret = 'a string of at least 16 characters that every instance sharing the store uses (e.g. 64 random hex digits from your secret manager)';
  const methods = "an array of HTTP method names (e.g. ['GET', 'HEAD', 'OPTIONS'])";
  const cases = [
    [{ ttlMs: 0 }, 'idempotency: invalid option "ttlMs": got 0; expected an integer number of milliseconds from 1 to 31536000000 (365 days)'],
    [{ ttlMs: '1000' }, 'idempotency: invalid option "ttlMs": got "1000"; expected an integer number of milliseconds from 1 to 31536000000 (365 days)'],
    [{ ttlMs: null }, 'idempotency: invalid option "ttlMs": got null; expected an integer number of milliseconds from 1 to 31536000000 (365 days)'],
    [{ lockTimeoutMs: 1.5 }, `idempotency: invalid option "lockTimeoutMs": got 1.5; expected ${lock}`],
    [{ lockTimeoutMs: 0 }, `idempotency: invalid option "lockTimeoutMs": got 0; expected ${lock}`],
    [{ lockTimeoutMs: 1 }, `idempotency: invalid option "lockTimeoutMs": got 1; expected ${lock}`],
    [{ lockTimeoutMs: 999 }, `idempotency: invalid option "lockTimeoutMs": got 999; expected ${lock}`],
    [{ lockTimeoutMs: 1000.5 }, `idempotency: invalid option "lockTimeoutMs": got 1000.5; expected ${lock}`],
    [{ lockTimeoutMs: 2 ** 31 }, `idempotency: invalid option "lockTimeoutMs": got 2147483648; expected ${lock}`],
    [{ handlerTimeoutMs: 0 }, `idempotency: invalid option "handlerTimeoutMs": got 0; expected ${ms}`],
    [{ handlerTimeoutMs: 1.5 }, `idempotency: invalid option "handlerTimeoutMs": got 1.5; expected ${ms}`],
    [{ handlerTimeoutMs: '100' }, `idempotency: invalid option "handlerTimeoutMs": got "100"; expected ${ms}`],
    [{ storeTimeoutMs: 0 }, `idempotency: invalid option "storeTimeoutMs": got 0; expected ${ms}`],
    [{ storeTimeoutMs: 2.5 }, `idempotency: invalid option "storeTimeoutMs": got 2.5; expected ${ms}`],
    [{ storeTimeoutMs: 2 ** 31 }, `idempotency: invalid option "storeTimeoutMs": got 2147483648; expected ${ms}`],
    [{ storeTimeoutMs: '5000' }, `idempotency: invalid option "storeTimeoutMs": got "5000"; expected ${ms}`],
    [{ secret: 'too short' }, `idempotency: invalid option "secret": got "too short"; expected ${secret}`],
    [{ secret: 'x'.repeat(15) }, `idempotency: invalid option "secret": got "${'x'.repeat(15)}"; expected ${secret}`],
    [{ secret: 42 }, /^idempotency: invalid option "secret": got 42; expected a string of at least 16 characters/],
    [{ ignoredMethods: ['G ET'] }, `idempotency: invalid option "ignoredMethods": got "G ET"; expected ${methods}`],
    [{ ignoredMethods: [''] }, `idempotency: invalid option "ignoredMethods": got ""; expected ${methods}`],
    [{ ignoredMethods: 'GET' }, /^idempotency: invalid option "ignoredMethods": got "GET"; expected an array of HTTP method names/],
    // Strings are quoted as JSON quotes them: a quote or a backslash inside stays readable.
    [{ header: 'a"b' }, 'idempotency: invalid option "header": got "a\\"b"; expected an HTTP header name (letters, digits and !#$%&\'*+-.^_`|~)'],
    [{ concurrent: 'a\\b\n' }, `idempotency: invalid option "concurrent": got "a\\\\b\\n"; expected 'wait' or 'reject'`],
    [{ waitTimeoutMs: -1 }, 'idempotency: invalid option "waitTimeoutMs": got -1; expected an integer number of milliseconds from 0 to 2147483647'],
    [{ pollMs: 0 }, `idempotency: invalid option "pollMs": got 0; expected ${ms}`],
    [{ pollMs: NaN }, `idempotency: invalid option "pollMs": got NaN; expected ${ms}`],
    [{ maxBodyBytes: -1 }, 'idempotency: invalid option "maxBodyBytes": got -1; expected an integer number of bytes from 0 to 2147483647'],
    [{ maxBodyBytes: 1.5 }, 'idempotency: invalid option "maxBodyBytes": got 1.5; expected an integer number of bytes from 0 to 2147483647'],
    [{ maxBodyBytes: '1mb' }, 'idempotency: invalid option "maxBodyBytes": got "1mb"; expected an integer number of bytes from 0 to 2147483647'],
    [{ maxBodyBytes: 2 ** 31 }, 'idempotency: invalid option "maxBodyBytes": got 2147483648; expected an integer number of bytes from 0 to 2147483647'],
    [{ concurrent: 'queue' }, `idempotency: invalid option "concurrent": got "queue"; expected 'wait' or 'reject'`],
    [{ header: 'Idempotency Key' }, 'idempotency: invalid option "header": got "Idempotency Key"; expected an HTTP header name (letters, digits and !#$%&\'*+-.^_`|~)'],
    [{ required: 'yes' }, 'idempotency: invalid option "required": got "yes"; expected true, false or a function (request) => boolean'],
    [{ identity: 'user' }, 'idempotency: invalid option "identity": got "user"; expected a function (request) => string | undefined, or false (keys not scoped)'],
    [{ identity: true }, 'idempotency: invalid option "identity": got true; expected a function (request) => string | undefined, or false (keys not scoped)'],
    [{ onStoreError: true }, 'idempotency: invalid option "onStoreError": got true; expected a function'],
    [{ onError: 1 }, 'idempotency: invalid option "onError": got 1; expected a function'],
    [{ store: new Map() }, 'idempotency: invalid option "store": got [object Map]; expected an IdempotencyStore: an object with acquire, reclaim, complete and release methods (MemoryStore, RedisStore, PostgresStore)'],
    [{ store: { acquire() {}, complete() {}, release() {} } }, /invalid option "store": got \[object Object\]; expected an IdempotencyStore/],
    [42, 'idempotency: invalid options: got 42; expected an object or undefined'],
    [[], 'idempotency: invalid options: got an array; expected an object or undefined'],
  ];
  for (const [options, message] of cases) {
    assert.throws(() => idempotency(ok, options), { name: 'TypeError', message }, JSON.stringify(options));
  }
  assert.throws(() => idempotency('handler'), { name: 'TypeError', message: 'idempotency: the handler must be a function (request, ctx) => Promise<Response>; got "handler"' });
  assert.throws(() => toNodeHandler(undefined), { name: 'TypeError', message: /toNodeHandler: the handler must be a function/ });
  assert.throws(() => toNodeHandler(ok, { onError: 1 }), { name: 'TypeError', message: 'toNodeHandler: invalid option "onError": got 1; expected a function' });
  assert.throws(() => toNodeHandler(ok, { onErorr() {} }), { name: 'TypeError', message: 'toNodeHandler: unknown option "onErorr" (did you mean "onError"?)' });
  toNodeHandler(ok, { onErorr: undefined });
  // undefined (and null for the whole object) means the default; every valid value is accepted.
  idempotency(ok, undefined);
  idempotency(ok, null);
  idempotency(ok, {
    ttlMs: undefined,
    concurrent: 'reject',
    waitTimeoutMs: 0,
    required: false,
    header: 'X-Request-Key',
    store: new MemoryStore(),
    identity: false,
    maxBodyBytes: 0,
    lockTimeoutMs: 1000,
    handlerTimeoutMs: 1,
    ignoredMethods: [],
    secret: 'x'.repeat(16),
    onError() {},
    onStoreError() {},
  });
  idempotency(ok, { maxBodyBytes: 2147483647, identity: async () => undefined, required: () => true });
  idempotency(ok, { lockTimeoutMs: 2147483647, handlerTimeoutMs: 2147483647, ignoredMethods: ['get', 'PROPFIND', 'M-SEARCH'] });
});

test('an unknown option is a TypeError naming the closest known one, or listing them', () => {
  const cases = [
    [{ lockTimeout: 1000 }, 'idempotency: unknown option "lockTimeout" (did you mean "lockTimeoutMs"?)'],
    [{ ttl: 1000 }, 'idempotency: unknown option "ttl" (did you mean "ttlMs"?)'],
    [{ waitTimeout: 1000 }, 'idempotency: unknown option "waitTimeout" (did you mean "waitTimeoutMs"?)'],
    [{ onstoreerror() {} }, 'idempotency: unknown option "onstoreerror" (did you mean "onStoreError"?)'],
    [{ Store: new MemoryStore() }, 'idempotency: unknown option "Store" (did you mean "store"?)'],
    [{ zzzz: 1 }, 'idempotency: unknown option "zzzz"; the options are store, header, required, identity, secret, ttlMs, lockTimeoutMs, concurrent, waitTimeoutMs, pollMs, maxBodyBytes, handlerTimeoutMs, storeTimeoutMs, ignoredMethods, acceptAfterMs, history, onStoreError, onError, onEvent'],
    [{ storeTimeout: 1000 }, 'idempotency: unknown option "storeTimeout" (did you mean "storeTimeoutMs"?)'],
    [{ handlerTimeout: 1000 }, 'idempotency: unknown option "handlerTimeout" (did you mean "handlerTimeoutMs"?)'],
    [{ ignoreMethods: [] }, 'idempotency: unknown option "ignoreMethods" (did you mean "ignoredMethods"?)'],
  ];
  for (const [options, message] of cases) {
    assert.throws(() => idempotency(ok, options), { name: 'TypeError', message }, JSON.stringify(Object.keys(options)));
  }
  // An unknown name set to undefined counts as absent, as everywhere in this package.
  idempotency(ok, { lockTimeout: undefined });
  assert.throws(() => idempotent(ok, { key: () => 'k', lockTimeout: 1 }), { name: 'TypeError', message: 'idempotent: unknown option "lockTimeout" (did you mean "lockTimeoutMs"?)' });
  assert.throws(() => idempotent(ok, { key: () => 'k', keys: 1 }), { name: 'TypeError', message: 'idempotent: unknown option "keys" (did you mean "key"?)' });
  assert.throws(() => idempotent(ok, { key: () => 'k', zzzz: 1 }), {
    name: 'TypeError',
    message: 'idempotent: unknown option "zzzz"; the options are store, key, scope, secret, ttlMs, lockTimeoutMs, concurrent, waitTimeoutMs, pollMs, storeTimeoutMs, maxRuns, history, onStoreError, onEvent, onDeadLetter',
  });
  assert.throws(() => idempotent(ok, { key: () => 'k', identity: false }), { name: 'TypeError', message: /^idempotent: unknown option "identity"; the options are store, key, scope, / });
  // The options of idempotency() alone are unknown to idempotent().
  for (const name of ['handlerTimeoutMs', 'ignoredMethods', 'maxBodyBytes']) {
    assert.throws(() => idempotent(ok, { key: () => 'k', [name]: 1 }), { name: 'TypeError', message: new RegExp(`^idempotent: unknown option "${name}"`) });
  }
  assert.throws(() => idempotent(ok, { key: () => 'k', lockTimeoutMs: 999 }), {
    name: 'TypeError',
    message: 'idempotent: invalid option "lockTimeoutMs": got 999; expected an integer number of milliseconds from 1000 to 2147483647 (a live holder renews its lock every third of it)',
  });
  assert.throws(() => idempotent(ok, { key: () => 'k', secret: 'short' }), { name: 'TypeError', message: /^idempotent: invalid option "secret": got "short"; expected a string of at least 16 characters/ });
});

test('required: a boolean or a function; a function must return a boolean', async () => {
  assert.equal((await idempotency(ok, { required: false })(post())).status, 200);
  assert.equal((await idempotency(ok)(new Request('http://localhost/pay', { method: 'DELETE' }))).status, 200);
  assert.equal((await idempotency(ok, { required: true })(new Request('http://localhost/x', { method: 'DELETE' }))).status, 400);
  // The methods whose keys are ignored (GET, HEAD, OPTIONS) never require one.
  assert.equal((await idempotency(ok, { required: true })(new Request('http://localhost/x'))).status, 200);
  const keyedGet = new Request('http://localhost/x', { headers: { 'Idempotency-Key': 'k' } });
  assert.equal((await idempotency(ok, { required: true, identity: false })(keyedGet)).status, 200);
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

test('a key on a GET, HEAD or OPTIONS is ignored by default (ignoredMethods); with ignoredMethods: [] it is honoured; a custom header name works', async () => {
  let runs = 0;
  const seen = [];
  const handler = async (request, ctx) => (seen.push(ctx.key), new Response(String(++runs)));
  const get = (method = 'GET') => new Request('http://localhost/report?id=1', { method, headers: { 'X-Request-Key': 'r1' } });
  const byDefault = idempotency(handler, { header: 'X-Request-Key', identity: false });
  for (const method of ['GET', 'HEAD', 'OPTIONS', 'GET']) {
    const res = await byDefault(get(method));
    assert.equal(res.headers.get('idempotent-replayed'), null, `${method}: not replayed`);
  }
  assert.equal(runs, 4, 'every keyed read ran');
  assert.deepEqual(seen, [null, null, null, null], 'and saw no key (ctx.key null)');
  // An invalid key on an ignored method is ignored too: no 400.
  const invalid = await byDefault(new Request('http://localhost/report', { headers: { 'X-Request-Key': 'two words' } }));
  assert.equal(invalid.status, 200);
  runs = 0;
  seen.length = 0;
  const h = idempotency(handler, { header: 'X-Request-Key', ignoredMethods: [], identity: false });
  assert.equal(await (await h(get())).text(), '1');
  const again = await h(get());
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(await again.text(), '1');
  assert.deepEqual(seen, ['r1']);
  const missing = await h(post('ignored-because-other-header'));
  assert.equal(missing.status, 400);
  assert.match((await missing.json()).detail, /requires an X-Request-Key header/);
  // ignoredMethods is compared without case, and may name any method (here POST: a key on a
  // POST is then ignored, and with required: false it passes straight through).
  let posts = 0;
  const ignorePost = idempotency(async () => new Response(String(++posts)), { ignoredMethods: ['post'], required: false, identity: false });
  const k = newKey();
  assert.equal(await (await ignorePost(post(k))).text(), '1');
  const second = await ignorePost(post(k));
  assert.equal(second.headers.get('idempotent-replayed'), null);
  assert.equal(await second.text(), '2');
  // A method left out of the list is keyed again: DELETE is not ignored by default.
  let deletes = 0;
  const del = idempotency(async () => new Response(String(++deletes)), { identity: false });
  const remove = () => new Request('http://localhost/pay/1', { method: 'DELETE', headers: { 'Idempotency-Key': k } });
  await (await del(remove())).text();
  assert.equal((await del(remove())).headers.get('idempotent-replayed'), 'true');
  assert.equal(deletes, 1);
});

test('identity must return a string or undefined', async () => {
  const h = idempotency(ok, { identity: () => 42 });
  await assert.rejects(h(post(newKey())), { name: 'TypeError', message: 'idempotency: option "identity" returned 42; expected a string or undefined' });
  const asyncIdentity = idempotency(ok, { identity: async () => 'alice' });
  assert.equal((await asyncIdentity(post(newKey()))).status, 200);
});

test('identity returning null is no caller known, as undefined: the key is not scoped (and no credential is read)', async () => {
  let runs = 0;
  const h = idempotency(async () => new Response(String(++runs)), { identity: (request) => request.headers.get('X-User') });
  const key = newKey();
  assert.equal(await (await h(post(key, { headers: { Authorization: 'Bearer a' } }))).text(), '1');
  const again = await h(post(key, { headers: { Authorization: 'Bearer b' } }));
  assert.equal(await again.text(), '1');
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal((await (await h(post(key, { headers: { 'X-User': 'alice' } }))).text()), '2', 'a known caller: a scope of its own');
});

test('an identity function replaces the credentials as the scope', async () => {
  let runs = 0;
  const h = idempotency(async () => new Response(String(++runs)), { identity: () => 'tenant-1' });
  const key = newKey();
  assert.equal(await (await h(post(key, { headers: { Authorization: 'Bearer a' } }))).text(), '1');
  const other = await h(post(key, { headers: { Authorization: 'Bearer b', Cookie: 'sid=x' } }));
  assert.equal(other.headers.get('idempotent-replayed'), 'true', 'the same identity: the same operation, whatever the credentials');
  assert.equal(runs, 1);
});

test('the handler must resolve with a Response: otherwise a stored 500 problem (the handler had started), onError is told', async () => {
  let calls = 0;
  const told = [];
  const h = idempotency(async () => (++calls === 1 ? 'not a response' : new Response('fine')), { onError: (e) => told.push(e) });
  const key = newKey();
  const first = await h(post(key));
  await problemOf(first, 500, 'idempotency-handler-failed');
  assert.equal(told.length, 1);
  assert.equal(told[0].name, 'TypeError');
  assert.equal(told[0].message, 'idempotency: the handler must resolve with a Response; got "not a response"');
  const again = await h(post(key));
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  await problemOf(again, 500, 'idempotency-handler-failed');
  assert.equal(calls, 1);
  // A synchronous throw counts the same.
  let syncRuns = 0;
  const sync = idempotency(() => {
    syncRuns++;
    throw new RangeError('sync');
  }, { onError: (e) => told.push(e) });
  const k2 = newKey();
  await problemOf(await sync(post(k2)), 500, 'idempotency-handler-failed');
  await problemOf(await sync(post(k2)), 500, 'idempotency-handler-failed');
  assert.equal(syncRuns, 1);
  assert.equal(told[1].message, 'sync');
});

test('a handler whose response body fails while it is read: the same stored 500 problem, onError is told', async () => {
  let runs = 0;
  const told = [];
  const h = idempotency(async () => {
    runs++;
    let sent = false;
    const body = new ReadableStream({
      pull(controller) {
        if (sent) return controller.error(new Error('upstream stream broke'));
        sent = true;
        controller.enqueue(new TextEncoder().encode('partial'));
      },
    });
    return new Response(body, { status: 201 });
  }, { onError: (e) => told.push(e.message) });
  await failsStored(h);
  assert.equal(runs, 1);
  assert.deepEqual(told, ['upstream stream broke']);
});

/** `h`'s failure is a stored 500 problem: the first request's answer, and a repeat's replay. */
async function failsStored(h) {
  const key = newKey();
  await problemOf(await h(post(key)), 500, 'idempotency-handler-failed');
  const again = await h(post(key));
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  await problemOf(again, 500, 'idempotency-handler-failed');
}

test('a Response that cannot be read (a throwing getter, headers that do not iterate, no body buffer, a promise whose then throws): the same stored 500 problem, onError is told', async () => {
  const shadow = (name, descriptor) => {
    const response = new Response('ok');
    Object.defineProperty(response, name, descriptor);
    return response;
  };
  const throwing = (message) => ({ get() { throw new Error(message); } });
  const badThen = (value) => {
    const promise = Promise.resolve(value);
    promise.then = () => { throw new Error('then broke'); };
    return promise;
  };
  const cases = [
    [() => shadow('headers', throwing('headers broke')), 'headers broke'],
    [() => shadow('status', throwing('status broke')), 'status broke'],
    [() => shadow('statusText', throwing('statusText broke')), 'statusText broke'],
    [() => shadow('headers', { value: null }), /^idempotency: the handler resolved with a Response that cannot be read: its headers: /],
    [() => shadow('status', { value: 0 }), 'idempotency: the handler resolved with a Response that cannot be read: its status: got 0; expected an integer from 200 to 599'],
    [() => {
      const headers = new Headers({ 'x-a': '1' });
      headers[Symbol.iterator] = function* () { yield null; };
      return shadow('headers', { value: headers });
    }, 'idempotency: the handler resolved with a Response that cannot be read: its headers: got null among its entries; expected [name, value] pairs'],
    [() => shadow('arrayBuffer', { value: () => 5 }), 'idempotency: the handler resolved with a Response that cannot be read: its arrayBuffer(): got 5 instead of an ArrayBuffer'],
    [() => ({ status: 200, headers: {}, arrayBuffer: async () => -1 }), 'idempotency: the handler resolved with a Response that cannot be read: its arrayBuffer(): got -1 instead of an ArrayBuffer'],
    [() => ({ status: 200, headers: {}, arrayBuffer: () => badThen(new ArrayBuffer(1)) }), 'then broke'],
  ];
  for (const [answer, message] of cases) {
    let runs = 0;
    const told = [];
    const h = idempotency(async () => (runs++, answer()), { identity: false, onError: (e) => told.push(e) });
    await failsStored(h);
    assert.equal(runs, 1);
    assert.equal(told.length, 1, String(message));
    if (typeof message === 'string') assert.equal(told[0].message, message);
    else assert.match(told[0].message, message);
  }
  // The handler's own promise, whose then throws: a throw of the handler.
  const told = [];
  const h = idempotency(() => badThen(new Response('ok')), { identity: false, onError: (e) => told.push(e.message) });
  await problemOf(await h(post(newKey())), 500, 'idempotency-handler-failed');
  assert.deepEqual(told, ['then broke']);
  // Through toNodeHandler: the same 500 problem, and the process goes on.
  const server = await serve(idempotency(async () => shadow('headers', throwing('headers broke')), { identity: false, onError: () => {} }));
  try {
    const response = await fetch(server.url, { method: 'POST', headers: { 'Idempotency-Key': newKey() }, body: 'x' });
    await problemOf(response, 500, 'idempotency-handler-failed');
  } finally {
    await server.close();
  }
});

test('an identity function returning "" or undefined leaves the key unscoped', async () => {
  let runs = 0;
  const h = idempotency(async () => new Response(String(++runs)), { identity: (request) => request.headers.get('X-User') ?? undefined });
  const key = newKey();
  assert.equal(await (await h(post(key, { headers: { 'X-User': '' } }))).text(), '1');
  const unscoped = await h(post(key));
  assert.equal(unscoped.headers.get('idempotent-replayed'), 'true', '"" and undefined are the same (no) scope');
  assert.equal(await (await h(post(key, { headers: { 'X-User': 'u1' } }))).text(), '2');
});

test('a request without a key (not required) goes straight to the handler, which may throw as it likes', async () => {
  const h = idempotency(async () => {
    throw new Error('no key, no scheme');
  });
  await assert.rejects(h(new Request('http://localhost/x')), /no key, no scheme/);
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

test('a custom store whose locks do not expire (and without renew): an expired lock is taken over with reclaim()', async () => {
  const store = new TableStore();
  const key = newKey();
  // A holder that died 1 s ago, with another payload even.
  store.rows.set(`-:${key}`, { state: 'in-progress', token: 'dead', fingerprint: 'other', lockExpiresAt: Date.now() - 1000 });
  let runs = 0;
  // TableStore has no secret(): keys that may be scoped need the secret option.
  assert.throws(() => idempotency(ok, { store }), {
    name: 'TypeError',
    message: 'idempotency: invalid option "secret": got undefined; expected a string of at least 16 characters that every instance sharing the store uses: this store has no secret() to keep one',
  });
  const h = idempotency(async () => new Response(`run ${++runs}`), { store, secret: 'table-store-secret-0123' });
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

test('a store that returns a malformed record: a 503 problem (Retry-After: 1), onStoreError(error, "acquire"), the handler does not run', async () => {
  const store = new TableStore();
  const told = [];
  let runs = 0;
  const h = idempotency(async () => (runs++, new Response('ran')), { store, identity: false, onStoreError: (error, operation) => told.push([operation, error]) });
  const fp = fingerprintOf({ method: 'POST', path: '/pay', body: 'x' });
  for (const [row, message] of [
    [{ state: 'done', fingerprint: 'f' }, /state is /],
    [{ state: 'completed', completedAt: 0, response: { status: 200, statusText: '', headers: [], body: '' } }, /no string fingerprint/],
    [{ state: 'completed', fingerprint: fp }, /a completed record without a response/],
    [{ state: 'completed', fingerprint: fp, response: { status: 'x' } }, /not an IdempotencyRecord/],
    [{ state: 'in-progress', fingerprint: 'f', token: 't' }, /no number lockExpiresAt/],
    [{ state: 'in-progress', fingerprint: 'f', lockExpiresAt: Date.now() + 60_000 }, /a lock without a string token/],
    [{ state: 'in-progress', fingerprint: 'f', token: 7, lockExpiresAt: Date.now() + 60_000 }, /not an IdempotencyRecord/],
    ['completed', /not an IdempotencyRecord/],
    [42, /not an IdempotencyRecord/],
  ]) {
    store.rows.set('-:k', row);
    told.length = 0;
    const res = await h(post('k'));
    const problem = await problemOf(res, 503, 'idempotency-store-unavailable', { retryAfter: true });
    assert.match(problem.detail, /not processed/);
    assert.equal(told.length, 1, JSON.stringify(row));
    assert.equal(told[0][0], 'acquire');
    assert.equal(told[0][1].name, 'TypeError');
    assert.match(told[0][1].message, message, JSON.stringify(row));
    assert.match(told[0][1].message, /^idempotency: the store returned a malformed record/);
  }
  assert.equal(runs, 0);
  // The fingerprint helper of the tests is the companion's: a well-formed record replays.
  store.rows.set('-:k', { state: 'completed', fingerprint: fp, completedAt: 0, response: { status: 201, statusText: '', headers: [['x-a', '1']], body: Buffer.from('hi').toString('base64') } });
  const replay = await h(post('k'));
  assert.equal(replay.status, 201);
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(await replay.text(), 'hi');
});

test('a store whose acquire() gives undefined (a forgotten return) is failing, not granting the lock: 503, the repeat does not run', async () => {
  const rows = new Map();
  const store = {
    acquire(key, lock) {
      if (!rows.has(key)) {
        rows.set(key, lock);
        return null;
      }
      // the record of the key, not returned
    },
    reclaim: () => false,
    complete(key, token, record) { rows.set(key, record); return true; },
    release(key) { rows.delete(key); return true; },
  };
  const told = [];
  let runs = 0;
  const h = idempotency(async () => (runs++, new Response('charged', { status: 201 })), { store, identity: false, history: false, onStoreError: (error, operation) => told.push([operation, error.message]) });
  const key = newKey();
  assert.equal((await h(post(key))).status, 201);
  await problemOf(await h(post(key)), 503, 'idempotency-store-unavailable', { retryAfter: true });
  assert.equal(runs, 1, 'the repeat ran the handler again');
  assert.deepEqual(told, [['acquire', "idempotency: the store returned a malformed record (acquire() must give null when the lock is taken, or the key's record): undefined"]]);
});

test('a store whose record or promise throws when read: a 503 problem, onStoreError is told, the process goes on', async () => {
  const badThen = () => {
    const promise = Promise.resolve(null);
    promise.then = () => { throw new Error('then broke'); };
    return promise;
  };
  const base = { acquire: async () => null, reclaim: async () => false, complete: async () => true, release: async () => true };
  for (const [acquire, message] of [
    [async () => ({ get state() { throw new Error('getter broke'); } }), 'getter broke'],
    [async () => new Proxy({}, { ownKeys() { throw new Error('trap broke'); } }), /could not be cloned|trap broke/],
    [badThen, 'then broke'],
  ]) {
    const told = [];
    let runs = 0;
    const h = idempotency(async () => (runs++, new Response('ran')), { store: { ...base, acquire }, identity: false, history: false, onStoreError: (error, operation) => told.push([operation, error.message]) });
    await problemOf(await h(post(newKey())), 503, 'idempotency-store-unavailable', { retryAfter: true });
    assert.equal(runs, 0);
    assert.equal(told.length, 1);
    assert.equal(told[0][0], 'acquire');
    if (typeof message === 'string') assert.equal(told[0][1], message);
    else assert.match(told[0][1], message);
  }
});

test('a stored response that cannot be rebuilt (body not base64, status out of range, bad header name) is a 503 too', async () => {
  const fp = fingerprintOf({ method: 'POST', path: '/pay', body: 'x' });
  const base = { status: 200, statusText: '', headers: [], body: '' };
  for (const response of [
    { ...base, body: '***' },
    { ...base, status: 1000 },
    { ...base, headers: [['bad name', 'v']] },
    { ...base, statusText: 'a\nb' },
  ]) {
    const told = [];
    const store = { acquire: () => ({ state: 'completed', fingerprint: fp, completedAt: 0, response }), reclaim: () => false, complete: () => true, release: () => true };
    const h = idempotency(ok, { store, identity: false, onStoreError: (e, op) => told.push(op) });
    let res;
    try {
      res = await h(post('k'));
    } catch (error) {
      assert.fail(`${JSON.stringify(response)}: the request rejected with ${error}`);
    }
    await problemOf(res, 503, 'idempotency-store-unavailable', { retryAfter: true });
    assert.deepEqual(told, ['acquire']);
  }
});

test('a store that is down before the handler: a 503 problem with Retry-After: 1, the handler does not run, onStoreError is told', async () => {
  for (const sync of [false, true]) {
    const down = new Error('redis down');
    const store = failing(new MemoryStore(), 'acquire', down, { sync });
    const told = [];
    let ran = false;
    const h = idempotency(async () => ((ran = true), new Response('ran')), { store, onStoreError: (error, operation) => told.push([operation, error]) });
    const problem = await problemOf(await h(post(newKey())), 503, 'idempotency-store-unavailable', { retryAfter: true });
    assert.equal(problem.title, 'The idempotency store is unavailable');
    assert.equal(ran, false);
    assert.deepEqual(told, [['acquire', down]]);
  }
  // A failing reclaim (taking a dead holder's lock over) is the same.
  const table = new TableStore();
  table.rows.set('-:k', { state: 'in-progress', token: 'dead', fingerprint: 'f', lockExpiresAt: Date.now() - 1 });
  const told = [];
  const h = idempotency(ok, { store: failing(table, 'reclaim', new Error('gone')), identity: false, onStoreError: (error, operation) => told.push(operation) });
  await problemOf(await h(post('k')), 503, 'idempotency-store-unavailable', { retryAfter: true });
  assert.deepEqual(told, ['reclaim']);
  // A throwing onStoreError does not change the answer.
  const loud = idempotency(ok, { store: failing(new MemoryStore(), 'acquire', new Error('x')), onStoreError: () => {
    throw new Error('onStoreError broke');
  } });
  await problemOf(await loud(post(newKey())), 503, 'idempotency-store-unavailable', { retryAfter: true });
});

test('storeTimeoutMs: a store that does not answer before the handler runs gets the request a 503 with Retry-After, nothing run; a lock it takes after that is given back', { timeout: 20_000 }, async () => {
  // acquire() answers only when the test lets it: a paused Redis, a pool with no connection.
  const gates = [];
  const tokens = [];
  class Hanging extends MemoryStore {
    async acquire(...args) {
      tokens.push(args[1].token);
      const gate = deferred();
      gates.push(gate);
      await gate.promise;
      return super.acquire(...args);
    }
  }
  const store = new Hanging();
  const released = [];
  const release = store.release.bind(store);
  store.release = (key, token) => (released.push(token), release(key, token));
  const told = [];
  let runs = 0;
  const h = idempotency(async () => new Response(`run ${++runs}`, { status: 201 }), {
    store, identity: false, storeTimeoutMs: 200, onStoreError: (error, operation) => told.push([operation, error.name, error.message]),
  });
  const key = newKey();
  const started = performance.now();
  await problemOf(await h(post(key)), 503, 'idempotency-store-unavailable', { retryAfter: true });
  assert.ok(performance.now() - started >= 190, 'answered once storeTimeoutMs passed, not before');
  assert.equal(runs, 0, 'nothing ran');
  assert.deepEqual(told, [['acquire', 'TimeoutError', 'idempotency: the store did not answer acquire() within storeTimeoutMs (200 ms); the request was answered 503 and not processed']]);
  // The store answers after all, granting the lock to the request already answered 503: it is
  // given back, with that request's token, so its retry is not kept waiting for its own lock.
  gates[0].resolve();
  await sleep(100);
  assert.deepEqual(released, [tokens[0]], 'the late lock is released, with its own token');
  // The retry (the store answering again) runs once, at once, and is stored.
  const retrying = h(post(key));
  await sleep(10);
  gates[1].resolve();
  const res = await retrying;
  assert.equal(res.status, 201);
  assert.equal(await res.text(), 'run 1');
  // A store that answers within the limit is not affected; calls after the handler ran are
  // waited for however long they take: a complete() slower than storeTimeoutMs still stores.
  class SlowComplete extends MemoryStore {
    async complete(...args) {
      await sleep(400);
      return super.complete(...args);
    }
  }
  const slowStore = new SlowComplete();
  const slow = idempotency(async () => new Response(`charged ${++runs}`, { status: 201 }), { store: slowStore, identity: false, storeTimeoutMs: 100 });
  const k2 = newKey();
  const first = await slow(post(k2));
  assert.equal(first.status, 201);
  assert.equal(first.headers.get('x-should-retry'), null, 'the answer was kept');
  const replay = await slow(post(k2));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(await replay.text(), 'charged 2');
});

test('storeTimeoutMs: a secret() that does not answer is a 503 too; a late reclaim() that took a dead holder\'s lock gives it back; idempotent() rejects with the TimeoutError', async () => {
  const never = new Promise(() => {});
  const told = [];
  const noSecret = idempotency(ok, { store: Object.assign(new MemoryStore(), { secret: () => never }), storeTimeoutMs: 50, onStoreError: (e, op) => told.push([op, e.name]) });
  await problemOf(await noSecret(post(newKey(), { headers: { Authorization: 'Bearer u1' } })), 503, 'idempotency-store-unavailable', { retryAfter: true });
  assert.deepEqual(told, [['secret', 'TimeoutError']]);
  // reclaim(): a dead holder's lock taken over after the request was answered 503.
  const table = new TableStore();
  table.rows.set('-:k', { state: 'in-progress', token: 'dead', fingerprint: 'f', lockExpiresAt: Date.now() - 1 });
  const gate = deferred();
  const reclaim = table.reclaim.bind(table);
  table.reclaim = async (...args) => (await gate.promise, reclaim(...args));
  const released = [];
  const release = table.release.bind(table);
  table.release = (key, token) => (released.push(token), release(key, token));
  const h = idempotency(ok, { store: table, identity: false, storeTimeoutMs: 50, onStoreError: () => {} });
  await problemOf(await h(post('k')), 503, 'idempotency-store-unavailable', { retryAfter: true });
  gate.resolve();
  await sleep(60);
  assert.equal(released.length, 1, 'the late take-over is given back');
  assert.equal(table.rows.get('-:k'), undefined, 'the key is free');
  // idempotent(): the delivery rejects with the TimeoutError, fn not run.
  class Hanging extends MemoryStore {
    acquire() {
      return never;
    }
  }
  let ran = false;
  const job = idempotent(async () => (ran = true), { store: new Hanging(), key: (m) => m.id, storeTimeoutMs: 30, onStoreError: () => {} });
  await assert.rejects(job({ id: 'j1' }), { name: 'TimeoutError', message: /did not answer acquire\(\) within storeTimeoutMs \(30 ms\)/ });
  assert.equal(ran, false);
});

test('a store failing after the handler ran: the handler\'s answer is still returned (non-transactional), onStoreError is told', async () => {
  const told = [];
  const onStoreError = (error, operation) => told.push([operation, error.message]);
  const h = idempotency(async () => new Response('charged', { status: 201 }), { store: failing(new MemoryStore(), 'complete', new Error('redis down')), onStoreError });
  const res = await h(post(newKey()));
  assert.equal(res.status, 201);
  assert.equal(await res.text(), 'charged');
  assert.deepEqual(told, [['complete', 'redis down']]);
  // release() failing after a "not processed" answer.
  told.length = 0;
  const busy = idempotency(async () => new Response('busy', { status: 429 }), { store: failing(new MemoryStore(), 'release', new Error('gone'), { sync: true }), onStoreError });
  const refused = await busy(post(newKey()));
  assert.equal(refused.status, 429);
  assert.equal(await refused.text(), 'busy');
  assert.deepEqual(told, [['release', 'gone']]);
  // renew() failing while the handler runs (the store renewed, but the call failed after):
  // reported; the answer is still stored.
  told.length = 0;
  const memory = new MemoryStore();
  const flaky = new Proxy(memory, {
    get(target, prop) {
      if (prop === 'renew') {
        return async (...args) => {
          await target.renew(...args);
          throw new Error('renew failed');
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  let runs = 0;
  const slow = idempotency(async () => (await sleep(450), new Response(`run ${++runs}`)), {
    store: flaky,
    lockTimeoutMs: 1000, // renewed every 333 ms: once or more in 450 ms
    onStoreError,
  });
  const key = newKey();
  assert.equal(await (await slow(post(key))).text(), 'run 1');
  assert.ok(told.length >= 1, 'renew failures are reported');
  assert.ok(told.every(([op, message]) => op === 'renew' && message === 'renew failed'), JSON.stringify(told));
  const replay = await slow(post(key));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(await replay.text(), 'run 1');
});

test('the lock is renewed every third of lockTimeoutMs while the handler runs, with the holder\'s token (mocked timers and clock: exact)', async (t) => {
  // The renewal timer is the global setInterval and the lock's expiry Date.now(): both mocked
  // here, so the test says when time passes and nothing depends on the machine's load.
  // "Every third" of 1000 ms is floor(1000 / 3) = 333 ms: not at 332, at 333, 666, 999, ...
  const spy = spyStore(new MemoryStore());
  const started = deferred();
  const finish = deferred();
  const h = idempotency(async () => (started.resolve(), await finish.promise, new Response('done')), { store: spy.store, lockTimeoutMs: 1000 });
  t.mock.timers.enable({ apis: ['setInterval', 'Date'], now: 1_000_000 });
  const renewals = () => spy.calls.filter(([m]) => m === 'renew');
  const settle = () => new Promise((resolve) => setImmediate(resolve)); // the renewal's promise jobs
  const answer = h(post(newKey()));
  await started.promise;
  const acquired = spy.calls.find(([m]) => m === 'acquire');
  assert.equal(acquired[2].lockExpiresAt, 1_000_000 + 1000, 'the first lock: now + lockTimeoutMs');
  for (let n = 1; n <= 6; n++) {
    t.mock.timers.tick(332);
    await settle();
    assert.equal(renewals().length, n - 1, `renewal ${n} not before ${333 * n} ms`);
    t.mock.timers.tick(1);
    await settle();
    assert.equal(renewals().length, n, `renewal ${n} at ${333 * n} ms`);
    const [, key, token, lock, ms] = renewals().at(-1);
    assert.equal(key, acquired[1]);
    assert.equal(token, acquired[2].token);
    assert.deepEqual(lock, { ...acquired[2], lockExpiresAt: 1_000_000 + 333 * n + 1000 }, `renewal ${n}: the holder's lock, expiring lockTimeoutMs from then`);
    assert.equal(ms, 1000);
  }
  finish.resolve();
  assert.equal(await (await answer).text(), 'done');
  t.mock.timers.tick(10_000);
  await settle();
  assert.equal(renewals().length, 6, 'no renewal after the handler ended');
});

test('a waiting request stops polling when its client disconnects', async () => {
  const store = new MemoryStore();
  const looks = []; // Date.now() of every acquire() of the waiting request (not the first's)
  let firstToken;
  const acquire = store.acquire.bind(store);
  store.acquire = (key, lock, ms) => {
    firstToken ??= lock.token;
    if (lock.token !== firstToken) looks.push(Date.now());
    return acquire(key, lock, ms);
  };
  const started = deferred();
  const finish = deferred();
  const h = idempotency(async () => (started.resolve(), await finish.promise, new Response('slow')), { store, pollMs: 10 });
  await withServer(h, async (server) => {
    const key = newKey();
    const first = send(server.url, { key });
    await started.promise; // the first run holds the key until `finish`
    const controller = new AbortController();
    const second = send(server.url, { key, signal: controller.signal }).catch((e) => e.name);
    // It polls (every 10 ms): wait for a few looks, however long the machine takes to get there.
    while (looks.length < 3) await sleep(10);
    controller.abort();
    assert.equal(await second, 'AbortError');
    const aborted = Date.now();
    // Polling stops: a quiet second (100 polls' worth) must come within 10 s of the abort, and
    // stay quiet for another second. A poll that went on would never leave a second quiet.
    let quietSince = null;
    while (Date.now() - aborted < 10_000) {
      const seen = looks.length;
      await sleep(1_000);
      if (looks.length === seen) {
        quietSince = Date.now();
        break;
      }
    }
    assert.ok(quietSince !== null, `still polling 10 s after the disconnect (${looks.length} looks)`);
    const seen = looks.length;
    await sleep(1_000);
    assert.equal(looks.length, seen, 'no more polling after the disconnect');
    finish.resolve();
    assert.equal(await (await first).text(), 'slow');
    assert.equal(server.errors.length, 0, 'a disconnect is not reported as an error');
  });
});

// ---------------------------------------------------------------------------------------------
// maxBodyBytes

/** A handler that counts its runs and answers with the length of the body it read. */
function bodyLength(options) {
  const state = { runs: 0 };
  const handler = idempotency(async (request) => {
    state.runs++;
    return new Response(String((await request.arrayBuffer()).byteLength), { status: 201 });
  }, options);
  return { handler, state };
}

test('maxBodyBytes (default 1 MiB): a longer body is a 413 problem and the handler does not run; exactly 1 MiB passes', async () => {
  const { handler, state } = bodyLength();
  await withServer(handler, async (server) => {
    const exact = 'x'.repeat(1024 * 1024);
    const res = await send(server.url, { key: newKey(), body: exact });
    assert.equal(res.status, 201);
    assert.equal(await res.text(), String(exact.length), 'the handler reads the whole body again');
    const over = await send(server.url, { key: newKey(), body: `${exact}y` });
    const problem = await problemOf(over, 413, 'idempotency-body-too-large');
    assert.match(problem.detail, /larger than 1048576 bytes/);
    assert.equal(state.runs, 1);
  });
});

test('maxBodyBytes: the limit is exact (1000 passes, 1001 is refused, 0 allows only an empty body)', async () => {
  const { handler, state } = bodyLength({ maxBodyBytes: 1000 });
  await withServer(handler, async (server) => {
    assert.equal(await (await send(server.url, { key: newKey(), body: 'a'.repeat(1000) })).text(), '1000');
    await problemOf(await send(server.url, { key: newKey(), body: 'a'.repeat(1001) }), 413, 'idempotency-body-too-large');
    assert.equal(state.runs, 1);
  });
  const zero = bodyLength({ maxBodyBytes: 0 });
  await withServer(zero.handler, async (server) => {
    assert.equal(await (await send(server.url, { key: newKey(), body: '' })).text(), '0');
    await problemOf(await send(server.url, { key: newKey(), body: 'a' }), 413, 'idempotency-body-too-large');
    assert.equal(zero.state.runs, 1);
  });
  // A request without a key does not go through the scheme: no limit there.
  const { handler: free } = bodyLength({ maxBodyBytes: 10 });
  const res = await free(new Request('http://localhost/upload', { method: 'PUT', body: 'b'.repeat(100) }));
  assert.equal(await res.text(), '100');
});

test('maxBodyBytes: a declared Content-Length over the limit is refused before the body is sent', async () => {
  const { handler, state } = bodyLength({ maxBodyBytes: 1000 });
  await withServer(handler, async (server) => {
    const { status, body } = await new Promise((resolve, reject) => {
      const req = http.request(`${server.url}/upload`, {
        method: 'POST',
        headers: { 'Idempotency-Key': newKey(), 'Content-Length': '10000000' },
      });
      req.on('response', (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode, body: text }));
      });
      req.on('error', reject);
      req.flushHeaders(); // the headers only: no byte of the 10 MB body is ever sent
    });
    assert.equal(status, 413);
    assert.equal(JSON.parse(body).code, 'idempotency-body-too-large');
    assert.equal(state.runs, 0);
  });
});

/**
 * Stream `total` bytes (chunked, no Content-Length) to `url` with a key; resolves with the
 * status (if an answer came) and whether the upload ended in an error, once both the answer
 * and the upload are over.
 */
function upload(url, total, key) {
  return new Promise((resolve) => {
    const chunk = Buffer.alloc(64 * 1024, 97);
    const req = http.request(url, { method: 'POST', headers: { 'Idempotency-Key': key, 'Content-Type': 'application/octet-stream' } });
    const out = { status: undefined, sent: 0, error: undefined, answeredAt: undefined, endedAt: undefined };
    let answered = false;
    let ended = false;
    const done = () => {
      if ((answered || out.error) && (ended || out.error)) resolve(out);
    };
    req.on('response', (res) => {
      out.status = res.statusCode;
      out.answeredAt = Date.now();
      res.resume();
      res.on('end', () => ((answered = true), done()));
      res.on('close', () => ((answered = true), done()));
    });
    req.on('error', (error) => {
      out.error = error.code ?? error.message;
      out.endedAt ??= Date.now();
      done();
    });
    req.on('finish', () => {
      ended = true;
      out.endedAt ??= Date.now();
      done();
    });
    // A connection the server closed after its answer: once a response came, Node reports
    // the broken upload as 'close' (not always 'error' or 'finish').
    req.on('close', () => {
      ended = true;
      out.endedAt ??= Date.now();
      if (out.status !== undefined) answered = true;
      done();
    });
    const pump = () => {
      while (out.sent < total && !out.error) {
        out.sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
  });
}

// A server in a process of its own (the upload's client-side buffers do not count), serving
// `bodyLength()` with the defaults; it reports its resident set size on request.
const MEMORY_SERVER = `
import http from 'node:http';
import { idempotency, toNodeHandler } from 'retry-fetch/server';
let runs = 0;
const handler = idempotency(async (request) => {
  runs++;
  return new Response(String((await request.arrayBuffer()).byteLength), { status: 201 });
});
const server = http.createServer(toNodeHandler(handler, { onError: () => {} }));
let peak = 0;
setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 2);
process.on('message', (message) => {
  if (message === 'reset') peak = process.memoryUsage().rss;
  if (message === 'reset' || message === 'report') process.send({ peak: Math.max(peak, process.memoryUsage().rss), runs });
  if (message === 'exit') process.exit(0);
});
server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
`;

test('maxBodyBytes: a 50 MiB streamed upload is cut at the limit: a 413, and the server process does not buffer it', async () => {
  const child = spawn(process.execPath, ['--max-semi-space-size=1', '--input-type=module', '-e', MEMORY_SERVER], {
    cwd: fileURLToPath(new URL('.', import.meta.url)),
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const next = () => new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`the server process exited (${code})`)));
  });
  try {
    const { port } = await next();
    const url = `http://127.0.0.1:${port}`;
    // Warm up (wasm instantiated, a keyed body read), then measure from here.
    assert.equal(await (await send(url, { key: newKey(), body: 'x'.repeat(512 * 1024) })).text(), String(512 * 1024));
    child.send('reset');
    const { peak: before } = await next();
    const size = 50 * 1024 * 1024;
    const result = await upload(`${url}/upload`, size, newKey());
    child.send('report');
    const { peak, runs } = await next();
    assert.equal(result.status, 413, JSON.stringify(result));
    assert.equal(runs, 1, 'the handler did not run for the upload');
    // Buffering the upload would take at least its 50 MiB (more, with the copies); what is read
    // is 1 MiB and the socket's buffers. The rest is drained as garbage: the child's small young
    // generation (--max-semi-space-size=1) collects it early, and the bound (half the upload)
    // leaves room for a loaded machine's late collections.
    const growth = peak - before;
    assert.ok(growth < size / 2, `the server's rss grew by ${(growth / 1048576).toFixed(1)} MiB during a ${size / 1048576} MiB upload`);
  } finally {
    child.send('exit');
    child.kill();
  }
});

test('toNodeHandler: after a 413 the rest of the upload is not left hanging (the connection is closed or the body drained)', async () => {
  const { handler } = bodyLength();
  await withServer(handler, async (server) => {
    const result = await upload(`${server.url}/upload`, 8 * 1024 * 1024, newKey());
    assert.equal(result.status, 413);
    // Drained, or closed when the adapters' linger (2 s) runs out: a slow machine may need all
    // of it for 8 MiB. Left hanging, it would not end at all.
    const stalled = result.endedAt - result.answeredAt;
    assert.ok(stalled < 3000, `the upload ended ${stalled} ms after the 413 (${result.error ?? 'finished'})`);
  });
});

// ---------------------------------------------------------------------------------------------
// toNodeHandler

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
