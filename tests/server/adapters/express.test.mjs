// retry-fetch/express in Express 5 and Connect 3 (real frameworks from npm, real servers on
// 127.0.0.1): after the body parsers, replays byte for byte, 422, the raw body read when no
// parser ran, headers of earlier middleware, Express's error handler, and the shared
// scenarios against PostgreSQL (support.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { gzipSync } from 'node:zlib';
import { pipeline, Readable } from 'node:stream';
import express from 'express';
import connect from 'connect';
import { idempotency } from 'retry-fetch/express';
import { adapterScenarios, post, snapshot, pay, upload, streamProbe, assertUncodedReplay, assertPerRequestHeadersReplayed, h2Post, assertTargetAsReceived } from './support.mjs';

/** Serve `handler` (an Express app, a Connect app) on 127.0.0.1:0. */
async function listen(handler) {
  const server = http.createServer(handler);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** An Express app that does not log the errors its routes throw (they are the tests'). */
function quietApp() {
  const app = express();
  app.set('env', 'test');
  return app;
}

const NO_SCOPE = { identity: false };

test('Express: after express.json() the route reads req.body; a repeat gets the stored answer byte for byte; another body is a 422', async () => {
  const app = quietApp();
  let runs = 0;
  app.post('/orders/:id/pay', express.json(), idempotency(NO_SCOPE), (req, res) => {
    runs++;
    res.status(201).set('X-Run', String(runs)).json({ order: req.params.id, amount: req.body.amount, key: req.idempotency.key, run: runs });
  });
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    const first = await post(server.url, '/orders/7/pay', { key, body: { amount: 4200, currency: 'EUR' } });
    assert.equal(first.status, 201);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    const a = await snapshot(first);
    assert.deepEqual(JSON.parse(a.body), { order: '7', amount: 4200, key, run: 1 });
    // The same JSON with its keys in another order and other spacing: the same request.
    const repeat = await post(server.url, '/orders/7/pay', { key, body: '{ "currency": "EUR", "amount": 4200 }' });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(repeat), a, 'the stored answer, byte for byte (status, headers, body)');
    const other = await post(server.url, '/orders/7/pay', { key, body: { amount: 1, currency: 'EUR' } });
    assert.equal(other.status, 422);
    assert.equal((await other.json()).code, 'idempotency-key-reused');
    assert.equal(runs, 1, 'the route ran once');
  } finally {
    await server.close();
  }
});

test('Express: after express.urlencoded(), express.text() and express.raw() too (no "body already read" 500)', async () => {
  const app = quietApp();
  let runs = 0;
  const echo = (req, res) => {
    runs++;
    res.status(201).json({ body: Buffer.isBuffer(req.body) ? `bytes:${req.body.toString('hex')}` : req.body, run: runs });
  };
  app.post('/form', express.urlencoded({ extended: false }), idempotency(NO_SCOPE), echo);
  app.post('/text', express.text(), idempotency(NO_SCOPE), echo);
  app.post('/raw', express.raw(), idempotency(NO_SCOPE), echo);
  const server = await listen(app);
  try {
    const cases = [
      ['/form', 'application/x-www-form-urlencoded', 'amount=4200&currency=EUR', 'amount=1', { amount: '4200', currency: 'EUR' }],
      ['/text', 'text/plain', 'pay 4200 EUR', 'pay 1 EUR', 'pay 4200 EUR'],
      ['/raw', 'application/octet-stream', '\x01\x02\x03', '\x01', 'bytes:010203'],
    ];
    for (const [path, type, body, otherBody, parsed] of cases) {
      const key = crypto.randomUUID();
      const before = runs;
      const first = await post(server.url, path, { key, body, type });
      assert.equal(first.status, 201, `${path}: ${first.status}`);
      const a = await snapshot(first);
      assert.deepEqual(JSON.parse(a.body).body, parsed, `${path}: the route reads what the parser made`);
      const repeat = await post(server.url, path, { key, body, type });
      assert.equal(repeat.headers.get('idempotent-replayed'), 'true', path);
      assert.deepEqual(await snapshot(repeat), a, `${path}: replayed byte for byte`);
      assert.equal((await post(server.url, path, { key, body: otherBody, type })).status, 422, `${path}: another body`);
      assert.equal(runs, before + 1, `${path}: the route ran once`);
    }
  } finally {
    await server.close();
  }
});

test('Express: no parser before it: the companion reads the raw body (413 over maxBodyBytes) and leaves it in req: a parser after it parses it as without the adapter', async () => {
  const app = quietApp();
  let runs = 0;
  app.post('/raw', idempotency({ ...NO_SCOPE, maxBodyBytes: 64 }), express.json(), (req, res) => {
    runs++;
    res.status(201).json({ body: req.body });
  });
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    const first = await post(server.url, '/raw', { key, body: '{"amount":4200}' });
    assert.equal(first.status, 201);
    const a = await snapshot(first);
    assert.deepEqual(JSON.parse(a.body), { body: { amount: 4200 } });
    const repeat = await post(server.url, '/raw', { key, body: '{"amount":4200}' });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(repeat), a);
    // A JSON body is its value, as express.json() before the adapter would make it: other
    // spacing is the same request, another amount another one.
    const spaced = await post(server.url, '/raw', { key, body: '{ "amount": 4200 }' });
    assert.equal(spaced.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(spaced), a);
    assert.equal((await post(server.url, '/raw', { key, body: '{"amount":4201}' })).status, 422);
    const big = await post(server.url, '/raw', { key: crypto.randomUUID(), body: JSON.stringify({ pad: 'x'.repeat(200) }) });
    assert.equal(big.status, 413);
    assert.equal((await big.json()).code, 'idempotency-body-too-large');
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

test('Express: no parser at all: req.body is the Buffer the companion read, and a route that reads req as a stream gets the same bytes (the answer stored is of the whole body)', async () => {
  const app = quietApp();
  app.use(idempotency(NO_SCOPE));
  let runs = 0;
  app.post('/import', async (req, res) => {
    runs++;
    const fromBody = Buffer.isBuffer(req.body) ? req.body.toString('utf8') : null;
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    res.status(201).json({ fromBody, fromStream: Buffer.concat(chunks).toString('utf8') });
  });
  const server = await listen(app);
  try {
    const body = 'id,amount\n1,100\n2,250\n';
    const key = crypto.randomUUID();
    const first = await post(server.url, '/import', { key, body, type: 'text/csv' });
    assert.equal(first.status, 201);
    const a = await snapshot(first);
    assert.deepEqual(JSON.parse(a.body), { fromBody: body, fromStream: body });
    const repeat = await post(server.url, '/import', { key, body, type: 'text/csv' });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(repeat), a);
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

/** An upload parser as multer is one: reads the stream, leaves the fields as req.body and the file apart. */
async function uploadParser(req, res, next) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('latin1');
  req.body = { note: /name="note"\r\n\r\n([^\r]*)/.exec(text)?.[1] };
  req.file = { text: /filename="doc.txt"\r\n[^\r]*\r\n\r\n([^\r]*)/.exec(text)?.[1] };
  next();
}

test('Express: a multipart body an upload parser read first (fields in req.body, the file apart) is the companion\'s 500, never a repeat; mounted before the parser, the parser reads the upload and another file is a 422', async () => {
  const app = quietApp();
  let runs = 0;
  const route = (req, res) => {
    runs++;
    res.status(201).json({ note: req.body.note, file: req.file.text });
  };
  app.post('/after', uploadParser, idempotency(NO_SCOPE), route);
  app.post('/before', idempotency(NO_SCOPE), uploadParser, route);
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    for (const content of ['FILE A', 'FILE B']) {
      const refused = await upload(`${server.url}/after`, key, content);
      assert.equal(refused.status, 500);
      assert.equal((await refused.json()).code, 'idempotency-body-already-read');
    }
    assert.equal(runs, 0);

    const first = await upload(`${server.url}/before`, key, 'FILE A');
    assert.equal(first.status, 201);
    assert.deepEqual(await first.json(), { note: 'invoice', file: 'FILE A' });
    const same = await upload(`${server.url}/before`, key, 'FILE A');
    assert.equal(same.headers.get('idempotent-replayed'), 'true');
    const other = await upload(`${server.url}/before`, key, 'FILE B');
    assert.equal(other.status, 422);
    assert.equal((await other.json()).code, 'idempotency-key-reused');
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

test('Express: app.use(idempotency()): headers set before it are on every answer (replay, 400, 422); a GET goes through every time; Express\'s error handler 500 is stored', async () => {
  const app = quietApp();
  app.use((req, res, next) => {
    res.setHeader('Access-Control-Allow-Origin', 'https://shop.example');
    next();
  });
  app.use(express.json());
  app.use(idempotency(NO_SCOPE));
  let runs = 0;
  let failures = 0;
  app.post('/pay', (req, res) => {
    runs++;
    res.status(201).json({ run: runs });
  });
  app.get('/balance', (req, res) => {
    runs++;
    res.json({ run: runs, key: req.idempotency.key });
  });
  app.post('/fails', () => {
    failures++;
    throw new Error('no ctx.tx used: the 500 is stored and replayed');
  });
  const server = await listen(app);
  const cors = (res) => res.headers.get('access-control-allow-origin');
  try {
    const key = crypto.randomUUID();
    const first = await post(server.url, '/pay', { key, body: { amount: 1 } });
    assert.equal(first.status, 201);
    assert.equal(cors(first), 'https://shop.example');
    const repeat = await post(server.url, '/pay', { key, body: { amount: 1 } });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.equal(cors(repeat), 'https://shop.example');
    const reused = await post(server.url, '/pay', { key, body: { amount: 2 } });
    assert.equal(reused.status, 422);
    assert.equal(cors(reused), 'https://shop.example', 'the companion\'s own answer keeps the earlier middleware\'s headers');
    const missing = await post(server.url, '/pay', { body: { amount: 2 } });
    assert.equal(missing.status, 400);
    assert.equal((await missing.json()).code, 'idempotency-key-missing');
    assert.equal(cors(missing), 'https://shop.example');
    assert.equal(runs, 1);

    const g1 = await fetch(`${server.url}/balance`);
    const g2 = await fetch(`${server.url}/balance`, { headers: { 'Idempotency-Key': 'ignored-on-get' } });
    assert.deepEqual([await g1.json(), await g2.json()], [{ run: 2, key: null }, { run: 3, key: null }], 'a GET runs every time');

    const failKey = crypto.randomUUID();
    const failed = await post(server.url, '/fails', { key: failKey, body: {} });
    assert.equal(failed.status, 500);
    const f = await snapshot(failed);
    const again = await post(server.url, '/fails', { key: failKey, body: {} });
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(again), f, 'Express\'s 500 page, replayed');
    assert.equal(failures, 1);
  } finally {
    await server.close();
  }
});

test('Express: app.use(idempotency()): a GET without a key streams as without it (its first chunk reaches the client before the answer ends)', async () => {
  const app = quietApp();
  app.use(idempotency(NO_SCOPE));
  const probe = streamProbe();
  app.get('/events', async (req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    res.write('data: 1\n\n');
    res.end(`data: ${await probe.clientRead()}\n\n`);
  });
  const server = await listen(app);
  try {
    assert.equal(await probe.get(`${server.url}/events`), 'data: 1\n\ndata: true\n\n');
  } finally {
    await server.close();
  }
});

test('Express: a compression middleware after the adapter: the answer is stored as identity bytes, so a replay to a client that asked for no coding gets none', async () => {
  const app = quietApp();
  // As compression() does after the adapter: encodes the route's answer for this request.
  const gzipAfter = (req, res, next) => {
    const end = res.end;
    res.end = function (chunk, ...rest) {
      if (!/gzip/.test(req.headers['accept-encoding'] ?? '') || chunk === undefined) return end.call(this, chunk, ...rest);
      this.setHeader('Content-Encoding', 'gzip');
      this.removeHeader('Content-Length');
      return end.call(this, gzipSync(chunk));
    };
    next();
  };
  app.post('/pay', express.json(), idempotency(NO_SCOPE), gzipAfter, (req, res) => res.status(201).json({ paid: req.body.amount }));
  const server = await listen(app);
  try {
    await assertUncodedReplay(`${server.url}/pay`, 201, { paid: 5 });
  } finally {
    await server.close();
  }
});

test('Express: the answer is lost on the way (connection cut as it is written): retryFetch\'s retry gets the stored 201, the route ran once', async () => {
  const app = quietApp();
  let attempts = 0;
  // Before the adapter: on the first attempt, the connection dies as the answer is written.
  app.use((req, res, next) => {
    if (++attempts === 1) {
      res.writeHead = function () {
        req.socket.destroy();
        return this;
      };
    }
    next();
  });
  let runs = 0;
  app.post('/payments', express.json(), idempotency(NO_SCOPE), (req, res) => {
    runs++;
    res.status(201).json({ payment: req.body.payment, run: runs });
  });
  const server = await listen(app);
  try {
    const res = await pay(server.url, { payment: 'p-1', amount: 1 });
    assert.equal(res.status, 201);
    assert.equal(res.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await res.json(), { payment: 'p-1', run: 1 });
    assert.equal(runs, 1);
    assert.equal(attempts, 2);
  } finally {
    await server.close();
  }
});

test('Express: a route that gives its answer up (throws after writeHead, res.destroy(), a failed pipeline) has its failure stored at once; a client that goes away still gets the route\'s answer stored', async () => {
  const app = quietApp();
  const runs = { throws: 0, destroys: 0, pipes: 0, slow: 0 };
  const options = { ...NO_SCOPE, lockTimeoutMs: 1500 };
  app.post('/throws', express.json(), idempotency(options), (req, res) => {
    runs.throws++;
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    throw new Error('failed after writeHead'); // Express's error handler destroys the socket
  });
  app.post('/destroys', express.json(), idempotency(options), (req, res) => {
    runs.destroys++;
    res.destroy();
  });
  // pipeline() destroys res with the error of a source that failed.
  app.post('/pipes', express.json(), idempotency(options), (req, res) => {
    runs.pipes++;
    pipeline(new Readable({ read() { this.destroy(new Error('the source failed')); } }), res, () => {});
  });
  let slowEnded;
  const slowDone = new Promise((resolve) => (slowEnded = resolve));
  app.post('/slow', express.json(), idempotency(options), (req, res) => {
    runs.slow++;
    setTimeout(() => {
      res.status(201).json({ paid: true });
      slowEnded();
    }, 300);
  });
  const server = await listen(app);
  const quiet = console.error;
  console.error = () => {}; // the companion's onError and Express's own log of the throw
  try {
    for (const path of ['/throws', '/destroys', '/pipes']) {
      const key = crypto.randomUUID();
      await assert.rejects(post(server.url, path, { key, body: {} }), path);
      // The repeat is answered at once with the stored failure: not a wait of waitTimeoutMs
      // ending in a 409, for as long as the process lives.
      const started = Date.now();
      const repeat = await post(server.url, path, { key, body: {} });
      assert.equal(repeat.status, 500, path);
      assert.equal((await repeat.json()).code, 'idempotency-handler-failed', path);
      assert.ok(Date.now() - started < 1000, `${path}: answered without waiting for the lock`);
    }
    assert.deepEqual({ throws: runs.throws, destroys: runs.destroys, pipes: runs.pipes }, { throws: 1, destroys: 1, pipes: 1 });
    // The client gives up while the route works: the route's answer is still stored.
    const key = crypto.randomUUID();
    const gone = new AbortController();
    setTimeout(() => gone.abort(), 50);
    await assert.rejects(fetch(`${server.url}/slow`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body: '{}', signal: gone.signal }));
    await slowDone;
    const repeat = await post(server.url, '/slow', { key, body: {} });
    assert.equal(repeat.status, 201);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs.slow, 1);
  } finally {
    console.error = quiet;
    await server.close();
  }
  // The client goes away, then the route gives up (a throw after writeHead, once it sees the
  // client gone): its failure is stored then, not a key locked for ever.
  const later = express();
  let gaveUp;
  const failed = new Promise((resolve) => (gaveUp = resolve));
  later.post('/late', express.json(), idempotency(options), async (req, res) => {
    await new Promise((resolve) => res.once('close', resolve));
    res.writeHead(200);
    setImmediate(gaveUp);
    throw new Error('gave up after the client left');
  });
  // The client left while a middleware before the adapter still ran: the same.
  later.post('/early', express.json(), (req, res, next) => setTimeout(next, 150), idempotency(options), (req, res) => {
    res.writeHead(200);
    setImmediate(gaveUp);
    throw new Error('gave up after the client left');
  });
  const laterServer = await listen(later);
  console.error = () => {};
  try {
    const key = crypto.randomUUID();
    const gone = new AbortController();
    setTimeout(() => gone.abort(), 50);
    await assert.rejects(fetch(`${laterServer.url}/late`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body: '{}', signal: gone.signal }));
    await failed;
    const started = Date.now();
    const repeat = await post(laterServer.url, '/late', { key, body: {} });
    assert.equal(repeat.status, 500);
    assert.equal((await repeat.json()).code, 'idempotency-handler-failed');
    assert.ok(Date.now() - started < 1000, 'answered without waiting for the lock');
    const earlyKey = crypto.randomUUID();
    const earlyFailed = new Promise((resolve) => (gaveUp = resolve));
    const left = new AbortController();
    setTimeout(() => left.abort(), 30);
    await assert.rejects(fetch(`${laterServer.url}/early`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': earlyKey }, body: '{}', signal: left.signal }));
    await earlyFailed;
    const earlyStarted = Date.now();
    const earlyRepeat = await post(laterServer.url, '/early', { key: earlyKey, body: {} });
    assert.equal(earlyRepeat.status, 500);
    assert.equal((await earlyRepeat.json()).code, 'idempotency-handler-failed');
    assert.ok(Date.now() - earlyStarted < 1000, 'answered without waiting for the lock');
  } finally {
    console.error = quiet;
    await laterServer.close();
  }
  // A timeout the route set on its own request (req.setTimeout) closes the connection from the
  // route's timer: still a timeout, not the route giving up; its answer is stored.
  const own = express();
  let ownEnded;
  own.post('/slow', express.json(), idempotency(options), (req, res) => {
    req.setTimeout(100);
    setTimeout(() => {
      res.status(201).json({ paid: true });
      ownEnded();
    }, 300);
  });
  const ownServer = await listen(own);
  try {
    const key = crypto.randomUUID();
    const done = new Promise((resolve) => (ownEnded = resolve));
    await assert.rejects(post(ownServer.url, '/slow', { key, body: {} }));
    await done;
    const repeat = await post(ownServer.url, '/slow', { key, body: {} });
    assert.equal(repeat.status, 201);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
  } finally {
    await ownServer.close();
  }
  // The server's inactivity timeout closes the connection under the slow route: the route
  // goes on, and its answer is stored as when the client goes away.
  const timed = http.createServer(app);
  timed.setTimeout(100);
  await new Promise((resolve) => timed.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${timed.address().port}`;
    const key = crypto.randomUUID();
    const done = new Promise((resolve) => (slowEnded = resolve));
    await assert.rejects(post(url, '/slow', { key, body: {} }));
    await done;
    const repeat = await post(url, '/slow', { key, body: {} });
    assert.equal(repeat.status, 201);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs.slow, 2);
  } finally {
    timed.closeAllConnections();
    await new Promise((resolve) => timed.close(resolve));
  }
});

test('Express: a middleware after the adapter that sets headers as the head is written (on-headers: response-time, express-session) sets them on res.send()\'s answer too', async () => {
  const app = quietApp();
  // What on-headers does: wrap res.writeHead, which node:http calls for an implicit head.
  const stamp = (req, res, next) => {
    const writeHead = res.writeHead;
    res.writeHead = function () {
      this.setHeader('X-Response-Time', '1ms');
      return writeHead.apply(this, arguments);
    };
    next();
  };
  app.post('/send', express.json(), idempotency(NO_SCOPE), stamp, (req, res) => res.status(201).send('ok'));
  app.post('/write', express.json(), idempotency(NO_SCOPE), stamp, (req, res) => {
    res.statusCode = 201;
    res.write('o');
    res.end('k');
  });
  const server = await listen(app);
  try {
    for (const path of ['/send', '/write']) {
      const key = crypto.randomUUID();
      const first = await post(server.url, path, { key, body: {} });
      assert.equal(first.status, 201, path);
      assert.equal(first.headers.get('x-response-time'), '1ms', path);
      assert.equal(await first.text(), 'ok', path);
      const repeat = await post(server.url, path, { key, body: {} });
      assert.equal(repeat.headers.get('idempotent-replayed'), 'true', path);
      assert.equal(repeat.headers.get('x-response-time'), '1ms', path);
    }
  } finally {
    await server.close();
  }
});

test('Express: after a 413 the keep-alive connection serves the next request (the rest of the upload is read and dropped)', async () => {
  const app = quietApp();
  app.post('/', idempotency({ ...NO_SCOPE, maxBodyBytes: 1024 }), (req, res) => res.send('ran'));
  app.post('/default-limit', idempotency(NO_SCOPE), (req, res) => res.send('ran'));
  const server = await listen(app);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const send = (body, chunked = false, path = '/') =>
    new Promise((resolve, reject) => {
      const length = chunked ? {} : { 'Content-Length': body.length };
      const req = http.request(`${server.url}${path}`, { method: 'POST', agent, timeout: 10_000, headers: { ...length, 'Idempotency-Key': crypto.randomUUID() } }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString(), reused: req.reusedSocket }));
      });
      req.on('error', reject);
      req.on('timeout', () => req.destroy(new Error('no answer: the connection stalled')));
      if (chunked) req.write(body.subarray(0, body.length >> 1));
      req.end(chunked ? body.subarray(body.length >> 1) : body);
    });
  try {
    assert.equal((await send(Buffer.alloc(200 << 10))).status, 413);
    const next = await send(Buffer.from('x'));
    assert.deepEqual(next, { status: 200, body: 'ran', reused: true });
    // an upload with no Content-Length (chunked), over the default limit (1 MiB, found once
    // that much was read): read and dropped too
    assert.equal((await send(Buffer.alloc(1_200_000), true, '/default-limit')).status, 413);
    assert.deepEqual(await send(Buffer.from('x')), { status: 200, body: 'ran', reused: true });
  } finally {
    agent.destroy();
    await server.close();
  }
});

test('Express: a route stopped by handlerTimeoutMs whose rejection reaches an error handler gets a 503 with Retry-After, not a stored 500; the retry runs it', async () => {
  const app = quietApp();
  let runs = 0;
  let slow = true;
  // A provider call that honours the signal (rejects with its TimeoutError when aborted).
  const provider = (signal) => new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, slow ? 5_000 : 0);
    signal.addEventListener('abort', () => { clearTimeout(timer); reject(signal.reason); }, { once: true });
  });
  app.post('/pay', express.json(), idempotency({ ...NO_SCOPE, handlerTimeoutMs: 100, onError: () => {} }), async (req, res) => {
    runs++;
    await provider(req.idempotency.signal);
    res.status(201).json({ run: runs });
  });
  // A typical JSON error handler: Express 5 hands it the async route's rejection.
  const handled = [];
  app.use((err, req, res, next) => {
    handled.push(err.name);
    res.status(500).json({ error: String(err) });
  });
  const server = await listen(app);
  try {
    const key = crypto.randomUUID();
    const first = await post(server.url, '/pay', { key, body: { amount: 1 } });
    assert.equal(first.status, 503);
    assert.equal(first.headers.get('retry-after'), '1');
    assert.equal((await first.json()).code, 'idempotency-handler-timeout');
    assert.deepEqual(handled, ['TimeoutError'], 'the error handler saw the abort\'s throw');
    slow = false;
    const retry = await post(server.url, '/pay', { key, body: { amount: 1 } });
    assert.equal(retry.status, 201, 'the key was freed: the retry runs the route');
    assert.equal(retry.headers.get('idempotent-replayed'), null);
    assert.deepEqual(await retry.json(), { run: 2 });
    const replay = await post(server.url, '/pay', { key, body: { amount: 1 } });
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 2);
  } finally {
    await server.close();
  }
});

test('Express: an unknown or invalid option is the companion\'s TypeError, at once', () => {
  assert.throws(() => idempotency({ lockTimeout: 5000 }), (e) => e instanceof TypeError && /lockTimeoutMs/.test(e.message));
  assert.throws(() => idempotency({ lockTimeoutMs: 10 }), (e) => e instanceof TypeError && /lockTimeoutMs/.test(e.message));
});

test('Connect: with express.json() and without a parser, node:http\'s API only: replay byte for byte, 422, route once', async () => {
  const app = connect();
  let runs = 0;
  const route = (req, res) => {
    runs++;
    const body = Buffer.isBuffer(req.body) ? req.body.toString('utf8') : req.body;
    res.statusCode = 201;
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ url: req.url, body, key: req.idempotency.key, run: runs }));
  };
  app.use('/parsed', express.json());
  app.use('/parsed', idempotency(NO_SCOPE));
  app.use('/parsed', route);
  app.use('/raw', idempotency(NO_SCOPE));
  app.use('/raw', route);
  const server = await listen(app);
  try {
    for (const [path, parsed] of [['/parsed/pay', { amount: 4200 }], ['/raw/pay', '{"amount":4200}']]) {
      const key = crypto.randomUUID();
      const before = runs;
      const first = await post(server.url, path, { key, body: { amount: 4200 } });
      assert.equal(first.status, 201, path);
      const a = await snapshot(first);
      assert.deepEqual(JSON.parse(a.body), { url: '/pay', body: parsed, key, run: before + 1 }, path);
      const repeat = await post(server.url, path, { key, body: { amount: 4200 } });
      assert.equal(repeat.headers.get('idempotent-replayed'), 'true', path);
      assert.deepEqual(await snapshot(repeat), a, `${path}: byte for byte`);
      assert.equal((await post(server.url, path, { key, body: { amount: 1 } })).status, 422, path);
      assert.equal(runs, before + 1, `${path}: the route ran once`);
    }
    // The mount path is part of the fingerprint (req.originalUrl): the same key on another route is a 422.
    const key = crypto.randomUUID();
    assert.equal((await post(server.url, '/raw/a', { key, body: {} })).status, 201);
    assert.equal((await post(server.url, '/raw/b', { key, body: {} })).status, 422);
  } finally {
    await server.close();
  }
});

/** Express 5: express.json() + the adapter + the route; a route that throws reaches Express's error handler. */
async function startExpress({ options, route }) {
  const app = quietApp();
  app.post('/payments', express.json(), idempotency(options), async (req, res) => {
    const out = await route({ body: req.body, ctx: req.idempotency });
    res.status(out.status).json(out.json);
  });
  return listen(app);
}

/** Connect 3: express.json() + the adapter + a route on node:http's API; a throw goes to next(error), then to the app's error handler. */
async function startConnect({ options, route }) {
  const app = connect();
  app.use(express.json());
  app.use(idempotency(options));
  app.use('/payments', (req, res, next) => {
    route({ body: req.body, ctx: req.idempotency }).then((out) => {
      res.statusCode = out.status;
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(out.json));
    }, next);
  });
  // An error handler of the app's own: its 500 is the route's answer.
  app.use((error, req, res, next) => {
    res.statusCode = 500;
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ error: error.message }));
  });
  return listen(app);
}

adapterScenarios('Express', startExpress);
adapterScenarios('Connect', startConnect);

test('Express: a replay carries the headers its own request\'s middleware set (CORS origin, request id), and the route\'s own', async () => {
  const app = quietApp();
  app.use((req, res, next) => {
    res.setHeader('Access-Control-Allow-Origin', req.headers.origin);
    res.setHeader('X-Request-Id', req.headers['x-request-id']);
    next();
  });
  app.use(express.json());
  app.use(idempotency(NO_SCOPE));
  app.post('/pay', (req, res) => res.set('X-Route', 'paid').status(201).json({ ok: true }));
  const server = await listen(app);
  try {
    await assertPerRequestHeadersReplayed(server.url, '/pay');
  } finally {
    await server.close();
  }
});

test('the Express adapter on Connect over HTTP/2: a keyed body is read to its end (with or without content-length), replayed, another body is a 422; no status-text warning', async () => {
  const { default: http2 } = await import('node:http2');
  const { MemoryStore } = await import('retry-fetch/server');
  let runs = 0;
  const app = connect();
  app.use(idempotency({ store: new MemoryStore(), identity: false }));
  app.use('/pay', (req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      runs++;
      res.statusCode = 201;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ body, runs }));
    });
  });
  const warnings = [];
  const onWarning = (w) => warnings.push(w.message);
  process.on('warning', onWarning);
  const server = http2.createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = http2.connect(`http://127.0.0.1:${server.address().port}`);
  // HTTP/2 frames a body without content-length (Chromium's streamed uploads, Node's client).
  const send = (key, body, contentLength) => h2Post(client, { key, body, contentLength });
  try {
    for (const contentLength of [true, false]) {
      const key = crypto.randomUUID();
      const first = await send(key, '{"amount":1}', contentLength);
      assert.equal(first.status, 201, `answered (content-length: ${contentLength})`);
      assert.deepEqual(JSON.parse(first.body).body, '{"amount":1}', 'the route read the whole body after the adapter');
      const replay = await send(key, '{"amount":1}', contentLength);
      assert.equal(replay.status, 201);
      assert.equal(replay.headers['idempotent-replayed'], 'true');
      const other = await send(key, '{"amount":999}', contentLength);
      assert.equal(other.status, 422, 'another body under the key (the body was fingerprinted)');
    }
    assert.equal(runs, 2);
    assert.deepEqual(warnings.filter((m) => /Status message/.test(m)), []);
  } finally {
    process.off('warning', onWarning);
    client.close();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('the Express adapter on Connect over HTTP/2: a body cut by the session dying is no body: the route does not run, the retry with the whole body does', async () => {
  const { default: http2 } = await import('node:http2');
  const { MemoryStore } = await import('retry-fetch/server');
  const seen = [];
  const app = connect();
  app.use(idempotency({ store: new MemoryStore(), identity: false, onError: () => {} }));
  app.use('/pay', (req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      seen.push(body);
      res.statusCode = 201;
      res.end(body);
    });
  });
  const quiet = console.error;
  console.error = () => {};
  const server = http2.createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  const full = '{"amount":100,"card":"tok_visa"}';
  try {
    for (const contentLength of [false, true]) {
      const key = crypto.randomUUID();
      const cut = http2.connect(url);
      cut.on('error', () => {});
      const headers = { ':method': 'POST', ':path': '/pay', 'content-type': 'application/json', 'idempotency-key': key };
      if (contentLength) headers['content-length'] = String(full.length);
      const req = cut.request(headers);
      req.on('error', () => {});
      req.write(full.slice(0, 12));
      await new Promise((resolve) => setTimeout(resolve, 100));
      cut.destroy();
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.deepEqual(seen, [], `the route did not run on the cut body (content-length: ${contentLength})`);
      const client = http2.connect(url);
      const retry = await h2Post(client, { key, body: full, contentLength });
      client.close();
      assert.equal(retry.status, 201, 'the retry is a first run, not a 422 for the cut body');
      assert.equal(retry.body, full);
      seen.length = 0;
    }
  } finally {
    console.error = quiet;
    await new Promise((resolve) => server.close(resolve));
  }
});

test('the Express adapter: a keyed POST with an empty body (Content-Length: 0) reaches a route that reads the stream, which sees its end', async () => {
  const { MemoryStore } = await import('retry-fetch/server');
  const app = connect();
  app.use(idempotency({ store: new MemoryStore(), identity: false }));
  app.use((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      res.statusCode = 201;
      res.end(`route saw ${JSON.stringify(body)}`);
    });
  });
  const server = http.createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const res = await fetch(`http://127.0.0.1:${server.address().port}/pay`, { method: 'POST', body: '', headers: { 'Idempotency-Key': crypto.randomUUID() }, signal: AbortSignal.timeout(5000) });
    assert.equal(res.status, 201);
    assert.equal(await res.text(), 'route saw ""');
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('Express: the fingerprint covers the target as received (a router reads /a/../b as another path than /b): another request, never the first one\'s replay', async () => {
  const app = quietApp();
  app.use(express.json());
  app.use(idempotency(NO_SCOPE));
  let runs = 0;
  app.post('/transfer/:from/:to', (req, res) => res.status(201).json({ run: ++runs, from: req.params.from }));
  const server = await listen(app);
  try {
    await assertTargetAsReceived(server.url, () => runs);
  } finally {
    await server.close();
  }
});
