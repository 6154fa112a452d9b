import type { CompletedRecord, IdempotencyRecord, IdempotencyStore, LockRecord } from './store.js';

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
 * `SET key value NX PX lockTimeoutMs`; a response is stored with `PX ttlMs`; renewing,
 * completing, releasing and taking over a lock check the owner's token in a Lua script
 * (`EVAL`), so a holder whose lock expired cannot extend or overwrite its successor's.
 * @throws TypeError when `client` is not a node-redis client or `prefix` not a string.
 */
export class RedisStore implements IdempotencyStore {
  constructor(options: RedisStoreOptions);
  /** The key prefix. @default 'idem:' */
  readonly prefix: string;
  /** `SET prefix+key lock NX PX lockTimeoutMs`; when that fails, `GET` the record. */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number): Promise<IdempotencyRecord | null>;
  /** Replace the lock held by `token` with `lock`, `PX lockTimeoutMs` (Lua, `EVAL`). */
  renew(key: string, token: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
  /** Replace the lock held by `staleToken` (Lua, `EVAL`). */
  reclaim(key: string, staleToken: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
  /** Replace the lock held by `token` with the record, `PX ttlMs` (Lua, `EVAL`). */
  complete(key: string, token: string, record: CompletedRecord, ttlMs: number): Promise<boolean>;
  /** Delete the lock held by `token` (Lua, `EVAL`). */
  release(key: string, token: string): Promise<boolean>;
}
