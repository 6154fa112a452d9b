// retry-fetch/hono in Hono 4 on @hono/node-server (real packages from npm, a real server on
// 127.0.0.1): before and after a validator, replays byte for byte, 422, c.req.raw, errors
// (a throw: the route failed; an HTTPException 4xx: its answer), headers of earlier
// middleware (cors), and the shared scenarios against PostgreSQL (support.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Hono } from 'hono';
import { validator } from 'hono/validator';
import { cors } from 'hono/cors';
import { compress } from 'hono/compress';
import { HTTPException } from 'hono/http-exception';
import { serve } from '@hono/node-server';
import { idempotency } from 'retry-fetch/hono';
import { adapterScenarios, post, snapshot, pay, upload, assertUncodedReplay, assertPerRequestHeadersReplayed } from './support.mjs';

/** Serve `app` with @hono/node-server on 127.0.0.1:0. */
async function listen(app) {
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
  if (!server.listening) await new Promise((resolve) => server.once('listening', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A validator of JSON bodies with an integer `amount` (what @hono/zod-validator does with a schema). */
const payment = validator('json', (value, c) => {
  if (typeof value?.amount !== 'number') return c.json({ error: 'amount is required' }, 400);
  return value;
});

const NO_SCOPE = { identity: false };

test('Hono: after a validator (the body already read) and before one: the route reads c.req.valid(); a repeat is replayed byte for byte; another body is a 422', async () => {
  const app = new Hono();
  app.onError((error, c) => c.json({ error: error.message }, 500));
  let runs = 0;
  const route = async (c) => {
    runs++;
    c.header('X-Run', String(runs));
    return c.json({ order: c.req.param('id'), amount: c.req.valid('json').amount, key: c.get('idempotency').key, run: runs }, 201);
  };
  // After the validator, per route.
  app.post('/after/:id', payment, idempotency(NO_SCOPE), route);
  // Before it: app.use on the path, the validator in the route.
  app.use('/before/*', idempotency(NO_SCOPE));
  app.post('/before/:id', payment, route);
  const server = await listen(app);
  try {
    for (const base of ['/after', '/before']) {
      const path = `${base}/7`;
      const before = runs;
      const key = crypto.randomUUID();
      const first = await post(server.url, path, { key, body: { amount: 4200, currency: 'EUR' } });
      assert.equal(first.status, 201, path);
      const a = await snapshot(first);
      assert.deepEqual(JSON.parse(a.body), { order: '7', amount: 4200, key, run: before + 1 }, path);
      const repeat = await post(server.url, path, { key, body: { amount: 4200, currency: 'EUR' } });
      assert.equal(repeat.headers.get('idempotent-replayed'), 'true', path);
      assert.deepEqual(await snapshot(repeat), a, `${path}: the stored answer, byte for byte`);
      const other = await post(server.url, path, { key, body: { amount: 1, currency: 'EUR' } });
      assert.equal(other.status, 422, path);
      assert.equal((await other.json()).code, 'idempotency-key-reused');
      assert.equal(runs, before + 1, `${path}: the route ran once`);
    }
    // A validator's refusal after the middleware is the route's answer (a 400, stored).
    const key = crypto.randomUUID();
    const refused = await post(server.url, '/before/7', { key, body: { currency: 'EUR' } });
    assert.equal(refused.status, 400);
    assert.equal((await post(server.url, '/before/7', { key, body: { currency: 'EUR' } })).headers.get('idempotent-replayed'), 'true');
  } finally {
    await server.close();
  }
});

test('Hono: c.req.arrayBuffer() gives the bytes back after c.req.json() (Hono\'s body cache); c.req.raw is readable in the route', async () => {
  const app = new Hono();
  app.post('/probe', async (c) => {
    const parsed = await c.req.json();
    const bytes = new Uint8Array(await c.req.arrayBuffer());
    return c.json({ parsed, text: new TextDecoder().decode(bytes) });
  });
  let runs = 0;
  app.post('/raw', idempotency(NO_SCOPE), async (c) => {
    runs++;
    return c.json({ raw: await c.req.raw.text(), text: await c.req.text(), aborted: c.req.raw.signal.aborted }, 201);
  });
  const server = await listen(app);
  try {
    const probe = await post(server.url, '/probe', { body: '{"b": 2,  "a": 1}' });
    assert.deepEqual(await probe.json(), { parsed: { b: 2, a: 1 }, text: '{"b": 2,  "a": 1}' }, 'the text as received, not re-serialised');
    const key = crypto.randomUUID();
    const first = await post(server.url, '/raw', { key, body: 'pay 4200', type: 'text/plain' });
    assert.equal(first.status, 201);
    const a = await snapshot(first);
    assert.deepEqual(JSON.parse(a.body), { raw: 'pay 4200', text: 'pay 4200', aborted: false });
    const repeat = await post(server.url, '/raw', { key, body: 'pay 4200', type: 'text/plain' });
    assert.deepEqual(await snapshot(repeat), a);
    assert.equal((await post(server.url, '/raw', { key, body: 'pay 1', type: 'text/plain' })).status, 422);
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

test('Hono: after a middleware that read c.req.formData() (Hono keeps only the FormData): an identical retry is replayed, another file or field is a 422', async () => {
  const app = new Hono();
  let runs = 0;
  const csrf = async (c, next) => {
    if ((await c.req.formData()).get('note') === null) return c.text('no note', 403);
    await next();
  };
  app.post('/form', csrf, idempotency(NO_SCOPE), async (c) => {
    runs++;
    const form = await c.req.formData();
    const file = form.get('file');
    return c.json({ note: form.get('note'), file: typeof file === 'string' ? file : await file.text() }, 201);
  });
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    const first = await upload(`${server.url}/form`, key, 'FILE A');
    assert.equal(first.status, 201);
    const a = await snapshot(first);
    assert.deepEqual(JSON.parse(a.body), { note: 'invoice', file: 'FILE A' });
    const repeat = await upload(`${server.url}/form`, key, 'FILE A');
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(repeat), a);
    assert.equal((await upload(`${server.url}/form`, key, 'FILE B')).status, 422);

    const formKey = crypto.randomUUID();
    const form = (amount) => post(server.url, '/form', { key: formKey, body: `note=invoice&file=${amount}`, type: 'application/x-www-form-urlencoded' });
    assert.equal((await form('10')).status, 201);
    assert.equal((await form('10')).headers.get('idempotent-replayed'), 'true');
    assert.equal((await form('99')).status, 422);
    assert.equal(runs, 2);
  } finally {
    await server.close();
  }
});

test('Hono: after a middleware that read c.req.formData(), the route\'s c.req.raw carries the form (multipart with its file, or URL-encoded), not the fingerprint', async () => {
  const app = new Hono();
  const readForm = async (c, next) => {
    await c.req.formData();
    await next();
  };
  app.post('/raw', readForm, idempotency(NO_SCOPE), async (c) => {
    const type = c.req.raw.headers.get('content-type');
    const form = await c.req.raw.formData();
    const file = form.get('file');
    return c.json({ multipart: type.startsWith('multipart/form-data; boundary='), note: form.get('note'), file: typeof file === 'string' ? file : await file.text() }, 201);
  });
  const server = await listen(app);
  try {
    const multipart = await upload(`${server.url}/raw`, crypto.randomUUID(), 'FILE A');
    assert.equal(multipart.status, 201);
    assert.deepEqual(await multipart.json(), { multipart: true, note: 'invoice', file: 'FILE A' });
    const urlEncoded = await post(server.url, '/raw', { key: crypto.randomUUID(), body: 'note=invoice&file=10', type: 'application/x-www-form-urlencoded' });
    assert.equal(urlEncoded.status, 201);
    assert.deepEqual(await urlEncoded.json(), { multipart: false, note: 'invoice', file: '10' });
  } finally {
    await server.close();
  }
});

test('Hono: a throw gets app.onError\'s answer (a 500, a domain error mapped to 402), stored and replayed, as Express does; an HTTPException 404 too; cors headers are on every answer', async () => {
  const app = new Hono();
  const told = [];
  class InsufficientFunds extends Error {}
  app.use('*', cors({ origin: 'https://shop.example' }));
  app.onError((error, c) => {
    if (error instanceof HTTPException) return error.getResponse();
    return c.json({ error: error.message }, error instanceof InsufficientFunds ? 402 : 500);
  });
  let runs = 0;
  app.use('/api/*', idempotency({ ...NO_SCOPE, onError: (error) => told.push(error.message) }));
  app.post('/api/fails', () => {
    runs++;
    throw new Error('the provider is down');
  });
  app.post('/api/mapped', () => {
    runs++;
    throw new InsufficientFunds('insufficient funds');
  });
  app.post('/api/missing', () => {
    runs++;
    throw new HTTPException(404, { message: 'no such order' });
  });
  app.post('/api/pay', (c) => {
    runs++;
    return c.json({ run: runs }, 201);
  });
  const server = await listen(app);
  const origin = { Origin: 'https://shop.example' };
  const cors_ = (res) => res.headers.get('access-control-allow-origin');
  try {
    const key = crypto.randomUUID();
    const failed = await post(server.url, '/api/fails', { key, body: {}, headers: origin });
    assert.equal(failed.status, 500);
    assert.equal(cors_(failed), 'https://shop.example');
    const f = await snapshot(failed);
    assert.deepEqual(JSON.parse(f.body), { error: 'the provider is down' });
    const again = await post(server.url, '/api/fails', { key, body: {}, headers: origin });
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(again), f);

    const mappedKey = crypto.randomUUID();
    const mapped = await post(server.url, '/api/mapped', { key: mappedKey, body: {}, headers: origin });
    assert.equal(mapped.status, 402);
    const p = await snapshot(mapped);
    assert.deepEqual(JSON.parse(p.body), { error: 'insufficient funds' });
    const mappedAgain = await post(server.url, '/api/mapped', { key: mappedKey, body: {}, headers: origin });
    assert.equal(mappedAgain.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(mappedAgain), p);
    assert.deepEqual(told, [], 'app.onError had the errors');

    const key404 = crypto.randomUUID();
    const missing = await post(server.url, '/api/missing', { key: key404, body: {}, headers: origin });
    assert.equal(missing.status, 404);
    const m = await snapshot(missing);
    assert.equal(m.body.toString(), 'no such order');
    const replay = await post(server.url, '/api/missing', { key: key404, body: {}, headers: origin });
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(replay), m);

    const payKey = crypto.randomUUID();
    assert.equal((await post(server.url, '/api/pay', { key: payKey, body: { a: 1 }, headers: origin })).status, 201);
    const reused = await post(server.url, '/api/pay', { key: payKey, body: { a: 2 }, headers: origin });
    assert.equal(reused.status, 422);
    assert.equal(cors_(reused), 'https://shop.example', 'the companion\'s own answer keeps cors\'s headers');
    const missingKey = await post(server.url, '/api/pay', { body: { a: 2 }, headers: origin });
    assert.equal(missingKey.status, 400);
    assert.equal(cors_(missingKey), 'https://shop.example');
    assert.equal(runs, 4);
  } finally {
    await server.close();
  }
});

test('Hono: a route that returns no Response failed (a 500, stored), not Hono\'s default 200; let through without a key, Hono answers as without the adapter', async () => {
  const app = new Hono();
  let runs = 0;
  app.post('/forgot', idempotency({ ...NO_SCOPE, required: false }), async (c) => {
    runs++;
    await c.req.json(); // ...and no `return c.json(...)`
  });
  const quiet = console.error;
  console.error = () => {}; // the companion's onError, Hono's log of its own error
  try {
    const request = (key) => new Request('http://x/forgot', { method: 'POST', headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) }, body: '{"a":1}' });
    const first = await app.fetch(request('k1'));
    assert.equal(first.status, 500);
    assert.equal((await first.json()).code, 'idempotency-handler-failed');
    const repeat = await app.fetch(request('k1'));
    assert.equal(repeat.status, 500);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 1);
    // No key: Hono's own answer for a context never finalized (its 500).
    const bare = await app.fetch(request());
    assert.equal(bare.status, 500);
    assert.equal(await bare.text(), 'Internal Server Error');
  } finally {
    console.error = quiet;
  }
});

test('Hono: compress() after the adapter: the answer is stored as identity bytes, so a replay to a client that asked for no coding gets none; a GET without a key keeps its coding', async () => {
  const app = new Hono();
  const big = { data: 'x'.repeat(2000) };
  app.use('/pay', idempotency(NO_SCOPE), compress());
  app.post('/pay', (c) => c.json(big, 201));
  app.get('/pay', (c) => c.json(big));
  const server = await listen(app);
  try {
    await assertUncodedReplay(`${server.url}/pay`, 201, big);
    const read = await fetch(`${server.url}/pay`, { headers: { 'Accept-Encoding': 'gzip' } });
    assert.equal(read.headers.get('content-encoding'), 'gzip');
    assert.deepEqual(await read.json(), big);
  } finally {
    await server.close();
  }
});

test('Hono: an unknown or invalid option is the companion\'s TypeError, at once', () => {
  assert.throws(() => idempotency({ lockTimeout: 5000 }), (e) => e instanceof TypeError && /lockTimeoutMs/.test(e.message));
  assert.throws(() => idempotency({ maxBodyBytes: -1 }), (e) => e instanceof TypeError && /maxBodyBytes/.test(e.message));
});

test('Hono: a body over maxBodyBytes is the companion\'s 413, the route does not run', async () => {
  const app = new Hono();
  let runs = 0;
  app.post('/payments', idempotency({ ...NO_SCOPE, maxBodyBytes: 64 }), (c) => {
    runs++;
    return c.text('ran');
  });
  const server = await listen(app);
  try {
    const res = await post(server.url, '/payments', { key: crypto.randomUUID(), body: { pad: 'x'.repeat(200) } });
    assert.equal(res.status, 413);
    assert.equal((await res.json()).code, 'idempotency-body-too-large');
    assert.equal(runs, 0);
    const ok = await pay(server.url, { small: 1 });
    assert.equal(ok.status, 200);
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

test('Hono: after a 413 for a declared length, the keep-alive connection serves the next request (the upload is dropped, not reset)', async () => {
  const app = new Hono();
  app.post('/payments', idempotency({ ...NO_SCOPE, maxBodyBytes: 1024 }), (c) => c.text('ran', 201));
  const server = await listen(app);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const send = (body) =>
    new Promise((resolve) => {
      const req = http.request(`${server.url}/payments`, { method: 'POST', agent, timeout: 10_000, headers: { 'Content-Length': body.length, 'Content-Type': 'application/octet-stream', 'Idempotency-Key': crypto.randomUUID() } }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode, reused: req.reusedSocket }));
      });
      req.on('error', (error) => resolve({ error: error.code ?? error.message }));
      req.on('timeout', () => req.destroy(new Error('no answer: the connection stalled')));
      req.end(body);
    });
  try {
    assert.equal((await send(Buffer.alloc(1_200_000, 1))).status, 413);
    assert.deepEqual(await send(Buffer.from('abc')), { status: 201, reused: true });
  } finally {
    agent.destroy();
    await server.close();
  }
});

test('Hono: headers a middleware before the adapter set with c.header() do not replace the route\'s own Response headers (Set-Cookie, Vary), first answer, replay, or a request let through', async () => {
  const app = new Hono();
  app.use('*', async (c, next) => {
    c.header('Vary', 'Origin');
    c.header('Set-Cookie', 'sess=abc');
    c.header('X-Request-Id', 'r-1');
    await next();
  });
  app.use('*', idempotency(NO_SCOPE));
  const route = () => {
    const headers = new Headers({ 'Content-Type': 'application/json', Vary: 'Origin, Accept' });
    headers.append('Set-Cookie', 'receipt=r1; Path=/');
    return new Response('{"ok":true}', { status: 201, headers });
  };
  app.post('/pay', route);
  app.get('/pay', route);
  const init = { method: 'POST', headers: { 'Idempotency-Key': crypto.randomUUID(), 'Content-Type': 'application/json' }, body: '{}' };
  const first = await app.request('/pay', init);
  assert.equal(first.status, 201);
  assert.deepEqual(first.headers.getSetCookie(), ['receipt=r1; Path=/'], 'the route\'s cookie, as without the adapter');
  assert.equal(first.headers.get('vary'), 'Origin, Accept');
  assert.equal(first.headers.get('x-request-id'), 'r-1', 'a header only the middleware set is kept');
  const replay = await app.request('/pay', init);
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(replay.headers.get('vary'), 'Origin, Accept');
  assert.equal(replay.headers.get('x-request-id'), 'r-1');
  const through = await app.request('/pay');
  assert.deepEqual(through.headers.getSetCookie(), ['receipt=r1; Path=/']);
  assert.equal(through.headers.get('vary'), 'Origin, Accept');
});

/** Hono 4: a validator, the middleware, the route; a throw goes to app.onError. */
async function startHono({ options, route }) {
  const app = new Hono();
  app.onError((error, c) => c.json({ error: error.message }, 500));
  app.post('/payments', payment, idempotency(options), async (c) => {
    const out = await route({ body: c.req.valid('json'), ctx: c.var.idempotency });
    return c.json(out.json, out.status);
  });
  return listen(app);
}

adapterScenarios('Hono', startHono);

test('Hono: a replay carries the headers its own request\'s middleware set (CORS origin, request id), and the route\'s own', async () => {
  const app = new Hono();
  app.use('*', async (c, next) => {
    c.header('Access-Control-Allow-Origin', c.req.header('origin'));
    c.header('X-Request-Id', c.req.header('x-request-id'));
    await next();
  });
  app.use('/pay', idempotency(NO_SCOPE));
  app.post('/pay', (c) => c.json({ ok: true }, 201, { 'X-Route': 'paid' }));
  const server = await listen(app);
  try {
    await assertPerRequestHeadersReplayed(server.url, '/pay');
  } finally {
    await server.close();
  }
});

test('Hono: a bodiless answer (c.body(null)) stays bodiless through the adapter: no Content-Type added, first or replayed', async () => {
  const app = new Hono();
  let runs = 0;
  app.post('/ack', idempotency({ identity: false }), (c) => {
    runs++;
    return c.body(null, 200);
  });
  const bare = new Hono();
  bare.post('/ack', (c) => c.body(null, 200));
  const [server, plain] = [await listen(app), await listen(bare)];
  try {
    const expected = (await post(plain.url, '/ack', { key: crypto.randomUUID(), body: {} })).headers.get('content-type');
    const key = crypto.randomUUID();
    const first = await post(server.url, '/ack', { key, body: {} });
    const repeat = await post(server.url, '/ack', { key, body: {} });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    for (const [label, res] of [['first', first], ['replay', repeat]]) {
      assert.equal(res.status, 200, label);
      assert.equal(res.headers.get('content-type'), expected, `${label}: as bare Hono`);
      assert.equal(await res.text(), '', label);
    }
    assert.equal(runs, 1);
  } finally {
    await server.close();
    await plain.close();
  }
});
