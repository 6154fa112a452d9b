// Crash test: a Redis stream consumer behind `idempotent()` on a PostgresStore, killed mid-job,
// has exactly one effect per message.
//
// 200 messages are added to a stream (unique per run) read through a consumer group by two
// worker processes at a time (tests/crash/stream-worker.mjs; each start a consumer name of its
// own). A worker reads `XREADGROUP ... COUNT 5 BLOCK 200 STREAMS s >`, reclaims messages other
// consumers left pending with `XAUTOCLAIM s g <consumer> 500 <cursor> COUNT 5`, runs each one
// through `idempotent(fn, { store: PostgresStore, key: (msg) => msg.id })` whose effect is an
// INSERT through ctx.tx (the effects table has its own serial id and NO unique constraint on
// message_id: a double effect is two rows), then XACKs it. Workers SIGKILL themselves (seeded,
// KILL_P per kill point per run) before the effect (a), after the effect before the commit
// (b), after the commit before the XACK (c); this process starts them again until every
// message is delivered and acked (the group's pending list is empty). Every point is hit at
// least once: while one has not been hit, every restarted worker dies there on its first run.
//
// Expected: exactly one effect row per message (200 rows, 200 distinct message ids).
//
// Needs DATABASE_URL and REDIS_URL (skipped with a message otherwise). Optional: CRASH_SEED
// (default: random, printed), CRASH_KILL_P (default 0.03).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { PostgresStore } from '../../pkg/server.js';
import { Fleet, readKills, countKills, missingPoint, runId, tempDir, snapshotPackage } from './harness.mjs';
import { DATABASE_URL, REDIS_URL, needs } from '../support/services.mjs';

const WORKER_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'stream-worker.mjs');
const MESSAGES = 200;
const WORKERS = 2;
const POINTS = ['a', 'b', 'c'];
const KILL_P = Number(process.env.CRASH_KILL_P ?? '0.03');
const SEED = Number(process.env.CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RUN = runId();
const DRAIN_TIMEOUT_MS = 90_000;

const skip = needs('DATABASE_URL', 'REDIS_URL');

// Run last first, after the test: workers, tables, stream; then the clients.
const cleanups = [];
let db = null;
let redis = null;
after(async () => {
  while (cleanups.length > 0) await cleanups.pop()().catch(() => {});
  await redis?.close().catch(() => redis.destroy());
  await db?.end().catch(() => {});
});

test(`a stream worker behind idempotent() + PostgresStore, SIGKILLed at 3 points: ${MESSAGES} messages, exactly one effect each`, { skip, timeout: 150_000 }, async (t) => {
  const { default: pg } = await import('pg');
  const { createClient } = await import('redis');
  db = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  db.on('error', () => {});
  redis = createClient({ url: REDIS_URL, socket: { connectTimeout: 5_000, reconnectStrategy: false } });
  redis.on('error', () => {});
  await redis.connect();

  const effects = `crash_effects_${RUN}`;
  const idemTable = `crash_idem_stream_${RUN}`;
  const stream = `retry-fetch-crash:${RUN}:stream`;
  const group = 'g';
  // Its own serial id and NO unique constraint on message_id: a double effect is two rows.
  await db.query(`CREATE TABLE "${effects}" (id serial PRIMARY KEY, message_id text NOT NULL, n integer NOT NULL, consumer text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${effects}"`));
  await new PostgresStore({ pool: db, table: idemTable }).migrate();
  cleanups.push(() => db.query(`DROP TABLE IF EXISTS "${idemTable}"`));
  cleanups.push(() => redis.del(stream));

  await redis.xGroupCreate(stream, group, '0', { MKSTREAM: true });
  const ids = [];
  for (let n = 0; n < MESSAGES; n++) ids.push(await redis.xAdd(stream, '*', { n: String(n) }));
  const lastId = ids.at(-1);

  const tmp = tempDir();
  cleanups.push(async () => tmp.cleanup());
  const killLog = path.join(tmp.dir, 'stream.kills');
  const eventLog = path.join(tmp.dir, 'stream.events');
  const pkgDir = await snapshotPackage(tmp.dir); // what the workers load: pkg/ may be rebuilt meanwhile
  const fleet = new Fleet(WORKER_SCRIPT, WORKERS, (slot, generation) => ({
    REDIS_URL,
    STREAM: stream,
    GROUP: group,
    CONSUMER: `w${slot}-g${generation}`,
    MIN_IDLE_MS: '500',
    DATABASE_URL,
    IDEM_TABLE: idemTable,
    EFFECTS_TABLE: effects,
    SLOT: String(slot),
    GENERATION: String(generation),
    SEED: String(SEED),
    KILL_P: String(KILL_P),
    // Until every point has been hit once, a restarted worker dies at a missing one first.
    FORCE: generation === 0 ? '' : missingPoint(killLog, POINTS),
    KILL_LOG: killLog,
    EVENT_LOG: eventLog,
    PKG_DIR: pkgDir,
  }));
  let stopped = false;
  const stop = async () => {
    if (!stopped) {
      stopped = true;
      await fleet.stop();
    }
  };
  cleanups.push(stop);
  const started = performance.now();
  await fleet.ready();

  // Until every message is delivered (the group read up to the last id) and acked (nothing pending).
  let info;
  const drainedBy = Date.now() + DRAIN_TIMEOUT_MS;
  for (;;) {
    [info] = await redis.xInfoGroups(stream);
    if (info['last-delivered-id'] === lastId && info.pending === 0) break;
    if (Date.now() > drainedBy) break;
    await sleep(100);
  }
  await stop();
  const seconds = (performance.now() - started) / 1000;

  const kills = readKills(killLog);
  const counts = countKills(kills, POINTS);
  const events = readKills(eventLog);
  const claims = events.filter((e) => e.type === 'claim').length;
  const replays = events.filter((e) => e.type === 'replay').length;
  const { rows } = await db.query(`SELECT id, message_id FROM "${effects}" ORDER BY id`);
  const perMessage = new Map();
  for (const r of rows) perMessage.set(r.message_id, (perMessage.get(r.message_id) ?? 0) + 1);
  const doubles = [...perMessage].filter(([, n]) => n > 1);
  const missing = ids.filter((id) => !perMessage.has(id));
  t.diagnostic(
    `crash stream worker: seed ${SEED}, kill_p ${KILL_P}, kills a=${counts.a} b=${counts.b} c=${counts.c} (${kills.length} in all, ${fleet.starts} starts), ${MESSAGES} messages, ${claims} reclaimed by XAUTOCLAIM, ${replays} answered by the stored result, ${rows.length} effect rows, ${doubles.length} doubles, ${missing.length} lost, pending at the end ${info.pending}, ${seconds.toFixed(1)} s`,
  );

  const context = () => `seed ${SEED}\n${fleet.stderrText()}`;
  assert.deepEqual(fleet.unexpectedExits(), [], `a worker exited other than by its own SIGKILL\n${context()}`);
  assert.equal(info['last-delivered-id'], lastId, `every message was delivered within ${DRAIN_TIMEOUT_MS} ms\n${context()}`);
  assert.equal(info.pending, 0, `every message was acked within ${DRAIN_TIMEOUT_MS} ms\n${context()}`);
  for (const p of POINTS) assert.ok(counts[p] >= 1, `kill point ${p} was hit (${JSON.stringify(counts)})`);
  assert.deepEqual(doubles.slice(0, 5), [], 'no message has two effects');
  assert.deepEqual(missing.slice(0, 5), [], 'no message is without an effect');
  assert.equal(rows.length, MESSAGES, 'exactly one effect row per message');
  assert.equal(perMessage.size, MESSAGES, 'distinct message ids');
  // (not the store's secret: a row of scope '', read when the handler is made)
  const stored = await db.query(`SELECT count(*)::int AS n FROM "${idemTable}" WHERE scope <> ''`);
  assert.equal(stored.rows[0].n, MESSAGES, 'one stored result per message in the idempotency table');
});
