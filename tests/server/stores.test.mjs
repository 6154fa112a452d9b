// The store protocol of retry-fetch/server, tested on the stores directly (no handler):
// MemoryStore, RedisStore against a real redis-server (REDIS_URL) and PostgresStore against a
// real PostgreSQL (DATABASE_URL); scripts/test.sh server starts both and passes their URLs
// (tests/support/services.mjs). Run by hand, a store whose server is not given is skipped.
//
// Imports the built files (pkg/, `bash scripts/build-pkg.sh`), as the package ships them.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { createClient } from 'redis';
import { MemoryStore } from '../../pkg/memory-store.js';
import { RedisStore } from '../../pkg/redis-store.js';
import { PostgresStore } from '../../pkg/postgres-store.js';
import { REDIS_URL, DATABASE_URL, needs } from '../support/services.mjs';

const redisSkip = needs('REDIS_URL');
const pgSkip = needs('DATABASE_URL');

const SCOPE = 'ab'.repeat(32); // what a hashed identity looks like: 64 hex digits
const newKey = (scope = '-') => `${scope}:${crypto.randomUUID()}`;
const lockOf = (token, ms = 60_000, fingerprint = 'f'.repeat(64)) => ({
  state: 'in-progress',
  token,
  fingerprint,
  lockExpiresAt: Date.now() + ms,
});
const completedOf = (body = 'ok', fingerprint = 'f'.repeat(64)) => ({
  state: 'completed',
  fingerprint,
  response: {
    status: 201,
    statusText: 'Created',
    headers: [['content-type', 'application/json'], ['set-cookie', 'a=1'], ['set-cookie', 'b=2']],
    body: Buffer.from(body).toString('base64'),
  },
  completedAt: Date.now(),
});
const HELD = { state: 'held' };
const HELD_FOR_OTHER = { state: 'held', mismatch: true }; // PostgresStore: held for another fingerprint

// ---------------------------------------------------------------------------------------------
// Connections, shared by the tests; each test has a store of its own (own table or prefix).

let redis;
let pool;
const tables = [];

before(async () => {
  if (!redisSkip) {
    redis = createClient({ url: REDIS_URL });
    redis.on('error', () => {}); // reconnects are the client's business; failures show in the tests
    await redis.connect();
  }
  if (!pgSkip) {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 30 });
    pool.on('error', () => {}); // an idle client whose backend was killed: the pool drops it
  }
});

after(async () => {
  await redis?.quit();
  if (pool) {
    for (const t of tables) await pool.query(`DROP TABLE IF EXISTS ${t.split('.').map((p) => `"${p}"`).join('.')}`);
    await pool.end();
  }
});

/** A PostgresStore on a fresh table of its own (migrated). */
async function postgresStore(options = {}) {
  const table = options.table ?? `idem_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(table);
  const store = new PostgresStore({ pool, ...options, table });
  await store.migrate();
  return store;
}

/**
 * The clients checked out of the pool: none once every transaction has ended. (A store's
 * background cleanup may hold one for a moment: give it up to a second.)
 */
async function checkedOut() {
  for (let i = 0; i < 50 && pool.totalCount > pool.idleCount; i++) await sleep(20);
  return pool.totalCount - pool.idleCount;
}

// ---------------------------------------------------------------------------------------------
// The protocol, every store. `held` is what acquire() answers for a key another holder holds:
// the holder's lock (Memory, Redis) or { state: 'held' } (Postgres).

const STORES = [
  { name: 'MemoryStore', skip: false, make: async () => new MemoryStore(), visibleLocks: true },
  {
    name: 'RedisStore',
    skip: redisSkip,
    make: async () => new RedisStore({ client: redis, prefix: `idem:test-${crypto.randomUUID()}:` }),
    visibleLocks: true,
  },
  { name: 'PostgresStore', skip: pgSkip, make: () => postgresStore(), visibleLocks: false },
];

for (const { name, skip, make, visibleLocks } of STORES) {
  // Concurrently: each test has a store and keys of its own, and several wait out real
  // lifetimes of a second or two (a lock, a ttl), which would otherwise add up.
  describe(`${name}: the store protocol`, { skip, concurrency: true }, () => {
    const heldAnswer = (lock) => (visibleLocks ? lock : HELD);

    test('acquire on a free key takes it (null); a second acquire gets the holder', async () => {
      const store = await make();
      const key = newKey();
      const a = lockOf('token-a');
      assert.equal(await store.acquire(key, a, 60_000), null);
      assert.deepEqual(await store.acquire(key, lockOf('token-b'), 60_000), heldAnswer(a));
      assert.equal(await store.release(key, 'token-a'), true);
    });

    test('complete stores the record; acquire then replays it, byte for byte', async () => {
      const store = await make();
      const key = newKey();
      assert.equal(await store.acquire(key, lockOf('t1'), 60_000), null);
      const record = completedOf('{"charged":4200}');
      assert.equal(await store.complete(key, 't1', record, 60_000), true);
      assert.deepEqual(await store.acquire(key, lockOf('t2'), 60_000), record);
      assert.deepEqual(await store.acquire(key, lockOf('t3'), 60_000), record, 'replayed again');
      // Completed: the old token no longer holds anything.
      assert.equal(await store.complete(key, 't1', completedOf('other'), 60_000), false);
      assert.equal(await store.release(key, 't1'), false);
      assert.equal(await store.renew(key, 't1', lockOf('t1'), 60_000), false);
      assert.deepEqual(await store.acquire(key, lockOf('t4'), 60_000), record, 'unchanged');
    });

    test('complete, release and renew with a token that does not hold the key are refused', async () => {
      const store = await make();
      const key = newKey();
      assert.equal(await store.complete(key, 'nobody', completedOf(), 60_000), false, 'free key');
      assert.equal(await store.release(key, 'nobody'), false, 'free key');
      assert.equal(await store.renew(key, 'nobody', lockOf('nobody'), 60_000), false, 'free key');
      const a = lockOf('owner');
      assert.equal(await store.acquire(key, a, 60_000), null);
      assert.equal(await store.complete(key, 'intruder', completedOf(), 60_000), false);
      assert.equal(await store.release(key, 'intruder'), false);
      assert.equal(await store.renew(key, 'intruder', lockOf('intruder'), 60_000), false);
      assert.equal(await store.reclaim(key, 'intruder', lockOf('intruder'), 60_000), false);
      // Another key, same token: not held there either.
      assert.equal(await store.complete(newKey(), 'owner', completedOf(), 60_000), false);
      assert.deepEqual(await store.acquire(key, lockOf('x'), 60_000), heldAnswer(a), 'still the owner');
      assert.equal(await store.complete(key, 'owner', completedOf(), 60_000), true);
    });

    test('release frees the key: the next acquire takes it', async () => {
      const store = await make();
      const key = newKey();
      assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
      assert.equal(await store.release(key, 'a'), true);
      assert.equal(await store.release(key, 'a'), false, 'released already');
      assert.equal(await store.acquire(key, lockOf('b'), 60_000), null);
      assert.equal(await store.complete(key, 'a', completedOf(), 60_000), false, 'the old holder cannot complete');
      assert.equal(await store.complete(key, 'b', completedOf(), 60_000), true);
    });

    test('renew keeps a live holder\'s key past its first lockTimeoutMs', async () => {
      const store = await make();
      const key = newKey();
      const acquired = performance.now();
      assert.equal(await store.acquire(key, lockOf('a', 1_000), 1_000), null);
      // Renewed at once (well inside the first second), and again: each renewal a new lifetime.
      const renewed = lockOf('a', 60_000);
      assert.equal(await store.renew(key, 'a', lockOf('a', 60_000), 60_000), true);
      assert.equal(await store.renew(key, 'a', renewed, 60_000), true, 'renewed again');
      await sleep(acquired + 1_500 - performance.now()); // past the first lockTimeoutMs
      assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), heldAnswer(renewed), 'still held, by the last renewal\'s lock');
      const record = completedOf();
      assert.equal(await store.complete(key, 'a', record, 60_000), true);
      assert.deepEqual(await store.acquire(key, lockOf('c'), 60_000), record);
    });

    test('a lock not renewed lapses after lockTimeoutMs; its holder cannot renew or complete its successor\'s (the fence)', async () => {
      const store = await make();
      const key = newKey();
      assert.equal(await store.acquire(key, lockOf('a', 200), 200), null);
      await sleep(1_500); // its 200 ms and a margin of seconds (Postgres ends the idle transaction)
      // Lapsed (Postgres: the idle transaction was ended, its row rolled back): a new holder.
      const b = lockOf('b');
      assert.equal(await store.acquire(key, b, 60_000), null);
      assert.equal(await store.renew(key, 'a', lockOf('a', 60_000), 60_000), false);
      assert.equal(await store.complete(key, 'a', completedOf('stale'), 60_000), false);
      assert.deepEqual(await store.acquire(key, lockOf('c'), 60_000), heldAnswer(b), 'the successor still holds it');
      const record = completedOf('fresh');
      assert.equal(await store.complete(key, 'b', record, 60_000), true);
      assert.deepEqual(await store.acquire(key, lockOf('d'), 60_000), record);
    });

    test('an expired completed record counts as absent: acquire takes the key again', async () => {
      const store = await make();
      const key = newKey();
      assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
      const completing = performance.now();
      assert.equal(await store.complete(key, 'a', completedOf('first'), 2_000), true);
      assert.equal((await store.acquire(key, lockOf('x'), 60_000))?.state, 'completed', 'inside its ttl of 2 s');
      await sleep(completing + 2_000 + 250 - performance.now());
      const b = lockOf('b');
      assert.equal(await store.acquire(key, b, 60_000), null, 'expired: taken again');
      assert.deepEqual(await store.acquire(key, lockOf('c'), 60_000), heldAnswer(b));
      const record = completedOf('second');
      assert.equal(await store.complete(key, 'b', record, 60_000), true);
      assert.deepEqual(await store.acquire(key, lockOf('d'), 60_000), record);
    });

    test('scopes and keys are kept apart (split at the first ":")', async () => {
      const store = await make();
      const id = crypto.randomUUID();
      const keys = [`-:${id}`, `${SCOPE}:${id}`, `-:${id}:x`, `-:x:${id}`, `${SCOPE}:${id}:x`];
      for (const [i, key] of keys.entries()) assert.equal(await store.acquire(key, lockOf(`t${i}`), 60_000), null, key);
      for (const [i, key] of keys.entries()) assert.equal(await store.complete(key, `t${i}`, completedOf(`body ${i}`), 60_000), true, key);
      for (const [i, key] of keys.entries()) {
        const record = await store.acquire(key, lockOf('again'), 60_000);
        assert.equal(Buffer.from(record.response.body, 'base64').toString(), `body ${i}`, key);
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Memory and Redis never take a lock over: their own expiry (MemoryStore's monotonic clock,
// Redis's PX) is what ends a lock, so a companion whose wall clock jumped cannot judge a live
// lock expired and run its handler twice. reclaim is always false there (and with
// PostgresStore: see its transactional test below).

for (const { name, skip, make } of STORES.filter((s) => s.visibleLocks)) {
  test(`${name}: reclaim never takes a lock over, not even with the holder's token; the lock ends by the store's own expiry`, { skip }, async () => {
    const store = await make();
    const key = newKey();
    const acquired = performance.now();
    assert.equal(await store.acquire(key, lockOf('dead', 2_000), 2_000), null);
    const b = lockOf('b');
    assert.equal(await store.reclaim(key, 'wrong', b, 60_000), false);
    assert.equal(await store.reclaim(key, 'dead', b, 60_000), false, 'a live lock is never taken over');
    assert.equal((await store.acquire(key, b, 60_000)).token, 'dead', 'the dead holder still holds it');
    await sleep(acquired + 2_000 + 250 - performance.now());
    assert.equal(await store.acquire(key, b, 60_000), null, 'after its lockTimeoutMs it is free');
    assert.equal(await store.complete(key, 'dead', completedOf(), 60_000), false);
    assert.equal(await store.complete(key, 'b', completedOf(), 60_000), true);
  });
}

// ---------------------------------------------------------------------------------------------
// PostgresStore: the row lock is the lock, and the handler's writes ride in its transaction.

describe('PostgresStore', { skip: pgSkip }, () => {
  /** A ledger table beside the store's, written through transaction() as a handler would. */
  async function ledger(store) {
    const table = `${store.table}_ledger`;
    tables.push(table);
    await pool.query(`CREATE TABLE "${table}" (key text PRIMARY KEY, amount int NOT NULL)`);
    return {
      insert: (tx, key, amount) => tx.query(`INSERT INTO "${table}" (key, amount) VALUES ($1, $2)`, [key, amount]),
      rows: async () => (await pool.query(`SELECT key, amount FROM "${table}" ORDER BY key`)).rows,
    };
  }

  test('transactional; transaction() is the holder\'s client, undefined for anyone else', async () => {
    const store = await postgresStore();
    assert.equal(store.transactional, true);
    assert.equal(store.table.startsWith('idem_'), true);
    const key = newKey();
    assert.equal(store.transaction(key, 'a'), undefined, 'nobody holds it');
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    assert.equal(typeof tx?.query, 'function');
    assert.equal(store.transaction(key, 'b'), undefined, 'another token');
    assert.equal(store.transaction(newKey(), 'a'), undefined, 'another key');
    assert.equal((await tx.query('SELECT 1 AS one')).rows[0].one, 1);
    assert.equal(await store.release(key, 'a'), true);
    assert.equal(store.transaction(key, 'a'), undefined, 'released');
    assert.equal(await store.reclaim(key, 'a', lockOf('b'), 60_000), false, 'reclaim is always false');
  });

  test('writes through transaction() commit with complete()', async () => {
    const store = await postgresStore();
    const book = await ledger(store);
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    await book.insert(store.transaction(key, 'a'), key, 4200);
    assert.deepEqual(await book.rows(), [], 'not visible before the commit');
    assert.equal(await store.complete(key, 'a', completedOf(), 60_000), true);
    assert.deepEqual(await book.rows(), [{ key, amount: 4200 }]);
    assert.equal(await checkedOut(), 0, 'the client went back to the pool');
  });

  test('writes through transaction() vanish with release()', async () => {
    const store = await postgresStore();
    const book = await ledger(store);
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    await book.insert(store.transaction(key, 'a'), key, 4200);
    assert.equal(await store.release(key, 'a'), true);
    assert.deepEqual(await book.rows(), []);
    assert.equal(await store.acquire(key, lockOf('b'), 60_000), null, 'the key is free');
    await book.insert(store.transaction(key, 'b'), key, 99);
    assert.equal(await store.complete(key, 'b', completedOf(), 60_000), true);
    assert.deepEqual(await book.rows(), [{ key, amount: 99 }]);
  });

  test('a failed statement through transaction() aborts it: complete() rejects, nothing is stored, the key is free', async () => {
    const store = await postgresStore();
    const book = await ledger(store);
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    await book.insert(tx, key, 1);
    await assert.rejects(book.insert(tx, key, 2), { code: '23505' }); // duplicate key
    await assert.rejects(store.complete(key, 'a', completedOf(), 60_000), {
      message: /transaction was aborted by a statement that failed before complete\(\)/,
    });
    assert.deepEqual(await book.rows(), []);
    assert.equal(await store.acquire(key, lockOf('b'), 60_000), null, 'the key is free');
    assert.equal(await store.release(key, 'b'), true);
    assert.equal(await checkedOut(), 0, 'the clients went back to the pool');
  });

  test('transaction() refuses what would end the key\'s transaction (BEGIN, COMMIT, ROLLBACK, release); SAVEPOINT works', async () => {
    const store = await postgresStore();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    for (const sql of ['COMMIT', ' begin', 'ROLLBACK', 'end', 'START TRANSACTION', 'SELECT 1; COMMIT', { text: 'ABORT' }]) {
      assert.throws(() => tx.query(sql), /not allowed through it/, JSON.stringify(sql));
    }
    assert.throws(() => tx.release(), /release\(\) is not allowed/);
    await tx.query('SAVEPOINT s1');
    await tx.query('ROLLBACK TO SAVEPOINT s1');
    assert.equal((await tx.query('SELECT 1 AS one')).rows[0].one, 1);
    assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), HELD, 'still held');
    assert.equal(await store.release(key, 'a'), true);
  });

  test('a key committed in progress (COMMIT on the raw connection) counts as held until it expires', async () => {
    const store = await postgresStore();
    const key = newKey();
    const acquired = performance.now();
    assert.equal(await store.acquire(key, lockOf('a', 2_000), 2_000), null);
    // Around the guard: the raw client under the proxy.
    const raw = store.transaction(key, 'a');
    await Object.getPrototypeOf(raw).query.call(raw, 'COMMIT');
    assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), HELD, 'inside its 2 s');
    assert.deepEqual(await store.acquire(key, lockOf('b2', 60_000, 'e'.repeat(64)), 60_000), HELD_FOR_OTHER, 'its fingerprint is in the row: another request\'s is told so');
    await sleep(acquired + 2_000 + 250 - performance.now());
    assert.equal(await store.acquire(key, lockOf('c'), 60_000), null, 'expired: taken over');
    assert.equal(await store.release(key, 'c'), true);
    assert.equal(await store.release(key, 'a'), true);
  });

  test('a second acquire waits at most lockWaitMs for the holder, then answers held', async () => {
    const store = await postgresStore({ lockWaitMs: 200 });
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const started = performance.now();
    assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), HELD);
    const waited = performance.now() - started;
    assert.ok(waited >= 190 && waited < 2_000, `waited ${waited} ms`);
    assert.equal(await store.release(key, 'a'), true);
  });

  test('a key held for another fingerprint is { state: "held", mismatch: true }; for the same one, plain held; other keys, scopes and tables are apart', async () => {
    const store = await postgresStore();
    const [mine, other] = ['a'.repeat(64), 'b'.repeat(64)];
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a', 60_000, mine), 60_000), null);
    assert.deepEqual(await store.acquire(key, lockOf('b', 60_000, other), 60_000), HELD_FOR_OTHER);
    assert.deepEqual(await store.acquire(key, lockOf('c', 60_000, mine), 60_000), HELD, 'the same request: waited for');
    assert.deepEqual(await store.acquire(key, lockOf('d', 60_000, other), 60_000), HELD_FOR_OTHER, 'asked again');
    // The locks are the key's: the same id in another scope, another key, another table.
    const apart = [`${SCOPE}:${key.slice(2)}`, newKey()];
    for (const [i, k] of apart.entries()) assert.equal(await store.acquire(k, lockOf(`e${i}`, 60_000, other), 60_000), null, k);
    const elsewhere = await postgresStore();
    assert.equal(await elsewhere.acquire(key, lockOf('f', 60_000, other), 60_000), null, 'another table');
    for (const [i, k] of apart.entries()) assert.equal(await store.release(k, `e${i}`), true);
    assert.equal(await elsewhere.release(key, 'f'), true);
    // Completed: the stored record, whose fingerprint the companion compares.
    const record = completedOf('{"charged":4200}', mine);
    assert.equal(await store.complete(key, 'a', record, 60_000), true);
    assert.deepEqual(await store.acquire(key, lockOf('g', 60_000, other), 60_000), record);
    assert.equal(await checkedOut(), 0, 'every probe gave its client back');
  });

  test('a holder that takes no advisory locks (an older version of the store) is plain held for any fingerprint: a doubt is waited for', async () => {
    const store = await postgresStore();
    const key = newKey();
    const raw = await pool.connect();
    try {
      await raw.query('BEGIN');
      await raw.query(`INSERT INTO "${store.table}" (scope, key, fingerprint, response, completed_at, expires_at) VALUES ('-', $1, $2, 'null'::jsonb, now(), now() + interval '1 minute')`, [key.slice(2), 'a'.repeat(64)]);
      assert.deepEqual(await store.acquire(key, lockOf('b', 60_000, 'b'.repeat(64)), 60_000), HELD);
      assert.deepEqual(await store.acquire(key, lockOf('c', 60_000, 'a'.repeat(64)), 60_000), HELD);
    } finally {
      await raw.query('ROLLBACK');
      raw.release();
    }
    assert.equal(await store.acquire(key, lockOf('d'), 60_000), null, 'free once it rolled back');
    assert.equal(await store.release(key, 'd'), true);
  });

  test('20 concurrent acquires of one key, two fingerprints: one holds it; its own fingerprint is never told mismatch', async () => {
    const store = await postgresStore({ lockWaitMs: 50 });
    const key = newKey();
    const fingerprints = Array.from({ length: 20 }, (_, i) => (i % 2 ? 'a' : 'b').repeat(64));
    const answers = await Promise.all(fingerprints.map((f, i) => store.acquire(key, lockOf(`t${i}`, 60_000, f), 60_000)));
    const winners = answers.flatMap((a, i) => (a === null ? [i] : []));
    assert.equal(winners.length, 1, 'exactly one holder');
    const [winner] = winners;
    answers.forEach((a, i) => {
      if (i === winner) return;
      if (fingerprints[i] === fingerprints[winner]) assert.deepEqual(a, HELD, `t${i}: the holder's request`);
      else assert.ok([HELD, HELD_FOR_OTHER].some((h) => JSON.stringify(h) === JSON.stringify(a)), `t${i}: ${JSON.stringify(a)}`);
    });
    // Asked again, one at a time: the other fingerprint is told mismatch.
    const loser = fingerprints.findIndex((f) => f !== fingerprints[winner]);
    assert.deepEqual(await store.acquire(key, lockOf('late', 60_000, fingerprints[loser]), 60_000), HELD_FOR_OTHER);
    assert.equal(await store.release(key, `t${winner}`), true);
    assert.equal(await checkedOut(), 0);
  });

  test('a waiting acquire gets the response when the holder completes within lockWaitMs, the key when it releases', async () => {
    const store = await postgresStore({ lockWaitMs: 5_000 });
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const waiting = store.acquire(key, lockOf('b'), 60_000);
    await sleep(150);
    const record = completedOf();
    assert.equal(await store.complete(key, 'a', record, 60_000), true);
    assert.deepEqual(await waiting, record);

    const other = newKey();
    assert.equal(await store.acquire(other, lockOf('c'), 60_000), null);
    const waiting2 = store.acquire(other, lockOf('d'), 60_000);
    await sleep(150);
    assert.equal(await store.release(other, 'c'), true);
    assert.equal(await waiting2, null, 'the waiter took the key');
    assert.equal(await store.complete(other, 'd', completedOf(), 60_000), true);
  });

  test('the holder\'s own statements are not limited by lockWaitMs', async () => {
    const store = await postgresStore({ lockWaitMs: 20 });
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    assert.equal((await tx.query('SHOW lock_timeout')).rows[0].lock_timeout, '0');
    assert.equal((await tx.query('SHOW idle_in_transaction_session_timeout')).rows[0].idle_in_transaction_session_timeout, '1min');
    assert.equal(await store.release(key, 'a'), true);
  });

  test('20 concurrent acquires of one key: one holds it, the rest are told it is held', async () => {
    const store = await postgresStore({ lockWaitMs: 50 });
    const key = newKey();
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => store.acquire(key, lockOf(`t${i}`), 60_000)));
    const winners = answers.flatMap((a, i) => (a === null ? [i] : []));
    assert.equal(winners.length, 1, 'exactly one holder');
    for (const a of answers) if (a !== null) assert.deepEqual(a, HELD);
    assert.equal(await store.complete(key, `t${winners[0]}`, completedOf(), 60_000), true);
    assert.equal(await checkedOut(), 0);
  });

  test('a holder whose connection is killed frees the key at once; its calls then fail softly', async () => {
    const store = await postgresStore();
    const book = await ledger(store);
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    await book.insert(tx, key, 4200);
    const pid = (await tx.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    // From another connection; the 5 s form waits until the backend is gone.
    assert.equal((await pool.query('SELECT pg_terminate_backend($1, 5000) AS done', [pid])).rows[0].done, true);
    assert.equal(await store.acquire(key, lockOf('b'), 60_000), null, 'free at once, no lock expiry to wait');
    assert.deepEqual(await book.rows(), [], 'its writes rolled back');
    await sleep(50); // the dead client's 'error' event (the process must not crash on it)
    assert.equal(await store.renew(key, 'a', lockOf('a'), 60_000), false);
    assert.equal(await store.complete(key, 'a', completedOf('lost'), 60_000), false);
    assert.equal(await store.release(key, 'a'), false, 'complete() already ended it');
    const record = completedOf('b');
    assert.equal(await store.complete(key, 'b', record, 60_000), true);
    assert.deepEqual(await store.acquire(key, lockOf('c'), 60_000), record);
    assert.equal(await checkedOut(), 0, 'the dead client was dropped, not leaked');
  });

  test('a holder killed while another acquire waits for it: the waiter gets the key', async () => {
    const store = await postgresStore({ lockWaitMs: 5_000 });
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const pid = (await store.transaction(key, 'a').query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const waiting = store.acquire(key, lockOf('b'), 60_000);
    await sleep(100);
    await pool.query('SELECT pg_terminate_backend($1, 5000)', [pid]);
    assert.equal(await waiting, null);
    assert.equal(await store.release(key, 'a'), true, 'its transaction is gone: released');
    assert.equal(await store.complete(key, 'b', completedOf(), 60_000), true);
    assert.equal(await checkedOut(), 0);
  });

  test('a holder idle for lockTimeoutMs loses its transaction; the process is not hurt', async () => {
    const store = await postgresStore();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a', 200), 200), null);
    await sleep(1_500); // its 200 ms and a margin of seconds for PostgreSQL to end it
    assert.equal(await checkedOut(), 0, 'the timed-out client was given back (destroyed) at once');
    assert.equal(await store.acquire(key, lockOf('b'), 60_000), null);
    assert.equal(await store.release(key, 'a'), true);
    assert.equal(await store.release(key, 'b'), true);
  });

  test('only completed rows are committed: a key in progress has no row to see', async () => {
    const store = await postgresStore();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const t = `"${store.table}"`;
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${t}`)).rows[0].n, 0);
    const record = completedOf('row');
    assert.equal(await store.complete(key, 'a', record, 60_000), true);
    const { rows } = await pool.query(
      `SELECT scope, key, fingerprint, response, completed_at, extract(epoch FROM expires_at - now())::float8 AS ttl FROM ${t}`,
    );
    assert.equal(rows.length, 1);
    assert.equal(rows[0].scope, '-');
    assert.equal(rows[0].key, key.slice(2));
    assert.equal(rows[0].fingerprint, record.fingerprint);
    assert.deepEqual(rows[0].response, record.response);
    assert.equal(rows[0].completed_at.getTime(), record.completedAt);
    assert.ok(rows[0].ttl > 55 && rows[0].ttl <= 60, `ttl ${rows[0].ttl} s`);
  });

  test('expired rows are cleaned up: cleanup() now, and acquire() now and then in the background', async () => {
    const store = await postgresStore();
    const t = `"${store.table}"`;
    const insert = (n, ttl) =>
      pool.query(
        `INSERT INTO ${t} SELECT '-', $2 || g, 'f', '{}'::jsonb, now(), now() + $3::interval FROM generate_series(1, $1) g`,
        [n, crypto.randomUUID(), ttl],
      );
    await insert(5, '-1 minute');
    await insert(3, '1 hour');
    assert.equal(await store.cleanup(), 5);
    assert.equal(await store.cleanup(), 0);
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${t}`)).rows[0].n, 3);

    // A new store cleans up on its first acquire, without waiting for it.
    await insert(4, '-1 second');
    const fresh = new PostgresStore({ pool, table: store.table });
    const key = newKey();
    assert.equal(await fresh.acquire(key, lockOf('a'), 60_000), null);
    let left;
    for (let i = 0; i < 100; i++) {
      left = (await pool.query(`SELECT count(*)::int AS n FROM ${t} WHERE expires_at < now()`)).rows[0].n;
      if (left === 0) break;
      await sleep(20);
    }
    assert.equal(left, 0);
    // Not again within the minute.
    await insert(2, '-1 second');
    const key2 = newKey();
    assert.equal(await fresh.acquire(key2, lockOf('b'), 60_000), null);
    await sleep(200);
    assert.equal((await pool.query(`SELECT count(*)::int AS n FROM ${t} WHERE expires_at < now()`)).rows[0].n, 2);
    assert.equal(await fresh.release(key, 'a'), true);
    assert.equal(await fresh.release(key2, 'b'), true);
  });

  test('cleanup() skips an expired row that an acquire is taking over (no wait on its lock)', async () => {
    const store = await postgresStore();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    assert.equal(await store.complete(key, 'a', completedOf(), 1), true);
    await sleep(20);
    assert.equal(await store.acquire(key, lockOf('b'), 60_000), null, 'taken over: its row is locked');
    const started = performance.now();
    assert.equal(await store.cleanup(), 0);
    assert.ok(performance.now() - started < 1_000);
    const record = completedOf('b');
    assert.equal(await store.complete(key, 'b', record, 60_000), true);
    assert.deepEqual(await store.acquire(key, lockOf('c'), 60_000), record);
  });

  test('migrate() is idempotent, and concurrent migrate() calls take turns', async () => {
    const table = `idem_${crypto.randomUUID().replaceAll('-', '')}`;
    tables.push(table);
    const stores = Array.from({ length: 5 }, () => new PostgresStore({ pool, table }));
    await Promise.all(stores.map((s) => s.migrate()));
    await stores[0].migrate();
    const { rows } = await pool.query('SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname', [table]);
    assert.deepEqual(rows.map((r) => r.indexname), [`${table}_expires_at_idx`, `${table}_pkey`]);
  });

  test('a schema-qualified table, and a table name that needs quoting (case, keyword)', async () => {
    const schema = `s_${crypto.randomUUID().replaceAll('-', '')}`;
    await pool.query(`CREATE SCHEMA "${schema}"`);
    try {
      for (const table of [`${schema}.idempotency_keys`, `${schema}.Order`]) {
        const store = await postgresStore({ table });
        assert.equal(store.table, table);
        const key = newKey(SCOPE);
        assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
        const record = completedOf();
        assert.equal(await store.complete(key, 'a', record, 60_000), true);
        assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), record);
        const [s, name] = table.split('.');
        const n = await pool.query(`SELECT count(*)::int AS n FROM "${s}"."${name}" WHERE scope = $1`, [SCOPE]);
        assert.equal(n.rows[0].n, 1);
      }
    } finally {
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });

  test('schema(): the SQL that migrate() runs', () => {
    assert.equal(
      PostgresStore.schema(),
      `CREATE TABLE IF NOT EXISTS "idempotency_keys" (
  scope text NOT NULL,
  key text NOT NULL,
  fingerprint text NOT NULL,
  response jsonb NOT NULL,
  completed_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS "idempotency_keys_expires_at_idx" ON "idempotency_keys" (expires_at);
`,
    );
    assert.match(PostgresStore.schema('app.idem'), /^CREATE TABLE IF NOT EXISTS "app"\."idem" \(/);
    assert.match(PostgresStore.schema('app.idem'), /CREATE INDEX IF NOT EXISTS "idem_expires_at_idx" ON "app"\."idem" \(expires_at\);/);
    assert.throws(() => PostgresStore.schema('idem; DROP TABLE x'), {
      name: 'TypeError',
      message: /^PostgresStore\.schema: invalid option "table": got "idem; DROP TABLE x"; expected an SQL table name/,
    });
  });

  test('every client goes back to the pool', async () => {
    assert.equal(await checkedOut(), 0);
  });
});

// ---------------------------------------------------------------------------------------------
// Options: TypeErrors naming the option (no server needed).

test('PostgresStore: bad options are TypeErrors naming the option and the value', () => {
  const fakePool = { connect: async () => ({}), query: async () => ({ rows: [], rowCount: 0 }) };
  const error = (message) => ({ name: 'TypeError', message });
  assert.throws(() => new PostgresStore(), error('PostgresStore: invalid option "options": got undefined; expected an object { pool, table?, lockWaitMs?, runRetentionMs? }'));
  assert.throws(() => new PostgresStore({}), error(/^PostgresStore: invalid option "pool": got undefined; expected a node-postgres Pool/));
  assert.throws(() => new PostgresStore({ pool: 'postgres://x' }), error(/invalid option "pool": got "postgres:\/\/x"/));
  assert.throws(() => new PostgresStore({ pool: { query() {} } }), error(/invalid option "pool": got \[object Object\]/));
  // A pg Client (never connected: nothing is sent) is not a Pool.
  assert.throws(() => new PostgresStore({ pool: new pg.Client({ connectionString: 'postgres://127.0.0.1:1/x' }) }), error(/^PostgresStore: invalid option "pool": .*expected a node-postgres Pool/));
  for (const table of ['', '1abc', 'a.b.c', 'a..b', '.a', 'idem keys', 'idem;drop', 'idem"x', 'é', 'a'.repeat(64), `s.${'a'.repeat(64)}`, 7, null]) {
    assert.throws(() => new PostgresStore({ pool: fakePool, table }), error(/^PostgresStore: invalid option "table": got .*; expected an SQL table name/), String(table));
  }
  for (const table of ['a', '_x9', 'Idem_Keys', 'app.idem', 'a'.repeat(63), `${'s'.repeat(63)}.${'t'.repeat(63)}`]) {
    assert.equal(new PostgresStore({ pool: fakePool, table }).table, table);
  }
  for (const lockWaitMs of [0, -1, 1.5, '50', Infinity, NaN, 2 ** 31, null]) {
    assert.throws(() => new PostgresStore({ pool: fakePool, lockWaitMs }), error(/^PostgresStore: invalid option "lockWaitMs": got .*; expected an integer number of milliseconds from 1 to 2147483647$/), String(lockWaitMs));
  }
  assert.throws(() => new PostgresStore({ pool: fakePool, tabel: 'x' }), error('PostgresStore: unknown option "tabel" (did you mean "table"?)'));
  assert.throws(() => new PostgresStore({ pool: fakePool, lockWait: 5 }), error('PostgresStore: unknown option "lockWait" (did you mean "lockWaitMs"?)'));
  assert.throws(() => new PostgresStore({ pool: fakePool, client: {} }), error('PostgresStore: unknown option "client"; the options are pool, table, lockWaitMs, runRetentionMs'));
  // Defaults; an option set to undefined is absent.
  const store = new PostgresStore({ pool: fakePool, table: undefined, lockWaitMs: undefined, other: undefined });
  assert.equal(store.table, 'idempotency_keys');
  assert.equal(store.transactional, true);
});

test('PostgresStore: a key without a scope, or a bad lockTimeoutMs, is refused', async () => {
  const fakePool = { connect: async () => assert.fail('must not connect'), query: async () => ({ rows: [], rowCount: 0 }) };
  const store = new PostgresStore({ pool: fakePool });
  await assert.rejects(store.acquire('no-scope', lockOf('a'), 1000), { name: 'TypeError', message: /the key must be "<scope>:<idempotency key>"; got "no-scope"/ });
  await assert.rejects(store.acquire('-:k', lockOf('a'), 0), { name: 'TypeError', message: /lockTimeoutMs must be a number of milliseconds above 0; got 0/ });
});

// ---------------------------------------------------------------------------------------------
// RedisStore's renew, as Redis sees it: the record and its PX.

test('RedisStore: renew rewrites the holder\'s lock with a new PX in Redis; a wrong token, a free key or a completed record are refused and left as they were', { skip: redisSkip }, async () => {
  const prefix = `idem:test-${crypto.randomUUID()}:`;
  const store = new RedisStore({ client: redis, prefix });
  const key = newKey();
  const redisKey = prefix + key;
  const first = lockOf('owner', 5_000);
  assert.equal(await store.acquire(key, first, 5_000), null);
  assert.deepEqual(JSON.parse(await redis.get(redisKey)), first);
  const ttl0 = await redis.pTTL(redisKey);
  assert.ok(ttl0 > 0 && ttl0 <= 5_000, `PTTL after acquire: ${ttl0}`);

  // A wrong token: refused, and neither the value nor the PX changed.
  assert.equal(await store.renew(key, 'intruder', lockOf('intruder', 600_000), 600_000), false);
  assert.deepEqual(JSON.parse(await redis.get(redisKey)), first, 'the lock is the owner\'s still');
  const ttl1 = await redis.pTTL(redisKey);
  assert.ok(ttl1 > 0 && ttl1 <= 5_000, `PTTL after a refused renew: ${ttl1} (not extended)`);

  // The owner: the record is the new lock, its PX the new lockTimeoutMs (far above the first).
  const renewed = lockOf('owner', 600_000);
  assert.equal(await store.renew(key, 'owner', renewed, 600_000), true);
  assert.deepEqual(JSON.parse(await redis.get(redisKey)), renewed);
  const ttl2 = await redis.pTTL(redisKey);
  assert.ok(ttl2 > 590_000 && ttl2 <= 600_000, `PTTL after the renew: ${ttl2} (600 s asked)`);

  // A free key: refused, and nothing is created there.
  const free = newKey();
  assert.equal(await store.renew(free, 'owner', lockOf('owner'), 60_000), false);
  assert.equal(await redis.exists(prefix + free), 0, 'no record made for a free key');

  // A completed record is not a lock: its owner's renew is refused, the record and its TTL kept.
  const record = completedOf();
  assert.equal(await store.complete(key, 'owner', record, 30_000), true);
  assert.equal(await store.renew(key, 'owner', lockOf('owner', 600_000), 600_000), false);
  assert.deepEqual(JSON.parse(await redis.get(redisKey)), record);
  const ttl3 = await redis.pTTL(redisKey);
  assert.ok(ttl3 > 0 && ttl3 <= 30_000, `PTTL of the completed record: ${ttl3} (its ttl, not the renew's)`);
});

test('MemoryStore: renew refuses a key nobody holds, and makes no record there', async () => {
  const store = new MemoryStore();
  assert.equal(await store.renew('-:k', 't', lockOf('t'), 1000), false);
  assert.equal(await store.acquire('-:k', lockOf('u'), 1000), null, 'the key is still free');
});
