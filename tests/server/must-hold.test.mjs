// Rules the companion must hold, one test each; every one of them failed before the change that
// brought it (keyed handlers outlive the client, HMAC scopes, ignoredMethods, lockTimeoutMs of
// a second or more, no hop-by-hop headers stored, ctx.tx never committed without its answer,
// the route argument): a regression of any shows here first.
//
// MemoryStore everywhere; RedisStore (REDIS_URL) and PostgresStore (DATABASE_URL) where the
// rule is about them (tests/support/services.mjs: skipped with a message when unset by hand).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawnSync } from 'node:child_process';
import { createHash, createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createClient } from 'redis';
import { idempotency, idempotent, MemoryStore, RedisStore, PostgresStore } from 'retry-fetch/server';
import { retryFetch } from 'retry-fetch';
import { serve, withServer, send, sleep, newKey, problemOf, spyStore } from './support.mjs';
import { REDIS_URL, DATABASE_URL, needs } from '../support/services.mjs';

const redisSkip = needs('REDIS_URL');
const pgSkip = needs('DATABASE_URL');

let redis;
let pool;
const redisClients = [];
const tables = [];

async function redisClient() {
  const client = createClient({ url: REDIS_URL });
  client.on('error', () => {});
  await client.connect();
  redisClients.push(client);
  return client;
}

before(async () => {
  if (!redisSkip) redis = await redisClient();
  if (!pgSkip) {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20 });
    pool.on('error', () => {});
  }
});

after(async () => {
  await Promise.all(redisClients.filter((c) => c.isOpen).map((c) => c.quit()));
  if (pool) {
    for (const t of tables) await pool.query(`DROP TABLE IF EXISTS "${t}"`);
    await pool.end();
  }
});

function tableName(kind) {
  const name = `${kind}_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(name);
  return name;
}

/** A migrated PostgresStore on a table of its own, and a `charges` table for ctx.tx writes. */
async function postgresSetup() {
  const idem = tableName('idem');
  const store = new PostgresStore({ pool, table: idem });
  await store.migrate();
  const charges = tableName('charges');
  await pool.query(`CREATE TABLE "${charges}" (id serial PRIMARY KEY, run int NOT NULL)`);
  return {
    store,
    idem,
    table: charges,
    insert: (tx, run) => tx.query(`INSERT INTO "${charges}" (run) VALUES ($1)`, [run]),
    rows: async () => (await pool.query(`SELECT run FROM "${charges}" ORDER BY id`)).rows.map((r) => r.run),
  };
}

/** A keyed POST as a fetch-style Request (the wrapped function called directly). */
const keyed = (key, { body = '{"amount":10}', headers = {}, path = '/charges', method = 'POST' } = {}) =>
  new Request(`http://localhost${path}`, {
    method,
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key, ...headers },
    body: method === 'GET' || method === 'HEAD' ? undefined : body,
  });

/** A promise that rejects with `signal`'s reason once it aborts: a handler that honours it. */
const aborted = (signal) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));

const t = (name, options, fn) => (fn ? test(name, { timeout: 30_000, ...options }, fn) : test(name, { timeout: 30_000 }, options));

/** Runs `fn(warned)` with console.warn's messages collected in `warned`, then puts it back. */
async function withWarnings(fn) {
  const warned = [];
  const original = console.warn;
  console.warn = (...args) => warned.push(args.map(String).join(' '));
  try {
    await fn(warned);
  } finally {
    console.warn = original;
  }
}

// ---------------------------------------------------------------------------------------------
// 1. The client giving up does not abort a keyed handler; only handlerTimeoutMs does.

t('1. a client that gives up does not abort the keyed handler: one provider charge, the retry gets the 201, no 500 stored', async () => {
  // The payment provider: takes 500 ms, then charges, whether or not its caller is still there.
  let charges = 0;
  const provider = http.createServer((req, res) => {
    req.resume();
    req.on('end', () =>
      setTimeout(() => {
        charges++;
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ charge: `ch_${charges}` }));
      }, 500),
    );
  });
  await new Promise((resolve) => provider.listen(0, '127.0.0.1', resolve));
  const providerUrl = `http://127.0.0.1:${provider.address().port}/charge`;
  const spy = spyStore(new MemoryStore());
  const signals = [];
  let runs = 0;
  const handler = idempotency(async (request) => {
    runs++;
    signals.push(request.signal);
    const body = await request.text();
    const paid = await fetch(providerUrl, { method: 'POST', body, signal: request.signal });
    return Response.json(await paid.json(), { status: 201 });
  }, { store: spy.store, identity: false, onError: () => {} });
  const server = await serve(handler);
  try {
    const res = await retryFetch(`${server.url}/payments`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"amount":10}' }, {
      timeoutMs: 300,
      maxAttempts: 6,
      baseDelayMs: 20,
      maxDelayMs: 50,
      budget: false,
    });
    assert.equal(res.status, 201, `the caller ended with ${res.status} ${await res.clone().text()}`);
    assert.equal(res.headers.get('idempotent-replayed'), 'true', 'the retry got the first run\'s answer');
    assert.deepEqual(await res.json(), { charge: 'ch_1' });
    await sleep(100);
    assert.equal(charges, 1, 'exactly one provider charge');
    assert.equal(runs, 1, 'the handler ran once');
    assert.equal(signals[0].aborted, false, 'the handler\'s signal was not aborted by the client going away');
    const statuses = spy.calls.filter(([m]) => m === 'complete').map(([, , , record]) => record.response.status);
    assert.deepEqual(statuses, [201], 'the store holds the 201, no 500');
  } finally {
    await server.close();
    provider.closeAllConnections();
    await new Promise((resolve) => provider.close(resolve));
  }
});

// A stopped handler that rethrows the TimeoutError, or catches it and answers its own 500: the
// same 503, and neither is stored.
for (const [how, onStop] of [
  ['rethrows it', (reason) => { throw reason; }],
  ['answers its own 500', (reason) => Response.json({ error: reason?.name }, { status: 500 })],
]) {
  t(`1. handlerTimeoutMs: a handler that honours its signal is stopped (and ${how}): 503 idempotency-handler-timeout with Retry-After, nothing stored, the key freed`, async () => {
    const spy = spyStore(new MemoryStore());
    const reasons = [];
    let runs = 0;
    const h = idempotency(async (request) => {
      const run = ++runs;
      if (run === 1) {
        try {
          await aborted(request.signal);
        } catch (reason) {
          reasons.push(reason?.name);
          return onStop(reason);
        }
      }
      return Response.json({ run }, { status: 201 });
    }, { store: spy.store, identity: false, handlerTimeoutMs: 100, onError: () => {} });
    const key = newKey();
    const started = Date.now();
    const first = await h(keyed(key));
    const problem = await problemOf(first, 503, 'idempotency-handler-timeout', { retryAfter: true });
    assert.match(problem.detail, /time limit/);
    assert.ok(Date.now() - started < 900, 'stopped after handlerTimeoutMs, not after lockTimeoutMs');
    assert.deepEqual(reasons, ['TimeoutError']);
    assert.equal(spy.calls.filter(([m]) => m === 'complete').length, 0, 'nothing stored');
    assert.equal(spy.calls.filter(([m]) => m === 'release').length, 1, 'the key released');
    const retried = await h(keyed(key));
    assert.equal(retried.status, 201);
    assert.equal(retried.headers.get('idempotent-replayed'), null, 'the retry ran the handler again');
    assert.deepEqual(await retried.json(), { run: 2 });
    assert.equal((await h(keyed(key))).headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 2);
  });
}

t('1. handlerTimeoutMs with PostgresStore: the stopped handler\'s ctx.tx writes are rolled back (0 rows), the retry commits once', { skip: pgSkip }, async () => {
  const { store, insert, rows } = await postgresSetup();
  let runs = 0;
  const h = idempotency(async (request, ctx) => {
    const run = ++runs;
    await insert(ctx.tx, run);
    if (run === 1) await aborted(request.signal);
    return Response.json({ run }, { status: 201 });
  }, { store, identity: false, handlerTimeoutMs: 100, onError: () => {} });
  const key = newKey();
  await problemOf(await h(keyed(key)), 503, 'idempotency-handler-timeout', { retryAfter: true });
  assert.deepEqual(await rows(), [], 'rolled back: 0 rows');
  const retried = await h(keyed(key));
  assert.equal(retried.status, 201);
  assert.deepEqual(await retried.json(), { run: 2 });
  assert.deepEqual(await rows(), [2], 'the retry committed once');
});

t('1. handlerTimeoutMs with PostgresStore: a handler stuck in a ctx.tx statement (blocked on a lock) is given up on, its transaction ended and the key freed, with every connection of the pool held', { skip: pgSkip }, async () => {
  const { idem, insert, rows, table } = await postgresSetup();
  // A pool of one: the stuck key holds its only connection.
  const one = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  one.on('error', () => {});
  const store = new PostgresStore({ pool: one, table: idem });
  const blocker = await pool.connect();
  try {
    await blocker.query(`BEGIN; LOCK TABLE "${table}" IN ACCESS EXCLUSIVE MODE`);
    let runs = 0;
    const h = idempotency(async (request, ctx) => {
      const run = ++runs;
      await insert(ctx.tx, run); // run 1 waits for the blocker's lock, ignoring its signal
      return Response.json({ run }, { status: 201 });
    }, { store, identity: false, handlerTimeoutMs: 100, lockTimeoutMs: 1000, onError: () => {} });
    const key = newKey();
    const started = Date.now();
    const first = await Promise.race([h(keyed(key)), sleep(8_000).then(() => assert.fail('no answer within 8 s'))]);
    await problemOf(first, 503, 'idempotency-handler-timeout', { retryAfter: true });
    assert.ok(Date.now() - started < 5_000, `answered after ${Date.now() - started} ms`);
    await blocker.query('ROLLBACK');
    const retried = await Promise.race([h(keyed(key)), sleep(8_000).then(() => assert.fail('the retry: no answer within 8 s'))]);
    assert.equal(retried.status, 201, 'the key was freed: the retry ran');
    assert.deepEqual(await retried.json(), { run: 2 });
    assert.deepEqual(await rows(), [2], 'the stuck run wrote nothing; the retry committed once');
  } finally {
    await blocker.query('ROLLBACK').catch(() => {});
    blocker.release();
    await one.end();
  }
});

t('1. handlerTimeoutMs bounds the body of a response-like answer (a Response of another fetch implementation) as well', async () => {
  const h = idempotency(async () => ({ status: 200, statusText: '', headers: new Headers(), arrayBuffer: () => new Promise(() => {}) }),
    { identity: false, handlerTimeoutMs: 100, lockTimeoutMs: 1000, onError: () => {} });
  const started = Date.now();
  const first = await Promise.race([h(keyed(newKey())), sleep(5_000).then(() => assert.fail('no answer within 5 s'))]);
  await problemOf(first, 503, 'idempotency-handler-timeout', { retryAfter: true });
  assert.ok(Date.now() - started >= 1_000, `answered after ${Date.now() - started} ms: handlerTimeoutMs 100 + lockTimeoutMs 1000`);
});

t('1. handlerTimeoutMs: a handler that ignores its aborted signal and finishes within lockTimeoutMs has its answer stored', async () => {
  const seen = [];
  let runs = 0;
  const h = idempotency(async (request) => {
    const run = ++runs;
    await sleep(350); // past handlerTimeoutMs, well within lockTimeoutMs
    seen.push([request.signal.aborted, request.signal.reason?.name]);
    return Response.json({ run }, { status: 201 });
  }, { identity: false, handlerTimeoutMs: 100, lockTimeoutMs: 1000, onError: () => {} });
  const key = newKey();
  const first = await h(keyed(key));
  assert.equal(first.status, 201);
  assert.deepEqual(await first.json(), { run: 1 });
  assert.deepEqual(seen, [[true, 'TimeoutError']], 'its signal was aborted');
  const again = await h(keyed(key));
  assert.equal(again.headers.get('idempotent-replayed'), 'true', 'its answer was stored');
  assert.deepEqual(await again.json(), { run: 1 });
  assert.equal(runs, 1);
});

// The limits are spans of this process: a step of the wall clock (NTP, a resumed VM) while a
// handler runs must neither stop it nor free its key once its effect happened.
t('1. handlerTimeoutMs is kept on a monotonic clock: a wall-clock step forward during the handler (and its answer\'s body) stops nothing', async () => {
  const realNow = Date.now;
  let runs = 0;
  const seen = [];
  const h = idempotency(async (request) => {
    runs++;
    Date.now = () => realNow() + 3_600_000;
    await sleep(50);
    seen.push(request.signal.aborted);
    const chunk = new TextEncoder().encode('{"charged":true}');
    return new Response(new ReadableStream({ async pull(c) { await sleep(20); c.enqueue(chunk); c.close(); } }), { status: 201 });
  }, { identity: false, handlerTimeoutMs: 5_000, onError: () => {} });
  try {
    const key = newKey();
    const first = await h(keyed(key));
    assert.equal(first.status, 201, 'answered as the handler did, not 503 idempotency-handler-timeout');
    assert.deepEqual(await first.json(), { charged: true });
    assert.deepEqual(seen, [false], 'its signal was not aborted');
    Date.now = realNow;
    const again = await h(keyed(key));
    assert.equal(again.headers.get('idempotent-replayed'), 'true', 'the charge was stored, not freed to run again');
    assert.equal(runs, 1);
  } finally {
    Date.now = realNow;
  }
});

t('1. waitTimeoutMs is kept on a monotonic clock: a wall-clock step forward while a duplicate waits does not end its wait with a 409', async () => {
  const realNow = Date.now;
  let release;
  const holding = new Promise((resolve) => { release = resolve; });
  let runs = 0;
  const h = idempotency(async () => {
    runs++;
    await holding;
    return Response.json({ charged: true }, { status: 201 });
  }, { identity: false, lockTimeoutMs: 5_000, pollMs: 20, onError: () => {} });
  try {
    const key = newKey();
    const first = h(keyed(key));
    await sleep(30);
    const duplicate = h(keyed(key));
    await sleep(30);
    Date.now = () => realNow() + 3_600_000;
    await sleep(100);
    Date.now = realNow;
    release();
    assert.equal((await first).status, 201);
    const answer = await duplicate;
    assert.equal(answer.status, 201, 'the duplicate waited for the first and got its answer');
    assert.equal(answer.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 1);
  } finally {
    Date.now = realNow;
    release();
  }
});

t('1. handlerTimeoutMs bounds the reading of the answer\'s body too: a body that ends at the abort frees the key at once; one that never ends is given up on lockTimeoutMs later', async () => {
  const spy = spyStore(new MemoryStore());
  let runs = 0;
  const h = idempotency(async (request) => {
    const run = ++runs;
    if (run === 3) return Response.json({ run }, { status: 201 });
    // The answer comes at once; its body sends a chunk and then waits: on the signal
    // (run 1), or for ever (run 2).
    return new Response(new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('partial'));
        if (run === 1) request.signal.addEventListener('abort', () => controller.error(request.signal.reason), { once: true });
      },
    }), { status: 200 });
  }, { store: spy.store, identity: false, handlerTimeoutMs: 100, lockTimeoutMs: 1000, onError: () => {} });
  const within = (promise, ms) => Promise.race([promise, sleep(ms).then(() => assert.fail(`no answer within ${ms} ms`))]);
  const key = newKey();
  let started = Date.now();
  await problemOf(await within(h(keyed(key)), 5_000), 503, 'idempotency-handler-timeout', { retryAfter: true });
  assert.ok(Date.now() - started < 900, `the body that ended at the abort: answered after ${Date.now() - started} ms`);
  assert.equal(spy.calls.filter(([m]) => m === 'release').length, 1, 'the key released');
  started = Date.now();
  await problemOf(await within(h(keyed(key)), 5_000), 503, 'idempotency-handler-timeout', { retryAfter: true });
  const took = Date.now() - started;
  assert.ok(took >= 1_000 && took < 3_000, `the body that never ends: answered after ${took} ms (handlerTimeoutMs 100 + lockTimeoutMs 1000)`);
  assert.equal(spy.calls.filter(([m]) => m === 'complete').length, 0, 'nothing stored');
  // Its lock is no longer renewed: once it lapses the retry runs the handler again.
  await sleep(300);
  const retried = await within(h(keyed(key)), 5_000);
  assert.equal(retried.status, 201);
  assert.deepEqual(await retried.json(), { run: 3 });
});

t('1. MemoryStore: a holder whose event loop was blocked past its lease keeps the key: the waiting duplicate gets its answer, the handler runs once', async () => {
  let runs = 0;
  const h = idempotency(async () => {
    const run = ++runs;
    await sleep(300); // late in the first renewal interval (a third of the 1000 ms lease)
    if (run === 1) {
      const until = performance.now() + 800; // the event loop blocked: the lease lapses meanwhile
      while (performance.now() < until);
    }
    await sleep(20);
    return Response.json({ run }, { status: 201 });
  }, { store: new MemoryStore(), identity: false, lockTimeoutMs: 1000, waitTimeoutMs: 5000, onError: () => {} });
  const key = newKey();
  const first = h(keyed(key));
  await sleep(30);
  const duplicate = h(keyed(key)); // waits for the key, polling
  const answers = await Promise.all([first, duplicate]);
  assert.equal(runs, 1, 'the duplicate took the lapsed lock over and ran the handler again');
  assert.deepEqual(answers.map((a) => a.status), [201, 201]);
  assert.deepEqual(await Promise.all(answers.map((a) => a.json())), [{ run: 1 }, { run: 1 }]);
});

/**
 * A keyed request to `h`, and 30 ms later its duplicate: both answers' JSON, once both came.
 * The key they used is `key`.
 */
async function holderAndDuplicate(h, key = newKey()) {
  const first = h(keyed(key));
  await sleep(30);
  const duplicate = h(keyed(key));
  const answers = await Promise.all([first, duplicate]);
  return Promise.all(answers.map((a) => a.json()));
}

for (const kind of ['MemoryStore', 'RedisStore']) {
  t(`1. ${kind}: a holder blocked past its lease as its last step (no renewal ran since) stores its answer: the duplicate gets it, the handler runs once, no lock is left`, { skip: kind === 'RedisStore' && redisSkip }, async () => {
    const store = kind === 'MemoryStore' ? new MemoryStore() : new RedisStore({ client: redis, prefix: `mh-${crypto.randomUUID()}:` });
    let runs = 0;
    const errors = [];
    const h = idempotency(async () => {
      const run = ++runs;
      await sleep(300);
      if (run === 1) {
        const until = performance.now() + 1_300; // past the 1000 ms lease, then straight to the answer
        while (performance.now() < until);
      }
      return Response.json({ run }, { status: 201 });
    }, { store, identity: false, lockTimeoutMs: 1000, waitTimeoutMs: 5000, pollMs: 1000, onError: (e) => errors.push(e.message), onStoreError: (e) => errors.push(e.message) });
    // The duplicate polls once a second (pollMs), away from the block's edges: a poll on its
    // way as the block starts is the next test's case.
    const key = newKey();
    assert.deepEqual(await holderAndDuplicate(h, key), [{ run: 1 }, { run: 1 }]);
    assert.equal(runs, 1, 'the handler ran again');
    // A late renewal tick must not take the key again after the run stored its answer.
    await sleep(500);
    const again = await h(keyed(key));
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await again.json(), { run: 1 });
    assert.deepEqual(errors, []);
  });
}

t('1. a duplicate whose acquire was sent before the holder\'s event loop blocked, and landed after the lease lapsed, hands the key back: the handler runs once', async () => {
  let holderToken;
  let blocking = false;
  let unblocked;
  const after = new Promise((resolve) => (unblocked = resolve));
  // The duplicate's acquire sent while the holder is about to block reaches the store only
  // after the block (as a store's answer on the network would); the rest is MemoryStore's.
  class LateAcquire extends MemoryStore {
    async acquire(key, lock, ms) {
      holderToken ??= lock.token;
      if (lock.token !== holderToken && blocking) await after;
      return super.acquire(key, lock, ms);
    }
  }
  const store = new LateAcquire();
  let runs = 0;
  const errors = [];
  const h = idempotency(async () => {
    const run = ++runs;
    if (run === 1) {
      await sleep(300);
      blocking = true; // from here the duplicate's polls are held back
      await sleep(60); // one of them is now on its way
      const until = performance.now() + 1_300; // past the 1000 ms lease
      while (performance.now() < until);
      unblocked();
    }
    return Response.json({ run }, { status: 201 });
  }, { store, identity: false, lockTimeoutMs: 1000, waitTimeoutMs: 5000, onError: (e) => errors.push(e.message), onStoreError: (e) => errors.push(e.message) });
  assert.deepEqual(await holderAndDuplicate(h), [{ run: 1 }, { run: 1 }]);
  assert.equal(runs, 1, 'the handler ran again');
  assert.deepEqual(errors, []);
});

// ---------------------------------------------------------------------------------------------
// 2. A body read before the companion is a server setup error, answered, never a crash.

const BODY_READ_CHILD = `
import { idempotency, MemoryStore } from 'retry-fetch/server';
const store = new MemoryStore();
let runs = 0;
const h = idempotency(async (request) => Response.json({ run: ++runs, body: await request.text() }, { status: 201 }), { store, identity: false });
const u = 'http://localhost/charges';
const post = (key) => new Request(u, { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{}' });
const other = await h(post('other'));
await other.text();
const r = post('k');
await r.json();
const res = await h(r);
const text = await res.text();
const again = await h(post('other'));
const out = {
  status: res.status,
  contentType: res.headers.get('content-type'),
  problem: JSON.parse(text),
  otherReplayed: again.headers.get('idempotent-replayed'),
  otherBody: await again.json(),
  runs,
  size: store.size,
};
// Any stray failure of the companion surfaces before the process ends, as a non-zero exit.
await new Promise((resolve) => setTimeout(resolve, 100));
console.log(JSON.stringify(out));
`;

t('2. a request whose body was already read: a 500 problem idempotency-body-already-read, no crash, the store keeps its other records', () => {
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', BODY_READ_CHILD], {
    cwd: fileURLToPath(new URL('.', import.meta.url)),
    encoding: 'utf8',
    timeout: 20_000,
  });
  assert.equal(child.status, 0, `the process exited with ${child.status} (${child.signal ?? ''}): ${child.stderr}`);
  const out = JSON.parse(child.stdout.trim().split('\n').at(-1));
  assert.equal(out.status, 500);
  assert.equal(out.contentType, 'application/problem+json');
  assert.equal(out.problem.code, 'idempotency-body-already-read');
  assert.equal(out.problem.status, 500);
  assert.equal(out.otherReplayed, 'true', 'the other key still replays');
  assert.deepEqual(out.otherBody, { run: 1, body: '{}' });
  assert.equal(out.runs, 1, 'the handler did not run for the read request');
  assert.equal(out.size, 1, 'the store holds the other record, and nothing for the read request');
});

// ---------------------------------------------------------------------------------------------
// 3. One caller cannot read another's answer; a key that cannot be scoped is warned about.

t('3. the default identity scopes keys by API-key headers and token cookies: bob gets his own run, not alice\'s replay', async () => {
  const credentials = [
    ['X-API-Key', (who) => ({ 'X-API-Key': who })],
    ['Api-Key', (who) => ({ 'Api-Key': who })],
    ['X-Auth-Token', (who) => ({ 'X-Auth-Token': who })],
    ['X-Access-Token', (who) => ({ 'X-Access-Token': who })],
    ['X-Session-Token', (who) => ({ 'X-Session-Token': who })],
    ...['token', 'jwt', 'access_token', 'auth_token', 'id_token', 'sb-abcdefgh-auth-token', 'sb-abcdefgh-auth-token.0', '.AspNetCore.Cookies', 'koa.sess', 'authjs.session-token', 'my_access-token']
      .map((name) => [`cookie ${name}`, (who) => ({ Cookie: `_ga=GA1.1; ${name}=${who}-value` })]),
  ];
  let runs = 0;
  const handler = idempotency(async () => Response.json({ run: ++runs }, { status: 201 }));
  await withServer(handler, async (server) => {
    for (const [label, as] of credentials) {
      const key = newKey();
      const alice = await send(server.url, { key, headers: as('alice') });
      const aliceRun = (await alice.json()).run;
      const bob = await send(server.url, { key, headers: as('bob') });
      assert.equal(bob.headers.get('idempotent-replayed'), null, `${label}: bob got alice's replay`);
      assert.equal((await bob.json()).run, aliceRun + 1, `${label}: bob's own run`);
      const aliceAgain = await send(server.url, { key, headers: as('alice') });
      assert.equal(aliceAgain.headers.get('idempotent-replayed'), 'true', `${label}: alice's retry replays`);
      assert.equal((await aliceAgain.json()).run, aliceRun);
    }
  });
});

t('3. a keyed request with no credential and no identity option: console.warn once per companion, naming the "identity" option', () => withWarnings(async (warned) => {
  const h = idempotency(async () => new Response('ok', { status: 201 }));
  assert.equal((await h(new Request('http://localhost/x'))).status, 201);
  assert.equal(warned.length, 0, 'a request without a key is not warned about');
  await h(keyed(newKey(), { headers: { 'X-API-Key': 'alice' } }));
  assert.equal(warned.length, 0, 'a keyed request with a credential is not warned about');
  for (let i = 0; i < 4; i++) assert.equal((await h(keyed(newKey()))).status, 201);
  assert.equal(warned.length, 1, `warned ${warned.length} times over 4 requests`);
  assert.match(warned[0], /"identity" option/);
  assert.match(warned[0], /not scoped/);
  // Another companion warns once too; identity: false or an identity function never do.
  const other = idempotency(async () => new Response('ok', { status: 201 }));
  await other(keyed(newKey()));
  await other(keyed(newKey()));
  assert.equal(warned.length, 2);
  const shared = idempotency(async () => new Response('ok'), { identity: false });
  const byUser = idempotency(async () => new Response('ok'), { identity: () => undefined });
  for (let i = 0; i < 2; i++) {
    await shared(keyed(newKey()));
    await byUser(keyed(newKey()));
  }
  assert.equal(warned.length, 2, 'no warning with an identity option');
}));

t('3. a keyed request whose credential header hides a session cookie from the default identity: console.warn once per companion, naming the "identity" option', () => withWarnings(async (warned) => {
  const h = idempotency(async () => new Response('ok', { status: 201 }));
  await h(keyed(newKey(), { headers: { Authorization: 'Bearer alice' } }));
  await h(keyed(newKey(), { headers: { Cookie: 'connect.sid=s1; theme=dark' } }));
  await h(keyed(newKey(), { headers: { Authorization: 'Bearer alice', Cookie: 'theme=dark' } }));
  assert.equal(warned.length, 0, 'a header alone, a session cookie alone, a header with other cookies: no warning');
  for (let i = 0; i < 3; i++) {
    const res = await h(keyed(newKey(), { headers: { 'X-API-Key': 'pk_live_frontend', Cookie: `connect.sid=s${i}` } }));
    assert.equal(res.status, 201);
  }
  assert.equal(warned.length, 1, `warned ${warned.length} times over 3 requests`);
  assert.match(warned[0], /"identity" option/);
  assert.match(warned[0], /session cookie/);
  const byUser = idempotency(async () => new Response('ok'), { identity: () => 'u1' });
  await byUser(keyed(newKey(), { headers: { 'X-API-Key': 'pk', Cookie: 'sid=1' } }));
  assert.equal(warned.length, 1, 'no warning with an identity option');
}));

// ---------------------------------------------------------------------------------------------
// 4. What the store holds does not give the credential back.

t('4. RedisStore: the scope of a Basic-auth caller is HMAC(secret, identity), not a hash a dictionary inverts; instances share the secret', { skip: redisSkip }, async () => {
  const prefix = `idem:must-hold-${crypto.randomUUID()}:`;
  const password = 'hunter2-correct-horse';
  const authorization = `Basic ${Buffer.from(`alice:${password}`).toString('base64')}`;
  const [clientA, clientB] = [await redisClient(), await redisClient()];
  const [storeA, storeB] = [new RedisStore({ client: clientA, prefix }), new RedisStore({ client: clientB, prefix })];
  let runs = 0;
  const app = (store) => idempotency(async () => Response.json({ run: ++runs }, { status: 201 }), { store });
  const [a, b] = [app(storeA), app(storeB)];
  const key = newKey();
  const first = await a(keyed(key, { headers: { Authorization: authorization } }));
  assert.equal(first.status, 201);
  const keys = (await redis.keys(`${prefix}*`)).filter((k) => k !== `${prefix}secret` && !k.startsWith(`${prefix}runs:`));
  assert.equal(keys.length, 1, JSON.stringify(keys));
  const match = keys[0].slice(prefix.length).match(/^([0-9a-f]{64}):(.*)$/);
  assert.ok(match, keys[0]);
  const [, scope, stored] = match;
  assert.equal(stored, key);
  const identity = `authorization:${authorization}`;
  const dictionary = ['password', '123456', 'letmein', 'qwerty', 'hunter2', 'alice', password];
  for (const word of dictionary) {
    const guess = createHash('sha256').update(`authorization:Basic ${Buffer.from(`alice:${word}`).toString('base64')}`).digest('hex');
    assert.notEqual(scope, guess, `the scope is the SHA-256 of the credential with password ${JSON.stringify(word)}`);
  }
  const secret = await storeA.secret();
  assert.equal(await storeB.secret(), secret, 'two instances on one Redis share the secret');
  assert.equal(scope, createHmac('sha256', secret).update(identity).digest('hex'), 'the scope is HMAC-SHA-256(secret, identity)');
  const retry = await b(keyed(key, { headers: { Authorization: authorization } }));
  assert.equal(retry.headers.get('idempotent-replayed'), 'true', 'a retry through the other instance gets the replay');
  assert.deepEqual(await retry.json(), { run: 1 });
  assert.equal(runs, 1);
});

// ---------------------------------------------------------------------------------------------
// 5. Keyed reads are not stored.

t('5. 1,000 keyed GETs of a 1 MiB answer leave the MemoryStore empty; with ignoredMethods: [] they are stored', async () => {
  const mib = new Uint8Array(1024 * 1024).fill(120);
  let runs = 0;
  const report = async () => (runs++, new Response(mib, { headers: { 'Content-Type': 'application/octet-stream' } }));
  const store = new MemoryStore();
  const h = idempotency(report, { store, identity: false });
  const get = (key, method = 'GET') => new Request('http://localhost/report', { method, headers: { 'Idempotency-Key': key } });
  for (let i = 0; i < 1000; i++) {
    const res = await h(get(newKey(), i % 10 === 0 ? 'HEAD' : 'GET'));
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('idempotent-replayed'), null);
    if (i % 100 === 1) assert.equal((await res.arrayBuffer()).byteLength, mib.length, 'the answer is whole');
    else await res.body?.cancel();
  }
  assert.equal(runs, 1000);
  assert.equal(store.size, 0, 'nothing stored for 1,000 keyed reads');
  const key = newKey();
  await (await h(get(key))).arrayBuffer();
  assert.equal((await h(get(key))).headers.get('idempotent-replayed'), null, 'a repeated keyed GET runs again');

  const honoured = new MemoryStore();
  const stored = idempotency(report, { store: honoured, identity: false, ignoredMethods: [] });
  for (let i = 0; i < 10; i++) await (await stored(get(`k${i}`))).arrayBuffer();
  assert.equal(honoured.size, 10, 'with ignoredMethods: [] keyed GETs are stored');
  const replay = await stored(get('k3'));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal((await replay.arrayBuffer()).byteLength, mib.length);
});

// ---------------------------------------------------------------------------------------------
// 7. With ctx.tx, nothing commits that cannot be stored.

t('7. idempotent(), PostgresStore: a result that is not JSON after ctx.tx writes rejects not-storable, commits nothing; the redelivery commits once', { skip: pgSkip }, async () => {
  const { store, insert, rows } = await postgresSetup();
  let runs = 0;
  const ship = idempotent(async (message, ctx) => {
    const run = ++runs;
    await insert(ctx.tx, run);
    return run === 1 ? { amount: 10n } : { amount: '10', run };
  }, { store, key: (m) => m.id });
  const message = { id: newKey() };
  await assert.rejects(ship(message), (error) => {
    assert.equal(error.name, 'IdempotencyError');
    assert.equal(error.code, 'not-storable');
    assert.match(error.message, /rolled back/);
    return true;
  });
  assert.deepEqual(await rows(), [], '0 rows committed');
  assert.deepEqual(await ship(message), { amount: '10', run: 2 }, 'the redelivery runs');
  assert.deepEqual(await rows(), [2], 'and commits once');
  assert.deepEqual(await ship(message), { amount: '10', run: 2 }, 'then replays');
  assert.equal(runs, 2);
});

t('7. idempotency(), PostgresStore: an answer too large to store after ctx.tx writes is a 500 idempotency-answer-too-large, 0 rows, the key freed', { skip: pgSkip }, async () => {
  const { store, insert, rows } = await postgresSetup();
  let runs = 0;
  const h = idempotency(async (request, ctx) => {
    const run = ++runs;
    await insert(ctx.tx, run);
    return run === 1 ? new Response(new Uint8Array(33 * 1024 * 1024), { status: 201 }) : Response.json({ run }, { status: 201 });
  }, { store, identity: false });
  const key = newKey();
  const problem = await problemOf(await h(keyed(key)), 500, 'idempotency-answer-too-large');
  assert.match(problem.detail, /rolled back/);
  assert.deepEqual(await rows(), [], '0 rows committed');
  const retried = await h(keyed(key));
  assert.equal(retried.status, 201);
  assert.equal(retried.headers.get('idempotent-replayed'), null, 'the key was freed: the retry ran');
  assert.deepEqual(await retried.json(), { run: 2 });
  assert.deepEqual(await rows(), [2]);
});

t('7. idempotency(), PostgresStore: a handler that wrote through ctx.tx and answers 500: 0 rows committed, the key freed', { skip: pgSkip }, async () => {
  const { store, insert, rows } = await postgresSetup();
  let runs = 0;
  const h = idempotency(async (request, ctx) => {
    const run = ++runs;
    await insert(ctx.tx, run);
    return run === 1 ? new Response('half done', { status: 500 }) : Response.json({ run }, { status: 201 });
  }, { store, identity: false });
  const key = newKey();
  const failed = await h(keyed(key));
  assert.equal(failed.status, 500);
  assert.equal(await failed.text(), 'half done');
  assert.deepEqual(await rows(), [], '0 rows committed');
  const retried = await h(keyed(key));
  assert.equal(retried.headers.get('idempotent-replayed'), null, 'the 500 was not stored');
  assert.deepEqual(await retried.json(), { run: 2 });
  assert.deepEqual(await rows(), [2]);
  assert.equal((await h(keyed(key))).headers.get('idempotent-replayed'), 'true');
});

// ---------------------------------------------------------------------------------------------
// 8. The limits are what they say.

t('8. lockTimeoutMs below 1000 is a TypeError; ttlMs accepts exactly the bounds server.d.ts documents', () => {
  const ok = async () => new Response('ok');
  for (const lockTimeoutMs of [1, 999]) {
    assert.throws(() => idempotency(ok, { lockTimeoutMs }), { name: 'TypeError', message: new RegExp(`invalid option "lockTimeoutMs": got ${lockTimeoutMs}; expected an integer number of milliseconds from 1000 to 2147483647`) });
    assert.throws(() => idempotent(ok, { key: () => 'k', lockTimeoutMs }), { name: 'TypeError', message: /invalid option "lockTimeoutMs"/ });
  }
  idempotency(ok, { lockTimeoutMs: 1000 });
  idempotent(ok, { key: () => 'k', lockTimeoutMs: 1000 });
  // The documented bounds of ttlMs: "1 ms to 365 days".
  const types = readFileSync(fileURLToPath(new URL('../../js/server.d.ts', import.meta.url)), 'utf8');
  const doc = types.match(/\/\*\*((?:(?!\*\/)[\s\S])*)\*\/\s*ttlMs\?: number(?: \| undefined)?;/)?.[1] ?? '';
  assert.match(doc, /\b1 ms to 365 days\b/, `the ttlMs bounds in server.d.ts: ${doc.trim()}`);
  const day = 24 * 60 * 60 * 1000;
  for (const ttlMs of [1, 365 * day]) {
    idempotency(ok, { ttlMs });
    idempotent(ok, { key: () => 'k', ttlMs });
  }
  for (const ttlMs of [0, 365 * day + 1]) {
    assert.throws(() => idempotency(ok, { ttlMs }), { name: 'TypeError', message: new RegExp(`invalid option "ttlMs": got ${ttlMs};`) });
    assert.throws(() => idempotent(ok, { key: () => 'k', ttlMs }), { name: 'TypeError', message: /invalid option "ttlMs"/ });
  }
});

// ---------------------------------------------------------------------------------------------
// 9. A replay carries nothing that describes a connection; error texts quote values as JSON.

t('9. hop-by-hop headers and Set-Cookie2 are neither stored nor replayed; an error quotes a value with a quote inside', async () => {
  const hopByHop = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'set-cookie', 'set-cookie2'];
  const spy = spyStore(new MemoryStore());
  let runs = 0;
  const h = idempotency(async () => {
    runs++;
    const headers = new Headers({
      'X-Kept': 'yes',
      Connection: 'close, X-Kept-Not',
      'Keep-Alive': 'timeout=5, max=100',
      'Proxy-Connection': 'keep-alive',
      TE: 'trailers',
      Trailer: 'Expires',
      'Transfer-Encoding': 'gzip',
      Upgrade: 'websocket',
      'Set-Cookie': 'sid=s; HttpOnly',
      'Set-Cookie2': 'old=1',
    });
    return new Response('charged', { status: 201, headers });
  }, { store: spy.store, identity: false });
  const key = newKey();
  const first = await h(keyed(key));
  assert.equal(first.status, 201);
  assert.equal(await first.text(), 'charged');
  const replay = await h(keyed(key));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(await replay.text(), 'charged');
  assert.equal(replay.headers.get('x-kept'), 'yes');
  for (const name of hopByHop) assert.equal(replay.headers.get(name), null, `the replay carries ${name}`);
  const [[, , , record]] = spy.calls.filter(([m]) => m === 'complete');
  const storedNames = record.response.headers.map(([name]) => name.toLowerCase());
  assert.ok(storedNames.includes('x-kept'));
  for (const name of hopByHop) assert.ok(!storedNames.includes(name), `${name} was stored`);
  assert.equal(runs, 1);

  const ok = async () => new Response('ok');
  assert.throws(() => idempotency(ok, { header: 'a"b' }), (error) => {
    assert.equal(error.name, 'TypeError');
    assert.ok(error.message.includes('got "a\\"b"'), error.message);
    return true;
  });
  assert.throws(() => idempotency(ok, { concurrent: 'wait\\' }), (error) => error.message.includes('got "wait\\\\"'));
});

// ---------------------------------------------------------------------------------------------
// 10. The route argument (Next.js's `{ params }`) reaches ctx.

t('10. idempotency(handler)(request, { params }): the handler\'s ctx has params and key', async () => {
  const seen = [];
  const h = idempotency(async (request, ctx) => {
    seen.push({ key: ctx.key, params: await ctx.params, keyFor: typeof ctx.keyFor });
    return Response.json({ id: (await ctx.params).id }, { status: 201 });
  }, { identity: false });
  const key = newKey();
  const res = await h(keyed(key, { path: '/orders/7' }), { params: Promise.resolve({ id: '7' }) });
  assert.equal(res.status, 201);
  assert.deepEqual(await res.json(), { id: '7' });
  // The idempotency fields win over the route's; a request without a key gets the params too.
  await h(new Request('http://localhost/orders/8', { method: 'PUT', body: '{}' }), { params: Promise.resolve({ id: '8' }), key: 'from-route' });
  assert.deepEqual(seen, [
    { key, params: { id: '7' }, keyFor: 'function' },
    { key: null, params: { id: '8' }, keyFor: 'function' },
  ]);
});
