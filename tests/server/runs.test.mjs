// The run history of every store (store.d.ts: `recordRun(run)`, `runs(key)`, `RunRecord`):
// MemoryStore, RedisStore against a real redis-server (REDIS_URL) and PostgresStore
// against a real PostgreSQL (DATABASE_URL); scripts/test.sh server starts both and
// passes their URLs. Unlike the older suites, a store whose URL is missing FAILS here (its
// `before` hook throws), so a server stage that lost a service cannot pass in silence.
//
// Each store keeps and returns records as given, bounded: MemoryStore a ring of the last
// `maxRunRecords`; RedisStore a stream per key capped at 2000 entries (1000 runs), expiring
// `runRetentionMs` after its last write; PostgresStore a table `<table>_runs` whose runs older than
// `runRetentionMs` are deleted by recordRun(), at most once a minute per store object.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import pg from 'pg';
import { createClient } from 'redis';
import { MemoryStore, RedisStore, PostgresStore, idempotent } from 'retry-fetch/server';
import { sleep } from './support.mjs';
import { REDIS_URL, DATABASE_URL } from '../support/services.mjs';

/** Thrown by a suite's `before` hook without its service: the suite fails, it is not skipped. */
function missing(name, service) {
  return new Error(`${name} is not set: run \`bash scripts/test.sh server\`, which starts ${service} and sets it (this suite fails rather than skip without it)`);
}

const SCOPE_A = 'ab'.repeat(32); // what a hashed identity looks like: 64 hex digits
const SCOPE_B = 'cd'.repeat(32);
const T0 = Date.now() - 60_000; // a minute ago: well inside the default retention (7 days)
const newKey = () => `order-${crypto.randomUUID()}`;

/** A RunRecord of `key` that started `at` ms after T0, still running unless told otherwise. */
function runOf(key, at, extra = {}) {
  return { id: crypto.randomUUID(), key, scope: '-', instance: 'host-a:101', startedAt: T0 + at, endedAt: null, outcome: null, ...extra };
}

/** The run `run` ended `ms` later with `outcome` (and `detail`, if given). */
function ended(run, outcome, ms = 25, detail) {
  const done = { ...run, endedAt: run.startedAt + ms, outcome };
  if (detail !== undefined) done.detail = detail;
  return done;
}

/** Poll `read()` until `ok(value)` (at most `ms`), then return the last value. */
async function until(read, ok, ms = 5_000) {
  const deadline = Date.now() + ms;
  let value = await read();
  while (!ok(value) && Date.now() < deadline) {
    await sleep(25);
    value = await read();
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// What every store does, through recordRun() and runs() only.

function historyProtocol(make) {
  test('a run recorded at its start, then again (same id) when it ends: one record, with the end', async () => {
    const store = await make();
    const key = newKey();
    const started = runOf(key, 0);
    await store.recordRun(started);
    assert.deepEqual(await store.runs(key), [started], 'running: endedAt and outcome null');
    const done = ended(started, 'stored');
    await store.recordRun(done);
    assert.deepEqual(await store.runs(key), [done]);
    const failed = ended(started, 'failed', 40, 'TypeError: card declined');
    await store.recordRun(failed);
    assert.deepEqual(await store.runs(key), [failed], 'the last write wins, detail included');
    const again = ended(started, 'rolled-back', 50);
    await store.recordRun(again);
    assert.deepEqual(await store.runs(key), [again], 'a later write without detail has none');
  });

  test('two keys are kept apart; a key without runs has none', async () => {
    const store = await make();
    const [k1, k2] = [newKey(), newKey()];
    const a = ended(runOf(k1, 0), 'stored');
    const b = runOf(k2, 1);
    const c = ended(runOf(k1, 2, { id: `replay-${crypto.randomUUID()}` }), 'replayed', 1);
    for (const run of [a, b, c]) await store.recordRun(run);
    assert.deepEqual(await store.runs(k1), [a, c]);
    assert.deepEqual(await store.runs(k2), [b]);
    assert.deepEqual(await store.runs(newKey()), []);
    assert.deepEqual(await store.runs(`-:${k1}`), [], 'runs() takes the key unscoped');
  });

  test('the runs of every scope of a key are returned together', async () => {
    const store = await make();
    const key = newKey();
    const unscoped = ended(runOf(key, 0), 'stored');
    const a = ended(runOf(key, 1, { scope: SCOPE_A, instance: 'host-b:202' }), 'failed', 10, 'boom');
    const b = runOf(key, 2, { scope: SCOPE_B });
    for (const run of [b, unscoped, a]) await store.recordRun(run);
    const runs = await store.runs(key);
    assert.deepEqual(runs, [unscoped, a, b]);
    assert.deepEqual(runs.map((r) => r.scope), ['-', SCOPE_A, SCOPE_B]);
  });

  test('oldest startedAt first, whatever the order they were recorded in (ties: by id)', async () => {
    const store = await make();
    const key = newKey();
    const at = [30, 10, 20, 0, 40];
    const runs = at.map((ms) => runOf(key, ms));
    for (const run of runs) await store.recordRun(run);
    const tie = [runOf(key, 25, { id: 'tie-b' }), runOf(key, 25, { id: 'tie-a' })];
    for (const run of tie) await store.recordRun(run);
    const got = await store.runs(key);
    assert.deepEqual(got.map((r) => r.startedAt - T0), [0, 10, 20, 25, 25, 30, 40]);
    assert.deepEqual(got.slice(3, 5).map((r) => r.id), ['tie-a', 'tie-b']);
    // An update that moves the start moves the run.
    await store.recordRun({ ...runs[0], startedAt: T0 + 50 }); // was 30
    assert.deepEqual((await store.runs(key)).map((r) => r.startedAt - T0), [0, 10, 20, 25, 25, 40, 50]);
  });

  test('a run keeps exactly the RunRecord fields: absent endedAt/outcome are null, extra fields and a null detail are dropped', async () => {
    const store = await make();
    const key = newKey();
    const { endedAt, outcome, ...bare } = runOf(key, 0);
    assert.equal(endedAt, null);
    assert.equal(outcome, null);
    await store.recordRun({ ...bare, detail: null, extra: 'not kept' });
    assert.deepEqual(await store.runs(key), [{ ...bare, endedAt: null, outcome: null }]);
    const unicode = ended(runOf(key, 1), 'failed', 5, 'déclinée — 💳 "quoted" \\ back');
    await store.recordRun(unicode);
    assert.deepEqual((await store.runs(key))[1], unicode);
  });

  test('a malformed run is a TypeError naming the field; nothing is stored', async () => {
    const store = await make();
    const key = newKey();
    const good = runOf(key, 0);
    const cases = [
      [null, /the run must be an object/],
      ['run', /the run must be an object/],
      [{ ...good, id: 7 }, /the run's "id" must be a non-empty string; got 7/],
      [{ ...good, id: '' }, /"id" must be a non-empty string/],
      [{ ...good, key: undefined }, /"key" must be a non-empty string; got undefined/],
      [{ ...good, scope: null }, /"scope" must be a non-empty string/],
      [{ ...good, instance: 1 }, /"instance" must be a non-empty string/],
      [{ ...good, startedAt: '2024-01-01' }, /"startedAt" must be a number/],
      [{ ...good, startedAt: NaN }, /"startedAt" must be a number/],
      [{ ...good, endedAt: 'now' }, /"endedAt" must be a number \(ms since the Unix epoch\) or null/],
      [{ ...good, outcome: 3 }, /"outcome" must be a string or null/],
      [{ ...good, detail: {} }, /"detail" must be a string, or absent/],
    ];
    for (const [run, message] of cases) {
      await assert.rejects(async () => store.recordRun(run), { name: 'TypeError', message }, JSON.stringify(run));
    }
    assert.deepEqual(await store.runs(key), []);
    await assert.rejects(async () => store.runs(7), { name: 'TypeError', message: /runs: the key must be a string; got 7/ });
  });
}

// ---------------------------------------------------------------------------------------------
// MemoryStore.

describe('MemoryStore: run history', () => {
  historyProtocol(async () => new MemoryStore());

  test('runs() returns copies; recordRun() keeps a copy', async () => {
    const store = new MemoryStore();
    const key = newKey();
    const run = runOf(key, 0);
    await store.recordRun(run);
    run.outcome = 'changed by the caller';
    const [first] = await store.runs(key);
    assert.equal(first.outcome, null);
    first.outcome = 'changed by a reader';
    first.startedAt = 0;
    assert.deepEqual(await store.runs(key), [{ ...run, outcome: null }]);
    assert.notEqual((await store.runs(key))[0], (await store.runs(key))[0], 'a fresh object each time');
  });

  test('maxRunRecords: 3 keeps the last 3 runs of every key; an update keeps its place in the ring', async () => {
    const store = new MemoryStore({ maxRunRecords: 3 });
    assert.equal(store.maxRunRecords, 3);
    const [k1, k2] = [newKey(), newKey()];
    const runs = [runOf(k1, 0), runOf(k2, 1), runOf(k1, 2), runOf(k2, 3), runOf(k1, 4)];
    for (const run of runs) await store.recordRun(run);
    assert.deepEqual(await store.runs(k1), [runs[2], runs[4]]);
    assert.deepEqual(await store.runs(k2), [runs[3]]);
    // Updating the oldest (runs[2]) keeps it where it was: the next new run drops it.
    const done = ended(runs[2], 'stored');
    await store.recordRun(done);
    assert.deepEqual(await store.runs(k1), [done, runs[4]]);
    const next = runOf(k2, 5);
    await store.recordRun(next);
    assert.deepEqual(await store.runs(k1), [runs[4]]);
    assert.deepEqual(await store.runs(k2), [runs[3], next]);
    // A dropped run recorded again is a new run (it takes the oldest place: runs[3]).
    await store.recordRun(done);
    assert.deepEqual(await store.runs(k1), [done, runs[4]]);
    assert.deepEqual(await store.runs(k2), [next]);
    // An update that changes the key moves the run to the other key's history.
    await store.recordRun({ ...next, key: k1 });
    assert.deepEqual(await store.runs(k1), [done, runs[4], { ...next, key: k1 }]);
    assert.deepEqual(await store.runs(k2), []);
  });

  test('maxRunRecords: 1, and a long ring that wraps many times', async () => {
    const one = new MemoryStore({ maxRunRecords: 1 });
    const key = newKey();
    for (let i = 0; i < 5; i++) await one.recordRun(runOf(key, i, { id: `r${i}` }));
    assert.deepEqual((await one.runs(key)).map((r) => r.id), ['r4']);
    const store = new MemoryStore({ maxRunRecords: 100 });
    const keys = [newKey(), newKey(), newKey()];
    for (let i = 0; i < 1_000; i++) await store.recordRun(runOf(keys[i % 3], i, { id: `r${i}` }));
    const kept = (await Promise.all(keys.map((k) => store.runs(k)))).flat();
    assert.equal(kept.length, 100);
    assert.deepEqual(kept.map((r) => Number(r.id.slice(1))).sort((a, b) => a - b), Array.from({ length: 100 }, (_, i) => 900 + i));
  });

  test('the run history is apart from the records: maxEntries does not bound it, clear() forgets it', async () => {
    const store = new MemoryStore({ maxEntries: 1 });
    const key = newKey();
    for (let i = 0; i < 5; i++) await store.recordRun(runOf(key, i));
    assert.equal((await store.runs(key)).length, 5);
    assert.equal(store.size, 0, 'runs are not records');
    assert.equal(await store.acquire(`-:${key}`, { state: 'in-progress', token: 't', fingerprint: 'f', lockExpiresAt: Date.now() + 60_000 }, 60_000), null);
    assert.equal((await store.runs(key)).length, 5);
    store.clear();
    assert.deepEqual(await store.runs(key), []);
    assert.equal(store.size, 0);
    await store.recordRun(runOf(key, 9));
    assert.equal((await store.runs(key)).length, 1, 'usable after clear()');
  });

  test('options: maxRunRecords defaults to 10000; invalid values and unknown names are TypeErrors naming them', () => {
    assert.equal(new MemoryStore().maxRunRecords, 10_000);
    assert.equal(new MemoryStore({ maxRunRecords: undefined }).maxRunRecords, 10_000, 'undefined is absent');
    assert.equal(new MemoryStore({ maxEntries: 5, maxBytes: 5_000, maxRunRecords: 7 }).maxRunRecords, 7);
    for (const maxRunRecords of [0, -1, 1.5, '10', Infinity, NaN, null, 2 ** 53]) {
      assert.throws(() => new MemoryStore({ maxRunRecords }), {
        name: 'TypeError',
        message: /^MemoryStore: invalid option "maxRunRecords": got .*; expected an integer from 1 to 9007199254740991$/,
      }, String(maxRunRecords));
    }
    assert.throws(() => new MemoryStore({ maxRunRecord: 3 }), { name: 'TypeError', message: 'MemoryStore: unknown option "maxRunRecord" (did you mean "maxRunRecords"?)' });
    assert.throws(() => new MemoryStore({ runRetentionMs: 3 }), { name: 'TypeError', message: /^MemoryStore: unknown option "runRetentionMs"/ });
    assert.throws(() => new MemoryStore(5), { name: 'TypeError', message: 'MemoryStore: invalid option "options": got 5; expected an object { maxEntries?, maxBytes?, maxRunRecords? }' });
  });
});

// ---------------------------------------------------------------------------------------------
// RedisStore.

describe('RedisStore: run history', () => {
  let redis;
  before(async () => {
    if (!REDIS_URL) throw missing('REDIS_URL', 'a redis-server');
    redis = createClient({ url: REDIS_URL });
    redis.on('error', () => {}); // reconnects are the client's business; failures show in the tests
    await redis.connect();
  });
  after(async () => {
    if (redis?.isOpen) await redis.quit();
  });
  // Every store gets a prefix of its own, so the tests never see each other's keys.
  const prefix = () => `idem:test-runs-${crypto.randomUUID()}:`;
  const redisStore = (options = {}) => new RedisStore({ client: redis, prefix: prefix(), ...options });

  historyProtocol(async () => redisStore());

  test('a stream per key at <prefix>runs:<key>, every scope in it, expiring runRetentionMs after its last write', async () => {
    const store = redisStore();
    assert.equal(store.runRetentionMs, 604_800_000);
    const key = newKey();
    const stream = `${store.prefix}runs:${key}`;
    const run = runOf(key, 0);
    await store.recordRun(run);
    await store.recordRun(runOf(key, 1, { scope: SCOPE_A }));
    await store.recordRun(ended(run, 'stored'));
    assert.equal(await redis.type(stream), 'stream');
    assert.equal(await redis.xLen(stream), 3, 'an update is an entry of its own');
    assert.equal((await store.runs(key)).length, 2, 'runs() keeps the last entry of each id');
    const entries = await redis.xRange(stream, '-', '+');
    assert.deepEqual(Object.keys(entries[0].message), ['run']);
    assert.deepEqual(JSON.parse(entries[2].message.run), ended(run, 'stored'));
    const ttl = await redis.pTTL(stream);
    assert.ok(ttl > 604_800_000 - 60_000 && ttl <= 604_800_000, `PTTL ${ttl}`);
    // Nothing else was written under the prefix (the records' keys are <prefix><scope>:<key>).
    assert.deepEqual(await redis.keys(`${store.prefix}*`), [stream]);

    const short = redisStore({ runRetentionMs: 1000 });
    assert.equal(short.runRetentionMs, 1000);
    const brief = newKey();
    await short.recordRun(runOf(brief, 0));
    const pttl = await redis.pTTL(`${short.prefix}runs:${brief}`);
    assert.ok(pttl > 0 && pttl <= 1000, `PTTL ${pttl}`);
    await short.recordRun(runOf(brief, 1));
    await sleep(600);
    await short.recordRun(runOf(brief, 2)); // sets the expiry again
    await sleep(600);
    assert.equal((await short.runs(brief)).length, 3, 'each write sets the expiry again');
    await sleep(600);
    assert.deepEqual(await short.runs(brief), [], 'expired 1000 ms after the last write');
    assert.equal(await redis.exists(`${short.prefix}runs:${brief}`), 0);
  });

  test('2001 writes of one key: the stream keeps the last 2000 (exact MAXLEN: 1000 runs of a start and an end, as many as maxRuns counts); another key is untouched', async () => {
    const ENTRIES = 2000;
    const store = redisStore();
    const [key, other] = [newKey(), newKey()];
    const lone = runOf(other, 0);
    await store.recordRun(lone);
    const runs = Array.from({ length: ENTRIES + 1 }, (_, i) => runOf(key, i, { id: `run-${String(i).padStart(4, '0')}` }));
    for (const run of runs) await store.recordRun(run);
    assert.equal(await redis.xLen(`${store.prefix}runs:${key}`), ENTRIES);
    const kept = await store.runs(key);
    assert.equal(kept.length, ENTRIES);
    assert.deepEqual(kept, runs.slice(1), 'the first one recorded is the one dropped');
    assert.deepEqual(await store.runs(other), [lone]);
    // Updates count as entries too: as many more writes of one run leave that run alone.
    const last = runs[ENTRIES];
    for (let i = 0; i < ENTRIES; i++) await store.recordRun(ended(last, 'stored', i + 1));
    assert.deepEqual(await store.runs(key), [ended(last, 'stored', ENTRIES)]);
  });

  test('a stream entry that is not a run record is a TypeError; runs() of a missing stream is []', async () => {
    const store = redisStore();
    const key = newKey();
    assert.deepEqual(await store.runs(key), []);
    await redis.xAdd(`${store.prefix}runs:${key}`, '*', { run: 'not json' });
    await assert.rejects(store.runs(key), { name: 'TypeError', message: /^RedisStore: an entry of the stream at ".*runs:order-.*" is not a JSON run record; got "not json"$/ });
  });

  test('options: runRetentionMs defaults to 7 days; invalid values and unknown names are TypeErrors naming them', () => {
    const fake = { set: async () => 'OK', get: async () => null, eval: async () => 0 };
    assert.equal(new RedisStore({ client: fake }).runRetentionMs, 604_800_000);
    assert.equal(new RedisStore({ client: fake, runRetentionMs: undefined }).runRetentionMs, 604_800_000, 'undefined is absent');
    assert.equal(new RedisStore({ client: fake, runRetentionMs: 1 }).runRetentionMs, 1);
    for (const runRetentionMs of [0, -1, 1.5, '1000', Infinity, NaN, null, 2 ** 53]) {
      assert.throws(() => new RedisStore({ client: fake, runRetentionMs }), {
        name: 'TypeError',
        message: /^RedisStore: invalid option "runRetentionMs": got .*; expected an integer number of milliseconds from 1 to 9007199254740991$/,
      }, String(runRetentionMs));
    }
    assert.throws(() => new RedisStore({ client: fake, runRetention: 5 }), { name: 'TypeError', message: 'RedisStore: unknown option "runRetention" (did you mean "runRetentionMs"?)' });
    assert.throws(() => new RedisStore({ client: fake, maxRunRecords: 5 }), { name: 'TypeError', message: /^RedisStore: unknown option "maxRunRecords"/ });
  });
});

// ---------------------------------------------------------------------------------------------
// PostgresStore.

describe('PostgresStore: run history', () => {
  let pool;
  const tables = [];
  before(async () => {
    if (!DATABASE_URL) throw missing('DATABASE_URL', 'a PostgreSQL');
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20 });
    pool.on('error', () => {}); // an idle client whose backend was killed: the pool drops it
  });
  after(async () => {
    if (!pool) return;
    await sleep(100); // a recordRun's background retention DELETE
    for (const t of tables) {
      const quoted = (name) => name.split('.').map((p) => `"${p}"`).join('.');
      await pool.query(`DROP TABLE IF EXISTS ${quoted(t)}, ${quoted(new PostgresStore({ pool, table: t }).runsTable)}`);
    }
    await pool.end();
  });
  const fresh = (kind = 'runs') => {
    const table = `${kind}_${crypto.randomUUID().replaceAll('-', '')}`;
    tables.push(table);
    return table;
  };
  /** A PostgresStore on a fresh table of its own (migrated). */
  async function postgresStore(options = {}) {
    const store = new PostgresStore({ pool, table: fresh(), ...options });
    await store.migrate();
    return store;
  }
  const rowsOf = async (store, key) =>
    (await pool.query(`SELECT id FROM "${store.runsTable}" WHERE key = $1 ORDER BY started_at, id`, [key])).rows.map((r) => r.id);

  historyProtocol(() => postgresStore());

  test('migrate() creates <table>_runs and its indexes, idempotently; a database made before the run history gets them', async () => {
    const table = fresh();
    // An existing database: only the keys' table, as an older migrate() made it.
    await pool.query(PostgresStore.schema(table));
    const store = new PostgresStore({ pool, table });
    assert.equal(store.runsTable, `${table}_runs`);
    const absent = { code: '42P01', message: `PostgresStore: the run history's table "${table}_runs" does not exist: run store.migrate(), or PostgresStore.runsSchema("${table}") in your migration tool` };
    await assert.rejects(store.runs('k'), absent, 'no runs table yet');
    await assert.rejects(store.recordRun(runOf(newKey(), 0)), absent);
    await Promise.all([store.migrate(), new PostgresStore({ pool, table }).migrate()]);
    await store.migrate();
    const { rows: columns } = await pool.query(
      `SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position`,
      [`${table}_runs`],
    );
    assert.deepEqual(columns.map((c) => [c.column_name, c.data_type, c.is_nullable]), [
      ['id', 'text', 'NO'],
      ['key', 'text', 'NO'],
      ['scope', 'text', 'NO'],
      ['instance', 'text', 'NO'],
      ['started_at', 'double precision', 'NO'],
      ['ended_at', 'double precision', 'YES'],
      ['outcome', 'text', 'YES'],
      ['detail', 'text', 'YES'],
    ]);
    const { rows: indexes } = await pool.query('SELECT indexname, indexdef FROM pg_indexes WHERE tablename = $1 ORDER BY indexname', [`${table}_runs`]);
    assert.deepEqual(indexes.map((r) => r.indexname), [`${table}_runs_key_started_at_idx`, `${table}_runs_pkey`, `${table}_runs_started_at_idx`]);
    assert.match(indexes[0].indexdef, /\(key, started_at\)$/);
    assert.match(indexes[1].indexdef, /UNIQUE INDEX .* \(id\)$/);
    assert.match(indexes[2].indexdef, /\(started_at\)$/);
    // The keys' table is as it was.
    const { rows: keyIndexes } = await pool.query('SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY indexname', [table]);
    assert.deepEqual(keyIndexes.map((r) => r.indexname), [`${table}_expires_at_idx`, `${table}_pkey`]);
    const run = runOf(newKey(), 0);
    await store.recordRun(run);
    assert.deepEqual(await store.runs(run.key), [run]);
  });

  test('runsSchema(): the SQL that migrate() runs after schema(); schema-qualified and long names', async () => {
    assert.equal(
      PostgresStore.runsSchema(),
      `CREATE TABLE IF NOT EXISTS "idempotency_keys_runs" (
  id text PRIMARY KEY,
  key text NOT NULL,
  scope text NOT NULL,
  instance text NOT NULL,
  started_at double precision NOT NULL,
  ended_at double precision,
  outcome text,
  detail text
);
CREATE INDEX IF NOT EXISTS "idempotency_keys_runs_key_started_at_idx" ON "idempotency_keys_runs" (key, started_at);
CREATE INDEX IF NOT EXISTS "idempotency_keys_runs_started_at_idx" ON "idempotency_keys_runs" (started_at);
`,
    );
    assert.match(PostgresStore.runsSchema('app.Idem'), /^CREATE TABLE IF NOT EXISTS "app"\."Idem_runs" \(/);
    assert.match(PostgresStore.runsSchema('app.Idem'), /CREATE INDEX IF NOT EXISTS "Idem_runs_key_started_at_idx" ON "app"\."Idem_runs" \(key, started_at\);/);
    assert.throws(() => PostgresStore.runsSchema('idem; DROP TABLE x'), {
      name: 'TypeError',
      message: /^PostgresStore\.runsSchema: invalid option "table": got "idem; DROP TABLE x"; expected an SQL table name/,
    });
    assert.equal(new PostgresStore({ pool, table: 'app.Idem' }).runsTable, 'app.Idem_runs');

    // Two long names that share their first 50 characters: a runs table (and indexes) each.
    const common = `runs_long_${'x'.repeat(40)}`;
    const [a, b] = [`${common}${'a'.repeat(13)}`, `${common}${'b'.repeat(13)}`];
    assert.equal(a.length, 63);
    tables.push(a, b);
    const stores = [new PostgresStore({ pool, table: a }), new PostgresStore({ pool, table: b })];
    for (const store of stores) await store.migrate();
    const names = stores.map((s) => s.runsTable);
    assert.notEqual(names[0], names[1]);
    for (const [i, table] of [a, b].entries()) {
      const hash = createHash('sha256').update(table).digest('hex').slice(0, 8);
      assert.equal(names[i], `${table.slice(0, 49)}_${hash}_runs`);
      assert.equal(names[i].length, 63);
      const { rows } = await pool.query('SELECT indexname FROM pg_indexes WHERE tablename = $1', [names[i]]);
      assert.equal(rows.length, 3, `three indexes on ${names[i]}`);
      for (const r of rows) assert.ok(r.indexname.length <= 63);
      const run = runOf(newKey(), i);
      await stores[i].recordRun(run);
      assert.deepEqual(await stores[i].runs(run.key), [run]);
      assert.deepEqual(await stores[1 - i].runs(run.key), [], 'each table its own runs');
    }

    // A schema-qualified table: its runs table is in the same schema.
    const schema = `s_${crypto.randomUUID().replaceAll('-', '')}`;
    await pool.query(`CREATE SCHEMA "${schema}"`);
    try {
      const store = new PostgresStore({ pool, table: `${schema}.Order` });
      await store.migrate();
      assert.equal(store.runsTable, `${schema}.Order_runs`);
      const run = runOf(newKey(), 0);
      await store.recordRun(run);
      assert.deepEqual(await store.runs(run.key), [run]);
      const n = await pool.query(`SELECT count(*)::int AS n FROM "${schema}"."Order_runs"`);
      assert.equal(n.rows[0].n, 1);
    } finally {
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
    }
  });

  test('one row per id, every column replaced (ON CONFLICT (id) DO UPDATE); detail NUL kept as U+FFFD', async () => {
    const store = await postgresStore();
    const key = newKey();
    const run = runOf(key, 0, { scope: SCOPE_A });
    await store.recordRun(ended(run, 'failed', 10, 'first'));
    const moved = { ...run, scope: SCOPE_B, instance: 'host-c:303', startedAt: run.startedAt + 5, endedAt: null, outcome: null };
    await store.recordRun(moved);
    const { rows } = await pool.query(`SELECT * FROM "${store.runsTable}" WHERE id = $1`, [run.id]);
    assert.equal(rows.length, 1);
    assert.deepEqual(rows[0], { id: run.id, key, scope: SCOPE_B, instance: 'host-c:303', started_at: moved.startedAt, ended_at: null, outcome: null, detail: null });
    assert.deepEqual(await store.runs(key), [moved]);
    const nul = ended(runOf(key, 1), 'failed', 1, 'a\0b');
    await store.recordRun(nul);
    assert.equal((await store.runs(key)).find((r) => r.id === nul.id).detail, 'a\uFFFDb');
  });

  test('recordRun and runs go through the pool, never a key\'s transaction: a run recorded while the key is held outlives its rollback', async () => {
    const store = await postgresStore();
    const key = newKey();
    const lock = { state: 'in-progress', token: 'token-a', fingerprint: 'f'.repeat(64), lockExpiresAt: Date.now() + 60_000 };
    assert.equal(await store.acquire(`-:${key}`, lock, 60_000), null);
    const run = runOf(key, 0, { id: 'token-a' });
    await store.recordRun(run);
    // Visible to another connection at once: committed on its own.
    assert.deepEqual(await rowsOf(store, key), ['token-a']);
    assert.equal(await store.release(`-:${key}`, 'token-a'), true); // ROLLBACK of the key's transaction
    await store.recordRun(ended(run, 'freed'));
    assert.deepEqual(await store.runs(key), [ended(run, 'freed')]);
  });

  test('runs() returns the newest 1000 (as RedisStore keeps the last 1000), oldest first; so does the start of a run', async () => {
    const store = await postgresStore();
    const key = newKey();
    const values = [];
    const params = [];
    // Inserted newest first, so that neither the insertion order nor the physical one is the
    // answer's; r1003 and r1004 start at the same ms (a tie, by id).
    for (let i = 1_004; i >= 0; i--) {
      params.push(`r${String(i).padStart(4, '0')}`, key, '-', 'host-a:101', T0 + Math.min(i, 1_003));
      const n = params.length;
      values.push(`($${n - 4}, $${n - 3}, $${n - 2}, $${n - 1}, $${n})`);
    }
    await pool.query(`INSERT INTO "${store.runsTable}" (id, key, scope, instance, started_at) VALUES ${values.join(', ')}`, params);
    const ids = (runs) => runs.map((r) => r.id);
    const expected = Array.from({ length: 1_000 }, (_, i) => `r${String(i + 5).padStart(4, '0')}`);
    const runs = await store.runs(key);
    assert.equal(runs.length, 1000);
    assert.deepEqual(ids(runs), expected, 'r0005 to r1004: the 5 oldest left out');
    assert.deepEqual(runs[0], { id: 'r0005', key, scope: '-', instance: 'host-a:101', startedAt: T0 + 5, endedAt: null, outcome: null });
    assert.deepEqual(runs, [...runs].sort((a, b) => a.startedAt - b.startedAt || (a.id < b.id ? -1 : 1)), 'in the order of the other stores');
    // A run's start (its record and the key's runs before it, in one statement: what maxRuns counts).
    const startRun = store.runs[Symbol.for('retry-fetch.startRun')];
    assert.equal(typeof startRun, 'function');
    const next = runOf(key, 2_000, { id: 'r2000' });
    assert.deepEqual(ids(await startRun.call(store, next)), expected, 'the newest 1000 before it');
    assert.deepEqual(ids(await store.runs(key)), [...expected.slice(1), 'r2000']);
  });

  test('retention: a run older than runRetentionMs is deleted by a later recordRun, at most once a minute per store object', async () => {
    const keeper = await postgresStore(); // the default retention: 7 days
    assert.equal(keeper.runRetentionMs, 604_800_000);
    const table = keeper.table;
    const key = newKey();
    const old = ended(runOf(key, 0), 'stored'); // a minute ago
    await keeper.recordRun(old); // its own retention DELETE runs now, and keeps it (7 days)
    await sleep(100);
    assert.deepEqual(await rowsOf(keeper, key), [old.id]);

    // A store whose retention is a second: its first recordRun deletes what started before then.
    const short = new PostgresStore({ pool, table, runRetentionMs: 1000 });
    assert.equal(short.runRetentionMs, 1000);
    const now1 = runOf(key, 0, { startedAt: Date.now() });
    await short.recordRun(now1);
    assert.deepEqual(await until(() => rowsOf(keeper, key), (ids) => !ids.includes(old.id)), [now1.id], 'the old run deleted, the new one kept');

    // Within the minute, the same object does not delete again.
    const old2 = runOf(key, 1); // a minute ago
    await keeper.recordRun(old2);
    await short.recordRun(runOf(key, 0, { id: 'now-2', startedAt: Date.now() }));
    await sleep(300);
    assert.deepEqual(await rowsOf(keeper, key), [old2.id, now1.id, 'now-2'], 'kept: that store deleted less than a minute ago');

    // Another store object has a gate of its own: its first recordRun deletes it.
    await new PostgresStore({ pool, table, runRetentionMs: 1000 }).recordRun(runOf(newKey(), 0, { startedAt: Date.now() }));
    assert.deepEqual(await until(() => rowsOf(keeper, key), (ids) => !ids.includes(old2.id)), [now1.id, 'now-2']);
  });

  test('options: runRetentionMs defaults to 7 days; invalid values and unknown names are TypeErrors naming them', () => {
    const fakePool = { connect: async () => ({}), query: async () => ({ rows: [], rowCount: 0 }) };
    assert.equal(new PostgresStore({ pool: fakePool }).runRetentionMs, 604_800_000);
    assert.equal(new PostgresStore({ pool: fakePool, runRetentionMs: undefined }).runRetentionMs, 604_800_000, 'undefined is absent');
    assert.equal(new PostgresStore({ pool: fakePool }).runsTable, 'idempotency_keys_runs');
    for (const runRetentionMs of [0, -1, 1.5, '1000', Infinity, NaN, null, 2 ** 53]) {
      assert.throws(() => new PostgresStore({ pool: fakePool, runRetentionMs }), {
        name: 'TypeError',
        message: /^PostgresStore: invalid option "runRetentionMs": got .*; expected an integer number of milliseconds from 1 to 9007199254740991$/,
      }, String(runRetentionMs));
    }
    assert.throws(() => new PostgresStore({ pool: fakePool, runRetention: 5 }), { name: 'TypeError', message: 'PostgresStore: unknown option "runRetention" (did you mean "runRetentionMs"?)' });
    assert.throws(() => new PostgresStore({ pool: fakePool, maxRunRecords: 5 }), { name: 'TypeError', message: /^PostgresStore: unknown option "maxRunRecords"/ });
  });
});

/** A MemoryStore whose complete() throws while `down` (Redis briefly down). */
class FlakyStore extends MemoryStore {
  down = false;
  async complete(...args) {
    if (this.down) throw new Error('store down at complete');
    return super.complete(...args);
  }
}

test('an answer whose storing goes on behind it is recorded not-stored at once (a process that exits meanwhile leaves that), then stored, the same run, if it is kept', async () => {
  const { idempotency } = await import('retry-fetch/server');
  const store = new FlakyStore();
  store.down = true;
  const ended = [];
  const h = idempotency(async () => new Response('charged', { status: 201 }), { store, identity: false, lockTimeoutMs: 3_000, onStoreError: () => {}, onEvent: (e) => e.type === 'run-ended' && ended.push(e.run.outcome) });
  const res = await h(new Request('http://localhost/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k-later' }, body: 'x' }));
  assert.equal(res.headers.get('x-should-retry'), 'false');
  const outcomes = async () => (await store.runs('k-later')).map((r) => r.outcome);
  assert.deepEqual(await until(outcomes, (o) => o[0] !== null), ['not-stored'], 'written when the caller was answered');
  store.down = false; // the storing behind the answer keeps it at its next try
  assert.deepEqual(await until(outcomes, (o) => o[0] === 'stored'), ['stored'], 'the same run, rewritten');
  assert.deepEqual(ended, ['not-stored', 'stored']);
});

test('a failure the store could not keep says so in its 500, and is recorded not-stored (a job) or as the storing behind the answer ended (a handler: kept once the store is back)', async () => {
  const { idempotency, idempotent } = await import('retry-fetch/server');
  const store = new FlakyStore();
  let runs = 0;
  const h = idempotency(async () => {
    runs++;
    store.down = runs === 1;
    throw new Error('boom');
  }, { store, identity: false, lockTimeoutMs: 1000, onError: () => {}, onStoreError: () => {} });
  const request = () => new Request('http://localhost/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k-not-stored' }, body: '' });
  const first = await h(request());
  assert.equal(first.status, 500);
  assert.equal(first.headers.get('x-should-retry'), 'false', 'a client is told not to retry it');
  assert.match((await first.json()).detail, /could not be stored/);
  // The store is back: the storing that went on behind the answer keeps it (the run's entry,
  // written when that storing ends, says so: failed, kept), and a repeat gets it, not a
  // second run.
  store.down = false;
  const repeat = await h(request());
  assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
  assert.equal(runs, 1);
  const outcomes = async (key) => (await store.runs(key)).map((r) => r.outcome);
  // Runs are recorded after the answer: polled for (a loaded machine may take a while).
  assert.deepEqual(await until(() => outcomes('k-not-stored'), (o) => o.length >= 2 && o[0] !== null), ['failed', 'replayed']);
  let jobRuns = 0;
  const job = idempotent(async () => {
    jobRuns++;
    store.down = jobRuns === 1;
    throw new Error('job boom');
  }, { store, key: (m) => m.id, lockTimeoutMs: 1000, onStoreError: () => {} });
  for (let i = 0; i < 2; i++) {
    await job({ id: 'j-not-stored' }).catch(() => {});
    store.down = false;
  }
  // A delivery waits while the store is asked again (up to lockTimeoutMs): still down for all
  // of it here, the failure is not kept, and the next delivery runs the job again.
  assert.deepEqual(await until(() => outcomes('j-not-stored'), (o) => o.length >= 2), ['not-stored', 'failed']);
  assert.equal(jobRuns, 2);
});

test('a key taken again whose answer still cannot be stored is freed after its run\'s end is written (the next holder finds it ended, not open: crashed)', async () => {
  const { idempotency, idempotent } = await import('retry-fetch/server');
  // complete() refuses twice, as for a lease that lapsed and then was lost again: the run takes
  // its lapsed key again after the first refusal, gives up at the second, and frees the key.
  class LapsingStore extends MemoryStore {
    calls = [];
    refusals = 2;
    async complete(...args) {
      if (this.refusals-- > 0) return false;
      return super.complete(...args);
    }
    async release(...args) {
      this.calls.push('release');
      return super.release(...args);
    }
    async recordRun(run) {
      this.calls.push(run.outcome === null ? 'started' : `ended ${run.outcome}`);
      return super.recordRun(run);
    }
  }
  const store = new LapsingStore();
  const h = idempotency(async () => new Response('charged', { status: 201 }), { store, identity: false, onStoreError: () => {} });
  const res = await h(new Request('http://localhost/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k-lapsing' }, body: 'x' }));
  assert.equal(res.status, 201);
  assert.deepEqual(await until(async () => store.calls, (c) => c.includes('release')), ['started', 'ended not-stored', 'release']);
  const jobStore = new LapsingStore();
  const job = idempotent(async () => 'done', { store: jobStore, key: (m) => m.id, onStoreError: () => {} });
  assert.equal(await job({ id: 'j-lapsing' }), 'done');
  assert.deepEqual(await until(async () => jobStore.calls, (c) => c.includes('release')), ['started', 'ended not-stored', 'release']);
});

test('a job process that exits once `await handle(message)` is done leaves its run written: start and end (RedisStore, PostgresStore)', async () => {
  if (!REDIS_URL) throw missing('REDIS_URL', 'redis-server');
  if (!DATABASE_URL) throw missing('DATABASE_URL', 'PostgreSQL');
  const { spawnSync } = await import('node:child_process');
  const stamp = crypto.randomUUID().replaceAll('-', '');
  const table = `exits_${stamp}`;
  const job = (kind) => `
    import pg from 'pg';
    import { createClient } from 'redis';
    import { idempotent, PostgresStore, RedisStore } from 'retry-fetch/server';
    let store;
    if (${JSON.stringify(kind)} === 'postgres') {
      store = new PostgresStore({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }), table: ${JSON.stringify(table)} });
      await store.migrate();
    } else {
      const client = createClient({ url: process.env.REDIS_URL });
      await client.connect();
      store = new RedisStore({ client, prefix: ${JSON.stringify(`exits:${stamp}:`)} });
    }
    const handle = idempotent(async (m) => ({ shipped: m.id }), { store, key: (m) => m.id });
    console.log(JSON.stringify(await handle({ id: 'order-1' })));
    process.exit(0);`;
  const pool = new pg.Pool({ connectionString: DATABASE_URL });
  const client = createClient({ url: REDIS_URL });
  await client.connect();
  try {
    for (const [kind, store] of [
      ['postgres', new PostgresStore({ pool, table })],
      ['redis', new RedisStore({ client, prefix: `exits:${stamp}:` })],
    ]) {
      const child = spawnSync(process.execPath, ['--input-type=module', '-e', job(kind)], { cwd: import.meta.dirname, encoding: 'utf8', env: process.env, timeout: 30_000 });
      assert.equal(child.status, 0, `${kind}: ${child.stderr}`);
      assert.equal(child.stdout.trim(), '{"shipped":"order-1"}');
      const runs = await store.runs('order-1');
      assert.deepEqual(runs.map((r) => r.outcome), ['stored'], `${kind}: ${JSON.stringify(runs)}`);
      assert.equal(typeof runs[0].endedAt, 'number', kind);
    }
  } finally {
    await pool.query(`DROP TABLE IF EXISTS "${table}", "${table}_runs"`).catch(() => {});
    await pool.end();
    await client.quit();
  }
});

test('a job waits for its own run\'s history writes only (at most a second), never for other jobs\' nor when it wrote nothing', async () => {
  const inner = new MemoryStore();
  // A store whose history writes for the key `stuck` never settle; the others take 20 ms.
  const written = [];
  const store = {
    acquire: (...a) => inner.acquire(...a), renew: (...a) => inner.renew(...a), reclaim: (...a) => inner.reclaim(...a),
    complete: (...a) => inner.complete(...a), release: (...a) => inner.release(...a), secret: () => inner.secret(),
    runs: (k) => inner.runs(k),
    recordRun: (run) => (run.key === 'stuck' ? new Promise(() => {}) : sleep(20).then(() => { written.push(run.key); return inner.recordRun(run); })),
  };
  const handle = idempotent(async (m) => ({ ok: m.id }), { store, key: (m) => m.id, onStoreError: () => {} });
  const timed = async (input) => {
    const t = performance.now();
    const outcome = await handle(input).then((v) => v, (e) => e);
    return [outcome, performance.now() - t];
  };
  const stuck = timed({ id: 'stuck' });
  await sleep(50);
  // Another job while the stuck one's writes hang: it waits for its own (about 40 ms), and
  // its start and end are written when it settles.
  const [result, ms] = await timed({ id: 'other' });
  assert.deepEqual(result, { ok: 'other' });
  assert.ok(ms < 700, `an unrelated job took ${Math.round(ms)} ms`);
  assert.ok(written.filter((k) => k === 'other').length >= 1, JSON.stringify(written));
  // A job refused before it ran wrote nothing, and waits for nothing.
  const [refused, refusedMs] = await timed({ id: 'x', n: NaN });
  assert.equal(refused.name, 'TypeError');
  assert.ok(refusedMs < 300, `a refused job took ${Math.round(refusedMs)} ms`);
  // The stuck one settles anyway, about a second after its run.
  const [stuckResult, stuckMs] = await stuck;
  assert.deepEqual(stuckResult, { ok: 'stuck' });
  assert.ok(stuckMs >= 900 && stuckMs < 3_000, `the stuck job took ${Math.round(stuckMs)} ms`);
});
