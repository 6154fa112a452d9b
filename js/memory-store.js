// MemoryStore: the idempotency store of `retry-fetch/server` for one server process (re-exported
// by server.js). The store protocol and every default: store.d.ts and memory-store.d.ts.

/** The live entry for `key` in `map`, dropping it when it has expired. */
function liveEntry(map, key, now) {
  const entry = map.get(key);
  if (entry === undefined) return undefined;
  if (entry.expiresAt <= now) {
    map.delete(key);
    return undefined;
  }
  return entry;
}

function holds(entry, token) {
  return entry !== undefined && entry.record.state === 'in-progress' && entry.record.token === token;
}

/**
 * An IdempotencyStore in this process's memory: for one server process (several processes or
 * machines need a shared store such as RedisStore). Atomic because JavaScript runs one
 * callback at a time and no method awaits before it has decided. Records expire by time.
 */
export class MemoryStore {
  #records = new Map(); // key -> { record, expiresAt }
  #lastSweep = 0;

  /** Drop expired records, at most once a second (each call is O(records)). */
  #sweep(now) {
    if (now - this.#lastSweep < 1000) return;
    this.#lastSweep = now;
    for (const [key, entry] of this.#records) if (entry.expiresAt <= now) this.#records.delete(key);
  }

  async acquire(key, lock, lockTimeoutMs) {
    const now = Date.now();
    this.#sweep(now);
    const entry = liveEntry(this.#records, key, now);
    if (entry !== undefined) return structuredClone(entry.record);
    this.#records.set(key, { record: structuredClone(lock), expiresAt: now + lockTimeoutMs });
    return null;
  }

  // Only the live lock of `token` is replaced: a holder whose lock expired (and was maybe taken
  // over) cannot extend its successor's.
  async renew(key, token, lock, lockTimeoutMs) {
    const now = Date.now();
    if (!holds(liveEntry(this.#records, key, now), token)) return false;
    this.#records.set(key, { record: structuredClone(lock), expiresAt: now + lockTimeoutMs });
    return true;
  }

  async reclaim(key, staleToken, lock, lockTimeoutMs) {
    const now = Date.now();
    if (!holds(liveEntry(this.#records, key, now), staleToken)) return false;
    this.#records.set(key, { record: structuredClone(lock), expiresAt: now + lockTimeoutMs });
    return true;
  }

  async complete(key, token, record, ttlMs) {
    const now = Date.now();
    if (!holds(liveEntry(this.#records, key, now), token)) return false;
    this.#records.set(key, { record: structuredClone(record), expiresAt: now + ttlMs });
    return true;
  }

  async release(key, token) {
    if (!holds(liveEntry(this.#records, key, Date.now()), token)) return false;
    this.#records.delete(key);
    return true;
  }

  /** How many records (locks and completed responses) are live. */
  get size() {
    const now = Date.now();
    let n = 0;
    for (const entry of this.#records.values()) if (entry.expiresAt > now) n++;
    return n;
  }

  /** Forget every record. */
  clear() {
    this.#records.clear();
  }
}
