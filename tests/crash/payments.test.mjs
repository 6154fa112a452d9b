// Crash test: exactly-once payments through process crashes and across server instances.
//
// Two payment-server instances (tests/crash/payment-server.mjs, separate node processes) share
// one idempotency store. A client `retryFetch` (the package) POSTs 200 payments, 20 at a time,
// each with its own Idempotency-Key (added by retryFetch) and payment id; its attempts
// alternate between the two instances. The instances SIGKILL themselves at random moments
// (seeded, KILL_P per kill point per handler run), at three points:
//   a: before the charge (the key is held),
//   b: after the charge, before the commit (before the store's complete()),
//   c: after the commit, before the answer (after complete() resolved);
// this process starts each killed instance again on its port. Every point is hit at least
// once: while one has not been hit, every restarted instance dies there on its first run.
//
// Variants:
//   1. PostgresStore, the charge inserted through ctx.tx (committed with the stored answer or
//      rolled back with it): every call succeeds and there is exactly one charge per payment,
//      whose id each call returned. The charges table has its own serial id and NO unique
//      constraint on payment_id, so a double charge shows as two rows.
//   2. RedisStore, the same charge inserted with a plain pool.query (an effect outside the
//      store: unkeyed). A kill between the charge and complete() leaves the lock to expire
//      (lockTimeoutMs 1000) and the retry charges again: the window is open, and the test
//      asserts that it saw it (every payment killed at b has a charge of the killed run and
//      one of the retry: at least two), besides what must hold (every call settles with a
//      success, nothing is lost). The doubles are reported (t.diagnostic).
//   3. RedisStore, the charge made at a fake payment provider (an http server in this process)
//      that dedupes by the Idempotency-Key it receives; the handler forwards
//      ctx.keyFor('charge'): exactly one provider charge per payment, whatever the store.
//   4. PostgresStore, the charge inserted with pool.query OUTSIDE ctx.tx: committed on its
//      own, so a kill between the charge and complete() frees the key (the transaction dies)
//      and the retry charges again at once: the window asserted seen and reported, as in 2.
//   5. Variant 1 with the client's default options (what users get: maxAttempts 3, backoff
//      from 500 ms, the default retry budget; only the transport is the test's): what must
//      hold whatever the policy (no payment charged twice, a call that succeeded returned its
//      one charge) is asserted; how many calls gave up, and why, is reported.
//
// Needs DATABASE_URL (variants 1, 2 and 4) and REDIS_URL (variants 2 and 3); a variant whose
// server is not configured is skipped with a message. Optional: CRASH_SEED (default: random,
// printed), CRASH_KILL_P (default 0.02).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { retryFetch } from '../../pkg/index.node.js';
import { PostgresStore } from '../../pkg/server.js';
import { Fleet, freePort, readKills, countKills, missingPoint, runId, tempDir, pool, snapshotPackage } from './harness.mjs';
import { DATABASE_URL, REDIS_URL, needs } from '../support/services.mjs';

const SERVER_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'payment-server.mjs');
const PAYMENTS = 200;
const CONCURRENCY = 20;
const POINTS = ['a', 'b', 'c'];
const KILL_P = Number(process.env.CRASH_KILL_P ?? '0.02');
const SEED = Number(process.env.CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RUN = runId();

// A policy that survives restarts: many attempts, short waits, every attempt bounded.
const POLICY = {
  maxAttempts: 30,
  baseDelayMs: 20,
  maxDelayMs: 1_000,
  timeoutMs: 5_000,
  deadlineMs: 120_000,
  // Server instances die every few requests here: to the default retry budget a sustained
  // failure. The test is about exactly-once through crashes, so it retries freely.
  budget: false,
};

const pgSkip = needs('DATABASE_URL');
const redisSkip = needs('REDIS_URL');

// Run last first, after every test: children, servers, tables, Redis keys; then the clients.
const cleanups = [];
after(async () => {
  while (cleanups.length > 0) await cleanups.pop()().catch(() => {});
  await redisClient?.close().catch(() => redisClient.destroy());
  await pgPool?.end().catch(() => {});
});

let pgPool = null;
async function pgTestPool() {
  if (pgPool === null) {
    const { default: pg } = await import('pg');
    pgPool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
    pgPool.on('error', () => {});
  }
  return pgPool;
}

/** A fake payment provider that dedupes by Idempotency-Key: same key, same charge. */
async function startProvider() {
  const byKey = new Map(); // Idempotency-Key -> { chargeId, paymentId }
  const charges = []; // { chargeId, paymentId, key }
  let calls = 0;
  const server = http.createServer(async (req, res) => {
    calls++;
    let body = '';
    for await (const chunk of req) body += chunk;
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || key === '') {
      res.writeHead(400).end('Idempotency-Key required');
      return;
    }
    let charge = byKey.get(key);
    const replayed = charge !== undefined;
    if (!replayed) {
      const { paymentId } = JSON.parse(body);
      charge = { chargeId: `pc_${charges.length + 1}`, paymentId, key };
      byKey.set(key, charge);
      charges.push(charge);
    }
    res.writeHead(replayed ? 200 : 201, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ chargeId: charge.chargeId }));
  });
  server.keepAliveTimeout = 1_000;
  server.listen(0, '127.0.0.1');
  await new Promise((ok) => server.once('listening', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}/charges`,
    charges,
    calls: () => calls,
    close: () =>
      new Promise((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}

/**
 * `fetch(input, init)` sent to `base` instead of the input's origin (same path and query).
 * retryFetch calls its transport with a Request whose body it already read and the body bytes
 * in `init.body`; any other shape works too.
 */
async function forwardTo(base, input, init) {
  const request = input instanceof Request ? input : new Request(input, init);
  const url = new URL(request.url);
  let body = init?.body;
  if (body === undefined && !request.bodyUsed && request.body !== null) body = await request.arrayBuffer();
  return fetch(base + url.pathname + url.search, {
    method: request.method,
    headers: init?.headers ?? request.headers,
    body,
    signal: init?.signal ?? request.signal,
  });
}

/** The copy of pkg/ the instances load (made once per file; see snapshotPackage). */
let pkgCopy = null;
function packageCopy() {
  if (pkgCopy === null) {
    const tmp = tempDir();
    cleanups.unshift(async () => tmp.cleanup()); // removed last
    pkgCopy = snapshotPackage(tmp.dir);
  }
  return pkgCopy;
}

/**
 * Runs the 200 payments against two instances of `variant` ('postgres' | 'redis' | 'provider').
 * Resolves with { results, kills, counts, fleet, seconds }.
 */
async function runPayments(variant, extraEnv, policy = POLICY) {
  const tmp = tempDir();
  cleanups.push(async () => tmp.cleanup());
  const killLog = path.join(tmp.dir, `${variant}.kills`);
  const ports = [await freePort(), await freePort()];
  const urls = ports.map((p) => `http://127.0.0.1:${p}`);
  const pkgDir = await packageCopy();
  const fleet = new Fleet(SERVER_SCRIPT, 2, (slot, generation) => ({
    VARIANT: variant,
    PORT: String(ports[slot]),
    INSTANCE: String(slot),
    GENERATION: String(generation),
    SEED: String(SEED),
    KILL_P: String(KILL_P),
    // Until every point has been hit once, a restarted instance dies at a missing one first.
    FORCE: generation === 0 ? '' : missingPoint(killLog, POINTS),
    KILL_LOG: killLog,
    PKG_DIR: pkgDir,
    ...extraEnv,
  }));
  let stopped = false;
  const stop = async () => {
    if (!stopped) {
      stopped = true;
      await fleet.stop();
    }
  };
  cleanups.push(stop);
  await fleet.ready();

  const started = performance.now();
  let results;
  try {
    results = await pool(
      Array.from({ length: PAYMENTS }, (_, i) => async () => {
        const paymentId = `${RUN}-${variant}-p${i}`;
        const amount = 100 + i;
        let attempt = 0;
        const instances = [];
        try {
          const res = await retryFetch(
            'http://payments.invalid/api/payments',
            { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ paymentId, amount }) },
            {
              ...policy,
              // Attempts alternate between the two instances (payment i starts on instance i % 2).
              fetch: (input, init) => {
                const instance = (i + attempt++) % 2;
                instances.push(instance);
                return forwardTo(urls[instance], input, init);
              },
            },
          );
          const text = await res.text();
          let body = null;
          try {
            body = JSON.parse(text);
          } catch {
            body = text;
          }
          return { i, paymentId, status: res.status, replayed: res.headers.get('idempotent-replayed') === 'true', body, attempts: attempt, instances };
        } catch (error) {
          // Why each attempt failed: a status, or the network error's code.
          const why = (error?.attempts ?? []).map((a) => a.status ?? a.error?.cause?.code ?? a.error?.cause?.message ?? a.error?.message ?? '?');
          return { i, paymentId, status: 0, error: `${error?.name}: ${error?.message}`, reason: error?.reason, attempts: attempt, instances, why };
        }
      }),
      CONCURRENCY,
    );
  } finally {
    await stop();
  }
  const seconds = (performance.now() - started) / 1000;
  const kills = readKills(killLog);
  const counts = countKills(kills, POINTS);
  return { results, kills, counts, fleet, seconds };
}

/**
 * Every call of the run settled with an outcome: a status (the call resolved with a response)
 * or an error (it rejected), each in its own slot, in order. (`pool` fills its results as the
 * calls settle: a slot without one would be a call that never ended.)
 */
function assertEveryCallSettled(results) {
  assert.equal(results.length, PAYMENTS);
  for (let i = 0; i < PAYMENTS; i++) {
    const r = results[i];
    assert.ok(r !== undefined && r !== null, `payment ${i}: no outcome (the call never settled)`);
    assert.equal(r.i, i, `slot ${i} holds payment ${r.i}'s outcome`);
    const answered = Number.isInteger(r.status) && r.status >= 100 && r.status <= 599 && r.error === undefined;
    const failed = r.status === 0 && typeof r.error === 'string' && r.error !== '';
    assert.ok(answered || failed, `payment ${i}: settled with neither a response nor an error: ${JSON.stringify(r)}`);
  }
}

/** Groups `rows` ({ payment_id, id }) by payment id. */
function byPayment(rows) {
  const map = new Map();
  for (const r of rows) map.set(r.payment_id, [...(map.get(r.payment_id) ?? []), r]);
  return map;
}

function describeRun(variant, run, extra) {
  const attempts = run.results.reduce((s, r) => s + r.attempts, 0);
  const replayed = run.results.filter((r) => r.replayed).length;
  const unexpected = run.fleet.unexpectedExits().length;
  return `crash ${variant}: seed ${SEED}, kill_p ${KILL_P}, kills a=${run.counts.a} b=${run.counts.b} c=${run.counts.c} (${run.kills.length} in all, ${run.fleet.starts} starts${unexpected ? `, ${unexpected} UNEXPECTED EXITS` : ''}), ${PAYMENTS} payments, ${attempts} attempts, ${replayed} answered by a replay, ${extra}, ${run.seconds.toFixed(1)} s`;
}

function failedCalls(results) {
  return results.filter((r) => !(r.status >= 200 && r.status < 300));
}

async function createCharges(db, table) {
  // Its own serial id and NO unique constraint on payment_id: a double charge is two rows.
  await db.query(`CREATE TABLE "${table}" (id serial PRIMARY KEY, payment_id text NOT NULL, amount integer NOT NULL, instance integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${table}"`));
}

test('PostgresStore, charge through ctx.tx: 200 payments through SIGKILLs at 3 points on 2 instances, exactly one charge each', { skip: pgSkip, timeout: 180_000 }, async (t) => {
  const db = await pgTestPool();
  const charges = `crash_charges_pg_${RUN}`;
  const idemTable = `crash_idem_pg_${RUN}`;
  await createCharges(db, charges);
  await new PostgresStore({ pool: db, table: idemTable }).migrate();
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${idemTable}"`));

  const run = await runPayments('postgres', { DATABASE_URL, IDEM_TABLE: idemTable, CHARGES_TABLE: charges });
  const { rows } = await db.query(`SELECT id, payment_id FROM "${charges}" ORDER BY id`);
  const grouped = byPayment(rows);
  const doubles = [...grouped].filter(([, list]) => list.length > 1);
  const expectedIds = run.results.map((r) => r.paymentId);
  const lost = expectedIds.filter((id) => !grouped.has(id));
  t.diagnostic(describeRun('PostgresStore + ctx.tx', run, `${rows.length} charge rows, ${doubles.length} doubles, ${lost.length} lost, ${failedCalls(run.results).length} failed calls`));

  const context = () => `seed ${SEED}\n${run.fleet.stderrText()}`;
  assert.deepEqual(run.fleet.unexpectedExits(), [], `an instance exited other than by its own SIGKILL\n${context()}`);
  for (const p of POINTS) assert.ok(run.counts[p] >= 1, `kill point ${p} was hit (${JSON.stringify(run.counts)})`);
  assertEveryCallSettled(run.results);
  assert.deepEqual(failedCalls(run.results).slice(0, 5), [], `every payment call succeeds\n${context()}`);
  assert.deepEqual(doubles.slice(0, 5), [], 'no payment is charged twice');
  assert.deepEqual(lost.slice(0, 5), [], 'no payment is lost');
  assert.equal(rows.length, PAYMENTS, 'exactly one charge row per payment');
  assert.equal(grouped.size, PAYMENTS, 'distinct payment ids');
  // (not the store's secret: a row of scope '', read when the handler is made)
  const stored = await db.query(`SELECT count(*)::int AS n FROM "${idemTable}" WHERE scope <> ''`);
  assert.equal(stored.rows[0].n, PAYMENTS, 'one stored answer per key in the idempotency table');
  for (const r of run.results) {
    assert.equal(r.status, 201);
    assert.equal(r.body.paymentId, r.paymentId);
    assert.equal(r.body.chargeId, grouped.get(r.paymentId)[0].id, `payment ${r.paymentId}: the call returned the id of its charge row`);
  }
});

test('PostgresStore, charge through ctx.tx, the client\'s default options: no payment charged twice; the calls that gave up are reported', { skip: pgSkip, timeout: 180_000 }, async (t) => {
  const db = await pgTestPool();
  const charges = `crash_charges_pgdef_${RUN}`;
  const idemTable = `crash_idem_pgdef_${RUN}`;
  await createCharges(db, charges);
  await new PostgresStore({ pool: db, table: idemTable }).migrate();
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${idemTable}"`));

  // What users get: no option but the transport (which sends to the two instances).
  const run = await runPayments('postgres', { DATABASE_URL, IDEM_TABLE: idemTable, CHARGES_TABLE: charges }, {});
  const { rows } = await db.query(`SELECT id, payment_id FROM "${charges}" ORDER BY id`);
  const grouped = byPayment(rows);
  const doubles = [...grouped].filter(([, list]) => list.length > 1);
  const failed = failedCalls(run.results);
  const succeeded = run.results.filter((r) => !failed.includes(r));
  const chargedAnyway = failed.filter((r) => grouped.has(r.paymentId));
  const why = new Map();
  for (const r of failed) {
    const reason = r.status === 0 ? `${r.error.split(':')[0]}${r.reason ? ` (${r.reason})` : ''}` : `status ${r.status}`;
    why.set(reason, (why.get(reason) ?? 0) + 1);
  }
  const attemptsFailed = new Map(); // how the attempts of the calls that gave up failed
  for (const r of failed) for (const w of r.why ?? []) attemptsFailed.set(String(w), (attemptsFailed.get(String(w)) ?? 0) + 1);
  // (not the store's secret: a row of scope '', read when the handler is made)
  const stored = (await db.query(`SELECT count(*)::int AS n FROM "${idemTable}" WHERE scope <> ''`)).rows[0].n;
  t.diagnostic(describeRun('PostgresStore + ctx.tx, default client options', run, `${rows.length} charge rows, ${doubles.length} doubles, ${succeeded.length} calls succeeded, ${failed.length} gave up (${[...why].map(([k, n]) => `${n} ${k}`).join(', ') || 'none'}; their attempts: ${[...attemptsFailed].map(([k, n]) => `${n} ${k}`).join(', ') || 'none'}; ${chargedAnyway.length} of them charged all the same: a repeat with the same key replays that charge), ${stored} stored answers`));

  const context = () => `seed ${SEED}\n${run.fleet.stderrText()}`;
  assert.deepEqual(run.fleet.unexpectedExits(), [], `an instance exited other than by its own SIGKILL\n${context()}`);
  for (const p of POINTS) assert.ok(run.counts[p] >= 1, `kill point ${p} was hit (${JSON.stringify(run.counts)})`);
  assertEveryCallSettled(run.results);
  // What holds whatever the client's policy: the store, not the retries, makes it exactly once.
  assert.deepEqual(doubles.slice(0, 5), [], 'no payment is charged twice');
  assert.equal(rows.length, stored, 'every charge committed with its stored answer, and no answer without its charge');
  for (const r of succeeded) {
    assert.equal(r.status, 201, `payment ${r.paymentId}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.chargeId, grouped.get(r.paymentId)?.[0].id, `payment ${r.paymentId}: the call returned the id of its one charge row`);
  }
});

/**
 * Runs the 200 payments with an unkeyed charge (a plain pool.query outside the key's
 * transaction) and checks what must hold whatever the store: every call ends with a success
 * and no payment is lost. The doubles are reported: the window between the charge and the
 * stored answer stays open (README's crash table).
 */
async function unkeyedRun(t, variant, label, extraEnv) {
  const db = await pgTestPool();
  const charges = `crash_charges_${variant.replace('-', '_')}_${RUN}`;
  await createCharges(db, charges);
  const run = await runPayments(variant, { DATABASE_URL, CHARGES_TABLE: charges, ...extraEnv });
  const { rows } = await db.query(`SELECT id, payment_id FROM "${charges}" ORDER BY id`);
  const grouped = byPayment(rows);
  const doubles = [...grouped].filter(([, list]) => list.length > 1);
  const extra = rows.length - grouped.size;
  const lost = run.results.filter((r) => !grouped.has(r.paymentId));
  const failed = failedCalls(run.results);
  t.diagnostic(describeRun(label, run, `${rows.length} charge rows, ${doubles.length} payments charged more than once (${extra} extra charges; kills at b: ${run.counts.b}), ${lost.length} lost, ${failed.length} failed calls`));

  const context = () => `seed ${SEED}\n${run.fleet.stderrText()}`;
  assert.deepEqual(run.fleet.unexpectedExits(), [], `an instance exited other than by its own SIGKILL\n${context()}`);
  for (const p of POINTS) assert.ok(run.counts[p] >= 1, `kill point ${p} was hit (${JSON.stringify(run.counts)})`);
  // What must hold: every call settles, with a success, and nothing is lost.
  assertEveryCallSettled(run.results);
  assert.deepEqual(failed.slice(0, 5), [], `every payment call succeeds\n${context()}`);
  assert.deepEqual(lost.map((r) => r.paymentId).slice(0, 5), [], 'no payment is lost: at least one charge each');
  for (const r of run.results) {
    assert.ok(grouped.get(r.paymentId).some((row) => row.id === r.body.chargeId), `payment ${r.paymentId}: the returned charge id is one of its rows`);
  }
  // The window the test reports, seen: each kill at b came after its run's charge committed
  // on its own and before the answer was stored, so the retry charged that payment again.
  // (Kill point b is hit at least once in every run: see FORCE.) Kills elsewhere may add
  // doubles of the payments in flight on the killed instance; they are not counted here.
  const killedAtB = new Map();
  for (const k of run.kills.filter((k) => k.point === 'b')) killedAtB.set(k.paymentId, (killedAtB.get(k.paymentId) ?? 0) + 1);
  assert.ok(killedAtB.size >= 1, `kill point b was hit (${JSON.stringify(run.counts)})`);
  for (const [paymentId, kills] of killedAtB) {
    const charged = grouped.get(paymentId)?.length ?? 0;
    assert.ok(charged >= kills + 1, `payment ${paymentId}, killed ${kills} time(s) between its charge and complete(): ${charged} charge(s), expected the killed run's and the retry's (the window was not observed)`);
  }
  assert.ok(doubles.length >= killedAtB.size, `${doubles.length} payments charged more than once, ${killedAtB.size} killed at b`);
}

test('RedisStore, unkeyed charge (plain pool.query): the crash window between charge and complete stays open (reported)', { skip: pgSkip || redisSkip, timeout: 180_000 }, async (t) => {
  const prefix = `retry-fetch-crash:${RUN}:redis:`;
  cleanups.push(() => deleteRedisPrefix(prefix));
  await unkeyedRun(t, 'redis', 'RedisStore + unkeyed pool.query', { REDIS_URL, REDIS_PREFIX: prefix, LOCK_TIMEOUT_MS: '1000' });
});

test('PostgresStore, charge outside ctx.tx (plain pool.query): the crash window stays open too (reported)', { skip: pgSkip, timeout: 180_000 }, async (t) => {
  const idemTable = `crash_idem_pgout_${RUN}`;
  const db = await pgTestPool();
  await new PostgresStore({ pool: db, table: idemTable }).migrate();
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${idemTable}"`));
  await unkeyedRun(t, 'postgres-outside', 'PostgresStore + pool.query outside ctx.tx', { IDEM_TABLE: idemTable });
});

test('RedisStore, charge at a provider that dedupes by ctx.keyFor(\'charge\'): exactly one provider charge per payment', { skip: redisSkip, timeout: 180_000 }, async (t) => {
  const provider = await startProvider();
  cleanups.push(provider.close);
  const prefix = `retry-fetch-crash:${RUN}:provider:`;
  cleanups.push(() => deleteRedisPrefix(prefix));

  const run = await runPayments('provider', { REDIS_URL, REDIS_PREFIX: prefix, LOCK_TIMEOUT_MS: '1000', PROVIDER_URL: provider.url });
  const grouped = new Map();
  for (const c of provider.charges) grouped.set(c.paymentId, [...(grouped.get(c.paymentId) ?? []), c]);
  const doubles = [...grouped].filter(([, list]) => list.length > 1);
  const lost = run.results.filter((r) => !grouped.has(r.paymentId));
  const failed = failedCalls(run.results);
  t.diagnostic(describeRun('RedisStore + keyed provider', run, `${provider.calls()} provider calls, ${provider.charges.length} provider charges, ${doubles.length} doubles, ${lost.length} lost, ${failed.length} failed calls`));

  const context = () => `seed ${SEED}\n${run.fleet.stderrText()}`;
  assert.deepEqual(run.fleet.unexpectedExits(), [], `an instance exited other than by its own SIGKILL\n${context()}`);
  for (const p of POINTS) assert.ok(run.counts[p] >= 1, `kill point ${p} was hit (${JSON.stringify(run.counts)})`);
  assertEveryCallSettled(run.results);
  assert.deepEqual(failed.slice(0, 5), [], `every payment call succeeds\n${context()}`);
  assert.deepEqual(doubles.slice(0, 5), [], 'no payment is charged twice at the provider');
  assert.deepEqual(lost.map((r) => r.paymentId).slice(0, 5), [], 'no payment is lost');
  assert.equal(provider.charges.length, PAYMENTS, 'exactly one provider charge per payment');
  for (const r of run.results) {
    assert.equal(r.body.chargeId, grouped.get(r.paymentId)[0].chargeId, `payment ${r.paymentId}: the call returned its provider charge`);
  }
});

let redisClient = null;
async function deleteRedisPrefix(prefix) {
  if (redisClient === null) {
    const { createClient } = await import('redis');
    redisClient = createClient({ url: REDIS_URL, socket: { connectTimeout: 5_000, reconnectStrategy: false } });
    redisClient.on('error', () => {});
    await redisClient.connect();
  }
  for await (const keys of redisClient.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
    if (keys.length) await redisClient.del(keys);
  }
}
