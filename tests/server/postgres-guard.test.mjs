// PostgresStore's guard of ctx.tx against a real PostgreSQL (DATABASE_URL, started by
// scripts/test.sh): transaction control refused in every spelling (an SQL lexer, not a regex),
// ctx.tx unusable once its handler settled, what gets past the guard anyway caught by complete()
// (txid_current()), and an expiry index of its own for every table, long names included.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { inspect } from 'node:util';
import pg from 'pg';
import { idempotency, PostgresStore } from 'retry-fetch/server';
import { sleep, deferred, problemOf } from './support.mjs';
import { DATABASE_URL, needs } from '../support/services.mjs';

const skip = needs('DATABASE_URL');

const pools = [];
const tables = [];
let pool;

function newPool(max = 20) {
  const p = new pg.Pool({ connectionString: DATABASE_URL, max });
  p.on('error', () => {}); // an idle client whose backend was terminated: the pool drops it
  pools.push(p);
  return p;
}

before(() => {
  if (!skip) pool = newPool();
});

after(async () => {
  if (!pool) return;
  for (const name of tables) await pool.query(`DROP TABLE IF EXISTS "${name}"`);
  await Promise.all(pools.map((p) => p.end()));
});

const fresh = (kind) => {
  const name = `${kind}_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(name);
  return name;
};

async function postgresStore(options = {}) {
  const store = new PostgresStore({ pool, table: fresh('guard'), ...options });
  await store.migrate();
  return store;
}

/** A table for the handler's own writes: `charges (key, note)`. */
async function chargesTable() {
  const name = fresh('charges');
  await pool.query(`CREATE TABLE "${name}" (id serial PRIMARY KEY, key text NOT NULL, note text NOT NULL)`);
  return {
    insert: (client, key, note) => client.query(`INSERT INTO "${name}" (key, note) VALUES ($1, $2)`, [key, note]),
    notes: async () => (await pool.query(`SELECT note FROM "${name}" ORDER BY id`)).rows.map((r) => r.note),
  };
}

const newKey = () => `-:${crypto.randomUUID()}`;
const lockOf = (token) => ({ state: 'in-progress', token, fingerprint: 'f'.repeat(64), lockExpiresAt: Date.now() + 60_000 });
const answerOf = (body = 'ok') => ({
  state: 'completed',
  fingerprint: 'f'.repeat(64),
  response: { status: 201, statusText: '', headers: [['content-type', 'text/plain']], body: Buffer.from(body).toString('base64') },
  completedAt: Date.now(),
});

/** A keyed POST for the fetch-style handler (unscoped: identity false in these tests). */
const post = (key, body = '{}') =>
  new Request('http://api.test/payments', { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body });

/** Run `sql` on the raw client under ctx.tx, around the guard (as a library holding the bare client could). */
const aroundGuard = (tx, sql) => Object.getPrototypeOf(tx).query.call(tx, sql);

/** Collect what console.error prints while `fn` runs. */
async function capturingConsoleError(fn) {
  const printed = [];
  const real = console.error;
  console.error = (...args) => printed.push(args.map((a) => (typeof a === 'string' ? a : inspect(a))).join(' '));
  try {
    return { result: await fn(), printed };
  } finally {
    console.error = real;
  }
}

/** Is the backend `pid` still connected? (Given a second to go.) */
async function backendAlive(pid) {
  for (let i = 0; i < 50; i++) {
    const { rowCount } = await pool.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid]);
    if (rowCount === 0) return false;
    await sleep(20);
  }
  return true;
}

const SETTLED = 'PostgresStore: ctx.tx was used after its handler settled: the transaction that held the idempotency key is being committed or rolled back; run statements only while the handler runs';

const REFUSED = [
  'COMMIT',
  'commit',
  ' begin',
  'BEGIN WORK',
  'BEGIN ISOLATION LEVEL SERIALIZABLE',
  'START TRANSACTION',
  'start  /* x */ transaction',
  'END',
  'end transaction',
  'ROLLBACK',
  'rollback work',
  'ROLLBACK AND CHAIN',
  'COMMIT AND CHAIN',
  'ABORT',
  "PREPARE TRANSACTION 'gid'",
  "COMMIT PREPARED 'gid'",
  "ROLLBACK PREPARED 'gid'",
  '/* c */ COMMIT',
  '--x\nCOMMIT',
  '-- a comment\r\nROLLBACK',
  'SELECT 1; /* a /* nested */ b */ COMMIT',
  '/* a /* nested; */ still a comment */ COMMIT',
  'select $$;$$; commit',
  'SELECT $tag$ $$ ; $tag$; COMMIT',
  `SELECT $${'t'.repeat(300)}$ ' $${'t'.repeat(300)}$; COMMIT; SELECT '`,
  "SELECT 'it''s'; COMMIT",
  "SELECT E'\\'; x'; COMMIT",
  'SELECT "a"";b"; COMMIT',
  'SELECT 1;COMMIT;',
  'SELECT 1;\n\n  Commit  ;',
  // Read with standard_conforming_strings off (a session setting), this is SELECT 'a\'; SELECT ',
  // then a COMMIT: refused whichever way the session reads backslashes.
  "SELECT 'a\\'; SELECT '; COMMIT; --'",
  { text: 'COMMIT' },
  { text: 'SELECT 1; ROLLBACK', values: undefined },
];

const ALLOWED = [
  'SAVEPOINT s',
  'ROLLBACK TO SAVEPOINT s',
  'rollback to s',
  'ROLLBACK WORK TO SAVEPOINT s',
  'ROLLBACK TRANSACTION TO s',
  "SELECT 'COMMIT'",
  'SELECT 1 AS "commit"',
  'SELECT 1 AS "; COMMIT"',
  "SELECT E'\\'; COMMIT'",
  "SELECT 'x'; SELECT 'y'",
  'SELECT $$; COMMIT $$',
  'SELECT $q$ $$; COMMIT; $$ $q$',
  `SELECT $${'t'.repeat(300)}$ '; COMMIT $${'t'.repeat(300)}$`,
  'SELECT a$b$c FROM (SELECT 1 AS a$b$c) t; SELECT 1',
  'SELECT 1 -- ; COMMIT',
  'SELECT /* ; COMMIT */ 1',
  'SELECT 1 AS begin_at',
  'SELECT 1 AS ended',
  'DO $$ BEGIN PERFORM 1; END $$',
  { text: 'SELECT $1::text AS v', values: ['COMMIT'] },
];

if (skip) {
  test('PostgresStore guard', { skip }, () => {});
} else {
  const t = (name, fn) => test(`PostgresStore guard: ${name}`, { timeout: 60_000 }, fn);

  t('transaction control is refused in every spelling; SAVEPOINT, strings, identifiers and comments that only mention it are not', async () => {
    const store = await postgresStore();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    for (const sql of REFUSED) {
      assert.throws(() => tx.query(sql), { name: 'TypeError', message: /not allowed through it/ }, `refused: ${JSON.stringify(sql)}`);
    }
    // Submittables: a pg.Query, and a pg-cursor-like object (text + submit).
    assert.throws(() => tx.query(new pg.Query('COMMIT')), /not allowed through it/, 'pg.Query');
    assert.throws(() => tx.query({ text: '/**/ROLLBACK', submit() {}, handleError() {} }), /not allowed through it/, 'a cursor');
    assert.throws(() => tx.release(), /release\(\) is not allowed/);
    for (const sql of ALLOWED) {
      await assert.doesNotReject(async () => tx.query(sql), `allowed: ${JSON.stringify(sql)}`);
    }
    // Nothing ended the transaction: it still holds the key, and completes.
    assert.equal((await tx.query('SELECT 1 AS one')).rows[0].one, 1);
    assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), { state: 'held' });
    assert.equal(await store.complete(key, 'a', answerOf(), 60_000), true);
    assert.equal((await store.acquire(key, lockOf('c'), 60_000)).state, 'completed');
  });

  t('after closeTransaction() every use of ctx.tx throws; complete() still commits', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    await charges.insert(tx, key, 'in the handler');
    const takenBefore = tx.query;
    const onBefore = tx.on;
    store.closeTransaction(key, 'a');
    assert.throws(() => tx.query('SELECT 1'), { name: 'TypeError', message: SETTLED });
    assert.throws(() => takenBefore('SELECT 1'), { name: 'TypeError', message: SETTLED }, 'a method taken before');
    assert.throws(() => onBefore('notice', () => {}), { name: 'TypeError', message: SETTLED });
    assert.throws(() => tx.release(), { name: 'TypeError', message: SETTLED });
    assert.throws(() => tx.connection, { name: 'TypeError', message: SETTLED });
    assert.throws(() => tx.on('error', () => {}), { name: 'TypeError', message: SETTLED });
    assert.throws(() => {
      tx.foo = 1;
    }, { name: 'TypeError', message: SETTLED });
    // Harmless inspection still works: awaiting it, logging it.
    assert.equal(await Promise.resolve(tx), tx);
    assert.equal(typeof inspect(tx), 'string');
    assert.equal(store.transaction(key, 'a'), tx, 'the same closed object');
    const record = answerOf('closed');
    assert.equal(await store.complete(key, 'a', record, 60_000), true, 'complete() uses the client itself');
    assert.deepEqual(await charges.notes(), ['in the handler']);
    assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), record);
  });

  t('without closeTransaction() (an older companion), complete() and release() close ctx.tx', async () => {
    const store = await postgresStore();
    const k1 = newKey();
    assert.equal(await store.acquire(k1, lockOf('a'), 60_000), null);
    const tx1 = store.transaction(k1, 'a');
    assert.equal(await store.complete(k1, 'a', answerOf(), 60_000), true);
    assert.throws(() => tx1.query('SELECT 1'), { name: 'TypeError', message: SETTLED });
    const k2 = newKey();
    assert.equal(await store.acquire(k2, lockOf('b'), 60_000), null);
    const tx2 = store.transaction(k2, 'b');
    assert.equal(await store.release(k2, 'b'), true);
    assert.throws(() => tx2.query('SELECT 1'), { name: 'TypeError', message: SETTLED });
  });

  t('a write through ctx.tx after the handler returned throws, and never lands in the next request\'s transaction', async () => {
    // One connection: the next request's transaction runs on the very client the first one held.
    const store = new PostgresStore({ pool: newPool(1), table: fresh('guard') });
    await store.migrate();
    const charges = await chargesTable();
    const late = deferred();
    let lateError;
    const secondRunning = deferred();
    const handler = idempotency(async (request, ctx) => {
      const { name } = await request.json();
      await charges.insert(ctx.tx, ctx.key, name);
      if (name === 'first') {
        const tx = ctx.tx;
        setTimeout(async () => {
          try {
            await charges.insert(tx, 'late', 'late write of first');
          } catch (error) {
            lateError = error;
          }
          late.resolve();
        }, 150);
      } else {
        secondRunning.resolve();
        await late.promise; // the late write happens while this transaction is open
        await sleep(50);
      }
      return Response.json({ name }, { status: 201 });
    }, { store, identity: false });
    assert.equal((await handler(post('first-key', JSON.stringify({ name: 'first' })))).status, 201);
    const second = handler(post('second-key', JSON.stringify({ name: 'second' })));
    await secondRunning.promise;
    assert.equal((await second).status, 201);
    await late.promise;
    assert.ok(lateError instanceof TypeError, `the late write threw a TypeError: ${lateError}`);
    assert.equal(lateError.message, SETTLED);
    assert.deepEqual(await charges.notes(), ['first', 'second'], 'nothing of the late write was committed');
  });

  t('a COMMIT that gets past the guard: complete() detects it, stores the answer into the committed row, says so, destroys the client; the retry replays', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    let runs = 0;
    let pid;
    const handler = idempotency(async (request, ctx) => {
      runs++;
      pid = (await ctx.tx.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      await charges.insert(ctx.tx, ctx.key, 'charge');
      await aroundGuard(ctx.tx, 'COMMIT');
      return Response.json({ charged: true }, { status: 201 });
    }, { store, identity: false });
    const { result: res, printed } = await capturingConsoleError(() => handler(post('committed-early')));
    assert.equal(res.status, 201);
    assert.deepEqual(await res.json(), { charged: true });
    const said = printed.filter((line) => line.startsWith('retry-fetch/server: PostgresStore:'));
    assert.equal(said.length, 1, `printed: ${printed.join('\n')}`);
    assert.match(said[0], /ended through ctx\.tx/);
    assert.match(said[0], /after the fact/);
    assert.equal(await backendAlive(pid), false, 'the client was destroyed, not given back to the pool');
    const replay = await handler(post('committed-early'));
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await replay.json(), { charged: true });
    assert.equal(runs, 1, 'never run twice');
    assert.deepEqual(await charges.notes(), ['charge']);
  });

  t('a ROLLBACK that gets past the guard: complete() rejects (503), nothing is stored, the client is destroyed, the retry runs', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    let runs = 0;
    let pid;
    const storeErrors = [];
    const handler = idempotency(async (request, ctx) => {
      const run = ++runs;
      pid = (await ctx.tx.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      await charges.insert(ctx.tx, ctx.key, `run ${run}`);
      if (run === 1) await aroundGuard(ctx.tx, 'ROLLBACK');
      return Response.json({ run }, { status: 201 });
    }, { store, identity: false, onStoreError: (error, operation) => storeErrors.push([operation, error.message]) });
    await problemOf(await handler(post('rolled-back')), 503, 'idempotency-store-unavailable', { retryAfter: true });
    assert.equal(storeErrors.length, 1);
    assert.equal(storeErrors[0][0], 'complete');
    assert.match(storeErrors[0][1], /ended through ctx\.tx.*ROLLBACK.*nothing is stored/);
    assert.equal(await backendAlive(pid), false, 'the client was destroyed');
    assert.deepEqual(await charges.notes(), [], 'the rolled-back write is gone');
    const retry = await handler(post('rolled-back'));
    assert.equal(retry.status, 201);
    assert.deepEqual(await retry.json(), { run: 2 });
    assert.deepEqual(await charges.notes(), ['run 2']);
  });

  t('the txid check on the store directly: COMMIT; BEGIN around the guard still counts as ended', async () => {
    const store = await postgresStore();
    const charges = await chargesTable();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    const pid = (await tx.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    await charges.insert(tx, key, 'effect');
    await aroundGuard(tx, 'COMMIT; BEGIN');
    await charges.insert(tx, key, 'in a transaction of its own, never committed');
    const record = answerOf('after the fact');
    const { result, printed } = await capturingConsoleError(() => store.complete(key, 'a', record, 60_000));
    assert.equal(result, true);
    assert.equal(printed.filter((line) => line.startsWith('retry-fetch/server: PostgresStore:')).length, 1);
    assert.deepEqual(await store.acquire(key, lockOf('b'), 60_000), record, 'the answer is stored and replays');
    assert.deepEqual(await charges.notes(), ['effect'], 'the stray transaction was rolled back');
    assert.equal(await backendAlive(pid), false, 'the client was destroyed');
  });

  t('a key row deleted inside its own transaction is not mistaken for an ended transaction: rolled back, the client kept', async () => {
    const store = await postgresStore();
    const key = newKey();
    assert.equal(await store.acquire(key, lockOf('a'), 60_000), null);
    const tx = store.transaction(key, 'a');
    const pid = (await tx.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    await tx.query(`DELETE FROM "${store.table}" WHERE scope = '-'`);
    const { result, printed } = await capturingConsoleError(() =>
      store.complete(key, 'a', answerOf(), 60_000).then(
        () => 'resolved',
        (error) => error.message,
      ),
    );
    assert.match(result, /missing from its own transaction/);
    assert.deepEqual(printed, []);
    assert.equal(await backendAlive(pid), true, 'a sound client goes back to the pool');
    assert.equal(await store.acquire(key, lockOf('b'), 60_000), null, 'the key is free');
    assert.equal(await store.release(key, 'b'), true);
  });

  t('every table gets an expiry index of its own, long names included', async () => {
    const common = `guard_long_${'x'.repeat(39)}`; // 50 characters
    assert.equal(common.length, 50);
    const a = `${common}${'a'.repeat(10)}`;
    const b = `${common}${'b'.repeat(10)}`;
    const short = fresh('guard_short');
    tables.push(a, b);
    for (const table of [a, b, short]) await new PostgresStore({ pool, table }).migrate();
    const { rows } = await pool.query(
      `SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY($1) AND indexname LIKE '%expires_at_idx'`,
      [[a, b, short]],
    );
    const byTable = Object.fromEntries(rows.map((r) => [r.tablename, r]));
    assert.deepEqual(Object.keys(byTable).sort(), [a, b, short].sort(), 'one expiry index per table');
    assert.notEqual(byTable[a].indexname, byTable[b].indexname);
    for (const table of [a, b]) {
      const hash = createHash('sha256').update(table).digest('hex').slice(0, 8);
      assert.equal(byTable[table].indexname, `${table.slice(0, 39)}_${hash}_expires_at_idx`);
      assert.ok(byTable[table].indexname.length <= 63);
      assert.match(byTable[table].indexdef, /\(expires_at\)/);
      assert.ok(PostgresStore.schema(table).includes(`"${byTable[table].indexname}"`));
    }
    assert.equal(byTable[short].indexname, `${short}_expires_at_idx`, 'a name that fits is unchanged');
  });
}
