// One payment-server instance for tests/crash/payments.test.mjs: a charge handler behind the
// package's idempotency companion, served on 127.0.0.1:$PORT, that SIGKILLs itself at random
// moments (seeded) so that the test can check exactly-once through crashes. The test process
// starts two of these on one shared store and starts each one again when it dies.
//
// Kill points, chosen once per handler run (a replayed answer never runs the handler):
//   a: in the handler, once the key is held, before the charge;
//   b: after the charge, before the commit (the store's complete() is wrapped: the process
//      dies BEFORE the real complete() is called);
//   c: after the commit, before the answer (dies once the real complete() has resolved).
// Every kill is appended (synchronously) to $KILL_LOG as one JSON line before the SIGKILL.
//
// Environment:
//   PORT, INSTANCE (0 or 1), GENERATION (how many times this instance was started before),
//   SEED, KILL_P (probability per kill point per handler run), FORCE (a|b|c|'': the first
//   handler run of this process dies at that point), KILL_LOG (file path);
//   VARIANT: 'postgres'  PostgresStore, the charge inserted through ctx.tx (keyed: commits with
//                        the stored answer or not at all);
//            'redis'     RedisStore, the charge inserted with pool.query (an unkeyed effect);
//            'postgres-outside'  PostgresStore, the charge inserted with pool.query, outside
//                        the key's transaction (an unkeyed effect);
//            'provider'  RedisStore, the charge made at a fake provider that dedupes by the
//                        Idempotency-Key it receives (ctx.keyFor('charge'));
//   DATABASE_URL, IDEM_TABLE, CHARGES_TABLE (postgres and redis); REDIS_URL, REDIS_PREFIX,
//   LOCK_TIMEOUT_MS (redis and provider); PROVIDER_URL (provider); PKG_DIR (default: pkg/).
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { killSwitch } from './kill-switch.mjs';

// The package: pkg/, or the copy of it the test made (PKG_DIR; see snapshotPackage in harness.mjs).
const pkgDir = process.env.PKG_DIR || new URL('../../pkg/', import.meta.url).pathname;
const { idempotency, PostgresStore, RedisStore, toNodeHandler } = await import(pathToFileURL(path.join(pkgDir, 'server.js')).href);

const env = process.env;
const VARIANT = env.VARIANT;
const INSTANCE = Number(env.INSTANCE);
const GENERATION = Number(env.GENERATION);
const KILL_P = Number(env.KILL_P ?? '0');

const { decide, die } = killSwitch({
  seed: Number(env.SEED) * 7919 + INSTANCE * 104729 + GENERATION * 1299709,
  killP: KILL_P,
  force: env.FORCE || '',
  logFile: env.KILL_LOG,
  who: { instance: INSTANCE, generation: GENERATION },
});

// The test process holds the IPC channel: when it goes, so does this instance.
process.on('disconnect', () => process.exit(0));

let pool = null;
const ON_POSTGRES = VARIANT === 'postgres' || VARIANT === 'postgres-outside';
if (ON_POSTGRES || VARIANT === 'redis') {
  const { default: pg } = await import('pg');
  pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 10, connectionTimeoutMillis: 10_000 });
  pool.on('error', (error) => console.error(`instance ${INSTANCE}: idle pg client error: ${error.message}`));
}

// The charge outside ctx.tx goes through a pool of its own: on the store's pool it would wait
// for a connection that the keys in progress hold (each holds one until its answer commits).
let chargePool = pool;
if (VARIANT === 'postgres-outside') {
  const { default: pg } = await import('pg');
  chargePool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 10, connectionTimeoutMillis: 10_000 });
  chargePool.on('error', (error) => console.error(`instance ${INSTANCE}: idle pg client error: ${error.message}`));
}

let store;
if (ON_POSTGRES) {
  store = new PostgresStore({ pool, table: env.IDEM_TABLE });
  await store.migrate();
} else {
  const { createClient } = await import('redis');
  const client = createClient({ url: env.REDIS_URL, socket: { connectTimeout: 5_000 } });
  client.on('error', (error) => console.error(`instance ${INSTANCE}: redis error: ${error.message}`));
  await client.connect();
  store = new RedisStore({ client, prefix: env.REDIS_PREFIX });
}

// Kill points b and c: around the store's complete() (the commit of the key's answer and, with
// PostgresStore, of the charge written through ctx.tx).
const dieAtComplete = new Map(); // idempotency key -> { point, paymentId }
const realComplete = store.complete.bind(store);
store.complete = async (key, token, record, ttlMs) => {
  const idempotencyKey = key.slice(key.indexOf(':') + 1);
  const planned = dieAtComplete.get(idempotencyKey);
  dieAtComplete.delete(idempotencyKey);
  if (planned?.point === 'b') die('b', { paymentId: planned.paymentId });
  const done = await realComplete(key, token, record, ttlMs);
  if (planned?.point === 'c') die('c', { paymentId: planned.paymentId });
  return done;
};

async function charge(paymentId, amount, ctx) {
  if (VARIANT === 'postgres') {
    const { rows } = await ctx.tx.query(
      `INSERT INTO "${env.CHARGES_TABLE}" (payment_id, amount, instance) VALUES ($1, $2, $3) RETURNING id`,
      [paymentId, amount, INSTANCE],
    );
    return rows[0].id;
  }
  if (VARIANT === 'redis' || VARIANT === 'postgres-outside') {
    // Outside any transaction: done the moment it returns, whatever happens to the key.
    const { rows } = await chargePool.query(
      `INSERT INTO "${env.CHARGES_TABLE}" (payment_id, amount, instance) VALUES ($1, $2, $3) RETURNING id`,
      [paymentId, amount, INSTANCE],
    );
    return rows[0].id;
  }
  const res = await fetch(env.PROVIDER_URL, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': ctx.keyFor('charge') },
    body: JSON.stringify({ paymentId, amount }),
  });
  if (!res.ok) throw new Error(`provider answered ${res.status}`);
  return (await res.json()).chargeId;
}

const handler = idempotency(
  async (request, ctx) => {
    const { paymentId, amount } = await request.json();
    const point = decide();
    if (point === 'a') die('a', { paymentId });
    const chargeId = await charge(paymentId, amount, ctx);
    if (point !== '') dieAtComplete.set(ctx.key, { point, paymentId });
    return Response.json({ paymentId, chargeId, instance: INSTANCE }, { status: 201 });
  },
  {
    store,
    ...(env.LOCK_TIMEOUT_MS ? { lockTimeoutMs: Number(env.LOCK_TIMEOUT_MS) } : {}),
    onStoreError: (error, operation) => console.error(`instance ${INSTANCE}: store ${operation} failed: ${error?.message ?? error}`),
  },
);

const server = http.createServer(
  toNodeHandler(handler, {
    onError: (error) => {
      if (error?.name !== 'AbortError') console.error(`instance ${INSTANCE}: handler failed: ${error?.stack ?? error}`);
    },
  }),
);
server.keepAliveTimeout = 1_000;
// The port is this instance's for the whole test; right after a kill it may still be taken
// for a moment: try again rather than die.
let listenTries = 0;
server.on('error', (error) => {
  if (error?.code !== 'EADDRINUSE' || ++listenTries > 100) throw error;
  setTimeout(() => server.listen(Number(env.PORT), '127.0.0.1'), 50);
});
server.once('listening', () => process.send?.({ ready: true }));
server.listen(Number(env.PORT), '127.0.0.1');
