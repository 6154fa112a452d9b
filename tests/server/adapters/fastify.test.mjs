// retry-fetch/fastify in Fastify 5 (real framework from npm, a real server on 127.0.0.1):
// Fastify's body parsing stays on, replays byte for byte, 422, thrown errors (5xx: the route
// failed; 4xx: its answer), headers of onRequest hooks, opting out, and the shared scenarios
// against PostgreSQL (support.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import http2 from 'node:http2';
import Fastify from 'fastify';
import { idempotency } from 'retry-fetch/fastify';
import defaultExport from 'retry-fetch/fastify';
import { adapterScenarios, post, snapshot, pay, upload, streamProbe, assertPerRequestHeadersReplayed, h2Post, assertTargetAsReceived } from './support.mjs';

/** Start `app` on 127.0.0.1:0. */
async function listen(app) {
  await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url: `http://127.0.0.1:${app.server.address().port}`,
    close: () => app.close(),
  };
}

const NO_SCOPE = { identity: false };

test('Fastify: the route reads request.body as Fastify parsed it; a repeat gets the stored answer byte for byte; another body is a 422', async () => {
  const app = Fastify();
  await app.register(idempotency, NO_SCOPE);
  let runs = 0;
  app.post('/orders/:id/pay', {
    schema: { body: { type: 'object', required: ['amount'], properties: { amount: { type: 'integer' }, currency: { type: 'string' } } } },
  }, async (request, reply) => {
    runs++;
    reply.code(201).header('x-run', String(runs));
    return { order: request.params.id, amount: request.body.amount, key: request.idempotency.key, run: runs };
  });
  app.post('/text', async (request, reply) => {
    runs++;
    return reply.code(201).type('text/plain').send(`got ${request.body}`);
  });
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    const first = await post(server.url, '/orders/7/pay', { key, body: { amount: 4200, currency: 'EUR' } });
    assert.equal(first.status, 201);
    const a = await snapshot(first);
    assert.deepEqual(JSON.parse(a.body), { order: '7', amount: 4200, key, run: 1 });
    const repeat = await post(server.url, '/orders/7/pay', { key, body: '{"currency":"EUR",  "amount":4200}' });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(repeat), a, 'the stored answer, byte for byte');
    const other = await post(server.url, '/orders/7/pay', { key, body: { amount: 1, currency: 'EUR' } });
    assert.equal(other.status, 422);
    assert.equal((await other.json()).code, 'idempotency-key-reused');
    // Schema validation runs before the plugin's hook: a bad body is Fastify's 400, nothing held.
    const invalid = await post(server.url, '/orders/7/pay', { key: crypto.randomUUID(), body: { currency: 'EUR' } });
    assert.equal(invalid.status, 400);
    assert.equal((await invalid.json()).code, 'FST_ERR_VALIDATION');
    assert.equal(runs, 1, 'the route ran once');

    const textKey = crypto.randomUUID();
    const t1 = await post(server.url, '/text', { key: textKey, body: 'pay 4200', type: 'text/plain' });
    assert.equal(t1.status, 201);
    const ta = await snapshot(t1);
    assert.equal(ta.body.toString(), 'got pay 4200');
    const t2 = await post(server.url, '/text', { key: textKey, body: 'pay 4200', type: 'text/plain' });
    assert.equal(t2.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(t2), ta);
    assert.equal((await post(server.url, '/text', { key: textKey, body: 'pay 1', type: 'text/plain' })).status, 422);
    assert.equal(runs, 2);
  } finally {
    await server.close();
  }
});

test('Fastify: a route that throws gets the error handler\'s answer (Fastify\'s 500, a setErrorHandler\'s 402, a 404), stored and replayed, as Express does', async () => {
  const app = Fastify();
  const told = [];
  await app.register(idempotency, { ...NO_SCOPE, onError: (error) => told.push(error.message) });
  let runs = 0;
  app.post('/fails', async () => {
    runs++;
    throw new Error('the provider is down');
  });
  await app.register(async (child) => {
    child.setErrorHandler((error, request, reply) => reply.code(402).send({ error: error.message }));
    child.post('/mapped', async () => {
      runs++;
      throw new Error('insufficient funds');
    });
  });
  app.post('/missing', async () => {
    runs++;
    const error = new Error('no such order');
    error.statusCode = 404;
    throw error;
  });
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    const failed = await post(server.url, '/fails', { key, body: {} });
    assert.equal(failed.status, 500);
    const f = await snapshot(failed);
    assert.equal(JSON.parse(f.body).message, 'the provider is down', 'Fastify\'s own error answer');
    const again = await post(server.url, '/fails', { key, body: {} });
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(again), f);

    const mappedKey = crypto.randomUUID();
    const mapped = await post(server.url, '/mapped', { key: mappedKey, body: {} });
    assert.equal(mapped.status, 402);
    const p = await snapshot(mapped);
    assert.deepEqual(JSON.parse(p.body), { error: 'insufficient funds' });
    const mappedAgain = await post(server.url, '/mapped', { key: mappedKey, body: {} });
    assert.equal(mappedAgain.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(mappedAgain), p);
    assert.deepEqual(told, [], 'the error handler had the errors');

    const key404 = crypto.randomUUID();
    const missing = await post(server.url, '/missing', { key: key404, body: {} });
    assert.equal(missing.status, 404);
    const m = await snapshot(missing);
    assert.equal(JSON.parse(m.body).message, 'no such order', 'Fastify\'s own error answer');
    const replay = await post(server.url, '/missing', { key: key404, body: {} });
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(replay), m);
    assert.equal(runs, 3);
  } finally {
    await server.close();
  }
});

test('Fastify: a multipart body left unparsed (as @fastify/multipart leaves it) is read by the companion and left for the route: another file is a 422; fields without the file are the companion\'s 500', async () => {
  const app = Fastify();
  // As @fastify/multipart: the parser leaves the stream to the route (request.file()).
  app.addContentTypeParser('multipart/form-data', (request, payload, done) => done(null));
  // As an upload parser that keeps the fields only: the file is not in request.body.
  app.addContentTypeParser('multipart/mixed', async (request, payload) => {
    for await (const chunk of payload) void chunk;
    return { note: 'invoice' };
  });
  await app.register(idempotency, NO_SCOPE);
  let runs = 0;
  app.post('/up', async (request, reply) => {
    runs++;
    const chunks = [];
    for await (const chunk of request.raw) chunks.push(chunk);
    return reply.code(201).send({ file: /filename="doc.txt"\r\n[^\r]*\r\n\r\n([^\r]*)/.exec(Buffer.concat(chunks).toString('latin1'))?.[1] });
  });
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    const first = await upload(`${server.url}/up`, key, 'FILE A');
    assert.equal(first.status, 201);
    assert.deepEqual(await first.json(), { file: 'FILE A' });
    const same = await upload(`${server.url}/up`, key, 'FILE A');
    assert.equal(same.headers.get('idempotent-replayed'), 'true');
    const other = await upload(`${server.url}/up`, key, 'FILE B');
    assert.equal(other.status, 422);
    assert.equal((await other.json()).code, 'idempotency-key-reused');
    assert.equal(runs, 1);

    const fields = await fetch(`${server.url}/up`, {
      method: 'POST',
      headers: { 'Idempotency-Key': crypto.randomUUID(), 'Content-Type': 'multipart/mixed; boundary=x' },
      body: '--x\r\n\r\nFILE A\r\n--x--\r\n',
    });
    assert.equal(fields.status, 500);
    assert.equal((await fields.json()).code, 'idempotency-body-already-read');
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

test('Fastify: a reply the route gives up (reply.raw.destroy(), hijacked then destroyed) has its failure stored at once; a client that goes away still gets the route\'s answer stored', async () => {
  const app = Fastify();
  await app.register(idempotency, { ...NO_SCOPE, lockTimeoutMs: 1500 });
  const runs = { destroy: 0, hijack: 0, slow: 0 };
  app.post('/destroy', async (request, reply) => {
    runs.destroy++;
    reply.raw.destroy();
    return reply;
  });
  app.post('/hijack', async (request, reply) => {
    runs.hijack++;
    reply.hijack();
    reply.raw.destroy();
  });
  let slowEnded;
  app.post('/slow', async (request, reply) => {
    runs.slow++;
    await new Promise((resolve) => setTimeout(resolve, 300));
    slowEnded?.();
    return reply.code(201).send({ paid: true });
  });
  const server = await listen(app);
  const quiet = console.error;
  console.error = () => {}; // the companion's onError
  try {
    for (const path of ['/destroy', '/hijack']) {
      const key = crypto.randomUUID();
      await assert.rejects(post(server.url, path, { key, body: {} }), path);
      // The repeat is answered at once with the stored failure: not a wait ending in a 409,
      // for as long as the process lives.
      const started = Date.now();
      const repeat = await post(server.url, path, { key, body: {} });
      assert.equal(repeat.status, 500, path);
      assert.equal((await repeat.json()).code, 'idempotency-handler-failed', path);
      assert.ok(Date.now() - started < 1000, `${path}: answered without waiting for the lock`);
    }
    assert.deepEqual({ destroy: runs.destroy, hijack: runs.hijack }, { destroy: 1, hijack: 1 });
    const key = crypto.randomUUID();
    const done = new Promise((resolve) => (slowEnded = resolve));
    const gone = new AbortController();
    setTimeout(() => gone.abort(), 50);
    await assert.rejects(fetch(`${server.url}/slow`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body: '{}', signal: gone.signal }));
    await done;
    await new Promise((resolve) => setTimeout(resolve, 50));
    const repeat = await post(server.url, '/slow', { key, body: {} });
    assert.equal(repeat.status, 201);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs.slow, 1);
  } finally {
    console.error = quiet;
    await server.close();
  }
});

test('Fastify over HTTP/2: a stream the client cancels while the route works leaves the route running; its answer is stored for the retry', async () => {
  const app = Fastify({ http2: true });
  await app.register(idempotency, NO_SCOPE);
  let runs = 0;
  let ended;
  const done = new Promise((resolve) => (ended = resolve));
  app.post('/pay', async (request, reply) => {
    runs++;
    await new Promise((resolve) => setTimeout(resolve, 300));
    ended();
    return reply.code(201).send({ paid: runs });
  });
  // An answer written to reply.raw, around Fastify: unseen, so its key keeps a 500.
  app.post('/raw', async (request, reply) => {
    reply.raw.writeHead(201, { 'content-type': 'text/plain' });
    reply.raw.end('paid');
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const client = http2.connect(`http://127.0.0.1:${app.server.address().port}`);
  const send = (key, cancelAfterMs, path = '/pay') => h2Post(client, { key, cancelAfterMs, path });
  try {
    const key = crypto.randomUUID();
    assert.equal((await send(key, 50)).status, undefined); // cancelled before any answer
    await done;
    await new Promise((resolve) => setTimeout(resolve, 50));
    const retry = await send(key);
    assert.equal(retry.status, 201);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.deepEqual(JSON.parse(retry.body), { paid: 1 });
    assert.equal(runs, 1);
    const rawKey = crypto.randomUUID();
    assert.equal((await send(rawKey, undefined, '/raw')).status, 201);
    const started = Date.now();
    const rawRepeat = await send(rawKey, undefined, '/raw');
    assert.equal(rawRepeat.status, 500);
    assert.equal(JSON.parse(rawRepeat.body).code, 'idempotency-handler-failed');
    assert.ok(Date.now() - started < 1000, 'answered without waiting for the lock');
  } finally {
    client.close();
    await app.close();
  }
});

test('Fastify: headers of onRequest hooks are on every answer; a route can opt out; a GET and an unknown route go through', async () => {
  const app = Fastify();
  app.addHook('onRequest', async (request, reply) => {
    reply.header('access-control-allow-origin', 'https://shop.example');
  });
  await app.register(defaultExport, NO_SCOPE);
  let runs = 0;
  app.post('/pay', async (request, reply) => {
    runs++;
    return reply.code(201).send({ run: runs });
  });
  app.post('/webhook', { config: { idempotency: false } }, async (request) => {
    runs++;
    return { idempotency: request.idempotency };
  });
  app.get('/balance', async (request) => {
    runs++;
    return { key: request.idempotency.key };
  });
  const server = await listen(app);
  const cors = (res) => res.headers.get('access-control-allow-origin');
  try {
    const key = crypto.randomUUID();
    const first = await post(server.url, '/pay', { key, body: { a: 1 } });
    assert.equal(first.status, 201);
    assert.equal(cors(first), 'https://shop.example');
    const repeat = await post(server.url, '/pay', { key, body: { a: 1 } });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.equal(cors(repeat), 'https://shop.example');
    const reused = await post(server.url, '/pay', { key, body: { a: 2 } });
    assert.equal(reused.status, 422);
    assert.equal(cors(reused), 'https://shop.example');
    const missing = await post(server.url, '/pay', { body: { a: 2 } });
    assert.equal(missing.status, 400);
    assert.equal(cors(missing), 'https://shop.example');
    assert.equal(runs, 1);

    const hook = await post(server.url, '/webhook', { body: {} });
    assert.equal(hook.status, 200, 'opted out: no key required');
    assert.deepEqual(await hook.json(), { idempotency: null });
    assert.deepEqual(await (await fetch(`${server.url}/balance`)).json(), { key: null });
    assert.equal((await post(server.url, '/nowhere', { key: crypto.randomUUID(), body: {} })).status, 404, 'Fastify\'s 404');
    assert.equal(runs, 3);
  } finally {
    await server.close();
  }
});

test('Fastify: a GET without a key streams as without the plugin (its first chunk reaches the client before the answer ends)', async () => {
  const app = Fastify();
  await app.register(idempotency, NO_SCOPE);
  const probe = streamProbe();
  app.get('/events', (request, reply) => {
    const stream = new Readable({ read() {} });
    stream.push('data: 1\n\n');
    probe.clientRead().then((early) => {
      stream.push(`data: ${early}\n\n`);
      stream.push(null);
    });
    return reply.type('text/event-stream').send(stream);
  });
  const server = await listen(app);
  try {
    assert.equal(await probe.get(`${server.url}/events`), 'data: 1\n\ndata: true\n\n');
  } finally {
    await server.close();
  }
});

test('Fastify: an unknown or invalid option fails the registration with the companion\'s TypeError', async () => {
  const app = Fastify();
  await assert.rejects(async () => app.register(idempotency, { lockTimeout: 5000 }), (e) => e instanceof TypeError && /lockTimeoutMs/.test(e.message));
  const app2 = Fastify();
  await assert.rejects(async () => app2.register(idempotency, { concurrent: 'queue' }), (e) => e instanceof TypeError && /concurrent/.test(e.message));
  // Fastify's own register options are not the companion's.
  const app3 = Fastify();
  await app3.register(idempotency, { ...NO_SCOPE, prefix: '/v1', logLevel: 'warn' });
  await app3.ready();
  await app3.close();
});

test('Fastify: a retrying client: the answer is lost on the way once, the retry gets the stored 201', async () => {
  const app = Fastify();
  let attempts = 0;
  app.addHook('onRequest', async (request, reply) => {
    if (++attempts === 1) {
      reply.raw.writeHead = function () {
        request.raw.socket.destroy();
        return this;
      };
    }
  });
  await app.register(idempotency, NO_SCOPE);
  let runs = 0;
  app.post('/payments', async (request, reply) => {
    runs++;
    return reply.code(201).send({ payment: request.body.payment, run: runs });
  });
  const server = await listen(app);
  try {
    const res = await pay(server.url, { payment: 'p-1', amount: 1 });
    assert.equal(res.status, 201);
    assert.equal(res.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await res.json(), { payment: 'p-1', run: 1 });
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

/** Fastify 5: the plugin, JSON parsed by Fastify, the route; a throw goes to Fastify's error handling. */
async function startFastify({ options, route }) {
  const app = Fastify();
  await app.register(idempotency, options);
  app.post('/payments', async (request, reply) => {
    const out = await route({ body: request.body, ctx: request.idempotency });
    return reply.code(out.status).send(out.json);
  });
  return listen(app);
}

adapterScenarios('Fastify', startFastify);

test('Fastify: a replay carries the headers its own request\'s hooks set (CORS origin, request id), and the route\'s own', async () => {
  const app = Fastify();
  app.addHook('onRequest', async (request, reply) => {
    reply.header('access-control-allow-origin', request.headers.origin);
    reply.header('x-request-id', request.headers['x-request-id']);
  });
  await app.register(defaultExport, NO_SCOPE);
  app.post('/pay', async (request, reply) => reply.header('x-route', 'paid').code(201).send({ ok: true }));
  const server = await listen(app);
  try {
    await assertPerRequestHeadersReplayed(server.url, '/pay');
  } finally {
    await server.close();
  }
});

test('Fastify: registered again in a child context, the plugin handles the child\'s routes with the child\'s options, once: a repeat replays, never a key stuck in progress', async () => {
  const app = Fastify();
  let runs = 0;
  const route = async (request, reply) => reply.code(201).send({ run: ++runs });
  app.post('/early', route); // declared before any registration: the app's registration has it
  await app.register(idempotency, { ...NO_SCOPE, lockTimeoutMs: 1000, waitTimeoutMs: 500 });
  app.post('/root', route);
  await app.register(async (child) => {
    await child.register(idempotency, { ...NO_SCOPE, lockTimeoutMs: 1000, waitTimeoutMs: 500, maxBodyBytes: 100 });
    child.post('/child', route);
  });
  const server = await listen(app);
  try {
    const big = { note: 'x'.repeat(200) };
    for (const [path, body] of [['/early', big], ['/root', big], ['/child', { a: 1 }]]) {
      const key = crypto.randomUUID();
      const before = runs;
      const first = await post(server.url, path, { key, body });
      assert.equal(first.status, 201, `${path}: ${await first.clone().text()}`);
      const repeat = await post(server.url, path, { key, body });
      assert.equal(repeat.status, 201, `${path}: the repeat (${await repeat.clone().text()})`);
      assert.equal(repeat.headers.get('idempotent-replayed'), 'true', `${path}: replayed`);
      assert.deepEqual(await repeat.json(), await first.json(), path);
      assert.equal(runs, before + 1, `${path}: runs`);
    }
    // The child's maxBodyBytes holds for its routes only.
    assert.equal((await post(server.url, '/child', { key: crypto.randomUUID(), body: big })).status, 413);
  } finally {
    await server.close();
  }
});

test('Fastify: the fingerprint covers the target as received (a router reads /a/../b as another path than /b): another request, never the first one\'s replay', async () => {
  const app = Fastify();
  await app.register(idempotency, NO_SCOPE);
  let runs = 0;
  app.post('/transfer/:from/:to', async (request, reply) => reply.code(201).send({ run: ++runs, from: request.params.from }));
  const server = await listen(app);
  try {
    await assertTargetAsReceived(server.url, () => runs);
  } finally {
    await server.close();
  }
});
