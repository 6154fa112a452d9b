// One instance for tests/crash/long-work.test.mjs: a charge that takes HANDLER_MS behind the
// idempotency companion with `acceptAfterMs` (a 202 while it runs) on a shared PostgresStore,
// the charge written through ctx.tx (it commits with the stored answer or not at all). It
// tells the test process when a handler run has written its charge ({ charging }), so the test
// can SIGKILL it mid-run.
//
// Environment: PORT, INSTANCE, DATABASE_URL, IDEM_TABLE, CHARGES_TABLE, HANDLER_MS,
// ACCEPT_AFTER_MS, LOCK_TIMEOUT_MS, PKG_DIR (default: pkg/).
import http from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';

const pkgDir = process.env.PKG_DIR || new URL('../../pkg/', import.meta.url).pathname;
const { idempotency, PostgresStore, toNodeHandler } = await import(pathToFileURL(path.join(pkgDir, 'server.js')).href);

const env = process.env;
const INSTANCE = Number(env.INSTANCE);
process.on('disconnect', () => process.exit(0));

const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 10, connectionTimeoutMillis: 10_000 });
pool.on('error', (error) => console.error(`instance ${INSTANCE}: idle pg client error: ${error.message}`));
const store = new PostgresStore({ pool, table: env.IDEM_TABLE });

const handler = idempotency(
  async (request, ctx) => {
    const { paymentId, amount } = await request.json();
    const { rows } = await ctx.tx.query(
      `INSERT INTO "${env.CHARGES_TABLE}" (payment_id, amount, instance) VALUES ($1, $2, $3) RETURNING id`,
      [paymentId, amount, INSTANCE],
    );
    process.send?.({ charging: { paymentId, key: ctx.key, instance: INSTANCE } });
    await new Promise((resolve) => setTimeout(resolve, Number(env.HANDLER_MS)));
    return Response.json({ paymentId, chargeId: rows[0].id, instance: INSTANCE }, { status: 201 });
  },
  {
    store,
    identity: false,
    acceptAfterMs: Number(env.ACCEPT_AFTER_MS),
    lockTimeoutMs: Number(env.LOCK_TIMEOUT_MS),
    onStoreError: (error, operation) => console.error(`instance ${INSTANCE}: store ${operation} failed: ${error?.message ?? error}`),
  },
);

const server = http.createServer(toNodeHandler(handler, { onError: (error) => console.error(`instance ${INSTANCE}: handler failed: ${error?.stack ?? error}`) }));
server.keepAliveTimeout = 1_000;
server.once('listening', () => process.send?.({ ready: true }));
server.listen(Number(env.PORT), '127.0.0.1');
