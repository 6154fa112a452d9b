// Edge cases found in review: each was a wrong answer or a double run before its fix.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { idempotency, idempotent, MemoryStore, toNodeHandler } from 'retry-fetch/server';
import express from 'express';
import { idempotency as expressIdempotency } from 'retry-fetch/express';
import { idempotency as honoIdempotency } from 'retry-fetch/hono';
import { Hono } from 'hono';
import { withServer, listen, newKey, sleep } from './support.mjs';

/**
 * `handler` behind toNodeHandler on a port of its own, and `raw(target, key)`: a keyed POST of
 * `{}` to the request target as written (fetch would normalise it).
 */
async function rawTargets(handler) {
  const server = http.createServer(toNodeHandler(handler));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  const raw = (target, key) => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: target, headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end('{}');
  });
  const close = async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return { port, raw, close };
}

test('a request target starting with // is a path, not another host: a second path under the same key is a 422', async () => {
  let runs = 0;
  const handler = idempotency(async (request) => {
    runs++;
    return Response.json({ path: new URL(request.url).pathname, host: new URL(request.url).hostname });
  });
  const { raw, close } = await rawTargets(handler);
  try {
    const key = newKey();
    const first = await raw('//payments/charge', key);
    assert.equal(first.status, 200);
    assert.deepEqual(JSON.parse(first.body), { path: '//payments/charge', host: '127.0.0.1' });
    const other = await raw('//refunds/charge', key);
    assert.equal(other.status, 422, 'another path under the same key');
    assert.equal(runs, 1);
  } finally {
    await close();
  }
});

test('toNodeHandler: the fingerprint covers the target as received (a router of node:http reads /a/../b as another path than /b): a 422, never the first one\'s replay', async () => {
  let runs = 0;
  const handler = idempotency(async () => Response.json({ run: ++runs }, { status: 201 }));
  const { raw, close } = await rawTargets(handler);
  try {
    const key = newKey();
    assert.equal((await raw('/transfer/alice/bob', key)).status, 201);
    for (const target of ['/transfer/x/../alice/bob', '/transfer/alice/./bob', '/transfer/x/%2e%2e/alice/bob', '/transfer/carol\\..\\alice/bob']) {
      const other = await raw(target, key);
      assert.equal(other.status, 422, `${target}: ${other.status} ${other.body}`);
    }
    assert.equal(runs, 1);
    // A dot segment before a fragment (Node's parser lets a `#` through) too.
    const fragment = newKey();
    assert.equal((await raw('/transfer/', fragment)).status, 201);
    assert.equal((await raw('/transfer/x/..#f', fragment)).status, 422);
    assert.equal((await raw('/transfer/x/%2e%2e#f', fragment)).status, 422);
    // In absolute form (as a proxy sends it), too.
    const proxied = newKey();
    assert.equal((await raw('/delete', proxied)).status, 201);
    assert.equal((await raw('http://127.0.0.1/files/%2e%2e/delete', proxied)).status, 422);
    // Any other target is as a URL parser makes it, as a fetch client sends it (and as a
    // `Request` says, and as earlier versions stored it): one request either way.
    const quoted = newKey();
    assert.equal((await raw("/pay?q=it's&n=\"x\"", quoted)).status, 201);
    const again = await raw('/pay?q=it%27s&n=%22x%22', quoted);
    assert.equal(again.status, 201);
    assert.equal(JSON.parse(again.body).run, 4, 'replayed, not run again');
    assert.equal(runs, 4);
  } finally {
    await close();
  }
});

test('a request target in absolute form (as a proxy sends it) is its URL: the handler sees its path, and a retry in origin form replays it', async () => {
  let runs = 0;
  const handler = idempotency(async (request) => {
    runs++;
    return Response.json({ path: new URL(request.url).pathname, query: new URL(request.url).search }, { status: 201 });
  }, { store: new MemoryStore(), identity: false });
  const { port, raw, close } = await rawTargets(handler);
  try {
    const key = newKey();
    const first = await raw(`http://127.0.0.1:${port}/pay?order=7`, key);
    assert.equal(first.status, 201);
    assert.deepEqual(JSON.parse(first.body), { path: '/pay', query: '?order=7' });
    const again = await raw('/pay?order=7', key);
    assert.equal(again.status, 201, 'the same resource in origin form is a repeat, not a 422');
    assert.deepEqual(JSON.parse(again.body), { path: '/pay', query: '?order=7' });
    assert.equal(runs, 1);
    // No host after `//`: not read as a URL whose host is the path's first segment (both
    // would then be `POST /`, one the replay of the other).
    const empty = newKey();
    assert.equal((await raw('http:///pay', empty)).status, 201);
    assert.equal((await raw('http:///refund', empty)).status, 422, 'another path under the same key');
    assert.equal(runs, 2);
  } finally {
    await close();
  }
});

test('a handler resolving with a response of another fetch implementation (not instanceof Response) is stored and replayed', async () => {
  let runs = 0;
  const foreign = () => ({
    status: 201,
    statusText: 'Created',
    headers: new Headers({ 'X-Charge': 'ch_1', 'Content-Type': 'application/json' }),
    arrayBuffer: async () => new TextEncoder().encode('{"charge":"ch_1"}').buffer,
  });
  const handler = idempotency(async () => {
    runs++;
    return foreign();
  }, { store: new MemoryStore(), onError: () => {} });
  await withServer(handler, async ({ url }) => {
    const key = newKey();
    const send = () => fetch(`${url}/pay`, { method: 'POST', body: '{}', headers: { 'Idempotency-Key': key } });
    const first = await send();
    assert.equal(first.status, 201);
    assert.equal(first.headers.get('x-charge'), 'ch_1');
    assert.deepEqual(await first.json(), { charge: 'ch_1' });
    const again = await send();
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await again.json(), { charge: 'ch_1' });
    assert.equal(runs, 1);
  });
});

test('idempotent: a thrown value that is not an Error is kept as its string', async () => {
  const fn = idempotent(async () => {
    throw 'card declined'; // eslint-disable-line no-throw-literal
  }, { store: new MemoryStore(), key: (m) => m.id, onStoreError: () => {} });
  const message = { id: newKey() };
  await assert.rejects(fn(message), (e) => e === 'card declined');
  await assert.rejects(fn(message), (e) => e.name === 'IdempotencyError' && e.code === 'previous-run-failed' && /card declined/.test(e.message));
});

test('toNodeHandler writes its headers with setHeader and a bare writeHead: a middleware that wraps writeHead and reads its headers (old on-headers, Next.js\'s compression) sees none to scramble', async () => {
  let runs = 0;
  const handler = idempotency(async () => {
    runs++;
    const headers = new Headers({ Location: '/payments/1', 'Content-Type': 'application/json' });
    headers.append('Set-Cookie', 'a=1');
    headers.append('Set-Cookie', 'b=2');
    return new Response('{"id":1}', { status: 201, statusText: 'Created Here', headers });
  }, { store: new MemoryStore(), identity: false });
  const node = toNodeHandler(handler);
  const seen = [];
  // What on-headers 1.0.2 does with writeHead's headers: an array read as [name, value] pairs.
  const app = (req, res) => {
    res.setHeader('X-Request-Id', 'r1');
    res.setHeader('Location', '/before');
    const writeHead = res.writeHead;
    res.writeHead = function (status, ...rest) {
      seen.push(rest.length);
      const headers = typeof rest[0] === 'string' ? rest[1] : rest[0];
      if (Array.isArray(headers)) for (const [name, value] of headers) this.setHeader(name, value);
      return writeHead.call(this, status, ...(typeof rest[0] === 'string' ? [rest[0]] : []));
    };
    node(req, res);
  };
  const server = await listen(app);
  try {
    for (const replayed of [null, 'true']) {
      const key = 'order-1';
      const res = await fetch(`${server.url}/payments`, { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{}' });
      assert.equal(res.status, 201);
      assert.equal(res.statusText, 'Created Here');
      assert.equal(res.headers.get('location'), '/payments/1', 'the answer\'s, over the one set before');
      assert.equal(res.headers.get('x-request-id'), 'r1', 'set before the handler, kept');
      assert.equal(res.headers.get('content-type'), 'application/json');
      assert.equal(res.headers.get('idempotent-replayed'), replayed);
      if (replayed === null) assert.deepEqual(res.headers.getSetCookie(), ['a=1', 'b=2']);
      assert.equal(await res.text(), '{"id":1}');
    }
    assert.equal(runs, 1);
    assert.deepEqual(seen, [1, 1], 'writeHead(status, statusText): no headers argument');
  } finally {
    await server.close();
  }
});

test('toNodeHandler after express.json(): a read body is a 500 idempotency-body-already-read, never a replay of an empty fingerprint', async () => {
  const runs = [];
  const handler = idempotency(async (request) => {
    const body = await request.text();
    runs.push(`${request.method} ${body}`);
    return Response.json({ run: runs.length, body }, { status: 201 });
  }, { identity: false, onError: () => {} });
  const app = express();
  app.set('env', 'test');
  app.use(express.json());
  app.all('/pay', toNodeHandler(handler));
  const { url, close } = await listen(app);
  try {
    const key = newKey();
    const post = (body, headers = {}) => fetch(`${url}/pay`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key, ...headers }, body });
    for (const body of ['{"amount":1}', '{"amount":999}']) {
      const response = await post(body);
      const problem = await response.json();
      assert.equal(response.status, 500, JSON.stringify(problem));
      assert.equal(problem.code, 'idempotency-body-already-read');
      assert.equal(response.headers.get('idempotent-replayed'), null);
    }
    assert.deepEqual(runs, [], 'the handler never ran on a body it could not see');

    // What the parser did not read still works: a body of another type (the companion reads
    // and fingerprints it: another body under its key is a 422)...
    const textKey = newKey();
    const text = (body) => fetch(`${url}/pay`, { method: 'POST', headers: { 'Content-Type': 'text/plain', 'Idempotency-Key': textKey }, body });
    assert.equal((await text('amount=1')).status, 201);
    assert.equal((await text('amount=999')).status, 422);
    // ...a POST without a body (Content-Length: 0, which express.json() reads to its empty
    // end), and one without Content-Length nor Transfer-Encoding, keyed, replayed on repeat...
    const emptyKey = newKey();
    const empty = () => fetch(`${url}/pay`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': emptyKey } });
    const first = await empty();
    assert.equal(first.status, 201, await first.clone().text());
    assert.deepEqual(await first.json(), { run: 2, body: '' });
    const repeat = await empty();
    assert.equal(repeat.status, 201);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    const bare = await new Promise((resolve, reject) => {
      const req = http.request(`${url}/pay`, { method: 'POST', headers: { 'Idempotency-Key': newKey() } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      });
      req.on('error', reject);
      req.end();
    });
    assert.equal(bare, 201, 'a POST with neither Content-Length nor Transfer-Encoding');
    // ...and a keyed GET (its key ignored).
    const get = await fetch(`${url}/pay`, { headers: { 'Idempotency-Key': newKey() } });
    assert.equal(get.status, 201);
    assert.deepEqual(runs, ['POST amount=1', 'POST ', 'POST ', 'GET ']);
  } finally {
    await close();
  }
});

test('toNodeHandler after a middleware that read the body itself (a Next.js Pages API route\'s parser): 500 idempotency-body-already-read', async () => {
  let runs = 0;
  const next = toNodeHandler(idempotency(async () => {
    runs++;
    return new Response('ran', { status: 201 });
  }, { identity: false, onError: () => {} }));
  // Reads the stream to its end, as a framework's body parser does, then hands over.
  const { url: base, close } = await listen(async (req, res) => {
    let text = '';
    for await (const chunk of req) text += chunk;
    req.body = text ? JSON.parse(text) : undefined;
    next(req, res);
  });
  try {
    const url = `${base}/pay`;
    const response = await fetch(url, { method: 'POST', headers: { 'Idempotency-Key': newKey() }, body: '{"amount":1}' });
    const problem = await response.json();
    assert.equal(response.status, 500);
    assert.equal(problem.code, 'idempotency-body-already-read');
    assert.equal(runs, 0);
    // A chunked upload (Transfer-Encoding, no Content-Length) read the same way: the same.
    const chunked = await fetch(url, {
      method: 'POST',
      headers: { 'Idempotency-Key': newKey() },
      body: new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('{"amount":2}')); c.close(); } }),
      duplex: 'half',
    });
    assert.equal(chunked.status, 500);
    assert.equal((await chunked.json()).code, 'idempotency-body-already-read');
    assert.equal(runs, 0);
  } finally {
    await close();
  }
});

test('Express adapter: bodies that differ only inside a "__proto__" member have different fingerprints (422)', async () => {
  let runs = 0;
  const app = express();
  app.set('env', 'test');
  app.post('/transfer', express.json(), expressIdempotency({ identity: false }), (req, res) => {
    runs++;
    res.status(201).json({ run: runs });
  });
  const { url, close } = await listen(app);
  try {
    const key = newKey();
    const send = (body) => fetch(`${url}/transfer`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body });
    assert.equal((await send('{"to":"alice","__proto__":{"amount":1}}')).status, 201);
    const other = await send('{"to":"alice","__proto__":{"amount":100000}}');
    assert.equal(other.status, 422, await other.text());
    // Key order still does not count, "__proto__" included.
    const same = await send('{"__proto__":{"amount":1},"to":"alice"}');
    assert.equal(same.status, 201);
    assert.equal(same.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 1);
  } finally {
    await close();
  }
});

test('Express: the server shutting down (closeAllConnections) under a slow route is not the route giving up: its answer is stored for the retry on another instance', async () => {
  const store = new MemoryStore(); // shared, as a RedisStore or PostgresStore is
  let paid = 0;
  const route = (delay) => (req, res) => setTimeout(() => res.status(201).json({ paid: ++paid }), delay);
  const app = express();
  app.post('/pay', express.json(), expressIdempotency({ identity: false, store }), route(300));
  const server = http.createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const key = newKey();
  const headers = { 'Content-Type': 'application/json', 'Idempotency-Key': key };
  const first = fetch(`http://127.0.0.1:${server.address().port}/pay`, { method: 'POST', headers, body: '{}' });
  setTimeout(() => {
    server.close();
    server.closeAllConnections();
  }, 100);
  await assert.rejects(first);
  await new Promise((resolve) => setTimeout(resolve, 400));
  assert.equal(paid, 1);
  const other = express();
  other.post('/pay', express.json(), expressIdempotency({ identity: false, store }), route(0));
  const instance = await listen(other);
  try {
    const retry = await fetch(`${instance.url}/pay`, { method: 'POST', headers, body: '{}' });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await retry.json(), { paid: 1 });
  } finally {
    await instance.close();
  }
});

test('toNodeHandler: a handler that answers before the upload ended and reads on gets the whole body', async () => {
  let read;
  const body = new Promise((resolve) => (read = resolve));
  const server = await listen(toNodeHandler(async (request) => {
    request.text().then((text) => read(text.length), (error) => read(error));
    return new Response('accepted', { status: 202 });
  }));
  try {
    const { port } = new URL(server.url);
    const status = await new Promise((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', headers: { 'Content-Length': 3000 } }, (res) => {
        res.resume();
        resolve(res.statusCode);
      });
      req.on('error', reject);
      req.write('a'.repeat(1000));
      setTimeout(() => req.write('b'.repeat(1000)), 150);
      setTimeout(() => req.end('c'.repeat(1000)), 300);
    });
    assert.equal(status, 202);
    assert.equal(await body, 3000);
  } finally {
    await server.close();
  }
});

test('toNodeHandler mounted under two paths (Express strips the mount path from req.url): one key on both is a 422, the fingerprint is of the original target', async () => {
  const store = new MemoryStore();
  const ran = [];
  const charge = idempotency(async (request) => {
    ran.push(`charge ${new URL(request.url).pathname}`);
    return Response.json({ op: 'charge' }, { status: 201 });
  }, { store, identity: false });
  const refund = idempotency(async () => {
    ran.push('refund');
    return Response.json({ op: 'refund' }, { status: 201 });
  }, { store, identity: false });
  const app = express();
  app.use('/payments', toNodeHandler(charge));
  app.use('/refunds', toNodeHandler(refund));
  const { url, close } = await listen(app);
  try {
    const key = newKey();
    const post = (path) => fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body: '{"order":42}' });
    assert.equal((await post('/payments')).status, 201);
    const refunded = await post('/refunds');
    assert.equal(refunded.status, 422, 'another endpoint under the same key is another request');
    assert.equal((await refunded.json()).code, 'idempotency-key-reused');
    const again = await post('/payments');
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(ran, ['charge /'], 'the handler still sees req.url as mounted; the refund never ran');
  } finally {
    await close();
  }
});

test('Express: a middleware that read the raw body and left req.body unset (a signature check) makes a keyed request the companion\'s 500, never a replay of an empty fingerprint', async () => {
  let runs = 0;
  const app = express();
  app.set('env', 'test');
  app.use((req, res, next) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      req.rawBody = Buffer.concat(chunks);
      next();
    });
  });
  app.use(expressIdempotency({ identity: false, onError: () => {} }));
  app.post('/transfer', (req, res) => {
    runs++;
    res.status(201).json(JSON.parse(req.rawBody.toString() || '{}'));
  });
  const { url, close } = await listen(app);
  try {
    const key = newKey();
    const post = (body) => fetch(`${url}/transfer`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body });
    for (const body of ['{"to":"bob","amount":10}', '{"to":"carol","amount":999}']) {
      const response = await post(body);
      assert.equal(response.status, 500);
      assert.equal((await response.json()).code, 'idempotency-body-already-read');
    }
    assert.equal(runs, 0);
    // A POST that declares no body (Content-Length: 0) is fingerprinted as empty, whoever read it.
    const empty = () => fetch(`${url}/transfer`, { method: 'POST', headers: { 'Idempotency-Key': key + '-empty' } });
    assert.equal((await empty()).status, 201);
    assert.equal((await empty()).headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 1);
  } finally {
    await close();
  }
});

test('an adapter mounted twice on a request\'s way (app-wide and on the route): the first that holds the key handles it, the second passes it on; no 409 for its own lock', async () => {
  const store = new MemoryStore();
  let runs = 0;
  const app = express();
  app.set('env', 'test');
  app.use(expressIdempotency({ store, identity: false, lockTimeoutMs: 2000 }));
  app.post('/pay', expressIdempotency({ store, identity: false, lockTimeoutMs: 2000, required: true }), (req, res) => {
    runs++;
    res.status(201).json({ charged: true });
  });
  const hono = new Hono();
  hono.use('*', honoIdempotency({ store, identity: false, lockTimeoutMs: 2000 }));
  hono.post('/pay', honoIdempotency({ store, identity: false, lockTimeoutMs: 2000, required: true }), (c) => {
    runs++;
    return c.json({ charged: true }, 201);
  });
  const { url, close } = await listen(app);
  try {
    for (const send of [(init) => fetch(`${url}/pay`, init), (init) => hono.request('/pay', init)]) {
      runs = 0;
      const init = (key) => ({ method: 'POST', headers: { 'Content-Type': 'application/json', ...(key && { 'Idempotency-Key': key }) }, body: '{"amount":1}' });
      const key = newKey();
      const first = await send(init(key));
      assert.equal(first.status, 201, await first.clone().text());
      const repeat = await send(init(key));
      assert.equal(repeat.status, 201);
      assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
      assert.equal(runs, 1);
      // Without a key the first lets it through: the route's own registration still applies.
      const keyless = await send(init(undefined));
      assert.equal(keyless.status, 400, 'the route\'s required: true');
      assert.equal(runs, 1);
    }
  } finally {
    await close();
  }
});

test('a store whose complete fails for a moment (a dropped connection) is called again: the answer is kept and a retry gets it, the handler ran once', async () => {
  class FlakyStore extends MemoryStore {
    failures = 0;
    calls = 0;
    async complete(...a) {
      this.calls++;
      if (this.failures > 0) {
        this.failures--;
        throw new Error('connection reset');
      }
      return super.complete(...a);
    }
  }
  const store = new FlakyStore();
  const reported = [];
  let runs = 0;
  const handler = idempotency(async () => {
    runs++;
    return Response.json({ charged: runs }, { status: 201 });
  }, { store, identity: false, onStoreError: (error, operation) => reported.push(`${operation}: ${error.message}`) });
  const pay = (key) => handler(new Request('http://shop.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{"amount":1}' }));
  store.failures = 2;
  const key = newKey();
  const first = await pay(key);
  assert.equal(first.status, 201);
  assert.equal(store.calls, 3, 'complete was called again after each failure');
  assert.deepEqual(reported, [], 'a failure made good is not reported');
  const repeat = await pay(key);
  assert.equal(repeat.headers.get('idempotent-replayed'), 'true', 'the answer was kept');
  assert.deepEqual(await repeat.json(), { charged: 1 });
  assert.equal(runs, 1);
  // Failing on: three calls, then the answer goes out, unkept so far (the last failure
  // reported, the client told not to retry) ...
  store.failures = 5;
  store.calls = 0;
  const unkeptKey = newKey();
  const unkept = await pay(unkeptKey);
  assert.equal(unkept.status, 201);
  assert.equal(unkept.headers.get('x-should-retry'), 'false');
  assert.equal(store.calls, 3);
  assert.deepEqual(reported, ['complete: connection reset']);
  // ... and the storing goes on behind it, once a renewal interval (a second here), the lock
  // renewed, until the store is back: a repeat then gets the answer, the handler ran once.
  for (let i = 0; store.calls < 6; i++) {
    assert.ok(i < 100, `complete() was not called again in the background (${store.calls} calls)`);
    await sleep(50);
  }
  const later = await pay(unkeptKey);
  assert.equal(later.headers.get('idempotent-replayed'), 'true', 'kept once the store was back');
  assert.deepEqual(await later.json(), { charged: 2 });
  assert.equal(runs, 2, 'one run per key');
  assert.deepEqual(reported, ['complete: connection reset'], 'reported once, when the caller was answered');
});

test('the storing that goes on behind an answer does not keep a Node process alive: a store that never comes back leaves it free to exit', async () => {
  const { spawnSync } = await import('node:child_process');
  const script = `
    const { idempotency, MemoryStore } = await import('retry-fetch/server');
    class Down extends MemoryStore { async complete() { throw new Error('down'); } }
    const h = idempotency(async () => new Response('charged', { status: 201 }), { store: new Down(), identity: false, lockTimeoutMs: 600000, onStoreError: () => {} });
    const res = await h(new Request('http://localhost/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k1' }, body: 'x' }));
    console.log(res.status, res.headers.get('x-should-retry'));
    globalThis.answeredAt = performance.now();
  `;
  const started = performance.now();
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: new URL('.', import.meta.url), encoding: 'utf8', timeout: 60_000 });
  assert.equal(child.signal, null, 'the process ended on its own');
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout.trim(), '201 false');
  assert.ok(performance.now() - started < 30_000, 'not held for lockTimeoutMs (10 minutes)');
});

test('toNodeHandler: an answer header node:http refuses is a 500 without the answer\'s headers, with the ones a middleware set before', async () => {
  const handler = async () => new Response('hello', { status: 200, headers: {
    'Access-Control-Allow-Origin': 'https://other.example', 'Cache-Control': 'public, max-age=600', 'Content-Length': '5', 'X-Note': 'a\x7fb' } });
  const node = toNodeHandler(handler, { onError: () => {} });
  const server = await listen((req, res) => {
    res.setHeader('Access-Control-Allow-Origin', 'https://app.example');
    res.setHeader('X-Request-Id', 'r-1');
    node(req, res);
  });
  try {
    const res = await fetch(server.url);
    assert.equal(res.status, 500);
    assert.equal(res.headers.get('access-control-allow-origin'), 'https://app.example', 'the middleware\'s, put back');
    assert.equal(res.headers.get('x-request-id'), 'r-1');
    assert.equal(res.headers.get('cache-control'), null, 'the answer\'s are not on the 500');
    assert.equal(await res.text(), 'Internal Server Error\n');
  } finally {
    await server.close();
  }
});

test('an answer the store could not keep, whatever its status, tells clients not to retry it (X-Should-Retry and Stripe-Should-Retry: false): retryFetch runs the handler once', async () => {
  const { retryFetch } = await import('retry-fetch');
  // A store whose complete() fails (Redis briefly down): the handler ran, nothing is stored,
  // and the key's lock lapses after lockTimeoutMs, after which a retry would run it again.
  class CompleteFails extends MemoryStore {
    async complete() {
      throw new Error('store down at complete');
    }
  }
  const options = () => ({ store: new CompleteFails(), identity: false, lockTimeoutMs: 1000, onError: () => {}, onStoreError: () => {} });
  // An upstream whose 502 the handler passes on as it is (fetch's Response: immutable headers).
  const upstream = await listen((req, res) => res.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway'));
  let charges = 0;
  const routes = {
    '/502': async () => (charges++, new Response('upstream failed', { status: 502 })),
    '/proxied': async () => (charges++, fetch(upstream.url)),
    '/201': async () => (charges++, Response.json({ ok: true }, { status: 201 })),
  };
  const app = express();
  app.post('/express', expressIdempotency(options()), (req, res) => {
    charges++;
    throw new Error('failed after charging'); // Express's error handler answers 500
  });
  app.use((error, req, res, next) => res.status(500).send('failed'));
  const wrapped = Object.fromEntries(Object.entries(routes).map(([path, handler]) => [path, toNodeHandler(idempotency(handler, options()))]));
  const fetchHandlers = Object.fromEntries(Object.entries(routes).map(([path, handler]) => [path, idempotency(handler, options())]));
  const { url, close } = await listen((req, res) => (req.url === '/express' ? app(req, res) : wrapped[req.url](req, res)));
  try {
    for (const path of ['/502', '/proxied', '/201', '/express']) {
      charges = 0;
      const res = await retryFetch(`${url}${path}`, { method: 'POST', body: 'pay 10' }, { baseDelayMs: 300, maxDelayMs: 300, maxAttempts: 6 });
      assert.equal(res.headers.get('x-should-retry'), 'false', `${path}: X-Should-Retry`);
      assert.equal(res.headers.get('stripe-should-retry'), 'false', `${path}: Stripe-Should-Retry`);
      await res.arrayBuffer();
      // Long enough for the lock to lapse and a retry to have run the handler again.
      await sleep(1_300);
      assert.equal(charges, 1, `${path}: the handler ran once`);
    }
    // The fetch handler's own Response too.
    for (const [path, handler] of Object.entries(fetchHandlers)) {
      const res = await handler(new Request(`http://localhost${path}`, { method: 'POST', headers: { 'Idempotency-Key': newKey() }, body: 'x' }));
      assert.equal(res.headers.get('x-should-retry'), 'false', `fetch handler ${path}`);
      assert.equal(res.headers.get('stripe-should-retry'), 'false', `fetch handler ${path}`);
    }
  } finally {
    await close();
    await upstream.close();
  }
});

test('toNodeHandler: a stored answer never holds a header HTTP cannot send: the header is left out (said to onError), the 201 is sent and replayed, not a 500 for the key\'s lifetime', async () => {
  const errors = [];
  let charges = 0;
  const handler = idempotency(async () => {
    charges++;
    // A user's file name with an ESC in it: fetch's Headers takes it, node:http does not.
    return new Response('receipt', { status: 201, headers: { 'Content-Disposition': 'attachment; filename="a\x1bb.pdf"', 'X-Receipt': 'r-1' } });
  }, { store: new MemoryStore(), identity: false, onError: (e) => errors.push(e) });
  const { url, close } = await listen(toNodeHandler(handler, { onError: (e) => errors.push(e) }));
  try {
    const key = newKey();
    for (const attempt of ['first', 'replay']) {
      const res = await fetch(url, { method: 'POST', headers: { 'Idempotency-Key': key }, body: 'pay' });
      assert.equal(res.status, 201, attempt);
      assert.equal(await res.text(), 'receipt', attempt);
      assert.equal(res.headers.get('x-receipt'), 'r-1', attempt);
      assert.equal(res.headers.get('content-disposition'), null, `${attempt}: the header left out`);
    }
    assert.equal(charges, 1);
    assert.equal(errors.length, 1, errors.map(String).join('; '));
    assert.match(String(errors[0]), /content-disposition/);
  } finally {
    await close();
  }
});

test('toNodeHandler: an answer node:http cannot write (a status text it refuses, a 1xx status) is a 500, never a request left without an answer', async () => {
  const answers = {
    '/nul-text': { status: 200, statusText: 'OK\0', headers: new Headers({ 'X-A': 'a' }), body: null },
    '/wide-text': { status: 200, statusText: 'OK \u0100', headers: new Headers(), body: null },
    '/103': { status: 103, statusText: '', headers: new Headers(), body: null },
  };
  const errors = [];
  const node = toNodeHandler(async (request) => answers[new URL(request.url).pathname], { onError: (e) => errors.push(e) });
  const { url, close } = await listen(node);
  try {
    for (const path of Object.keys(answers)) {
      errors.length = 0;
      const res = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(5_000) });
      assert.equal(res.status, 500, path);
      assert.equal(res.headers.get('x-a'), null, `${path}: none of the answer's headers`);
      assert.equal(await res.text(), 'Internal Server Error\n');
      assert.equal(errors.length, 1, `${path}: reported once`);
    }
  } finally {
    await close();
  }
});
