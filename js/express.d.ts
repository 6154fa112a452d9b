/**
 * retry-fetch/express: the idempotency companion (`retry-fetch/server`) as Express 5 and
 * Connect middleware. A request with an `Idempotency-Key` runs the route once; a repeat gets
 * the stored answer byte for byte (`Idempotent-Replayed: true`); a duplicate in flight waits
 * for the first; the same key with another request is a 422. Every rule is the companion's
 * (see `idempotency` in server.d.ts): the middleware only translates between Express and the
 * companion's fetch `Request` and `Response`.
 *
 * ```ts
 * import express from 'express';
 * import pg from 'pg';
 * import { PostgresStore } from 'retry-fetch/server';
 * import { idempotency } from 'retry-fetch/express';
 *
 * const store = new PostgresStore({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) });
 * await store.migrate();
 * const app = express();
 * app.post('/payments', express.json(), idempotency({ store }), async (req, res) => {
 *   const tx = req.idempotency!.tx as pg.PoolClient; // the transaction that holds the key
 *   const { rows } = await tx.query('INSERT INTO payments (amount) VALUES ($1) RETURNING id', [req.body.amount]);
 *   res.status(201).json({ payment: rows[0].id }); // committed with the stored answer, or not at all
 * });
 * ```
 *
 * - **Body parsers go before it.** After `express.json()`, `express.urlencoded()`,
 *   `express.text()` or `express.raw()` (or any parser that read the body), the fingerprint
 *   is of what the parser made (`canonicalBody(req.body)`: a string as UTF-8, bytes as they
 *   are, anything else as JSON with sorted keys). Without a parser before it, the middleware
 *   has the companion read the raw body (at most `maxBodyBytes`, else 413) and sets
 *   `req.body` to those bytes (a `Buffer`): a parser placed after it finds the body read and
 *   leaves `req.body` as it is; an upload parser (multer) reads a multipart body again.
 * - **The route's answer is buffered**: what it writes (`res.status()`, `res.json()`,
 *   `res.send()`, `res.writeHead()`, `res.write()`, `res.end()`, a piped stream) is held
 *   until the companion has stored it, then sent; `res.headersSent` turns true as the route
 *   writes. Not for streaming answers, except to a request the companion lets through (no
 *   key, or an ignored method such as GET): that answer is written as without the middleware.
 * - **Errors.** A route that fails reaches Express's error handler (or yours) as usual; the
 *   500 it writes is the route's answer (stored, or rolled back with `ctx.tx` and the key
 *   freed: see the companion's rules).
 * - **Headers set before the middleware** (CORS, a session cookie) are sent with every
 *   answer, the companion's own (400, 409, 422...) and replays included.
 * - The route reads the key's context as `req.idempotency` (`ctx` of server.d.ts: `key`,
 *   `keyFor(name)`, `tx`). `tx` is usable until the route ends its response: that answer is
 *   what commits it. A route that never ends its response holds its key (and, with
 *   `PostgresStore`, a pooled connection) until `handlerTimeoutMs` + `lockTimeoutMs` (set
 *   `handlerTimeoutMs`; the route itself is not stopped). With Express's types (`@types/express`) it is declared on
 *   `Express.Request`; with Connect or plain node:http, read it as
 *   `(req as IncomingMessage & { idempotency?: IdempotencyContext }).idempotency`.
 *
 * Only node:http's own API is used on `req` and `res`, so the middleware also works in Connect
 * (`connect().use(idempotency(options))`) and any `(req, res, next)` stack.
 */
import type { IdempotencyContext, IdempotencyOptions, NodeIncomingMessage, NodeServerResponse } from './server.js';

/** The options of `idempotency()` but `acceptAfterMs`, which the adapter refuses (a 202 sent ahead of the route would leave its answer nowhere to go). */
export type AdapterOptions<Tx = unknown> = Omit<IdempotencyOptions<Tx>, 'acceptAfterMs'>;

export type { IdempotencyContext, IdempotencyOptions } from './server.js';

/** `next` of Express and Connect: called with no argument to go on, with an error to fail. */
export type NextFunction = (error?: unknown) => void;

/**
 * The middleware: `(req, res, next)`. It resolves nothing and never throws: an error of its
 * own (the companion failing outside its rules) goes to `next(error)` before anything was
 * written.
 */
export type IdempotencyMiddleware = (req: NodeIncomingMessage, res: NodeServerResponse, next: NextFunction) => void;

/**
 * Make the middleware: one companion (and, without a `store` option, one `MemoryStore`) per
 * call, so make it once per set of routes that share keys, not per request.
 * @param options the companion's options (`store`, `header`, `required`, `identity`, `secret`,
 *   `ttlMs`, `lockTimeoutMs`, `concurrent`, `waitTimeoutMs`, `pollMs`, `maxBodyBytes`,
 *   `handlerTimeoutMs`, `storeTimeoutMs`, `ignoredMethods`, `onStoreError`, `onError`), with their defaults:
 *   see `IdempotencyOptions`. @default {} (a `MemoryStore`; keys required on POST and PATCH)
 * @throws TypeError when an option is invalid or unknown (naming it).
 */
export function idempotency<Tx = unknown>(options?: AdapterOptions<Tx>): IdempotencyMiddleware;

declare global {
  // Express's types (`@types/express`) let packages add to their Request through this
  // namespace; without them it declares nothing anyone uses.
  namespace Express {
    interface Request {
      /**
       * Set by retry-fetch/express's `idempotency()` before the route runs: the request's
       * idempotency context (`key`, `keyFor(name)`, `tx`). `tx` is the store's transaction
       * (`PostgresStore`: a `pg` client; cast it to your client's type).
       */
      idempotency?: IdempotencyContext;
    }
  }
}
