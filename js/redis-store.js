// RedisStore: the idempotency store of `retry-fetch/server` shared by every server instance
// through Redis (re-exported by server.js). The store protocol and every default: store.d.ts and
// redis-store.d.ts. This package does not depend on `redis`: the caller passes its client.
import { optionError, checkOptionNames, newSecret, cachedSecret, SECRET_FORMAT } from './store-support.js';

// Replace (or delete) the record at KEYS[1] only if it is the lock held by ARGV[1]:
// ARGV[2] is the new value ('' deletes), ARGV[3] its lifetime in ms. Returns 1 if done, else 0.
// One script for renew, reclaim, complete and release: each is "only the lock's owner may".
const OWNER_SWAP = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, r = pcall(cjson.decode, v)
if not ok or type(r) ~= 'table' or r.state ~= 'in-progress' or r.token ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
`;

function parseRecord(value, key) {
  try {
    return JSON.parse(typeof value === 'string' ? value : String(value));
  } catch {
    throw new TypeError(`RedisStore: the value at ${JSON.stringify(key)} is not a JSON idempotency record`);
  }
}

/**
 * An IdempotencyStore in Redis, shared by every server instance: the lock is
 * `SET key value NX PX lockTimeoutMs` (a distributed lock: a job already running is not
 * started twice), a completed response is stored with
 * `PX ttlMs`, and only the lock's owner may renew, complete, release or take it over (a Lua
 * script comparing the owner token). `client` is a connected node-redis (`redis` v4+) client
 * you create; this package does not depend on it.
 */
export class RedisStore {
  #client;
  #prefix;
  #secret = cachedSecret(() => this.#readSecret());

  constructor(options) {
    if (typeof options !== 'object' || options === null) {
      throw optionError('RedisStore', 'options', options, 'an object { client, prefix? }');
    }
    checkOptionNames('RedisStore', options, ['client', 'prefix']);
    const { client, prefix = 'idem:' } = options;
    const isClient =
      typeof client === 'object' &&
      client !== null &&
      typeof client.set === 'function' &&
      typeof client.get === 'function' &&
      typeof client.eval === 'function';
    if (!isClient) {
      throw optionError('RedisStore', 'client', client, "a connected node-redis client (createClient() from the 'redis' package, then connect())");
    }
    if (typeof prefix !== 'string') throw optionError('RedisStore', 'prefix', prefix, 'a string');
    this.#client = client;
    this.#prefix = prefix;
  }

  /** The key prefix (default `'idem:'`). */
  get prefix() {
    return this.#prefix;
  }

  async acquire(key, lock, lockTimeoutMs) {
    const k = this.#prefix + key;
    const value = JSON.stringify(lock);
    // SET NX fails when a record exists; it may expire or be released before the GET, then try again.
    for (let i = 0; i < 10; i++) {
      const set = await this.#client.set(k, value, { NX: true, PX: lockTimeoutMs });
      if (set !== null && set !== undefined) return null;
      const existing = await this.#client.get(k);
      if (existing !== null && existing !== undefined) return parseRecord(existing, k);
    }
    throw new Error(`RedisStore: the record at ${JSON.stringify(k)} kept changing; giving up`);
  }

  async #swap(key, token, value, ms) {
    const reply = await this.#client.eval(OWNER_SWAP, {
      keys: [this.#prefix + key],
      arguments: [token, value, String(ms)],
    });
    return Number(reply) === 1;
  }

  renew(key, token, lock, lockTimeoutMs) {
    return this.#swap(key, token, JSON.stringify(lock), lockTimeoutMs);
  }

  // Never takes a lock over: Redis expires a lock by itself (PX), by its own clock, so a lock
  // that is still there is live. The waiter's judgement ("expired") uses its own clock against
  // the holder's, and clock skew between instances would let it take over a live lock and run
  // the handler twice; it waits for the PX expiry instead, then acquire() succeeds.
  async reclaim() {
    return false;
  }

  complete(key, token, record, ttlMs) {
    return this.#swap(key, token, JSON.stringify(record), ttlMs);
  }

  release(key, token) {
    return this.#swap(key, token, '', 0);
  }

  /**
   * The secret shared by every instance on this Redis and prefix, at `<prefix>secret` (never a
   * record's key: those have a `:` after the prefix): created once by whichever instance comes
   * first (`SET NX`, no expiry), then read. Cached once read.
   */
  secret() {
    return this.#secret();
  }

  async #readSecret() {
    const k = `${this.#prefix}secret`;
    // SET NX then GET: the GET sees whichever instance's SET came first. Only a deletion in
    // between (by hand, FLUSHALL) makes the GET miss: then set it again.
    for (let i = 0; i < 3; i++) {
      await this.#client.set(k, newSecret(), { NX: true });
      const value = await this.#client.get(k);
      if (value === null || value === undefined) continue;
      const secret = typeof value === 'string' ? value : String(value);
      if (!SECRET_FORMAT.test(secret)) {
        throw new TypeError(`RedisStore: the value at ${JSON.stringify(k)} is not a store secret (64 hex digits); delete it, or give idempotency() a secret option`);
      }
      return secret;
    }
    throw new Error(`RedisStore: the secret at ${JSON.stringify(k)} kept vanishing; giving up`);
  }
}
