// Shared by the framework adapter tests (tests/server/adapters/*.test.mjs): a PostgreSQL pool
// and throwaway tables, the retrying client, and the scenarios every framework must pass
// (`adapterScenarios`), written once against a framework-neutral route.
//
// A test file gives `adapterScenarios` a `start({ options, route })` that serves, on
// 127.0.0.1:0, one route `POST /payments` through its framework and its adapter (with the
// framework's body parser or validator before it) and resolves with `{ url, close() }`.
// `route({ body, ctx })` is the route's work: `body` the parsed JSON body, `ctx` the
// idempotency context the adapter exposes; it resolves with `{ status, json }` (the route
// answers `json` with that status) or throws (the route fails, as the framework lets it).
import http2 from 'node:http2';
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import pg from 'pg';
import { retryFetch } from 'retry-fetch';
import { PostgresStore } from 'retry-fetch/server';
import { watchAcquires, deferred } from '../support.mjs';
import { DATABASE_URL, needs } from '../../support/services.mjs';

export { DATABASE_URL };
export const pgSkip = needs('DATABASE_URL');

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A retrying client that survives what the scenarios do: no retry budget, short waits. */
export const POLICY = { maxAttempts: 8, baseDelayMs: 50, maxDelayMs: 500, budget: false };

/** A JSON POST through retryFetch (which adds an Idempotency-Key, or uses `key`). */
export function pay(url, body, options = {}) {
  return retryFetch(
    `${url}/payments`,
    { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) },
    { ...POLICY, ...options },
  );
}

/** A JSON POST with real fetch, once, with `key` (or none) and `extra` headers. */
export function post(url, path, { key, body, type = 'application/json', headers = {} } = {}) {
  const h = { 'Content-Type': type, ...headers };
  if (key !== undefined) h['Idempotency-Key'] = key;
  return fetch(url + path, { method: 'POST', headers: h, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

/**
 * A keyed JSON POST on the HTTP/2 session `client` (node:http2): `{ status, headers, body }`
 * once the stream closes (`status` undefined when it closed without an answer). With
 * `contentLength`, the header is sent (HTTP/2 frames a body without one); `cancelAfterMs`
 * cancels the stream then.
 */
export function h2Post(client, { path = '/pay', key, body = '{"amount":1}', contentLength = false, cancelAfterMs } = {}) {
  return new Promise((resolve, reject) => {
    const headers = { ':method': 'POST', ':path': path, 'content-type': 'application/json', 'idempotency-key': key };
    if (contentLength) headers['content-length'] = String(Buffer.byteLength(body));
    const req = client.request(headers);
    req.end(body);
    const answer = { status: undefined, headers: undefined, body: '' };
    req.on('response', (h) => {
      answer.status = h[':status'];
      answer.headers = h;
    });
    req.setEncoding('utf8');
    req.on('data', (chunk) => (answer.body += chunk));
    req.on('close', () => resolve(answer));
    req.on('error', reject);
    req.setTimeout(5000, () => req.close());
    if (cancelAfterMs !== undefined) setTimeout(() => req.close(http2.constants.NGHTTP2_CANCEL), cancelAfterMs);
  });
}

/** A multipart upload (field `note`, file `file` holding `content`) to `url`, with `key`. */
export function upload(url, key, content) {
  // One boundary, as a retry sends the same bytes (a new FormData would pick another).
  const body = [
    '--b0undary\r\nContent-Disposition: form-data; name="note"\r\n\r\ninvoice\r\n',
    `--b0undary\r\nContent-Disposition: form-data; name="file"; filename="doc.txt"\r\nContent-Type: text/plain\r\n\r\n${content}\r\n`,
    '--b0undary--\r\n',
  ].join('');
  return fetch(url, { method: 'POST', headers: { 'Idempotency-Key': key, 'Content-Type': 'multipart/form-data; boundary=b0undary' }, body });
}

/**
 * A streamed answer to a request the companion lets through (a GET without a key): the route
 * writes a first chunk, then `await probe.clientRead()` tells whether the client has read it
 * (within 1 s, so before the answer ends); `await probe.get(url)` is the client, whose text
 * is every chunk.
 */
export function streamProbe() {
  const read = deferred();
  return {
    clientRead: () => Promise.race([read.promise.then(() => true), sleep(1000).then(() => false)]),
    async get(url) {
      const reader = (await fetch(url)).body.getReader();
      let text = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return text;
        text += Buffer.from(value).toString();
        read.resolve();
      }
    },
  };
}

/**
 * A JSON POST through node:http, which (unlike fetch) neither asks for nor decodes a content
 * coding: `acceptEncoding` is sent as it is; `path`, if given, is the request target, sent
 * exactly as written (fetch would resolve `..` and `\`). Resolves with status, headers and
 * body bytes.
 */
function rawPost(url, { key, body, acceptEncoding, path }) {
  return new Promise((resolve, reject) => {
    const headers = { 'Content-Type': 'application/json', 'Idempotency-Key': key };
    if (acceptEncoding !== undefined) headers['Accept-Encoding'] = acceptEncoding;
    const request = http.request(url, { method: 'POST', headers, ...(path === undefined ? {} : { path }) }, (response) => {
      const chunks = [];
      response.on('data', (chunk) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode, headers: response.headers, body: Buffer.concat(chunks) }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(JSON.stringify(body));
  });
}

/**
 * A keyed POST to `url` from a client that asks for gzip, then its repeat from one that asks
 * for no coding: both answered `status` with `expected` as JSON and no Content-Encoding, the
 * repeat a replay.
 */
export async function assertUncodedReplay(url, status, expected) {
  const key = crypto.randomUUID();
  const first = await rawPost(url, { key, body: { amount: 5 }, acceptEncoding: 'gzip' });
  assert.equal(first.status, status);
  assert.equal(first.headers['content-encoding'], undefined);
  assert.deepEqual(JSON.parse(first.body), expected);
  const replay = await rawPost(url, { key, body: { amount: 5 } });
  assert.equal(replay.headers['idempotent-replayed'], 'true');
  assert.equal(replay.headers['content-encoding'], undefined);
  assert.deepEqual(JSON.parse(replay.body), expected);
}

/** Status, headers (minus Date, Idempotent-Replayed, and the connection's own) and body bytes. */
export async function snapshot(response) {
  const skip = new Set(['date', 'idempotent-replayed', 'connection', 'keep-alive']);
  return {
    status: response.status,
    headers: [...response.headers].filter(([name]) => !skip.has(name)),
    body: Buffer.from(await response.arrayBuffer()),
  };
}

let pool = null;
const tables = [];
after(async () => {
  if (pool === null) return;
  for (const t of tables) await pool.query(`DROP TABLE IF EXISTS "${t}"`).catch(() => {});
  await pool.end();
});

/** The file's pg Pool (small: test files may share the server with others). */
export function pgPool() {
  if (pool === null) {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20 });
    pool.on('error', () => {});
  }
  return pool;
}

function tableName(kind) {
  const name = `${kind}_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(name);
  return name;
}

/** A PostgresStore on a fresh table, migrated. */
export async function postgresStore() {
  const store = new PostgresStore({ pool: pgPool(), table: tableName('adapter_idem') });
  await store.migrate();
  return store;
}

/** A fresh `charges` table: `insert(tx, payment)` (through the key's transaction), `rows()`. */
export async function chargesTable() {
  const name = tableName('adapter_charges');
  await pgPool().query(`CREATE TABLE "${name}" (id serial PRIMARY KEY, payment text NOT NULL, amount int NOT NULL)`);
  return {
    async insert(tx, payment, amount) {
      const { rows } = await tx.query(`INSERT INTO "${name}" (payment, amount) VALUES ($1, $2) RETURNING id`, [payment, amount]);
      return rows[0].id;
    },
    async rows() {
      return (await pgPool().query(`SELECT id, payment, amount FROM "${name}" ORDER BY id`)).rows;
    },
  };
}

/** The statuses of the answers stored in `store`'s table. */
export async function storedStatuses(store) {
  return (await pgPool().query(`SELECT response FROM "${store.table}"`)).rows.map((r) => r.response.status);
}

/** Clients of the pool still checked out (a transaction left open): 0 once every request ended. */
export async function checkedOut() {
  const p = pgPool();
  for (let i = 0; i < 100 && p.totalCount - p.idleCount > 0; i++) await sleep(20);
  return p.totalCount - p.idleCount;
}

/**
 * The scenarios every adapter must pass, against PostgreSQL (skipped without one).
 * `start({ options, route })`: see the top of this file.
 */
export function adapterScenarios(name, start) {
  const t = (title, fn) => test(`${name}: ${title}`, { skip: pgSkip, timeout: 30_000 }, fn);

  test(`${name}: a route that ignores its aborted signal (handlerTimeoutMs) gets the 503 when the companion gives up on it (lockTimeoutMs later), not when it ends`, async () => {
    const release = deferred();
    const server = await start({
      options: { identity: false, handlerTimeoutMs: 100, lockTimeoutMs: 1000, onError: () => {} },
      route: async () => {
        await Promise.race([release.promise, sleep(5000)]); // the signal ignored
        return { status: 201, json: { late: true } };
      },
    });
    try {
      const started = Date.now();
      const response = await post(server.url, '/payments', { key: crypto.randomUUID(), body: { payment: 'p-hung', amount: 1 } });
      const elapsed = Date.now() - started;
      assert.equal(response.status, 503);
      assert.equal((await response.json()).code, 'idempotency-handler-timeout');
      assert.ok(response.headers.has('retry-after'));
      assert.ok(elapsed < 3000, `answered after ${elapsed} ms, not when the route ended`);
    } finally {
      release.resolve();
      await server.close();
    }
  });

  t('50 concurrent duplicates of one key: 49 find the key held while the route runs; it runs once, one row is written, every caller gets the same 201', async () => {
    const store = await postgresStore();
    const watch = watchAcquires(store);
    const charges = await chargesTable();
    const release = deferred();
    let runs = 0;
    const server = await start({
      options: { store: watch.store, identity: false },
      route: async ({ body, ctx }) => {
        runs++;
        await release.promise; // held until the 49 duplicates have found the key held
        const id = await charges.insert(ctx.tx, body.payment, body.amount);
        return { status: 201, json: { charge: id, payment: body.payment, key: ctx.key } };
      },
    });
    try {
      const key = crypto.randomUUID();
      const sent = Array.from({ length: 50 }, () => pay(server.url, { payment: 'p-50', amount: 4200 }, { idempotencyKey: key }));
      await watch.overlapped(49, sent);
      release.resolve();
      const responses = await Promise.all(sent);
      const answers = await Promise.all(responses.map(snapshot));
      assert.equal(runs, 1, 'the route ran once');
      const rows = await charges.rows();
      assert.equal(rows.length, 1, 'one row written');
      const first = answers[0];
      assert.equal(first.status, 201);
      assert.deepEqual(JSON.parse(first.body), { charge: rows[0].id, payment: 'p-50', key });
      for (const a of answers) assert.deepEqual(a, first, 'every caller gets the same answer, byte for byte');
      const replayed = responses.filter((r) => r.headers.get('idempotent-replayed') === 'true').length;
      assert.equal(replayed, 49, 'the 49 that waited got the replay');
      assert.deepEqual(await storedStatuses(store), [201]);
    } finally {
      release.resolve(); // never leave the route blocked, whatever failed
      await server.close();
    }
    assert.equal(await checkedOut(), 0, 'every pool client is back');
  });

  t('ctx.tx: the route\'s write commits with its answer; a route that throws after writing commits nothing, the key is freed and the retry writes once', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    const seen = []; // [payment, status] of every attempt the client made
    let runs = 0;
    const server = await start({
      options: { store, identity: false, onError: () => {} },
      route: async ({ body, ctx }) => {
        const run = ++runs;
        const id = await charges.insert(ctx.tx, body.payment, body.amount);
        if (body.payment === 'p-throws' && run === 2) throw new Error('the provider failed after our insert');
        return { status: 201, json: { charge: id, run } };
      },
    });
    const watch = (payment) => ({
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        seen.push([payment, res.status]);
        return res;
      },
    });
    try {
      // 1. commits with its answer
      const ok = await pay(server.url, { payment: 'p-ok', amount: 100 }, watch('p-ok'));
      assert.equal(ok.status, 201);
      const okBody = await ok.json();
      assert.deepEqual((await charges.rows()).map((r) => [r.id, r.payment]), [[okBody.charge, 'p-ok']]);

      // 2. run 2 throws after its insert: rolled back, the key freed; retryFetch's retry (a
      //    500 on a keyed POST) runs the route again, which writes once.
      const retried = await pay(server.url, { payment: 'p-throws', amount: 200 }, watch('p-throws'));
      assert.equal(retried.status, 201);
      assert.equal(retried.headers.get('idempotent-replayed'), null, 'the retry ran the route');
      const body = await retried.json();
      assert.equal(body.run, 3);
      assert.deepEqual(seen.filter(([p]) => p === 'p-throws').map(([, s]) => s), [500, 201], 'the failed attempt was a 500, the retry a 201');
      const rows = await charges.rows();
      assert.deepEqual(rows.map((r) => r.payment), ['p-ok', 'p-throws'], 'the failed run\'s insert was rolled back: one row for p-throws');
      assert.equal(rows[1].id, body.charge);
      assert.deepEqual((await storedStatuses(store)).sort(), [201, 201], 'no 500 stored');
      assert.equal(runs, 3);
    } finally {
      await server.close();
    }
    assert.equal(await checkedOut(), 0, 'every pool client is back');
  });

  t('a client that times out (300 ms) on a route whose provider takes 500 ms: one charge, the caller ends with the 201 by the replay, no 500 stored', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    let runs = 0;
    let providerCalls = 0;
    const server = await start({
      options: { store, identity: false },
      route: async ({ body, ctx }) => {
        runs++;
        providerCalls++;
        await sleep(500); // the payment provider
        const id = await charges.insert(ctx.tx, body.payment, body.amount);
        return { status: 201, json: { charge: id } };
      },
    });
    const statuses = [];
    try {
      const res = await pay(server.url, { payment: 'p-slow', amount: 300 }, {
        timeoutMs: 300,
        fetch: async (input, init) => {
          try {
            const r = await fetch(input, init);
            statuses.push(r.status);
            return r;
          } catch (error) {
            statuses.push(error?.name ?? 'error');
            throw error;
          }
        },
      });
      assert.equal(res.status, 201);
      assert.equal(res.headers.get('idempotent-replayed'), 'true', 'answered by the replay of the first run');
      const body = await res.json();
      assert.equal(typeof statuses[0], 'string', `the first attempt timed out (${statuses[0]})`);
      assert.equal(runs, 1, 'the route ran once');
      assert.equal(providerCalls, 1, 'one charge at the provider');
      const rows = await charges.rows();
      assert.deepEqual(rows.map((r) => r.id), [body.charge], 'one row, the one the caller was told');
      assert.deepEqual(await storedStatuses(store), [201], 'the 201 is stored, no 500');
    } finally {
      await server.close();
    }
    assert.equal(await checkedOut(), 0, 'every pool client is back');
  });
}

/**
 * Headers an earlier middleware sets per request (a CORS origin echoed from `Origin`, a request
 * id from `X-Request-Id`) are this request's on a replay, not the first request's; a header
 * the route set (`X-Route`) is replayed. `url + path` is a keyed POST route behind such a
 * middleware that sets `X-Route: paid`.
 */
export async function assertPerRequestHeadersReplayed(url, path) {
  const key = crypto.randomUUID();
  const send = (origin, id) => post(url, path, { key, body: { amount: 1 }, headers: { Origin: origin, 'X-Request-Id': id } });
  const first = await send('https://a.example', 'req-1');
  assert.equal(first.status, 201);
  assert.equal(first.headers.get('access-control-allow-origin'), 'https://a.example');
  assert.equal(first.headers.get('x-request-id'), 'req-1');
  assert.equal(first.headers.get('x-route'), 'paid');
  const replay = await send('https://b.example', 'req-2');
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(replay.headers.get('access-control-allow-origin'), 'https://b.example', 'the replay\'s own origin');
  assert.equal(replay.headers.get('x-request-id'), 'req-2', 'the replay\'s own request id');
  assert.equal(replay.headers.get('x-route'), 'paid', 'the route\'s header, replayed');
}

/**
 * The fingerprint covers the target as received, as the framework's router reads it: a
 * request under a key whose target a URL parser would make the first one's (dot segments,
 * `%2e%2e`, a backslash) is another request (422), never the first one's replay. `url` serves
 * `POST /transfer/:from/:to` behind the adapter; `runs()` counts the route's runs.
 */
export async function assertTargetAsReceived(url, runs) {
  const key = crypto.randomUUID();
  const send = (path) => rawPost(url, { key, body: { amount: 1 }, path });
  const replayed = (answer) => answer.headers['idempotent-replayed'] === 'true';
  const first = await send('/transfer/alice/bob');
  assert.equal(first.status, 201, String(first.body));
  assert.equal(replayed(await send('/transfer/alice/bob')), true, 'the same target is a repeat');
  // The first matches the route (`from` is `carol\..\alice`): the adapter runs; the others
  // match no route, where a framework that runs the adapter for routes only answers 404.
  for (const [path, statuses] of [['/transfer/carol\\..\\alice/bob', [422]], ['/transfer/x/%2e%2e/alice/bob', [422, 404]], ['/transfer/alice/./bob', [422, 404]], ['/transfer/x/../alice/bob', [422, 404]]]) {
    const other = await send(path);
    assert.ok(statuses.includes(other.status), `${path}: ${other.status} ${other.body}`);
    assert.equal(replayed(other), false, path);
  }
  assert.equal(runs(), 1);
}
