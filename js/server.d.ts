/**
 * retry-fetch/server: the server half of idempotency keys. `idempotency(handler)` makes a
 * fetch-style handler answer a repeated request (same `Idempotency-Key`) with the stored
 * response instead of processing it twice; a concurrent duplicate waits for the first.
 * `idempotent(fn)` does the same for any async function (a queue consumer, a cron job).
 * For Node 20+ (and Deno and Bun).
 *
 * ```ts
 * import http from 'node:http';
 * import pg from 'pg';
 * import { idempotency, PostgresStore, toNodeHandler } from 'retry-fetch/server';
 *
 * const store = new PostgresStore({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) });
 * await store.migrate();
 * const handler = idempotency(async (request, ctx) => {
 *   const { amount } = await request.json();
 *   // Written in the transaction that holds the key: commits with the stored answer, or not at all.
 *   const tx = ctx.tx as pg.PoolClient; // a pg client in a keyed request (POST requires a key)
 *   const { rows } = await tx.query('INSERT INTO charges (amount) VALUES ($1) RETURNING id', [amount]);
 *   return Response.json({ charge: rows[0].id }, { status: 201 });
 * }, { store });
 * http.createServer(toNodeHandler(handler)).listen(8080);
 * ```
 */

export * from './store.js';
export * from './memory-store.js';
export * from './redis-store.js';
export * from './postgres-store.js';
import type { IdempotencyStore, RunRecord } from './store.js';

/**
 * What the handler (and an `idempotent` function) gets as its second argument.
 * @typeParam Tx the store's transaction type (`PostgresStore`: a `pg` client).
 */
export interface IdempotencyContext<Tx = unknown> {
  /** The request's idempotency key (the content of the IETF draft's sf-string form `"abc"`, or the plain header value); `null` for a request without one. */
  readonly key: string | null;
  /**
   * A stable key for one downstream call, derived from this key and its scope: forward it as
   * the downstream `Idempotency-Key` (e.g. to a payment provider) so that exactly-once
   * composes down the chain. The same `name` gives the same key on every retry and every
   * instance, after a restart too: it is derived from the key, a hash of the scope and the
   * name, not from the store or its secret. A UUID (version 8).
   * @throws TypeError for a request without a key or an empty name.
   */
  keyFor(name: string): string;
  /**
   * The store's transaction that holds the key (`PostgresStore`: a `pg` client inside it):
   * the handler's writes through it commit together with the stored answer, or not at all.
   * `undefined` with a store without transactions (`MemoryStore`, `RedisStore`). Any use of
   * it after the handler settled throws a TypeError.
   */
  readonly tx: Tx | undefined;
  /**
   * The handler's `request.signal`, for a framework route that does not see the request: in
   * a keyed request the companion's (aborted only by `handlerTimeoutMs`, with a
   * `TimeoutError`), otherwise the client's. `undefined` in an `idempotent` job.
   */
  readonly signal: AbortSignal | undefined;
}

/**
 * A fetch-style handler: what `idempotency` wraps, called with the request and its context.
 * `Route` is the second argument the wrapped function is called with (Next.js's
 * `{ params }`): its fields are in `ctx` too. In a keyed request, `request.signal` is the
 * companion's: aborted only by `handlerTimeoutMs`, never by the client going away.
 */
export type IdempotentHandler<Tx = unknown, Route extends object = {}> = (
  request: Request,
  ctx: IdempotencyContext<Tx> & Route,
) => Promise<Response> | Response;

/**
 * A fetch-style handler: what `idempotency` returns and `toNodeHandler` serves. The optional
 * `route` (Next.js's `{ params }`) is handed on in the handler's `ctx`.
 */
export type FetchHandler<Route extends object = {}> = (request: Request, route?: Route) => Promise<Response>;

/** Options of `idempotency(handler, options)`. Every one is optional; one given as `undefined` is not given. */
export interface IdempotencyOptions<Tx = unknown> {
  /** Where locks and responses are kept. One process: `MemoryStore`; several: `RedisStore`. @default new MemoryStore() */
  store?: IdempotencyStore<Tx> | undefined;
  /** The header that carries the key, read in plain form (`abc`) or the IETF draft's sf-string form (`"abc"`). @default 'Idempotency-Key' */
  header?: string | undefined;
  /**
   * Whether a request without a key is refused (400, a JSON problem). When not required, a
   * request without a key goes straight to the handler. A request that has a key always goes
   * through the idempotency scheme.
   * Never applies to `ignoredMethods` (their keys are ignored anyway).
   * @default true for POST and PATCH, false for every other method
   */
  required?: boolean | ((request: Request) => boolean | Promise<boolean>) | undefined;
  /**
   * The caller's identity that scopes keys (the IETF draft's composite key; a unique
   * `(key, user)` pair), e.g. the authenticated user id: the same key from two identities is
   * two operations, so a caller who reuses another's key never gets that caller's answer.
   * Stored as an HMAC-SHA-256 keyed with `secret`, never in clear. A function returning
   * `undefined`, `null` or `''` (no caller known): no scope; `false`: keys are never scoped.
   * @default the request's credentials: the first of the `Authorization`, `X-API-Key`,
   * `Api-Key`, `X-Auth-Token`, `X-Access-Token` and `X-Session-Token` headers, else one
   * credential cookie (`connect.sid`, `sid`, `session`, `sessionid`, `session_id`,
   * `JSESSIONID`, `PHPSESSID`, `laravel_session`, `next-auth.session-token`,
   * `authjs.session-token`, `koa.sess`, `.AspNetCore.*`, `token`, `jwt`, `access_token`,
   * `auth_token`, `id_token`, or a name ending in `session`, `sessionid`, `session-token`,
   * `auth-token`, `auth_token`, `access_token` or `access-token`; `__Host-`/`__Secure-`
   * prefixes ignored); else no scope, and a `console.warn` (once) naming this option.
   */
  identity?: ((request: Request) => string | null | undefined | Promise<string | null | undefined>) | false | undefined;
  /**
   * The key of the HMAC that turns the identity into the stored scope: at least 16
   * characters, the same on every instance that shares the store (e.g. 64 random hex digits
   * from your secret manager). Required with a store that has no `secret()`, unless
   * `identity: false`.
   * @default the store's own secret (`store.secret()`)
   */
  secret?: string | undefined;
  /** How long a completed response is kept and replayed, in ms (1 ms to 365 days). @default 86400000 (24 h) */
  ttlMs?: number | undefined;
  /**
   * How long a lock lasts without renewal, in ms. A live holder renews its lock every third
   * of this while its handler runs (with its token as the fence), so a slow handler keeps its
   * key; a holder that died (crash, a blocked event loop) frees it after this. With
   * `PostgresStore` a dead holder frees the key at once (its connection's transaction dies).
   * At least 1000 (below a second a slow store round trip lets a live holder's lock lapse).
   * @default 60000
   */
  lockTimeoutMs?: number | undefined;
  /** A second request with the key of one still running: `'wait'` for it and answer with its (replayed) response, or `'reject'` with 409 (and `Retry-After: 1`). @default 'wait' */
  concurrent?: 'wait' | 'reject' | undefined;
  /** Longest wait with `concurrent: 'wait'`, in ms; then 409. @default lockTimeoutMs */
  waitTimeoutMs?: number | undefined;
  /** How often a waiting request polls the store, in ms. @default 25 */
  pollMs?: number | undefined;
  /**
   * The largest request body read (to fingerprint it) before the handler runs, in bytes; a
   * longer body is answered 413 (a declared `Content-Length` over it at once, unread).
   * @default 1048576 (1 MiB)
   */
  maxBodyBytes?: number | undefined;
  /**
   * How long a keyed handler may run, in ms: then its `request.signal` is aborted with a
   * `TimeoutError`; a throw after that frees the key (with `PostgresStore`, rolls back its
   * `ctx.tx` writes) and answers 503 with `Retry-After`, never a stored 500. A handler that
   * ignores the abort is abandoned `lockTimeoutMs` later (its lock no longer renewed).
   * @default none (no limit)
   */
  handlerTimeoutMs?: number | undefined;
  /**
   * How long a store call made before the handler runs (taking the key, reading the store's
   * secret, polling a key held by another request) may take, in ms: a store that has not
   * answered by then (a paused or unreachable Redis, a pool with no free connection) gets the
   * request a 503 with `Retry-After` (told to `onStoreError` as a `TimeoutError`), nothing
   * run; a lock the call takes after that is given back. Calls made after the handler ran
   * (storing its answer, renewing, releasing) are waited for.
   * @default 5000
   */
  storeTimeoutMs?: number | undefined;
  /**
   * Methods whose `Idempotency-Key` is ignored: the request goes to the handler as one
   * without a key (nothing stored).
   * @default ['GET', 'HEAD', 'OPTIONS']
   */
  ignoredMethods?: readonly string[] | undefined;
  /**
   * Long work: a keyed request whose handler has not settled after this many ms is answered
   * `202 Accepted` (JSON body, `Retry-After`: this many seconds rounded up, at least 1) while
   * the handler goes on to its end, holding the key (its answer stored, or the key freed, as
   * always). A repeat with the same key while it runs gets `202` at once (not a wait, not a
   * 409); once it is done, the stored answer, as any replay. `202` is never stored. Clients
   * follow it with `retryFetch(..., { followAccepted: true })`. Not for the framework
   * adapters (express, fastify, hono), which refuse it.
   * @default none (the caller waits for the handler)
   */
  acceptAfterMs?: number | undefined;
  /**
   * Record every run in the store's run history (`recordRun`; `store.runs(key)` reads it),
   * when the store keeps one (MemoryStore, RedisStore, PostgresStore). Written in the
   * background: a run never waits for it. `false` saves the writes; `onEvent` still hears.
   * @default true
   */
  history?: boolean | undefined;
  /**
   * Told of every run and replay, for logs and metrics: `{ type, run }` where `type` is
   * `'run-started'`, `'run-ended'` (`run.outcome` says how), `'replayed'`, `'holder-crashed'`
   * (an earlier run of the key never ended: its process died), or `'accepted'` (a 202). A
   * throw or a rejection is ignored.
   * @default none
   */
  onEvent?: ((event: RunEvent) => void) | undefined;
  /**
   * Told when the store fails, or refuses (the lock was lost): `operation` is `'secret'`,
   * `'acquire'` or `'reclaim'` (the answer is a 503 problem, nothing ran, nothing stored), `'renew'`,
   * `'complete'` or `'release'` (after the handler ran: its answer is still returned, except
   * a transactional store whose commit failed: a 503, nothing kept).
   * @default logs with console.error
   */
  onStoreError?: ((error: unknown, operation: 'secret' | 'acquire' | 'reclaim' | 'renew' | 'complete' | 'release' | 'recordRun' | 'runs') => void) | undefined;
  /** Told when the handler throws, or does not resolve with a Response, after it started. @default logs with console.error */
  onError?: ((error: unknown) => void) | undefined;
}

/**
 * Wrap `handler` so that each idempotency key is processed once. The handler is called as
 * `handler(request, ctx)`.
 *
 * - no key: 400 problem on routes that require one (see `required`), else the handler runs
 *   (`ctx.key` is `null`);
 * - an invalid key (empty, over 255 characters, not visible ASCII, a bad sf-string): 400;
 * - a body over `maxBodyBytes`: 413;
 * - a key on an ignored method (`ignoredMethods`: GET, HEAD, OPTIONS): as without a key;
 * - a body already read by something else: 500 problem (`idempotency-body-already-read`);
 * - a new key: the lock is taken atomically, the handler runs (the lock renewed while it
 *   does; the client going away does not abort it), its answer (status, headers except
 *   `Set-Cookie` and hop-by-hop ones, body; 5xx included, as Stripe does) is stored for
 *   `ttlMs` and returned; a 500 after `ctx.tx` writes is rolled back instead;
 * - an answer that says the request was not processed — 408, 425, 429, or 503 with
 *   `Retry-After` — is returned but not stored: the key is freed for the client's retry;
 * - a key with a stored answer: that answer, byte for byte, plus `Idempotent-Replayed: true`
 *   (never a `Set-Cookie`);
 * - a key used with another method, path, query or body: 422;
 * - a key whose request is still running: wait for it, or 409 (`concurrent: 'reject'`);
 * - a handler that throws (or rejects) after it started: it may have had effects, so the
 *   answer is a 500 problem that is stored and replayed; unless the store is transactional
 *   and the handler used `ctx.tx`: then its writes are rolled back and the key is freed;
 * - a store that fails before the handler ran: 503 problem with `Retry-After: 1`, nothing
 *   ran, nothing stored.
 *
 * The response body is buffered to be stored: not for streaming answers.
 * @throws TypeError when `handler` is not a function, or an option is invalid or unknown.
 */
export function idempotency<Tx = unknown, Route extends object = {}>(
  handler: IdempotentHandler<Tx, Route>,
  options?: IdempotencyOptions<Tx>,
): FetchHandler<Route>;

/** Options of `idempotent(fn, options)`. `key` is required. */
export interface IdempotentOptions<Input, Tx = unknown> {
  /** The job's key, e.g. the message id: 1 to 255 visible ASCII characters. */
  key: (input: Input) => string | Promise<string>;
  /**
   * Scopes the keys (a queue's or a tenant's name): the same key in two scopes is two jobs. A
   * non-empty string: `''` is a `TypeError` (it would be no scope at all). @default none
   */
  scope?: string | undefined;
  /** See `IdempotencyOptions.secret` (needed with a `scope` and a store without `secret()`). @default the store's own */
  secret?: string | undefined;
  /** See `IdempotencyOptions.store`. @default new MemoryStore() */
  store?: IdempotencyStore<Tx> | undefined;
  /** How long a result is kept and returned for the key, in ms. @default 86400000 (24 h) */
  ttlMs?: number | undefined;
  /** See `IdempotencyOptions.lockTimeoutMs`. @default 60000 */
  lockTimeoutMs?: number | undefined;
  /** A call whose key is running elsewhere: `'wait'` for its result, or `'reject'` (an `IdempotencyError`, code `'in-progress'`). @default 'wait' */
  concurrent?: 'wait' | 'reject' | undefined;
  /** Longest wait with `concurrent: 'wait'`, in ms. @default lockTimeoutMs */
  waitTimeoutMs?: number | undefined;
  /** How often a waiting call polls the store, in ms. @default 25 */
  pollMs?: number | undefined;
  /** See `IdempotencyOptions.storeTimeoutMs`: a store call before `fn` runs that takes longer rejects the call with a `TimeoutError` (nothing run). @default 5000 */
  storeTimeoutMs?: number | undefined;
  /**
   * Told when the store fails after `fn` started (`'renew'`, `'complete'`, `'release'`). A
   * store that fails before `fn` ran rejects the call with the store's error instead.
   * @default logs with console.error
   */
  onStoreError?: ((error: unknown, operation: 'secret' | 'acquire' | 'reclaim' | 'renew' | 'complete' | 'release' | 'recordRun' | 'runs') => void) | undefined;
  /**
   * Dead letters: a job whose runs failed this many times (a failure, a rollback, a result
   * not stored, or its process dying mid-run) is not run again: `onDeadLetter` is called, a
   * failure is stored for the key, and every later delivery rejects with `IdempotencyError`
   * `'previous-run-failed'` at once. Needs a store with a run history. A job whose throw is
   * stored (no `ctx.tx`) ends at its first failure, and that run hands it to `onDeadLetter`.
   * @default none (no limit)
   */
  maxRuns?: number | undefined;
  /**
   * Called once when a job reaches `maxRuns`, before the failure is stored: move the job to
   * your own queue or table. If it throws or rejects, nothing is stored and the delivery
   * rejects with its error: the next delivery tries again (so it is at least once: make it
   * idempotent on `record.key`). For a run whose own failure is stored (a throw without
   * `ctx.tx`), it is called by that run after the failure is stored (the effect may have
   * happened: the job is never run again, whatever follows): at most once, so a throw there,
   * or the process dying first, leaves no dead letter but the stored failure and the run
   * history (that delivery rejects with its error; later ones with `'previous-run-failed'`). Needs `maxRuns` (a `TypeError` without it). What it returns
   * (or its promise resolves to) is ignored: `(record) => redis.xAdd(...)` is fine.
   * @default none
   */
  onDeadLetter?: ((record: DeadLetter<Input>) => unknown) | undefined;
  /** See `IdempotencyOptions.history`. @default true */
  history?: boolean | undefined;
  /** See `IdempotencyOptions.onEvent`; jobs also tell `'dead-lettered'`. @default none */
  onEvent?: ((event: RunEvent) => void) | undefined;
}

/** What `onDeadLetter` gets. */
export interface DeadLetter<Input = unknown> {
  /** The job's key. */
  key: string;
  /** The key's scope (64 hex digits, or `-`). */
  scope: string;
  /** The delivery's input. */
  input: Input;
  /** How many runs failed. */
  failedRuns: number;
  /** The `maxRuns` option. */
  maxRuns: number;
  /** The key's run history, oldest first (runs whose process died marked `'crashed'`). */
  runs: RunRecord[];
}

/** What `onEvent` is told. */
export interface RunEvent {
  /** What happened. */
  type: 'run-started' | 'run-ended' | 'replayed' | 'holder-crashed' | 'accepted' | 'dead-lettered';
  /** The run it happened to. */
  run: RunRecord;
}

/**
 * The error an `idempotent` function rejects with when it does not run `fn`, or ran it but
 * kept nothing: `code` is `'key-reused'` (the key was used with another input),
 * `'in-progress'` (a run with the key is still going on), `'previous-run-failed'` (a run with
 * the key threw after it started; its message is in this one's) or `'not-committed'` (a
 * transactional store could not commit: `fn`'s `ctx.tx` writes were rolled back and nothing
 * is stored; run it again, do not acknowledge the message) or `'not-storable'` (`fn` wrote
 * through `ctx.tx` and its result is not JSON: rolled back, nothing kept).
 */
export interface IdempotencyError extends Error {
  /** `'IdempotencyError'`. */
  readonly name: 'IdempotencyError';
  /** Why `fn` did not run. */
  readonly code: 'key-reused' | 'in-progress' | 'previous-run-failed' | 'not-committed' | 'not-storable';
  /** On the delivery that dead-lettered the job (`maxRuns`): what `onDeadLetter` got. */
  readonly deadLetter?: DeadLetter;
}

/**
 * Wrap `fn` so that it has one effect per key under at-least-once delivery: the first call
 * with a key runs `fn(input, ctx)` and stores its result (as JSON); a repeat with the same key
 * and input returns the stored result without running `fn`. A throw is stored as a failure
 * (repeats reject with `IdempotencyError` `'previous-run-failed'`), unless the store is
 * transactional and `fn` used `ctx.tx`: then its writes are rolled back, the key is freed and
 * a redelivery runs `fn` again. The input must be JSON-serialisable (it is the fingerprint).
 * @throws TypeError when `fn` is not a function, `key` is missing, or an option is invalid or unknown.
 */
export function idempotent<Input, Result, Tx = unknown>(
  fn: (input: Input, ctx: IdempotencyContext<Tx>) => Promise<Result> | Result,
  options: IdempotentOptions<Input, Tx>,
): (input: Input) => Promise<Result>;

/** The part of `node:http`'s `IncomingMessage` that `toNodeHandler` reads. */
export interface NodeIncomingMessage extends AsyncIterable<unknown> {
  method?: string | undefined;
  url?: string | undefined;
  headers: { host?: string | undefined };
  rawHeaders: string[];
  /** Whether the body was read to its end: when it was not, the answer closes the connection. */
  complete?: boolean;
  /** Ends the connection after an answer given before the body was read. */
  destroy?(): unknown;
  /** The connection (a `net.Socket`); a TLS one (`encrypted`) makes the request URL `https:`. */
  socket?: unknown;
}

/** The part of `node:http`'s `ServerResponse` that `toNodeHandler` writes. */
export interface NodeServerResponse {
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  readonly writableFinished: boolean;
  writeHead(statusCode: number, ...rest: unknown[]): unknown;
  write(chunk: Uint8Array): boolean;
  end(): unknown;
  destroy(): unknown;
  on(event: string, listener: () => void): unknown;
  once(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

/** Options of `toNodeHandler(handler, options)`. */
export interface NodeHandlerOptions {
  /** Told when the handler throws, does not resolve with a Response, or its body fails. @default logs with console.error */
  onError?: (error: unknown) => void;
}

/**
 * Adapt a fetch-style handler to `node:http` (`http.createServer(toNodeHandler(handler))`):
 * the `Request` streams the body (`duplex: 'half'`) and its `signal` aborts when the client
 * disconnects; the `Response` is written back with its status, headers (several `Set-Cookie`
 * kept) and body. A handler that throws is answered 500. The listener returns a promise that
 * resolves once the response is written (or the client is gone); it never rejects.
 */
export function toNodeHandler(
  handler: FetchHandler,
  options?: NodeHandlerOptions,
): (req: NodeIncomingMessage, res: NodeServerResponse) => Promise<void>;
