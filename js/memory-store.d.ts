import type { CompletedRecord, IdempotencyRecord, IdempotencyStore, LockRecord, RunRecord } from './store.js';

/** Options of `new MemoryStore(...)`. An unknown option name is a `TypeError` naming it. */
export interface MemoryStoreOptions {
  /**
   * The most records (locks and completed answers) kept: an integer of 1 or more.
   * @default 10000
   */
  maxEntries?: number;
  /**
   * The most bytes of records kept, a record's size being the size of its JSON (the length of
   * `JSON.stringify(record)`, in UTF-16 code units; a stored answer's body is base64 in it, so
   * about 4/3 of its bytes): an integer of 1 or more. @default 67108864 (64 MiB)
   */
  maxBytes?: number;
  /**
   * The most runs the run history keeps (`recordRun`/`runs`), of every key together: an integer
   * of 1 or more. It is a ring: once full, a newly recorded run takes the place of the oldest
   * one (the first recorded); a run recorded again with the same `id` is updated in place.
   * Apart from `maxEntries` and `maxBytes` (a run is never evicted to make room for a record,
   * nor the reverse). @default 10000
   */
  maxRunRecords?: number;
}

/**
 * An `IdempotencyStore` in this process's memory (one server process; atomic because
 * JavaScript is single-threaded).
 *
 * Bounded by `maxEntries` and `maxBytes`. When storing a record (a lock, an answer) would
 * exceed either, expired records are dropped, then completed answers are evicted, oldest
 * completion first, until it fits (an evicted answer is no longer replayed: a retry with its key
 * runs the handler again); but while the callers holding the most answers (the scope: the part
 * of the key before its first `:`) hold a tenth of them or more, their oldest go first, so one
 * caller sending many keys evicts its own answers, not another caller's (a caller is a scope:
 * a flood with a new credential on each request is many callers; authenticate before it). A lock, a request in progress, is never evicted: when the other
 * records are all locks and a new one does not fit, `acquire` throws (`MemoryStore: full: N
 * requests in progress (maxEntries ...)`), which the companion answers with a 503. An answer
 * larger than `maxBytes` by itself evicts every other answer and is stored anyway: the one case
 * in which `bytes` exceeds `maxBytes`.
 *
 * Records expire by the monotonic clock (`performance.now()`): a step of the wall clock never
 * makes a live lock or answer expire early or late. For the same reason `reclaim` is always
 * `false` (a lock still in the store is live by its clock, whatever the caller's wall clock
 * says; an expired one is dropped and `acquire` succeeds).
 *
 * The run history (`recordRun`, `runs`) is a ring of the last `maxRunRecords` runs (default
 * 10000), of every key, in this process's memory (lost when it exits).
 * @throws TypeError when an option is unknown, or `maxEntries`, `maxBytes` or `maxRunRecords`
 *   is not an integer of 1 or more.
 */
export class MemoryStore implements IdempotencyStore {
  /** An empty store. */
  constructor(options?: MemoryStoreOptions);
  /** See `IdempotencyStore.acquire`. Rejects when the store is full of requests in progress. */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number): Promise<IdempotencyRecord | null>;
  /** See `IdempotencyStore.renew`. */
  renew(key: string, token: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
  /** Always `false`: a lock still in the store is live by the store's own clock; an expired one is gone. */
  reclaim(key: string, staleToken: string, lock: LockRecord, lockTimeoutMs: number): Promise<false>;
  /** See `IdempotencyStore.complete`. */
  complete(key: string, token: string, record: CompletedRecord, ttlMs: number): Promise<boolean>;
  /** See `IdempotencyStore.release`. */
  release(key: string, token: string): Promise<boolean>;
  /**
   * See `IdempotencyStore.recordRun`: keeps a copy of `run` in the ring of the last
   * `maxRunRecords` runs (a run with the same `id` is replaced in place; when the ring is full a
   * new run drops the oldest). Rejects with a `TypeError` when `run` is not a `RunRecord`.
   */
  recordRun(run: RunRecord): Promise<void>;
  /**
   * See `IdempotencyStore.runs`: copies of the kept runs of `key` (every scope), oldest
   * `startedAt` first (then by `id`).
   */
  runs(key: string): Promise<RunRecord[]>;
  /**
   * See `IdempotencyStore.secret`: 64 hex digits, random, made by the constructor (each
   * `MemoryStore` has its own).
   */
  secret(): string;
  /** How many records (locks and stored responses) are live. */
  readonly size: number;
  /** The size of the live records: the sum of the sizes of their JSON (see `maxBytes`). */
  readonly bytes: number;
  /** The most records kept. @default 10000 */
  readonly maxEntries: number;
  /** The most bytes of records kept. @default 67108864 */
  readonly maxBytes: number;
  /** The most runs the run history keeps. @default 10000 */
  readonly maxRunRecords: number;
  /** Forget every record and the run history (the secret stays). */
  clear(): void;
}
