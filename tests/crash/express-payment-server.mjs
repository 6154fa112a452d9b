// One Express payment-server instance for tests/crash/express-payments.test.mjs: an Express 5
// app with express.json() and retry-fetch/express in front of the charge route, PostgresStore,
// the charge inserted through ctx.tx (req.idempotency.tx), served on 127.0.0.1:$PORT, that
// SIGKILLs itself at random moments (seeded). The test starts two of these on one store and
// starts each one again when it dies.
//
// Kill points, chosen once per route run (a replayed answer never runs the route):
//   a: in the route, once the key is held, before the charge;
//   b: after the charge, before the commit (the store's complete() is wrapped: the process
//      dies BEFORE the real complete() is called);
//   c: after the commit, before the answer is written (dies once complete() has resolved).
// Every kill is appended (synchronously) to $KILL_LOG as one JSON line before the SIGKILL
// (kill-switch.mjs).
//
// Environment: PORT, INSTANCE (0 or 1), GENERATION, SEED, KILL_P, FORCE (a|b|c|''), KILL_LOG,
// DATABASE_URL, IDEM_TABLE, CHARGES_TABLE, PKG_DIR (default: pkg/).
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import express from 'express';
import pg from 'pg';
import { killSwitch } from './kill-switch.mjs';

// The package: pkg/, or the copy of it the test made (PKG_DIR; see snapshotPackage in harness.mjs).
const pkgDir = process.env.PKG_DIR || new URL('../../pkg/', import.meta.url).pathname;
const { PostgresStore } = await import(pathToFileURL(path.join(pkgDir, 'server.js')).href);
const { idempotency } = await import(pathToFileURL(path.join(pkgDir, 'express.js')).href);

const env = process.env;
const INSTANCE = Number(env.INSTANCE);
const GENERATION = Number(env.GENERATION);

const { decide, die } = killSwitch({
  seed: Number(env.SEED) * 7919 + INSTANCE * 104729 + GENERATION * 1299709,
  killP: Number(env.KILL_P ?? '0'),
  force: env.FORCE || '',
  logFile: env.KILL_LOG,
  who: { instance: INSTANCE, generation: GENERATION },
});

// The test process holds the IPC channel: when it goes, so does this instance.
process.on('disconnect', () => process.exit(0));

const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 10, connectionTimeoutMillis: 10_000 });
pool.on('error', (error) => console.error(`instance ${INSTANCE}: idle pg client error: ${error.message}`));
const store = new PostgresStore({ pool, table: env.IDEM_TABLE });
await store.migrate();

// Kill points b and c: around the store's complete() (the commit of the key's answer and of
// the charge written through ctx.tx).
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

const app = express();
app.set('env', 'test'); // the route's errors are not logged by Express's handler (they are reported below)
app.post(
  '/api/payments',
  express.json(),
  idempotency({
    store,
    onStoreError: (error, operation) => console.error(`instance ${INSTANCE}: store ${operation} failed: ${error?.message ?? error}`),
    onError: (error) => console.error(`instance ${INSTANCE}: route failed: ${error?.stack ?? error}`),
  }),
  async (req, res) => {
    const { paymentId, amount } = req.body;
    const ctx = req.idempotency;
    const point = decide();
    if (point === 'a') die('a', { paymentId });
    const { rows } = await ctx.tx.query(
      `INSERT INTO "${env.CHARGES_TABLE}" (payment_id, amount, instance) VALUES ($1, $2, $3) RETURNING id`,
      [paymentId, amount, INSTANCE],
    );
    if (point !== '') dieAtComplete.set(ctx.key, { point, paymentId });
    res.status(201).json({ paymentId, chargeId: rows[0].id, instance: INSTANCE });
  },
);
app.use((error, req, res, next) => {
  console.error(`instance ${INSTANCE}: express error: ${error?.stack ?? error}`);
  next(error);
});

const server = http.createServer(app);
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
