import type { CompletedRecord, IdempotencyRecord, IdempotencyStore, LockRecord, RunRecord } from './store.js';

/**
 * The part of a node-redis client (`createClient()` from the `redis` package, v4 or later)
 * that `RedisStore` uses.
 */
export interface RedisClientLike {
  /** `SET key value NX [PX ms]`: resolves `null` when the key exists. */
  set(key: string, value: string, options: { NX: true; PX?: number }): Promise<unknown>;
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
  /**
   * How long a key's run history (`recordRun`/`runs`, the stream `<prefix>runs:<key>`) is kept
   * after its last recorded run, in ms (each `recordRun` sets the stream's `PEXPIRE` again): an
   * integer of 1 or more. The stream also keeps only the last 2000 entries of its key (each
   * `recordRun` is one: 1000 runs of a start and an end).
   * @default 604800000 (7 days)
   */
  runRetentionMs?: number;
}

/**
 * An `IdempotencyStore` in Redis, shared by every server instance. The lock is
 * `SET key value NX PX lockTimeoutMs` (in a Lua script, sent with one that checks the store's
 * secret, below; each touches one key, as a Redis Cluster requires); a response is stored with `PX ttlMs`; renewing,
 * completing and releasing a lock check the owner's token in a Lua script (`EVAL`), so a
 * holder whose lock expired cannot extend or overwrite its successor's. The store's secret
 * (`secret()`) is kept at `<prefix>secret`, without expiry.
 *
 * The run history of a key is a stream, `<prefix>runs:<key>` (the key unscoped: every scope's
 * runs in one stream), capped at its last 2000 entries (`XADD ... MAXLEN 2000`) and expiring
 * `runRetentionMs` (default 7 days) after its last recorded run. Each `recordRun` is an entry:
 * a run recorded when it starts and again when it ends takes two, so a key keeps its last 1000
 * runs, as many as the largest `maxRuns` counts.
 *
 * @example
 * ```js
 * import { createClient } from 'redis';
 * import { idempotency, RedisStore } from 'retry-fetch/server';
 *
 * // disableOfflineQueue: while Redis is unreachable, commands fail at once (the companion
 * // answers 503, the client retries later) instead of queueing until it is back, which would
 * // leave every request hanging.
 * const client = createClient({ url: process.env.REDIS_URL, disableOfflineQueue: true });
 * client.on('error', (error) => console.error('redis:', error)); // node-redis reconnects by itself
 * await client.connect();
 * const handler = idempotency(charge, { store: new RedisStore({ client }) });
 * ```
 * @throws TypeError when `client` is not a node-redis client, `prefix` not a string,
 *   `runRetentionMs` not an integer of 1 or more, or an option name is unknown.
 */
export class RedisStore implements IdempotencyStore {
  constructor(options: RedisStoreOptions);
  /** The key prefix. @default 'idem:' */
  readonly prefix: string;
  /** How long a key's run history is kept after its last recorded run, in ms. @default 604800000 */
  readonly runRetentionMs: number;
  /** `SET prefix+key lock NX PX lockTimeoutMs`; when that fails, `GET` the record. */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number, options?: { signal?: AbortSignal }): Promise<IdempotencyRecord | null>;
  /** Replace the lock held by `token` with `lock`, `PX lockTimeoutMs` (Lua, `EVAL`). */
  renew(key: string, token: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
  /**
   * Always `false`: a lock still in Redis is live by Redis's own clock (its `PX`); taking it
   * over on the caller's clock would run the handler twice under clock skew. Once Redis
   * expires it, `acquire` succeeds.
   */
  reclaim(key: string, staleToken: string, lock: LockRecord, lockTimeoutMs: number): Promise<false>;
  /** Replace the lock held by `token` with the record, `PX ttlMs` (Lua, `EVAL`). */
  complete(key: string, token: string, record: CompletedRecord, ttlMs: number): Promise<boolean>;
  /** Delete the lock held by `token` (Lua, `EVAL`). */
  release(key: string, token: string): Promise<boolean>;
  /**
   * See `IdempotencyStore.recordRun`: appends `run` (its JSON, field `run`) to the stream
   * `<prefix>runs:<run.key>`, keeping its last 2000 entries (`XADD <stream> MAXLEN 2000 * run
   * <json>`), and sets the stream to expire in `runRetentionMs` (`PEXPIRE`): both in one Lua
   * script (`EVAL`), so atomically. Rejects with a `TypeError` when `run` is not a `RunRecord`.
   */
  recordRun(run: RunRecord): Promise<void>;
  /**
   * See `IdempotencyStore.runs`: the stream's entries (`XRANGE - +`, in a Lua script), the last
   * one of each `id`, oldest `startedAt` first (then by `id`): the stream keeps the last 1000.
   */
  runs(key: string): Promise<RunRecord[]>;
  /**
   * See `IdempotencyStore.secret`: 64 hex digits at `<prefix>secret`, the same for every
   * instance on this Redis and prefix. The first call creates it if missing
   * (`SET <prefix>secret <random> NX`, no expiry) and reads it (`GET`); the value is cached in
   * the instance once read (a failure is not). Once read, every `acquire` checks it in the
   * script that takes the lock: a lost secret is put back as it was; another one there (made
   * by an instance started while it was lost) makes `acquire` throw (a 503), since a new
   * secret gives every caller a new scope, where a retry of a request made before would run
   * it again.
   */
  secret(): Promise<string>;
}
