/**
 * retry-fetch/fastify: the idempotency companion (`retry-fetch/server`) as a Fastify 5
 * plugin. A request with an `Idempotency-Key` runs the route once; a repeat gets the stored
 * answer byte for byte (`Idempotent-Replayed: true`); a duplicate in flight waits for the
 * first; the same key with another request is a 422. Every rule is the companion's (see
 * `idempotency` in server.d.ts): the plugin only translates between Fastify and the
 * companion's fetch `Request` and `Response`.
 *
 * ```ts
 * import Fastify from 'fastify';
 * import pg from 'pg';
 * import { PostgresStore } from 'retry-fetch/server';
 * import { idempotency } from 'retry-fetch/fastify';
 *
 * const store = new PostgresStore({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) });
 * await store.migrate();
 * const app = Fastify();
 * await app.register(idempotency, { store });
 * app.post('/payments', async (request, reply) => {
 *   const tx = request.idempotency!.tx as pg.PoolClient; // the transaction that holds the key
 *   const { amount } = request.body as { amount: number };
 *   const { rows } = await tx.query('INSERT INTO payments (amount) VALUES ($1) RETURNING id', [amount]);
 *   return reply.code(201).send({ payment: rows[0].id }); // committed with the stored answer, or not at all
 * });
 * ```
 *
 * - **Where it applies.** The plugin is not encapsulated (as with fastify-plugin): its hooks
 *   go to the context it is registered in, so every route of that context and of its child
 *   contexts goes through it, wherever the route is declared. To cover some routes only,
 *   register it inside a plugin of their own; a route opts out with
 *   `config: { idempotency: false }`. A request that matches no route (Fastify's 404) is not
 *   touched.
 * - **Body.** Fastify's parsing stays on: the fingerprint is of what the parser made
 *   (`canonicalBody(request.body)`: a string as UTF-8, bytes as they are, anything else as
 *   JSON with sorted keys), or of `request.rawBody` when a raw-body plugin set it.
 * - **Hooks.** `preHandler`: the companion answers (replay, 400, 409, 413, 422, 503) and the
 *   route does not run, or it holds the key and `request.idempotency` is set. `onSend`: the
 *   route's answer (status, headers, payload: a string, Buffer or stream) is what the
 *   companion stores, and what it answers is sent. A route that throws reaches Fastify's error
 *   handler (`setErrorHandler`, or Fastify's own) as usual: the answer it gives is the route's
 *   answer, kept like any other (a 5xx after `ctx.tx` writes is rolled back and the key freed).
 * - **Headers set before the hook** (by `onRequest` hooks: CORS, a session) are sent with
 *   every answer, the companion's own and replays included.
 * - `request.idempotency.tx` is usable until the route's answer reaches `onSend`: that answer
 *   is what commits it.
 * - The answer is buffered: not for streaming answers, nor for a route that hijacks the reply
 *   (`reply.hijack()`: its key ends with a 500 problem). A request the companion lets through
 *   (no key, or an ignored method such as GET) is answered as without the plugin, streams
 *   included.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { IdempotencyContext, IdempotencyOptions } from './server.js';

/** The options of `idempotency()` but `acceptAfterMs`, which the adapter refuses (a 202 sent ahead of the route would leave its answer nowhere to go). */
export type AdapterOptions<Tx = unknown> = Omit<IdempotencyOptions<Tx>, 'acceptAfterMs'>;

export type { IdempotencyContext, IdempotencyOptions } from './server.js';

/**
 * The plugin: `await app.register(idempotency, options)`. One companion (and, without a
 * `store` option, one `MemoryStore`) per registration.
 *
 * Its options are the companion's (`store`, `header`, `required`, `identity`, `secret`,
 * `ttlMs`, `lockTimeoutMs`, `concurrent`, `waitTimeoutMs`, `pollMs`, `maxBodyBytes`,
 * `handlerTimeoutMs`, `storeTimeoutMs`, `ignoredMethods`, `onStoreError`, `onError`), with their defaults: see
 * `IdempotencyOptions`; Fastify's own register options (`prefix`, `logLevel`,
 * `logSerializers`) are left out of them. An invalid or unknown option fails the
 * registration with a TypeError naming it.
 */
export declare const idempotency: FastifyPluginAsync<AdapterOptions>;
export default idempotency;

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Set by retry-fetch/fastify before the route runs: the request's idempotency context
     * (`key`, `keyFor(name)`, `tx`); `null` on a route of its context that opts out
     * (`config: { idempotency: false }`), `undefined` on a route outside the context it was
     * registered in (Fastify's encapsulation: the plugin never sees those). `tx` is the
     * store's transaction (`PostgresStore`: a `pg` client; cast it to your client's type).
     */
    idempotency: IdempotencyContext | null | undefined;
  }
  interface FastifyContextConfig {
    /** `false`: this route does not go through retry-fetch/fastify's `idempotency` plugin. @default true */
    idempotency?: boolean;
  }
}
