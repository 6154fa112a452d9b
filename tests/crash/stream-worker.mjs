// One worker process for tests/crash/stream-worker.test.mjs: consumes a Redis stream through a
// consumer group, runs each message through the package's `idempotent()` on a PostgresStore
// (the effect is an INSERT through ctx.tx, committed with the stored result or not at all),
// then XACKs it. It reclaims other consumers' stuck messages with XAUTOCLAIM (redelivery) and
// SIGKILLs itself at random moments (seeded), at three points:
//   a: once the message's key is held, before the effect;
//   b: after the effect, before the commit (the store's complete() is wrapped: the process
//      dies BEFORE the real complete() is called);
//   c: after the commit, before the XACK (dies once the real complete() has resolved).
// Every kill is appended (synchronously) to $KILL_LOG as one JSON line before the SIGKILL; each
// reclaimed message and each replayed run (the stored result, the effect not run again) to
// $EVENT_LOG.
//
// Environment: REDIS_URL, STREAM, GROUP, CONSUMER, MIN_IDLE_MS; DATABASE_URL, IDEM_TABLE,
// EFFECTS_TABLE; SLOT, GENERATION, SEED, KILL_P (probability per kill point per run), FORCE
// (a|b|c|'': the first run of this process dies at that point), KILL_LOG, EVENT_LOG; PKG_DIR
// (default: pkg/).
import { appendFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { killSwitch } from './kill-switch.mjs';
import pg from 'pg';
import { createClient } from 'redis';

// The package: pkg/, or the copy of it the test made (PKG_DIR; see snapshotPackage in harness.mjs).
const pkgDir = process.env.PKG_DIR || new URL('../../pkg/', import.meta.url).pathname;
const { idempotent, PostgresStore } = await import(pathToFileURL(path.join(pkgDir, 'server.js')).href);

const env = process.env;
const SLOT = Number(env.SLOT);
const GENERATION = Number(env.GENERATION);
const KILL_P = Number(env.KILL_P ?? '0');
const MIN_IDLE_MS = Number(env.MIN_IDLE_MS ?? '500');

const { decide, die } = killSwitch({
  seed: Number(env.SEED) * 7919 + SLOT * 104729 + GENERATION * 1299709,
  killP: KILL_P,
  force: env.FORCE || '',
  logFile: env.KILL_LOG,
  who: { slot: SLOT, generation: GENERATION, consumer: env.CONSUMER },
});

function event(type, messageId) {
  appendFileSync(env.EVENT_LOG, `${JSON.stringify({ type, messageId, consumer: env.CONSUMER })}\n`);
}

// The test process holds the IPC channel: when it goes, so does this worker.
process.on('disconnect', () => process.exit(0));

const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 5, connectionTimeoutMillis: 10_000 });
pool.on('error', (error) => console.error(`${env.CONSUMER}: idle pg client error: ${error.message}`));
const store = new PostgresStore({ pool, table: env.IDEM_TABLE });
await store.migrate();

const redis = createClient({ url: env.REDIS_URL, socket: { connectTimeout: 5_000 } });
redis.on('error', (error) => console.error(`${env.CONSUMER}: redis error: ${error.message}`));
await redis.connect();

// Kill points b and c: around the store's complete() (the commit of the effect and the result).
const dieAtComplete = new Map(); // message id -> point
const realComplete = store.complete.bind(store);
store.complete = async (key, token, record, ttlMs) => {
  const messageId = key.slice(key.indexOf(':') + 1);
  const point = dieAtComplete.get(messageId);
  dieAtComplete.delete(messageId);
  if (point === 'b') die('b', { messageId });
  const done = await realComplete(key, token, record, ttlMs);
  if (point === 'c') die('c', { messageId });
  return done;
};

let ran = false;
const processMessage = idempotent(
  async (msg, ctx) => {
    ran = true;
    const point = decide();
    if (point === 'a') die('a', { messageId: msg.id });
    const { rows } = await ctx.tx.query(
      `INSERT INTO "${env.EFFECTS_TABLE}" (message_id, n, consumer) VALUES ($1, $2, $3) RETURNING id`,
      [msg.id, msg.n, env.CONSUMER],
    );
    if (point !== '') dieAtComplete.set(msg.id, point);
    return { effect: rows[0].id };
  },
  {
    store,
    key: (msg) => msg.id,
    onStoreError: (error, operation) => console.error(`${env.CONSUMER}: store ${operation} failed: ${error?.message ?? error}`),
  },
);

async function handle(message) {
  ran = false;
  try {
    await processMessage({ id: message.id, n: Number(message.message.n) });
  } catch (error) {
    // Not acked: it stays pending and is delivered again (XAUTOCLAIM) later.
    console.error(`${env.CONSUMER}: message ${message.id} failed: ${error?.code ?? ''} ${error?.message ?? error}`);
    return;
  }
  if (!ran) event('replay', message.id);
  await redis.xAck(env.STREAM, env.GROUP, message.id);
}

process.send?.({ ready: true });
let cursor = '0-0';
for (;;) {
  // Messages another (dead) consumer left pending for MIN_IDLE_MS: take them over.
  const claimed = await redis.xAutoClaim(env.STREAM, env.GROUP, env.CONSUMER, MIN_IDLE_MS, cursor, { COUNT: 5 });
  cursor = claimed.nextId;
  let messages = claimed.messages.filter((m) => m !== null);
  for (const m of messages) event('claim', m.id);
  if (messages.length === 0) {
    const reply = await redis.xReadGroup(env.GROUP, env.CONSUMER, { key: env.STREAM, id: '>' }, { COUNT: 5, BLOCK: 200 });
    messages = reply?.[0]?.messages ?? [];
  }
  for (const m of messages) await handle(m);
}
