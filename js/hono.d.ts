/**
 * retry-fetch/hono: the idempotency companion (`retry-fetch/server`) as Hono 4 middleware
 * (on `@hono/node-server`, Bun, Deno or any runtime Hono runs on that has `node:fs`). A
 * request with an `Idempotency-Key` runs the route once; a repeat gets the stored answer byte
 * for byte (`Idempotent-Replayed: true`); a duplicate in flight waits for the first; the same
 * key with another request is a 422. Every rule is the companion's (see `idempotency` in
 * server.d.ts): the middleware only translates between Hono and the companion.
 *
 * ```ts
 * import { Hono } from 'hono';
 * import { serve } from '@hono/node-server';
 * import { zValidator } from '@hono/zod-validator';
 * import { idempotency } from 'retry-fetch/hono';
 *
 * const app = new Hono();
 * app.post('/payments', zValidator('json', Payment), idempotency({ store }), async (c) => {
 *   const { amount } = c.req.valid('json');
 *   const tx = c.var.idempotency.tx as pg.PoolClient; // the transaction that holds the key
 *   const { rows } = await tx.query('INSERT INTO payments (amount) VALUES ($1) RETURNING id', [amount]);
 *   return c.json({ payment: rows[0].id }, 201); // committed with the stored answer, or not at all
 * });
 * serve({ fetch: app.fetch, port: 8080 });
 * ```
 *
 * - **Body.** Before or after a validator: a body a validator (or `c.req.json()`...) already
 *   read is fingerprinted as Hono gives it back (`c.req.arrayBuffer()`: JSON as the text it
 *   parsed); an unread body is read by the companion (at most `maxBodyBytes`, else 413) and
 *   handed to Hono's body cache, so `c.req.json()`, `c.req.valid()` and a validator after
 *   the middleware work. `c.req.raw` becomes a Request over those bytes whose `signal` is the
 *   companion's (not aborted when the client goes away).
 * - **The route's answer** (`c.res` after `next()`) is what the companion stores, and `c.res`
 *   becomes what it answers (normally the same). A route that throws reaches `app.onError`
 *   (or Hono's own handler) as usual: the answer it gives is the route's answer, kept like any
 *   other (a 5xx after `ctx.tx` writes is rolled back and the key freed).
 * - **Headers set before the middleware** (CORS, a session cookie) are sent with every
 *   answer, the companion's own (400, 409, 422...) and replays included.
 * - The route reads the key's context as `c.get('idempotency')` or `c.var.idempotency`
 *   (declared in Hono's `ContextVariableMap`); its `tx` is usable until the route returns its
 *   answer, which commits it. With `handlerTimeoutMs`, `c.req.raw.signal` aborts when the time
 *   is up.
 * - The answer is buffered: not for streaming answers (`streamSSE()` and the like).
 */
import type { MiddlewareHandler } from 'hono';
import type { IdempotencyContext, IdempotencyOptions } from './server.js';

/** The options of `idempotency()` but `acceptAfterMs`, which the adapter refuses (a 202 sent ahead of the route would leave its answer nowhere to go). */
export type AdapterOptions<Tx = unknown> = Omit<IdempotencyOptions<Tx>, 'acceptAfterMs'>;

export type { IdempotencyContext, IdempotencyOptions } from './server.js';

/** The variables the middleware sets, for `new Hono<IdempotencyEnv<Tx>>()` (a typed `tx`). */
export interface IdempotencyEnv<Tx = unknown> {
  Variables: {
    /** The request's idempotency context: `key`, `keyFor(name)`, `tx`. */
    idempotency: IdempotencyContext<Tx>;
  };
}

/**
 * Make the middleware: one companion (and, without a `store` option, one `MemoryStore`) per
 * call, so make it once per set of routes that share keys, not per request.
 * @param options the companion's options (`store`, `header`, `required`, `identity`, `secret`,
 *   `ttlMs`, `lockTimeoutMs`, `concurrent`, `waitTimeoutMs`, `pollMs`, `maxBodyBytes`,
 *   `handlerTimeoutMs`, `storeTimeoutMs`, `ignoredMethods`, `onStoreError`, `onError`), with their defaults:
 *   see `IdempotencyOptions`. @default {} (a `MemoryStore`; keys required on POST and PATCH)
 * @throws TypeError when an option is invalid or unknown (naming it).
 */
export function idempotency<Tx = unknown>(options?: AdapterOptions<Tx>): MiddlewareHandler<IdempotencyEnv<Tx>>;

declare module 'hono' {
  interface ContextVariableMap {
    /**
     * Set by retry-fetch/hono's `idempotency()` before the route runs: the request's
     * idempotency context (`key`, `keyFor(name)`, `tx`). `tx` is the store's transaction
     * (`PostgresStore`: a `pg` client; cast it, or use `IdempotencyEnv<Tx>`). Typed as always
     * set, as Hono's own middleware variables are (this map is global), but `undefined` at
     * run time on a route the middleware does not cover.
     */
    idempotency: IdempotencyContext;
  }
}
