/**
 * retry-fetch/server: the server half of idempotency keys. `idempotency(handler)` makes a
 * fetch-style handler answer a repeated request (same `Idempotency-Key`) with the stored
 * response instead of processing it twice; a concurrent duplicate waits for the first.
 * For Node 20+ (and Deno and Bun).
 *
 * ```ts
 * import http from 'node:http';
 * import { createClient } from 'redis';
 * import { idempotency, RedisStore, toNodeHandler } from 'retry-fetch/server';
 *
 * const client = await createClient({ url: process.env.REDIS_URL }).connect();
 * const handler = idempotency(async (request) => Response.json(await charge(await request.json())), {
 *   store: new RedisStore({ client }),
 *   identity: (request) => request.headers.get('X-User-Id') ?? undefined,
 * });
 * http.createServer(toNodeHandler(handler)).listen(8080);
 * ```
 */

/** A fetch-style handler: what `idempotency` wraps and returns, and what `toNodeHandler` serves. */
export type FetchHandler = (request: Request) => Promise<Response>;

/** A lock: a request with this key is being processed. */
export interface LockRecord {
  /** Always `'in-progress'`. */
  state: 'in-progress';
  /** The lock owner's random token; only the owner may complete or release the lock. */
  token: string;
  /** The request fingerprint: SHA-256 (hex) over method, path + query and the SHA-256 of the body. */
  fingerprint: string;
  /** When the lock stops counting, in ms since the Unix epoch (the holder is presumed dead). */
  lockExpiresAt: number;
}

/** A stored response, JSON-serialisable. */
export interface StoredResponse {
  /** The status, 200 to 599. */
  status: number;
  /** The reason phrase (`''` for the default one). */
  statusText: string;
  /** Header name/value pairs in order (lower-case names; each `Set-Cookie` a pair of its own). */
  headers: Array<[string, string]>;
  /** The body bytes, base64. */
  body: string;
}

/** A completed request: its response is replayed for the same key and fingerprint. */
export interface CompletedRecord {
  /** Always `'completed'`. */
  state: 'completed';
  /** The fingerprint of the request that produced the response. */
  fingerprint: string;
  /** The response to replay. */
  response: StoredResponse;
  /** When the response was stored, in ms since the Unix epoch. */
  completedAt: number;
}

/** What a store holds for a key. */
export type IdempotencyRecord = LockRecord | CompletedRecord;

/**
 * Where `idempotency` keeps locks and responses. `MemoryStore` and `RedisStore` implement it;
 * write your own for another database (e.g. SQL: a table with a unique key, `INSERT ... ON
 * CONFLICT DO NOTHING` for `acquire`, `UPDATE ... WHERE key = ? AND token = ?` for the rest).
 * Records are plain JSON-serialisable objects. Each method must be atomic on its key; a method
 * may return its result or a promise of it. A method that throws fails the request (from
 * `acquire` or `reclaim`: before the handler runs) or is reported to `onStoreError` (from
 * `complete` and `release`: after it ran).
 */
export interface IdempotencyStore {
  /**
   * If `key` holds no live record, store `lock`, live for `lockTimeoutMs`, and return `null`
   * (the caller now holds the lock). Otherwise return the live record, unchanged. A lock must
   * stop being live after its `lockTimeoutMs`, a completed record after its `ttlMs`.
   */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number): Promise<IdempotencyRecord | null> | IdempotencyRecord | null;
  /**
   * If `key` holds a lock whose token is `staleToken` (a lock the caller judged expired),
   * replace it with `lock`, live for `lockTimeoutMs`, and return `true`; otherwise `false`.
   */
  reclaim(key: string, staleToken: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean> | boolean;
  /**
   * If `key` holds the lock whose token is `token`, replace it with `record`, live for `ttlMs`,
   * and return `true`; otherwise (the lock expired, maybe taken over) `false`.
   */
  complete(key: string, token: string, record: CompletedRecord, ttlMs: number): Promise<boolean> | boolean;
  /** If `key` holds the lock whose token is `token`, delete it and return `true`; otherwise `false`. */
  release(key: string, token: string): Promise<boolean> | boolean;
}

/** Options of `idempotency(handler, options)`. Every one is optional. */
export interface IdempotencyOptions {
  /** Where locks and responses are kept. One process: `MemoryStore`; several: `RedisStore`. @default new MemoryStore() */
  store?: IdempotencyStore;
  /** The header that carries the key, read in plain form (`abc`) or the IETF draft's sf-string form (`"abc"`). @default 'Idempotency-Key' */
  header?: string;
  /**
   * Whether a request without a key is refused (400, a JSON problem). When not required, a
   * request without a key goes straight to the handler. A request that has a key always goes
   * through the idempotency scheme.
   * @default true for POST and PATCH, false for every other method
   */
  required?: boolean | ((request: Request) => boolean | Promise<boolean>);
  /**
   * The caller's identity that scopes keys (the IETF draft's composite key; a unique
   * `(key, user)` pair), e.g. the authenticated user id: the same key from two identities is
   * two operations. Stored as its SHA-256, never in clear. `undefined` or `''`: no scope.
   * @default undefined (keys are not scoped)
   */
  identity?: (request: Request) => string | undefined | Promise<string | undefined>;
  /** How long a completed response is kept and replayed, in ms (1 to 365 days). @default 86400000 (24 h) */
  ttlMs?: number;
  /** How long a lock lasts, in ms: a holder that died (crash, hang) frees the key after this. Keep it above the handler's longest run. @default 60000 */
  lockTimeoutMs?: number;
  /** A second request with the key of one still running: `'wait'` for it and answer with its (replayed) response, or `'reject'` with 409 (and `Retry-After: 1`). @default 'wait' */
  concurrent?: 'wait' | 'reject';
  /** Longest wait with `concurrent: 'wait'`, in ms; then 409. @default lockTimeoutMs */
  waitTimeoutMs?: number;
  /** How often a waiting request polls the store, in ms. @default 25 */
  pollMs?: number;
  /**
   * Told when the store fails (or refuses, the lock having expired) after the handler ran:
   * `operation` is `'complete'` or `'release'`. The handler's response is still returned.
   * @default logs with console.error
   */
  onStoreError?: (error: unknown, operation: 'complete' | 'release') => void;
}

/**
 * Wrap `handler` so that each idempotency key is processed once.
 *
 * - no key: 400 problem on routes that require one (see `required`), else the handler runs;
 * - an invalid key (empty, over 255 characters, not visible ASCII, a bad sf-string): 400;
 * - a new key: the lock is taken atomically, the handler runs, its response (status, headers,
 *   body; every status, 5xx included, as Stripe does) is stored for `ttlMs` and returned;
 * - a key with a stored response: that response, byte for byte, plus `Idempotent-Replayed: true`;
 * - a key used with another method, path, query or body: 422;
 * - a key whose request is still running: wait for it, or 409 (`concurrent: 'reject'`);
 * - a handler that throws (or rejects): nothing is stored, the lock is released and the error
 *   propagates (so a retry runs the handler again; `toNodeHandler` answers it with 500).
 *
 * The response body is buffered to be stored: not for streaming answers.
 * @throws TypeError when `handler` is not a function or an option is invalid.
 */
export function idempotency(handler: FetchHandler, options?: IdempotencyOptions): FetchHandler;

/**
 * An `IdempotencyStore` in this process's memory (one server process; atomic because
 * JavaScript is single-threaded). Records expire by time; expired ones are swept lazily.
 */
export class MemoryStore implements IdempotencyStore {
  /** An empty store. */
  constructor();
  /** See `IdempotencyStore.acquire`. */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number): Promise<IdempotencyRecord | null>;
  /** See `IdempotencyStore.reclaim`. */
  reclaim(key: string, staleToken: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
  /** See `IdempotencyStore.complete`. */
  complete(key: string, token: string, record: CompletedRecord, ttlMs: number): Promise<boolean>;
  /** See `IdempotencyStore.release`. */
  release(key: string, token: string): Promise<boolean>;
  /** How many records (locks and stored responses) are live. */
  readonly size: number;
  /** Forget every record. */
  clear(): void;
}

/**
 * The part of a node-redis client (`createClient()` from the `redis` package, v4 or later)
 * that `RedisStore` uses.
 */
export interface RedisClientLike {
  /** `SET key value NX PX ms`: resolves `null` when the key exists. */
  set(key: string, value: string, options: { NX: true; PX: number }): Promise<unknown>;
  /** `GET key`: the string, or `null`. */
  get(key: string): Promise<unknown>;
  /** `EVAL script numkeys keys... args...`. */
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
}

/** Options of `new RedisStore(...)`. */
export interface RedisStoreOptions {
  /** A connected node-redis client you created (this package has no dependency on `redis`). */
  client: RedisClientLike;
  /** Prefix of every key written. @default 'idem:' */
  prefix?: string;
}

/**
 * An `IdempotencyStore` in Redis, shared by every server instance. The lock is
 * `SET key value NX PX lockTimeoutMs`; a response is stored with `PX ttlMs`; completing,
 * releasing and taking over a lock check the owner's token in a Lua script (`EVAL`), so a
 * holder whose lock expired cannot overwrite its successor's.
 * @throws TypeError when `client` is not a node-redis client or `prefix` not a string.
 */
export class RedisStore implements IdempotencyStore {
  constructor(options: RedisStoreOptions);
  /** The key prefix. @default 'idem:' */
  readonly prefix: string;
  /** `SET prefix+key lock NX PX lockTimeoutMs`; when that fails, `GET` the record. */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number): Promise<IdempotencyRecord | null>;
  /** Replace the lock held by `staleToken` (Lua, `EVAL`). */
  reclaim(key: string, staleToken: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
  /** Replace the lock held by `token` with the record, `PX ttlMs` (Lua, `EVAL`). */
  complete(key: string, token: string, record: CompletedRecord, ttlMs: number): Promise<boolean>;
  /** Delete the lock held by `token` (Lua, `EVAL`). */
  release(key: string, token: string): Promise<boolean>;
}

/** The part of `node:http`'s `IncomingMessage` that `toNodeHandler` reads. */
export interface NodeIncomingMessage extends AsyncIterable<unknown> {
  method?: string | undefined;
  url?: string | undefined;
  headers: { host?: string | undefined };
  rawHeaders: string[];
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
