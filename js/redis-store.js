// RedisStore: the idempotency store of `retry-fetch/server` shared by every server instance
// through Redis (re-exported by server.js). The store protocol and every default: store.d.ts and
// redis-store.d.ts. This package does not depend on `redis`: the caller passes its client.
import { optionError, checkOptionNames, newSecret, cachedSecret, SECRET_FORMAT, runRecord, byStart, runsKey, describe } from './store-support.js';

/**
 * The most runs kept per key in the run history: as many as the largest `maxRuns` counts, so a
 * job's failed runs are never trimmed before it is dead-lettered. A run writes two entries
 * (its start, then its end or crash mark): the stream holds twice as many (an exact XADD MAXLEN).
 */
const RUNS_PER_KEY = 1000;
const ENTRIES_PER_KEY = 2 * RUNS_PER_KEY;
/** How long a key's run history is kept after its last recorded run, by default: 7 days. */
const DEFAULT_RUN_RETENTION_MS = 604_800_000;
const RETENTION_EXPECTED = `an integer number of milliseconds from 1 to ${Number.MAX_SAFE_INTEGER}`;

// Take the lock at KEYS[1] (ARGV[1], living ARGV[2] ms) unless a record is there; returns nil
// (taken) or that record. One key, one step (the record cannot expire between the two).
const TAKE = `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return nil end
return redis.call('GET', KEYS[1])
`;

// The store's secret at KEYS[1] is ARGV[1], the one this instance hashes scopes with: kept in
// use (an LRU eviction does not pick it), put back if it was lost (before another instance
// makes a new one); returns 1, or 0 when another secret is there (hashed with another secret,
// a caller's retry would meet another scope and run again). A script of its own key, sent with
// the lock's: each touches one key, as a Redis Cluster requires, and both go in one round trip.
const CHECK_SECRET = `
local s = redis.call('GET', KEYS[1])
if not s then
  redis.call('SET', KEYS[1], ARGV[1])
elseif s ~= ARGV[1] then
  return 0
end
return 1
`;

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

// The run history of one key: a stream of `run <json>` entries at KEYS[1], capped at ARGV[1]
// entries (exact MAXLEN: the oldest go), which lives ARGV[3] ms after its last write. ARGV[2] is
// the run's JSON. One script, so the XADD and the PEXPIRE are one atomic step (a stream never
// stays without its expiry).
const RECORD_RUN = `
redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], '*', 'run', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`;

// The values of the `run` fields of the stream at KEYS[1], oldest entry first (XRANGE - +).
const READ_RUNS = `
local out = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'run' then out[#out + 1] = fields[i + 1] end
  end
end
return out
`;

function parseRecord(value, key) {
  let record;
  try {
    record = JSON.parse(typeof value === 'string' ? value : String(value));
  } catch {
    // not JSON: refused below
  }
  // Only an object is a record: `null` would read as "the lock is taken" (the key's holder
  // would run again).
  if (typeof record !== 'object' || record === null || Array.isArray(record)) {
    throw new TypeError(`RedisStore: the value at ${JSON.stringify(key)} is not a JSON idempotency record`);
  }
  return record;
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
  #runRetentionMs;
  #secret = cachedSecret(() => this.#readSecret());
  /** The secret once read (acquire checks that Redis still holds it). */
  #secretRead;

  constructor(options) {
    if (typeof options !== 'object' || options === null) {
      throw optionError('RedisStore', 'options', options, 'an object { client, prefix?, runRetentionMs? }');
    }
    checkOptionNames('RedisStore', options, ['client', 'prefix', 'runRetentionMs']);
    const { client, prefix = 'idem:', runRetentionMs = DEFAULT_RUN_RETENTION_MS } = options;
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
    if (!Number.isSafeInteger(runRetentionMs) || runRetentionMs < 1) {
      throw optionError('RedisStore', 'runRetentionMs', runRetentionMs, RETENTION_EXPECTED);
    }
    this.#client = client;
    this.#prefix = prefix;
    this.#runRetentionMs = runRetentionMs;
  }

  /** The key prefix (default `'idem:'`). */
  get prefix() {
    return this.#prefix;
  }

  /** How long a key's run history lives after its last recorded run, in ms (default 7 days). */
  get runRetentionMs() {
    return this.#runRetentionMs;
  }

  async acquire(key, lock, lockTimeoutMs, { signal } = {}) {
    const k = this.#prefix + key;
    const secretKey = `${this.#prefix}secret`;
    // The secret this instance hashes scopes with, once read: checked beside the take.
    const secret = this.#secretRead;
    // Once the request stops waiting (storeTimeoutMs), node-redis (5 and later) drops these
    // commands if they are still unsent, queued while Redis is down: a lock is not taken for
    // a request answered 503 when Redis comes back. A sent one is given back by the companion.
    // (Some node-redis proxies replace their options rather than add to them: the client's own
    // are passed along.)
    const client = signal && typeof this.#client.withCommandOptions === 'function' ? this.#client.withCommandOptions({ ...this.#client._commandOptions, abortSignal: signal }) : this.#client;
    const [checked, taken] = await Promise.allSettled([
      secret === undefined ? 1 : client.eval(CHECK_SECRET, { keys: [secretKey], arguments: [secret] }),
      client.eval(TAKE, { keys: [k], arguments: [JSON.stringify(lock), String(lockTimeoutMs)] }),
    ]);
    const tookIt = taken.status === 'fulfilled' && (taken.value === null || taken.value === undefined);
    const refused = checked.status === 'fulfilled' && Number(checked.value) !== 1;
    if (checked.status === 'rejected' || refused) {
      // Not to be used: a lock taken beside it is let go (a retry would wait out its PX).
      if (tookIt) await this.#swap(key, lock?.token, '', 0).catch(() => {});
      if (refused) {
        throw new Error(`RedisStore: the secret at ${JSON.stringify(secretKey)} is not the one this instance read: another instance made a new one after it was lost, and the two hash the same caller into different scopes (a retry reaching the other would run again), so this instance refuses keyed requests (503); restart every instance, or give idempotency() a secret option`);
      }
      throw checked.reason;
    }
    if (taken.status === 'rejected') throw taken.reason;
    return tookIt ? null : parseRecord(taken.value, k);
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
   * Append `run` to its key's stream `<prefix>runs:<key>` (never a record's key, whose scope is
   * `-` or 64 hex digits), capped at the last 2000 entries (1000 runs), and set the stream to expire
   * `runRetentionMs` from now. A run recorded again (same id) is a new entry: runs() keeps the
   * last one of each id.
   */
  async recordRun(run) {
    const record = runRecord('RedisStore', run);
    await this.#client.eval(RECORD_RUN, {
      keys: [`${this.#prefix}runs:${record.key}`],
      arguments: [String(ENTRIES_PER_KEY), JSON.stringify(record), String(this.#runRetentionMs)],
    });
  }

  /** The runs of `key` in its stream: the last entry of each id, oldest `startedAt` first. */
  async runs(key) {
    const k = `${this.#prefix}runs:${runsKey('RedisStore', key)}`;
    const values = await this.#client.eval(READ_RUNS, { keys: [k], arguments: [] });
    const byId = new Map();
    for (const value of Array.isArray(values) ? values : []) {
      let run;
      try {
        run = runRecord('RedisStore', JSON.parse(typeof value === 'string' ? value : String(value)));
      } catch {
        throw new TypeError(`RedisStore: an entry of the stream at ${JSON.stringify(k)} is not a JSON run record; got ${describe(value)}`);
      }
      byId.delete(run.id); // the later entry of an id wins
      byId.set(run.id, run);
    }
    return [...byId.values()].sort(byStart);
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
      this.#secretRead = secret;
      return secret;
    }
    throw new Error(`RedisStore: the secret at ${JSON.stringify(k)} kept vanishing; giving up`);
  }
}
