// The idempotency scenarios with PostgresStore against a real PostgreSQL (scripts/test.sh
// starts one and passes its URL in DATABASE_URL), plus what only a transactional
// store does: the handler's writes through ctx.tx commit with the stored answer or not at all,
// a key held by a live transaction is waited for, a dead holder's key is free at once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import pg from 'pg';
import { idempotency, idempotent, PostgresStore } from 'retry-fetch/server';
import { storeScenarios, holding } from './scenarios.mjs';
import { serve, withServer, send, snapshot, newKey, sleep, deferred, problemOf, watchAcquires } from './support.mjs';
import { DATABASE_URL, needs } from '../support/services.mjs';

const skip = needs('DATABASE_URL');

const pools = [];
const tables = [];
let pool;

/** A pg Pool of its own (ended after the tests), with `options` over the defaults; idle clients whose backend died are dropped. */
function newPool(max = 40, options = {}) {
  const p = new pg.Pool({ connectionString: DATABASE_URL, max, ...options });
  p.on('error', () => {});
  pools.push(p);
  return p;
}

before(() => {
  if (!skip) pool = newPool();
});

after(async () => {
  if (!pool) return;
  for (const t of tables) await pool.query(`DROP TABLE IF EXISTS "${t}"`);
  await Promise.all(pools.map((p) => p.end()));
});

/** A fresh table name, dropped after the tests. */
function tableName(kind) {
  const name = `${kind}_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(name);
  return name;
}

/** A PostgresStore on a table of its own, migrated. */
async function postgresStore(options = {}) {
  const store = new PostgresStore({ pool, table: tableName('idem'), ...options });
  await store.migrate();
  return store;
}

/** A table for the handler's own writes: `charges (key, run)`. */
async function chargesTable() {
  const name = tableName('charges');
  await pool.query(`CREATE TABLE "${name}" (id serial PRIMARY KEY, key text NOT NULL, run int NOT NULL)`);
  return {
    name,
    insert: (client, key, run) => client.query(`INSERT INTO "${name}" (key, run) VALUES ($1, $2)`, [key, run]),
    runs: async () => (await pool.query(`SELECT run FROM "${name}" ORDER BY id`)).rows.map((r) => r.run),
  };
}

/** The completed rows of `store`'s table for the unscoped `key`. */
async function storedRows(store, key) {
  return (await pool.query(`SELECT fingerprint, response FROM "${store.table}" WHERE scope = '-' AND key = $1`, [key])).rows;
}

/** Clients of `p` checked out (in a transaction or a query): none once every request ended. */
async function settled(p = pool) {
  for (let i = 0; i < 100 && p.totalCount - p.idleCount > 0; i++) await sleep(20);
  return p.totalCount - p.idleCount;
}

if (skip) {
  test('PostgresStore', { skip }, () => {});
} else {
  storeScenarios('PostgresStore', () => postgresStore(), { transactional: true });

  const t = (name, options, fn) => (fn ? test(`PostgresStore: ${name}`, { timeout: 60_000, ...options }, fn) : test(`PostgresStore: ${name}`, { timeout: 60_000 }, options));

  t('the handler\'s writes through ctx.tx commit with the stored answer: invisible while it runs, there once it is stored', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    const written = deferred();
    const proceed = deferred();
    let runs = 0;
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      await charges.insert(ctx.tx, ctx.key, run);
      written.resolve();
      await proceed.promise;
      return Response.json({ run }, { status: 201 });
    }, { store });
    await withServer(handler, async (server) => {
      const key = newKey();
      const sent = send(server.url, { key });
      await holding(written.promise, sent);
      assert.deepEqual(await charges.runs(), [], 'the write is not committed while the handler runs');
      assert.deepEqual(await storedRows(store, key), [], 'nor is the key\'s row');
      proceed.resolve();
      const res = await sent;
      assert.equal(res.status, 201);
      assert.deepEqual(await charges.runs(), [1], 'committed with the answer');
      const rows = await storedRows(store, key);
      assert.equal(rows.length, 1);
      assert.equal(rows[0].response.status, 201);
      const replay = await send(server.url, { key });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await replay.json(), { run: 1 });
      assert.deepEqual(await charges.runs(), [1]);
      assert.equal(runs, 1);
    });
    assert.equal(await settled(), 0, 'every pool client is back');
  });

  t('a "not processed" answer (429, 503 with Retry-After) rolls back the handler\'s ctx.tx writes and frees the key', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    let runs = 0;
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      await charges.insert(ctx.tx, ctx.key, run);
      if (run === 1) return new Response('busy', { status: 429 });
      if (run === 2) return new Response('down', { status: 503, headers: { 'Retry-After': '1' } });
      return Response.json({ run }, { status: 201 });
    }, { store });
    await withServer(handler, async (server) => {
      const key = newKey();
      assert.equal((await send(server.url, { key })).status, 429);
      assert.deepEqual(await charges.runs(), [], 'rolled back');
      assert.deepEqual(await storedRows(store, key), []);
      assert.equal((await send(server.url, { key })).status, 503);
      assert.deepEqual(await charges.runs(), [], 'rolled back');
      const done = await send(server.url, { key });
      assert.equal(done.status, 201);
      assert.equal(done.headers.get('idempotent-replayed'), null);
      assert.deepEqual(await charges.runs(), [3], 'one row in the end, from the run that was stored');
      assert.equal((await send(server.url, { key })).headers.get('idempotent-replayed'), 'true');
      assert.equal(runs, 3);
    });
    assert.equal(await settled(), 0);
  });

  t('a handler that used ctx.tx and throws: its writes roll back, the key is freed (500, not stored): the retry runs it again', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    const told = [];
    let runs = 0;
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      await charges.insert(ctx.tx, ctx.key, run);
      if (run === 1) throw new Error('provider timeout after our insert');
      return Response.json({ run }, { status: 201 });
    }, { store, onError: (error) => told.push(error.message) });
    await withServer(handler, async (server) => {
      const key = newKey();
      const failed = await send(server.url, { key });
      const problem = await problemOf(failed, 500, 'idempotency-handler-failed');
      assert.match(problem.detail, /rolled back/);
      assert.deepEqual(told, ['provider timeout after our insert']);
      assert.deepEqual(await charges.runs(), [], 'the insert was rolled back');
      assert.deepEqual(await storedRows(store, key), [], 'nothing stored');
      const retried = await send(server.url, { key });
      assert.equal(retried.status, 201);
      assert.equal(retried.headers.get('idempotent-replayed'), null, 'the retry ran the handler');
      assert.deepEqual(await charges.runs(), [2], 'one row in the end');
      assert.equal(runs, 2);
    });
    assert.equal(await settled(), 0);
  });

  t('a handler that did not read ctx.tx and throws: a stored 500, as with the other stores (its own writes stay)', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    let runs = 0;
    const handler = idempotency(async (request) => {
      const run = ++runs;
      const key = request.headers.get('idempotency-key');
      await charges.insert(pool, key, run); // outside the key's transaction: nothing can undo it
      throw new Error('failed after a write of its own');
    }, { store, onError: () => {} });
    await withServer(handler, async (server) => {
      const key = newKey();
      await problemOf(await send(server.url, { key }), 500, 'idempotency-handler-failed');
      const replay = await send(server.url, { key });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await problemOf(replay, 500, 'idempotency-handler-failed');
      assert.equal(runs, 1, 'not run again: its effect may have happened');
      assert.deepEqual(await charges.runs(), [1]);
      assert.equal((await storedRows(store, key))[0]?.response.status, 500);
    });
    assert.equal(await settled(), 0);
  });

  t('two server instances, each with its own Pool, share one table: 50 concurrent requests, 49 find the key held while the one run goes on; one row', async () => {
    const table = tableName('idem');
    const charges = await chargesTable();
    let runs = 0;
    const instances = [];
    const release = deferred();
    let watch;
    try {
      for (let i = 0; i < 2; i++) {
        const store = new PostgresStore({ pool: newPool(20), table });
        await store.migrate(); // both at once would be fine too (advisory lock)
        // Both instances' acquire() answers in one record.
        watch ??= watchAcquires(store);
        const handler = idempotency(async (request, ctx) => {
          const run = ++runs;
          await charges.insert(ctx.tx, ctx.key, run);
          await release.promise; // held until the 49 others have found the key held
          return Response.json({ run, instance: i }, { status: 201 });
        }, { store: i === 0 ? watch.store : watch.also(store), waitTimeoutMs: 30_000 });
        instances.push(await serve(handler));
      }
      const [a, b] = instances;
      const key = newKey();
      const sent = Array.from({ length: 50 }, (_, i) => send((i % 2 ? a : b).url, { key }));
      await watch.overlapped(49, sent);
      release.resolve();
      const responses = await Promise.all(sent);
      assert.equal(runs, 1);
      const snaps = await Promise.all(responses.map(snapshot));
      for (const s of snaps) assert.deepEqual(s, snaps[0]);
      assert.equal(snaps[0].status, 201);
      assert.equal(responses.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 49);
      assert.deepEqual(await charges.runs(), [1]);
    } finally {
      release.resolve(); // never leave the run blocked, whatever failed
      await Promise.all(instances.map((s) => s.close()));
    }
  });

  t('a ctx.tx statement that failed aborts the transaction: nothing is kept, the answer is a 503 (Retry-After: 1), onStoreError(complete)', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    const told = [];
    let runs = 0;
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      await charges.insert(ctx.tx, ctx.key, run);
      if (run === 1) await ctx.tx.query('SELECT 1 / 0').catch(() => {}); // swallowed, but the transaction is aborted
      return Response.json({ run }, { status: 201 });
    }, { store, onStoreError: (error, operation) => told.push([operation, error.message]) });
    await withServer(handler, async (server) => {
      const key = newKey();
      const failed = await send(server.url, { key });
      await problemOf(failed, 503, 'idempotency-store-unavailable', { retryAfter: true });
      assert.equal(told.length, 1);
      assert.equal(told[0][0], 'complete');
      assert.deepEqual(await charges.runs(), []);
      assert.deepEqual(await storedRows(store, key), []);
      const retried = await send(server.url, { key });
      assert.equal(retried.status, 201);
      assert.deepEqual(await retried.json(), { run: 2 });
      assert.deepEqual(await charges.runs(), [2]);
    });
    assert.equal(await settled(), 0);
  });

  t('a holder whose connection dies frees the key at once (no lockTimeoutMs to wait): a waiting duplicate runs', async () => {
    const store = await postgresStore();
    const storeErrors = [];
    const killed = deferred();
    const secondRun = deferred();
    let runs = 0;
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      if (run === 1) {
        const { rows } = await ctx.tx.query('SELECT pg_backend_pid() AS pid');
        await pool.query('SELECT pg_terminate_backend($1)', [rows[0].pid]); // the holder's connection dies
        killed.resolve();
        await secondRun.promise; // the key is free while this run is still going
      } else {
        secondRun.resolve();
      }
      return Response.json({ run }, { status: 201 });
    }, { store, lockTimeoutMs: 60_000, waitTimeoutMs: 30_000, onStoreError: (e, op) => storeErrors.push(op) });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = send(server.url, { key });
      await holding(killed.promise, first);
      const started = Date.now();
      const second = await send(server.url, { key });
      assert.equal(second.status, 201);
      assert.equal(second.headers.get('idempotent-replayed'), null);
      assert.deepEqual(await second.json(), { run: 2 });
      assert.ok(Date.now() - started < 20_000, 'well before lockTimeoutMs');
      await (await first).arrayBuffer();
      assert.deepEqual(storeErrors, ['complete'], 'the dead transaction could not store the first answer');
      const third = await send(server.url, { key });
      assert.equal(third.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await third.json(), { run: 2 });
    });
    assert.equal(await settled(), 0);
  });

  t('a holder that wrote through ctx.tx and lost its connection does not answer as if it had committed', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    let runs = 0;
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      await charges.insert(ctx.tx, ctx.key, run);
      if (run === 1) {
        const { rows } = await ctx.tx.query('SELECT pg_backend_pid() AS pid');
        await pool.query('SELECT pg_terminate_backend($1)', [rows[0].pid]);
        await sleep(100);
      }
      return Response.json({ charged: true, run }, { status: 201 });
    }, { store, onStoreError: () => {} });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = await send(server.url, { key });
      const body = await first.text();
      assert.deepEqual(await charges.runs(), [], 'the insert died with the connection');
      assert.notEqual(first.status, 201, `the client was told ${first.status} ${body} though nothing was committed`);
      assert.equal(first.status, 503, 'a failed commit is a 503 (retry with the same key)');
    });
  });

  t('a handler whose savepoint is rolled back while a renewal lands keeps its key past lockTimeoutMs: one run, committed', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    let runs = 0;
    const errors = [];
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      await ctx.tx.query('SAVEPOINT s');
      await ctx.tx.query('SELECT 1/0').catch(() => {}); // the transaction is aborted until the rollback
      await sleep(500); // a renewal (every 333 ms) lands meanwhile
      await ctx.tx.query('ROLLBACK TO SAVEPOINT s');
      await charges.insert(ctx.tx, ctx.key, run);
      await sleep(1_800); // no statement for longer than lockTimeoutMs
      return Response.json({ run }, { status: 201 });
    }, { store, identity: false, lockTimeoutMs: 1000, waitTimeoutMs: 5_000, onStoreError: (e, op) => errors.push(`${op}: ${e.message}`) });
    const key = newKey();
    const request = () => new Request('http://x.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{}' });
    const first = handler(request());
    await sleep(1_500);
    const duplicate = handler(request());
    const answers = await Promise.all([first, duplicate]);
    assert.deepEqual(answers.map((a) => a.status), [201, 201], errors.join('; '));
    assert.equal(runs, 1, 'the duplicate ran the handler again');
    assert.deepEqual(await charges.runs(), [1], 'committed once');
  });

  t('idempotent + maxRuns: an onDeadLetter slower than lockTimeoutMs keeps the key: called once, every delivery gets the dead letter', async () => {
    const store = await postgresStore();
    let handedOff = 0;
    const handle = idempotent(async (message, ctx) => {
      await ctx.tx.query('SELECT 1');
      throw new Error('poison'); // rolled back, not stored: a failed run
    }, {
      store,
      key: (message) => message.id,
      maxRuns: 1,
      lockTimeoutMs: 1000,
      waitTimeoutMs: 5_000,
      onStoreError: () => {},
      onDeadLetter: async () => {
        handedOff += 1;
        await sleep(2_000);
      },
    });
    const id = newKey();
    await handle({ id }).catch(() => {});
    const second = handle({ id }).catch((e) => e);
    await sleep(1_500); // past lockTimeoutMs of the hand-off
    const third = handle({ id }).catch((e) => e);
    const codes = (await Promise.all([second, third])).map((e) => e?.code);
    assert.deepEqual(codes, ['previous-run-failed', 'previous-run-failed']);
    assert.equal(handedOff, 1, 'onDeadLetter was called again while the first hand-off went on');
    assert.equal((await handle({ id }).catch((e) => e))?.code, 'previous-run-failed');
    assert.equal(handedOff, 1);
  });

  // A waiting duplicate whose INSERT gave up (lock_timeout) asks the claims' advisory locks who
  // holds the key. A claim that is losing (another body under the key, still in its own claim
  // transaction) holds the key's lock as a holder does: when the holder of the duplicate's own
  // body committed its answer just before that probe, the probe saw "another request" and the
  // duplicate was answered 422 for a charge that went through.
  t('a duplicate whose holder commits just before its probe, while a claim of another body is in flight, gets the replay, not 422', async () => {
    const table = tableName('idem');
    const real = pool;
    let beforeRollback; // set once: runs before the duplicate's ROLLBACK after its lock_timeout
    const hooked = new Proxy(real, {
      get(target, prop) {
        if (prop !== 'connect') {
          const value = Reflect.get(target, prop, target);
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return async () => {
          const client = await target.connect();
          const query = client.query;
          return new Proxy(client, {
            get(c, q) {
              if (q !== 'query') {
                const value = Reflect.get(c, q, c);
                return typeof value === 'function' ? value.bind(c) : value;
              }
              return async (text, ...rest) => {
                if (text === 'ROLLBACK' && beforeRollback) {
                  const hook = beforeRollback;
                  beforeRollback = undefined;
                  await hook();
                }
                return query.call(c, text, ...rest);
              };
            },
          });
        };
      },
    });
    const store = new PostgresStore({ pool: hooked, table });
    await store.migrate();
    const release = deferred();
    let runs = 0;
    const h = idempotency(async () => {
      runs++;
      await release.promise;
      return Response.json({ charged: 42 }, { status: 201 });
    }, { store, identity: false, lockTimeoutMs: 5_000, onError: () => {} });
    const key = newKey();
    const body = '{"amount":42}';
    const request = () => new Request('http://localhost/charges', { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body });
    // A claim of another body, in flight: the key's advisory lock, held shared (as a claim's).
    const keyLock = createHash('sha256').update(['retry-fetch', 'key', table, '-', key].join('\0')).digest().readBigInt64BE(0).toString();
    const loser = await real.connect();
    try {
      const first = h(request());
      while (runs === 0) await sleep(5);
      await loser.query(`BEGIN; SELECT pg_advisory_xact_lock_shared(${keyLock})`);
      // The duplicate's INSERT waits for the holder's row and gives up after lockWaitMs; then,
      // before its probe, the holder answers and commits.
      beforeRollback = async () => {
        release.resolve();
        assert.equal((await first).status, 201);
      };
      const duplicate = await h(request());
      assert.equal(beforeRollback, undefined, 'the duplicate went through the probe');
      assert.equal(duplicate.status, 201, `the duplicate was answered ${duplicate.status}: ${await duplicate.clone().text()}`);
      assert.equal(duplicate.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await duplicate.json(), { charged: 42 });
      assert.equal(runs, 1);
    } finally {
      release.resolve();
      await loser.query('ROLLBACK').catch(() => {});
      loser.release();
    }
  });
}

test('PostgresStore on a pool with no free connection: storeTimeoutMs answers 503 with Retry-After, nothing run; the claim that gets a connection late gives it back unclaimed, and the retry runs once', { skip, timeout: 60_000 }, async () => {
  // One connection, held by a keyed request whose handler runs (its transaction is its lock).
  const own = newPool(1);
  const store = new PostgresStore({ pool: own, table: tableName('idem') });
  await store.migrate();
  const release = store.release.bind(store);
  let givenBack = 0;
  store.release = async (...args) => {
    givenBack++;
    return release(...args);
  };
  const charges = await chargesTable();
  let runs = 0;
  const told = [];
  const handler = idempotency(async (req, ctx) => {
    const run = ++runs;
    await charges.insert(ctx.tx, ctx.key, run);
    if (ctx.key === 'slow') await sleep(1_000);
    return Response.json({ run }, { status: 201 });
  }, { store, history: false, identity: false, storeTimeoutMs: 300, onStoreError: (e, op) => told.push(`${op} ${e.name}`) });
  const pay = (key) => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' }, body: '{"amount":1}' }));
  const slow = pay('slow');
  await sleep(100);
  // Ten requests while the one connection is held: each is shed after storeTimeoutMs.
  const shed = await Promise.all(['second', ...Array.from({ length: 9 }, () => newKey())].map(pay));
  for (const res of shed) await problemOf(res, 503, 'idempotency-store-unavailable', { retryAfter: true });
  assert.deepEqual(told, Array(10).fill('acquire TimeoutError'));
  assert.equal(runs, 1, 'only the holder ran');
  assert.equal((await slow).status, 201);
  // The shed claim got the connection once the holder committed: told by its aborted signal
  // that nobody waits for it, it gave the connection back without claiming anything.
  for (let i = 0; own.waitingCount > 0 || own.idleCount !== own.totalCount; i++) {
    assert.ok(i < 200, `the late claim still holds a connection (${own.totalCount - own.idleCount} out, ${own.waitingCount} waiting)`);
    await sleep(20);
  }
  assert.equal(givenBack, 0, 'nothing was claimed for the shed requests, so nothing to give back');
  const retry = await pay('second');
  assert.equal(retry.status, 201);
  assert.deepEqual(await retry.json(), { run: 2 });
  const replay = await pay('second');
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(await charges.runs(), [1, 2], 'one charge per key');
});

test('PostgresStore: duplicates waiting on one held key ask without holding a pooled connection each', { skip, timeout: 60_000 }, async () => {
  // 20 duplicates of one request whose handler takes 1.5 s, waiting (concurrent: 'wait'): each
  // ask of theirs once held a connection for lockWaitMs (a claim blocked on the key's row):
  // 20 waiters kept most of a pool busy and starved every other key. After their first ask
  // they probe with one statement: the connections they hold at a time stay few.
  const own = newPool(30);
  // Connection-milliseconds checked out: the integral of the connections in use over time.
  let inUse = 0;
  let busyMs = 0;
  let since = performance.now();
  const tick = () => {
    const now = performance.now();
    busyMs += inUse * (now - since);
    since = now;
  };
  own.on('acquire', () => {
    tick();
    inUse += 1;
  });
  own.on('release', () => {
    tick();
    inUse -= 1;
  });
  const table = tableName('idem');
  const store = new PostgresStore({ pool: own, table, lockWaitMs: 100 });
  await store.migrate();
  let runs = 0;
  const handler = idempotency(async () => {
    runs += 1;
    await sleep(2_000);
    return Response.json({ charged: true }, { status: 201 });
  }, { store, history: false, identity: false });
  const key = newKey();
  const request = () => new Request('http://api.test/payments', { method: 'POST', headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' }, body: '{"amount":1}' });
  const first = handler(request());
  await sleep(100);
  const waiters = Array.from({ length: 20 }, () => handler(request()));
  await sleep(800); // their first asks: a claim each, blocked lockWaitMs on the key's row
  // From here, their later asks, while the holder runs: connections in use on average.
  tick();
  busyMs = 0;
  const from = performance.now();
  const whileHeld = first.then(() => {
    tick();
    return busyMs / (performance.now() - from);
  });
  const answers = await Promise.all([first, ...waiters]);
  assert.equal(runs, 1);
  assert.ok(answers.every((r) => r.status === 201), JSON.stringify(answers.map((r) => r.status)));
  const average = await whileHeld;
  assert.ok(average <= 4, `${average.toFixed(1)} connections in use on average while the key was held (the holder's and 20 waiters')`);
});

test('PostgresStore: a COMMIT whose answer the lost connection never brought is asked about (txid_status): the committed charge is the answer, stored, not a 503 saying nothing was kept', { skip, timeout: 60_000 }, async () => {
  // A TCP proxy to PostgreSQL that, once armed, lets the query holding complete()'s COMMIT
  // reach the server, then cuts the connection when the server's answer comes back.
  const net = await import('node:net');
  const target = new URL(DATABASE_URL);
  let armed = false;
  let cuts = 0;
  const proxy = net.createServer((client) => {
    const server = net.connect(Number(target.port), target.hostname);
    let cutting = false;
    client.on('data', (d) => {
      if (armed && d.includes('COMMIT')) {
        armed = false;
        cutting = true;
      }
      server.write(d);
    });
    server.on('data', (d) => {
      if (!cutting) return client.write(d);
      // ReadyForQuery: the COMMIT was done; its answer is dropped with the connection.
      if (d.includes(Buffer.from([0x5a, 0, 0, 0, 5]))) {
        cuts++;
        client.destroy();
        server.destroy();
      }
    });
    for (const [a, b] of [[client, server], [server, client]]) {
      a.on('error', () => b.destroy());
      a.on('close', () => b.destroy());
    }
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  try {
    const via = new URL(DATABASE_URL);
    via.hostname = '127.0.0.1';
    via.port = String(proxy.address().port);
    const cutPool = newPool(4, { connectionString: via.href });
    const store = new PostgresStore({ pool: cutPool, table: tableName('idem') });
    await store.migrate();
    const charges = await chargesTable();
    let runs = 0;
    const handler = idempotency(async (req, ctx) => {
      const run = ++runs;
      await charges.insert(ctx.tx, ctx.key, run);
      armed = true; // the next COMMIT (complete()'s) loses its answer
      return Response.json({ charged: run }, { status: 201 });
    }, { store, identity: false, history: false, onStoreError: () => {} });
    const pay = () => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': 'cut-commit', 'Content-Type': 'application/json' }, body: '{"amount":5}' }));
    const first = await pay();
    assert.equal(cuts, 1, 'the COMMIT\'s answer was cut');
    assert.equal(first.status, 201, `the charge committed, and the caller is told so: ${first.status} ${await first.clone().text()}`);
    assert.deepEqual(await first.json(), { charged: 1 });
    assert.deepEqual(await charges.runs(), [1]);
    const again = await pay();
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await again.json(), { charged: 1 });
    assert.deepEqual(await charges.runs(), [1], 'one charge');
  } finally {
    proxy.close();
  }
});

test('PostgresStore: a handler whose effects are outside ctx.tx, whose key\'s transaction is lost before its answer is stored, answers its own answer with X-Should-Retry: false (the effect happened), not a 503 "nothing was kept"', { skip, timeout: 60_000 }, async () => {
  const application = `cut-${crypto.randomUUID().slice(0, 8)}`;
  const storePool = newPool(4, { application_name: application });
  const store = new PostgresStore({ pool: storePool, table: tableName('idem') });
  await store.migrate();
  const charges = await chargesTable();
  let runs = 0;
  const errors = [];
  const handler = idempotency(async (req, ctx) => {
    const run = ++runs;
    await charges.insert(pool, ctx.key, run); // outside ctx.tx: commits on its own
    // The key's transaction is lost (its backend terminated: a failover, an admin).
    await pool.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [application]);
    return Response.json({ charged: run }, { status: 201 });
  }, { store, identity: false, history: false, onStoreError: (e, op) => errors.push(op) });
  const res = await handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': 'outside-tx', 'Content-Type': 'application/json' }, body: '{"amount":5}' }));
  assert.equal(res.status, 201, `${res.status} ${await res.clone().text()}`);
  assert.deepEqual(await res.json(), { charged: 1 });
  assert.equal(res.headers.get('x-should-retry'), 'false');
  assert.equal(res.headers.get('stripe-should-retry'), 'false');
  assert.deepEqual(await charges.runs(), [1]);
  assert.ok(errors.includes('complete'), errors.join());
});
