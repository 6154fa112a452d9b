import type { CompletedRecord, IdempotencyRecord, IdempotencyStore, LockRecord } from './store.js';

/**
 * An `IdempotencyStore` in this process's memory (one server process; atomic because
 * JavaScript is single-threaded). Records expire by time; expired ones are swept lazily.
 */
export class MemoryStore implements IdempotencyStore {
  /** An empty store. */
  constructor();
  /** See `IdempotencyStore.acquire`. */
  acquire(key: string, lock: LockRecord, lockTimeoutMs: number): Promise<IdempotencyRecord | null>;
  /** See `IdempotencyStore.renew`. */
  renew(key: string, token: string, lock: LockRecord, lockTimeoutMs: number): Promise<boolean>;
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
