// Crash test of retry-fetch/express: exactly-once payments through process crashes, across
// two Express instances. Like payments.test.mjs's PostgresStore variant, with an Express 5 app
// (express.json(), then the adapter, then the route) in front of the companion.
//
// Two express-payment-server.mjs instances (separate node processes) share one PostgresStore
// table. A client `retryFetch` (the package) POSTs 200 payments, 20 at a time, each with its
// own Idempotency-Key (added by retryFetch) and payment id; its attempts alternate between the
// two instances. The route inserts the charge through req.idempotency.tx (the transaction that
// holds the key: committed with the stored answer or rolled back with it). The instances
// SIGKILL themselves at random moments (seeded, KILL_P per kill point per route run):
//   a: in the route, before the charge (the key is held),
//   b: after the charge, before the commit (before the store's complete()),
//   c: after the commit, before the answer is written (after complete() resolved);
// this process starts each killed instance again on its port. Every point is hit at least
// once: while one has not been hit, every restarted instance dies there on its first run.
// Asserted: every call succeeds, 0 payments charged twice, 0 lost, one stored answer each.
//
// Needs DATABASE_URL (skipped with a message without it). Optional: CRASH_SEED (default:
// random, printed), CRASH_KILL_P (default 0.02).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { retryFetch } from '../../pkg/index.node.js';
import { PostgresStore } from '../../pkg/server.js';
import { Fleet, freePort, readKills, countKills, missingPoint, runId, tempDir, pool, snapshotPackage } from './harness.mjs';
import { DATABASE_URL, needs } from '../support/services.mjs';

const SERVER_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'express-payment-server.mjs');
const PAYMENTS = 200;
const CONCURRENCY = 20;
const POINTS = ['a', 'b', 'c'];
const KILL_P = Number(process.env.CRASH_KILL_P ?? '0.02');
const SEED = Number(process.env.CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RUN = runId();

// A policy that survives restarts: many attempts, short waits, every attempt bounded, no
// retry budget (instances die every few requests here: to a budget, a sustained failure).
const POLICY = { maxAttempts: 30, baseDelayMs: 20, maxDelayMs: 1_000, timeoutMs: 5_000, deadlineMs: 120_000, budget: false };

const skip = needs('DATABASE_URL');

// Run last first, after the test: children, tables, temporary directories; then the pool.
const cleanups = [];
let db = null;
after(async () => {
  while (cleanups.length > 0) await cleanups.pop()().catch(() => {});
  await db?.end().catch(() => {});
});

/**
 * `fetch(input, init)` sent to `base` instead of the input's origin (same path and query).
 * retryFetch calls its transport with the body bytes in `init.body`.
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

test('Express + retry-fetch/express + PostgresStore, charge through req.idempotency.tx: 200 payments through SIGKILLs at 3 points on 2 instances, exactly one charge each', { skip, timeout: 180_000 }, async (t) => {
  db = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
  db.on('error', () => {});
  const charges = `crash_charges_express_${RUN}`;
  const idemTable = `crash_idem_express_${RUN}`;
  // Its own serial id and NO unique constraint on payment_id: a double charge is two rows.
  await db.query(`CREATE TABLE "${charges}" (id serial PRIMARY KEY, payment_id text NOT NULL, amount integer NOT NULL, instance integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${charges}"`));
  await new PostgresStore({ pool: db, table: idemTable }).migrate();
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${idemTable}"`));

  const tmp = tempDir();
  cleanups.unshift(async () => tmp.cleanup()); // removed last
  const pkgDir = await snapshotPackage(tmp.dir);
  const killLog = path.join(tmp.dir, 'express.kills');
  const ports = [await freePort(), await freePort()];
  const urls = ports.map((p) => `http://127.0.0.1:${p}`);
  const fleet = new Fleet(SERVER_SCRIPT, 2, (slot, generation) => ({
    PORT: String(ports[slot]),
    INSTANCE: String(slot),
    GENERATION: String(generation),
    SEED: String(SEED),
    KILL_P: String(KILL_P),
    // Until every point has been hit once, a restarted instance dies at a missing one first.
    FORCE: generation === 0 ? '' : missingPoint(killLog, POINTS),
    KILL_LOG: killLog,
    PKG_DIR: pkgDir,
    DATABASE_URL,
    IDEM_TABLE: idemTable,
    CHARGES_TABLE: charges,
  }));
  cleanups.push(() => fleet.stop());
  await fleet.ready();

  const started = performance.now();
  let results;
  try {
    results = await pool(
      Array.from({ length: PAYMENTS }, (_, i) => async () => {
        const paymentId = `${RUN}-express-p${i}`;
        let attempt = 0;
        try {
          const res = await retryFetch(
            'http://payments.invalid/api/payments',
            { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ paymentId, amount: 100 + i }) },
            {
              ...POLICY,
              // Attempts alternate between the two instances (payment i starts on instance i % 2).
              fetch: (input, init) => forwardTo(urls[(i + attempt++) % 2], input, init),
            },
          );
          const text = await res.text();
          let body = text;
          try {
            body = JSON.parse(text);
          } catch {
            // not JSON: kept as text for the failure message
          }
          return { paymentId, status: res.status, replayed: res.headers.get('idempotent-replayed') === 'true', body, attempts: attempt };
        } catch (error) {
          const why = (error?.attempts ?? []).map((a) => a.status ?? a.error?.cause?.code ?? a.error?.message ?? '?');
          return { paymentId, status: 0, error: `${error?.name}: ${error?.message}`, attempts: attempt, why };
        }
      }),
      CONCURRENCY,
    );
  } finally {
    await fleet.stop();
  }
  const seconds = (performance.now() - started) / 1000;
  const kills = readKills(killLog);
  const counts = countKills(kills, POINTS);

  const { rows } = await db.query(`SELECT id, payment_id FROM "${charges}" ORDER BY id`);
  const grouped = new Map();
  for (const r of rows) grouped.set(r.payment_id, [...(grouped.get(r.payment_id) ?? []), r]);
  const doubles = [...grouped].filter(([, list]) => list.length > 1);
  const lost = results.filter((r) => !grouped.has(r.paymentId)).map((r) => r.paymentId);
  const failed = results.filter((r) => !(r.status >= 200 && r.status < 300));
  const attempts = results.reduce((s, r) => s + r.attempts, 0);
  const replayed = results.filter((r) => r.replayed).length;
  const unexpected = fleet.unexpectedExits();
  t.diagnostic(`crash Express + retry-fetch/express + PostgresStore + ctx.tx: seed ${SEED}, kill_p ${KILL_P}, kills a=${counts.a} b=${counts.b} c=${counts.c} (${kills.length} in all, ${fleet.starts} starts${unexpected.length ? `, ${unexpected.length} UNEXPECTED EXITS` : ''}), ${PAYMENTS} payments, ${attempts} attempts, ${replayed} answered by a replay, ${rows.length} charge rows, ${doubles.length} doubles, ${lost.length} lost, ${failed.length} failed calls, ${seconds.toFixed(1)} s`);

  const context = () => `seed ${SEED}\n${fleet.stderrText()}`;
  assert.deepEqual(unexpected, [], `an instance exited other than by its own SIGKILL\n${context()}`);
  for (const p of POINTS) assert.ok(counts[p] >= 1, `kill point ${p} was hit (${JSON.stringify(counts)})`);
  assert.deepEqual(failed.slice(0, 5), [], `every payment call succeeds\n${context()}`);
  assert.deepEqual(doubles.slice(0, 5), [], 'no payment is charged twice');
  assert.deepEqual(lost.slice(0, 5), [], 'no payment is lost');
  assert.equal(rows.length, PAYMENTS, 'exactly one charge row per payment');
  // (not the store's secret: a row of scope '', read when the handler is made)
  const stored = await db.query(`SELECT count(*)::int AS n, count(*) FILTER (WHERE (response->>'status')::int = 201)::int AS created FROM "${idemTable}" WHERE scope <> ''`);
  assert.deepEqual(stored.rows[0], { n: PAYMENTS, created: PAYMENTS }, 'one stored 201 per key in the idempotency table');
  for (const r of results) {
    assert.equal(r.status, 201);
    assert.equal(r.body.paymentId, r.paymentId);
    assert.equal(r.body.chargeId, grouped.get(r.paymentId)[0].id, `payment ${r.paymentId}: the call returned the id of its charge row`);
  }
});
