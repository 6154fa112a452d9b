// One worker process for tests/crash/dead-letter.test.mjs: consumes a Redis stream through a
// consumer group and runs each message through `idempotent(fn, { store: RedisStore, maxRuns,
// onDeadLetter })`. A message marked `poison` SIGKILLs the process in the middle of its job,
// every time: only the dead letters end it. `onDeadLetter` moves the record to the stream
// `<STREAM>:dead`; a message whose job was dead-lettered (IdempotencyError
// 'previous-run-failed') is acked, as are the ones that ran; any other failure leaves it
// pending for the next worker (XAUTOCLAIM). The worker exits 0 once nothing is pending.
//
// Environment: REDIS_URL, STREAM, GROUP, CONSUMER, PREFIX (the store's), MAX_RUNS, RUN_LOG
// (one JSON line per job run, appended before the job's effect or death), PKG_DIR.
import { appendFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createClient } from 'redis';

const env = process.env;
const pkgDir = env.PKG_DIR || new URL('../../pkg/', import.meta.url).pathname;
const { idempotent, RedisStore } = await import(pathToFileURL(path.join(pkgDir, 'server.js')).href);

const redis = createClient({ url: env.REDIS_URL, socket: { connectTimeout: 5_000 } });
redis.on('error', (error) => console.error(`${env.CONSUMER}: redis error: ${error.message}`));
await redis.connect();
const store = new RedisStore({ client: redis, prefix: env.PREFIX });

const job = idempotent(
  async (msg) => {
    appendFileSync(env.RUN_LOG, `${JSON.stringify({ id: msg.id, consumer: env.CONSUMER })}\n`);
    if (msg.poison) {
      await new Promise((resolve) => setTimeout(resolve, 20)); // mid-job
      process.kill(process.pid, 'SIGKILL');
    }
    return { done: msg.id };
  },
  {
    store,
    key: (msg) => msg.id,
    lockTimeoutMs: 1000,
    maxRuns: Number(env.MAX_RUNS),
    onDeadLetter: async (record) => {
      await redis.xAdd(`${env.STREAM}:dead`, '*', { record: JSON.stringify(record) });
    },
  },
);

async function handle(entry) {
  const msg = { id: entry.message.id, poison: entry.message.poison === '1' };
  try {
    await job(msg);
  } catch (error) {
    if (error?.code !== 'previous-run-failed') {
      console.error(`${env.CONSUMER}: ${entry.id} failed: ${error?.message ?? error}`);
      return; // left pending: delivered again
    }
  }
  await redis.xAck(env.STREAM, env.GROUP, entry.id);
}

for (;;) {
  const claimed = await redis.xAutoClaim(env.STREAM, env.GROUP, env.CONSUMER, 0, '0-0', { COUNT: 10 });
  let entries = claimed.messages.filter((m) => m !== null);
  if (entries.length === 0) {
    const reply = await redis.xReadGroup(env.GROUP, env.CONSUMER, { key: env.STREAM, id: '>' }, { COUNT: 10, BLOCK: 100 });
    entries = reply?.[0]?.messages ?? [];
  }
  for (const entry of entries) await handle(entry);
  if (entries.length === 0) {
    const pending = await redis.xPending(env.STREAM, env.GROUP);
    if (pending.pending === 0) break;
  }
}
await redis.quit();
process.exit(0);
