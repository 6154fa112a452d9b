/**
 * The idempotency store protocol of `retry-fetch/server`: the records a store keeps and the
 * methods `idempotency()` calls. `MemoryStore`, `RedisStore` and `PostgresStore` implement it;
 * so can a store of your own.
 *
 * Keys: `idempotency()` passes one string, `"<scope>:<idempotency key>"`, where the scope is
 * 64 hex digits (an HMAC-SHA-256 of the caller's identity, keyed with the store's secret or the
 * `secret` option) or `-` when keys are not scoped. The scope is never empty and never contains
 * `:`, so a store that keeps the two apart splits at the first `:`.
 */

/** A lock: a request with this key is being processed. */
export interface LockRecord {
  /** Always `'in-progress'`. */
  state: 'in-progress';
  /** The lock owner's random token; only the owner may renew, complete or release the lock. */
  token: string;
  /** The request fingerprint: SHA-256 (hex) over method, path + query and the SHA-256 of the body. */
  fingerprint: string;
  /** When the lock stops counting, in ms since the Unix epoch (the holder is presumed dead). */
  lockExpiresAt: number;
  /** Never set on a lock (it tells a `HeldRecord` apart). */
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

/**
 * A key held by a live transaction whose details are not visible (`PostgresStore`: the
 * holder's row is uncommitted). It counts as a request in progress (wait for it, or 409); its
 * holder is alive by definition, as a dead one's connection rolled its transaction back.
 */
export interface HeldRecord {
  /** Always `'held'` (a state of its own, so a store that narrows on `'in-progress'` still reads a `LockRecord`). */
  state: 'held';
  /**
   * Optional: `true` when the store can tell that the holder's request has another
   * fingerprint than the `lock` passed to `acquire` (without knowing which): the key is
   * reused for another request, answered 422 at once, as a visible lock with another
   * fingerprint is. Absent or `false`: a request in progress, waited for (or 409, or 202).
   */
  mismatch?: boolean;
}

/** What a store holds for a key. */
export type IdempotencyRecord = LockRecord | CompletedRecord | HeldRecord;

/**
 * One run of a keyed handler or job (or one delivery answered from the store, such as a
 * replay), as the run history keeps it (`recordRun`, `runs`). JSON-serialisable. A store keeps
 * and returns these as they were given; the companion writes them (at the run's start, then
 * again, with the same `id`, when it ends).
 */
export interface RunRecord {
  /** The run's id, unique: the run's lock token, or a random UUID for a delivery answered from the store. */
  id: string;
  /** The idempotency key as the client or the job gave it (not scoped). */
  key: string;
  /** The scope: 64 hex digits (an HMAC of the caller's identity), or `'-'` when keys are not scoped. */
  scope: string;
  /** The server instance that ran it (`'<host>:<pid>'`). */
  instance: string;
  /** When it started, in ms since the Unix epoch. */
  startedAt: number;
  /** When it ended, in ms since the Unix epoch; `null` while it runs (and for good if its holder died). */
  endedAt: number | null;
  /**
   * How it ended (`'stored'`, `'replayed'`, `'failed'`, `'rolled-back'`, `'freed'`, `'crashed'`,
   * `'dead-lettered'`, ...); `null` while it runs.
   */
  outcome: string | null;
  /** A short text about how it ended (an error message), when there is one. */
  detail?: string;
}

/**
 * Where `idempotency` keeps locks and responses. `MemoryStore`, `RedisStore` and
 * `PostgresStore` implement it; write your own for another database (e.g. SQL: a table with a
 * unique key, `INSERT ... ON CONFLICT DO NOTHING` for `acquire`, `UPDATE ... WHERE key = ? AND
 * token = ?` for the rest). Records are plain JSON-serialisable objects. Each method must be
 * atomic on its key; a method may return its result or a promise of it. A method that throws
 * fails the request (from `acquire` or `reclaim`: before the handler runs) or is reported to
 * `onStoreError` (from `renew`, `complete` and `release`: while or after it ran).
 *
 * `Tx` is what `transaction()` hands the handler (`ctx.tx`), for a store that has one.
 */
export interface IdempotencyStore<Tx = unknown> {
  /**
   * If `key` holds no live record, store `lock`, live for `lockTimeoutMs`, and return `null`
   * (the caller now holds the lock). Otherwise return the live record, unchanged (or a
   * `HeldRecord` when its details are not visible). A lock must stop being live after its
   * `lockTimeoutMs`, a completed record after its `ttlMs`; an expired record counts as absent.
   * `options.signal` aborts when the request stopped waiting for this call (`storeTimeoutMs`:
   * it was answered 503): work not begun yet (a connection still awaited) may be skipped by
   * throwing; a lock taken anyway is released by the companion.
   */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number, options?: { signal?: AbortSignal }): Promise<IdempotencyRecord | null> | IdempotencyRecord | null;
  /**
   * Optional. If `key` holds the lock whose token is `token`, replace it with `lock` (the same
   * token, a later `lockExpiresAt`), live for `lockTimeoutMs` from now, and return `true`;
   * otherwise `false`. Called while the handler runs, so a live holder keeps its key; the
   * token check is the fence: a holder whose lock expired, and was maybe taken over, cannot
   * extend its successor's. Without it a lock is never renewed: `lockTimeoutMs` must then
   * outlast the handler's longest run.
   */
  renew?(key: string, token: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean> | boolean;
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
  /**
   * Optional. What the handler gets as `ctx.tx` while it holds `key` with `token` (for
   * `PostgresStore`, the pg client inside the transaction that holds the key), or `undefined`.
   * Synchronous.
   */
  transaction?(key: string, token: string): Tx | undefined;
  /**
   * Optional. Called once the handler has settled (resolved or thrown), before `complete()` or
   * `release()`, with the key and token `transaction()` was called with: from then on the
   * object `transaction()` returned must refuse to be used (`PostgresStore`: every use of
   * `ctx.tx` throws a `TypeError`), so that a statement the handler left running late can no
   * longer reach the transaction being committed, nor, once its connection is back in a pool,
   * another request's. Synchronous; called whether or not the handler used `ctx.tx`.
   */
  closeTransaction?(key: string, token: string): void;
  /**
   * Optional. `true` when `release()` rolls back what was written through `transaction()`
   * (`PostgresStore`). @default false
   */
  readonly transactional?: boolean;
  /**
   * Optional. The store's secret: the HMAC key with which the companion hashes a caller's
   * identity into the scope part of the store key, so that a scope read from the store cannot
   * be reversed into the credential by trying a dictionary of them. It must be the same for
   * every instance that shares the store's backend (the same caller must get the same scope on
   * each) and must never change once created (every stored key would be orphaned). The
   * companion calls it at most once per `idempotency()` / `idempotent()` instance, on the first
   * request that has an identity, and caches it. The `secret` option of `idempotency()` takes
   * its place. `MemoryStore`: random, made by its constructor; `RedisStore`: at
   * `<prefix>secret`; `PostgresStore`: a row of its table (scope `''`).
   */
  secret?(): string | Promise<string>;
  /**
   * Optional, with `runs`: the run history. Store `run`, replacing the run with the same `id`
   * (the last write wins: a run is recorded when it starts, then again when it ends). Keep it
   * bounded (`MemoryStore`: the last `maxRunRecords` runs; `RedisStore`: the last 2000 writes of
   * each key, for `runRetentionMs`; `PostgresStore`: every run for `runRetentionMs`). A store
   * makes no decision on what it keeps: it stores the records it is given.
   */
  recordRun?(run: RunRecord): Promise<void> | void;
  /**
   * Optional, with `recordRun`: the recorded runs of `key` (the key as the client or job gave
   * it: every scope's), oldest `startedAt` first; at most what the store's bound keeps (`[]` for
   * a key with none).
   */
  runs?(key: string): Promise<RunRecord[]> | RunRecord[];
}
