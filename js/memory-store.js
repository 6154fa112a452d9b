// MemoryStore: the idempotency store of `retry-fetch/server` for one server process (re-exported
// by server.js). The store protocol and every default: store.d.ts and memory-store.d.ts.
//
// Bounded: at most `maxEntries` records and `maxBytes` bytes of records (the length of each
// record's JSON). Room is made by dropping expired records, then evicting completed answers,
// oldest completion first, except that a scope (a caller: the part of the key before its first
// `:`, the companion's HMAC of the identity) holding a tenth of the answers or more gives its
// own oldest first: one caller sending many keys cannot push out other callers' answers, whose
// retries would run again. A lock (a request in progress) is never evicted: when only locks are
// left, a new lock is refused (acquire throws; the companion answers 503).
//
// Expiry runs on the monotonic clock (performance.now()), not on Date.now(): a step of the wall
// clock (NTP, a VM resumed, an operator) must neither expire a live lock, which would let a
// duplicate run the handler a second time, nor keep an expired answer. The records keep the
// epoch-ms fields the companion puts in them (lockExpiresAt, completedAt): those are its own.
//
// The run history (recordRun/runs) is apart from the records: a ring of the last
// `maxRunRecords` runs, whatever their key; a run recorded again (same id) keeps its place.
import { newSecret, optionError, checkOptionNames, runRecord, byStart, runsKey } from './store-support.js';

/** Where a store's method carries its synchronous twin for the companion (src/wasm/server/store.rs). */
const SYNC_STORE = Symbol.for('retry-fetch.syncStore');
/** Where `runs` and `recordRun` carry the two in one call, for the companion (src/wasm/server/store.rs). */
const START_RUN = Symbol.for('retry-fetch.startRun');
/** Where a method carries its twin that takes the record as JSON text (src/wasm/server/store.rs). */
const TEXT_STORE = Symbol.for('retry-fetch.textStore');

const OPTIONS = ['maxEntries', 'maxBytes', 'maxRunRecords'];
const DEFAULT_MAX_ENTRIES = 10_000;
const DEFAULT_MAX_RUN_RECORDS = 10_000;
const DEFAULT_MAX_BYTES = 67_108_864; // 64 MiB
const BOUND_EXPECTED = `an integer from 1 to ${Number.MAX_SAFE_INTEGER}`;

/** A lifetime in ms as the expiry arithmetic takes it (a NaN would break the heap's order). */
function lifetime(ms) {
  if (Number.isFinite(ms)) return ms;
  return ms === Infinity ? Infinity : 0;
}

function holds(entry, token) {
  return entry !== undefined && entry.state === 'in-progress' && entry.token === token;
}

// A binary min-heap of entries on `expiresAt`. An entry is immutable while stored (a renewal or
// a completion stores a new one; a removed one loses its JSON), so a heap item whose entry is
// no longer the key's current one is stale: skipped when it is popped, and dropped when the
// heap is rebuilt.
function siftUp(heap, i) {
  const item = heap[i];
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (heap[parent].expiresAt <= item.expiresAt) break;
    heap[i] = heap[parent];
    i = parent;
  }
  heap[i] = item;
}

function siftDown(heap, i) {
  const n = heap.length;
  const item = heap[i];
  for (;;) {
    let child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap[child + 1].expiresAt < heap[child].expiresAt) child++;
    if (heap[child].expiresAt >= item.expiresAt) break;
    heap[i] = heap[child];
    i = child;
  }
  heap[i] = item;
}

function popMin(heap) {
  const top = heap[0];
  const last = heap.pop();
  if (heap.length > 0) {
    heap[0] = last;
    siftDown(heap, 0);
  }
  return top;
}

/**
 * An IdempotencyStore in this process's memory: for one server process (several processes or
 * machines need a shared store such as RedisStore). Atomic because JavaScript runs one
 * callback at a time and no method awaits before it has decided. Records expire by time (the
 * monotonic clock); the store holds at most `maxEntries` records and `maxBytes` bytes of them.
 */
export class MemoryStore {
  // key -> entry { key, json, state, token, expiresAt (performance.now() ms), bytes }. A record is
  // kept as its JSON (records are JSON by the protocol): a copy the caller cannot change, whose
  // length is its size, parsed again for each reader.
  #records = new Map();
  #answers = new Map(); // key -> entry of each completed record
  // The completed entries in completion order, the eviction order, from #oldest on (entries no
  // longer in #answers are skipped). A queue rather than #answers' own order: V8 leaves a
  // deleted Map entry's slot in place until it rehashes, so iterating a Map whose oldest entries
  // keep being deleted from its start walks over every one of them, each time.
  #order = [];
  #oldest = 0;
  // The completed entries of each scope: scope -> { count, queue, head } (the queue in
  // completion order from head on, entries no longer in #answers skipped), and the scopes by
  // their count, with the largest count, so that the heaviest scope is found at once.
  #scopes = new Map();
  #byCount = new Map(); // count -> Set of scope records
  #maxCount = 0;
  #completions = 0; // entries made, numbered (an answer's number orders it by completion)
  #heap = []; // every stored entry by expiresAt (stale ones until popped or rebuilt)
  #bytes = 0; // of #records
  #answerBytes = 0; // of #answers
  #maxEntries;
  #maxBytes;
  #secret = newSecret();
  // The run history: a ring of stored runs (frozen plain objects), the oldest at #runStart once
  // it is full; where each id is in it; and the ids of each key.
  #runs = [];
  #runStart = 0;
  #runSlots = new Map(); // id -> index in #runs
  #runIds = new Map(); // key -> Set of ids
  #maxRunRecords;

  constructor(options) {
    if (options !== undefined && (typeof options !== 'object' || options === null)) {
      throw optionError('MemoryStore', 'options', options, 'an object { maxEntries?, maxBytes?, maxRunRecords? }');
    }
    if (options !== undefined) checkOptionNames('MemoryStore', options, OPTIONS);
    const { maxEntries = DEFAULT_MAX_ENTRIES, maxBytes = DEFAULT_MAX_BYTES, maxRunRecords = DEFAULT_MAX_RUN_RECORDS } = options ?? {};
    if (!Number.isSafeInteger(maxEntries) || maxEntries < 1) throw optionError('MemoryStore', 'maxEntries', maxEntries, BOUND_EXPECTED);
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 1) throw optionError('MemoryStore', 'maxBytes', maxBytes, BOUND_EXPECTED);
    if (!Number.isSafeInteger(maxRunRecords) || maxRunRecords < 1) throw optionError('MemoryStore', 'maxRunRecords', maxRunRecords, BOUND_EXPECTED);
    this.#maxEntries = maxEntries;
    this.#maxBytes = maxBytes;
    this.#maxRunRecords = maxRunRecords;
  }

  /** Drop every record that has expired by `now` (amortised O(log n) each). */
  #dropExpired(now) {
    const heap = this.#heap;
    while (heap.length > 0 && heap[0].expiresAt <= now) {
      const entry = popMin(heap);
      if (this.#records.get(entry.key) === entry) this.#remove(entry.key);
    }
  }

  #remove(key) {
    const entry = this.#records.get(key);
    if (entry === undefined) return;
    this.#records.delete(key);
    this.#bytes -= entry.bytes;
    if (this.#answers.get(key) === entry) {
      this.#answers.delete(key);
      this.#answerBytes -= entry.bytes;
      this.#countScope(key, -1);
    }
    // The expiry heap and the eviction queue keep a removed entry until it is popped or they
    // are rebuilt (up to 2 × size + 1024 of them): without its JSON, so that what they keep
    // is a few dozen bytes each, not an answer of up to 32 MiB each beyond maxBytes.
    entry.json = '';
  }

  /**
   * Store the record `json` (its JSON text; its `state` and `token`) at `key` (replacing what is
   * there), live for `ms` from `now`, making room by evicting completed answers, oldest first.
   * `newLock`: a lock that takes a new entry, refused (throws) when it does not fit beside the
   * other locks; anything else is stored even then.
   */
  #put(key, json, state, token, ms, now, newLock) {
    const bytes = json.length;
    this.#remove(key);
    const fits = () => this.#records.size < this.#maxEntries && this.#bytes + bytes <= this.#maxBytes;
    if (!fits()) {
      if (newLock) {
        // Only completed answers can be evicted: does the lock fit once they all are?
        const locks = this.#records.size - this.#answers.size;
        if (locks >= this.#maxEntries) {
          throw new Error(`MemoryStore: full: ${locks} requests in progress (maxEntries ${this.#maxEntries})`);
        }
        if (bytes > this.#maxBytes) {
          throw new Error(`MemoryStore: a lock of ${bytes} bytes does not fit in maxBytes ${this.#maxBytes}: maxBytes must hold at least one request in progress`);
        }
        if (this.#bytes - this.#answerBytes + bytes > this.#maxBytes) {
          throw new Error(`MemoryStore: full: ${locks} requests in progress (maxBytes ${this.#maxBytes})`);
        }
      }
      // Oldest completion first (a heavy scope's first). An answer larger than maxBytes by
      // itself evicts every other one and is stored anyway (the one case the bound is exceeded).
      while (!fits()) {
        const victim = this.#nextVictim();
        if (victim === undefined) break;
        this.#remove(victim.key);
      }
    }
    const entry = { key, json, state, token, expiresAt: now + lifetime(ms), bytes, seq: ++this.#completions };
    this.#records.set(key, entry);
    this.#bytes += bytes;
    if (state === 'completed') {
      this.#answers.set(key, entry);
      this.#answerBytes += bytes;
      this.#order.push(entry);
      const scope = this.#countScope(key, 1);
      scope.queue.push(entry);
      if (scope.queue.length - scope.head > 2 * scope.count + 16) {
        scope.queue = scope.queue.slice(scope.head).filter((e) => this.#answers.get(e.key) === e);
        scope.head = 0;
      }
      // The places of answers that expired (evicted ones leave from the front): dropped when
      // they outnumber the live answers.
      if (this.#order.length - this.#oldest > 2 * this.#answers.size + 1024) {
        this.#order = [...this.#answers.values()]; // a Map iterates in insertion order: completion order
        this.#oldest = 0;
      } else if (this.#oldest > 1024 && this.#oldest * 2 > this.#order.length) {
        this.#order = this.#order.slice(this.#oldest);
        this.#oldest = 0;
      }
    }
    const heap = this.#heap;
    heap.push(entry);
    siftUp(heap, heap.length - 1);
    // Renewed, replaced and evicted entries stay in the heap until their time: rebuild it from
    // the live ones when they outnumber those (amortised O(1) a call).
    if (heap.length > 2 * this.#records.size + 1024) {
      this.#heap = [...this.#records.values()];
      for (let i = (this.#heap.length >> 1) - 1; i >= 0; i--) siftDown(this.#heap, i);
    }
  }

  /**
   * The answer to evict next: the oldest of the heaviest scope when it holds a tenth of the
   * answers or more (and more than one), else the oldest of all; undefined when none is left.
   */
  #nextVictim() {
    if (this.#maxCount > 1 && this.#maxCount * 10 >= this.#answers.size) {
      // Of the heaviest scopes (at most ten: each holds a tenth), the one whose oldest answer
      // is the oldest.
      let victim;
      for (const scope of this.#byCount.get(this.#maxCount)) {
        let entry = scope.queue[scope.head];
        while (this.#answers.get(entry.key) !== entry) {
          scope.queue[scope.head++] = undefined;
          entry = scope.queue[scope.head];
        }
        if (victim === undefined || entry.seq < victim.seq) victim = entry;
      }
      return victim;
    }
    while (this.#oldest < this.#order.length) {
      const entry = this.#order[this.#oldest];
      this.#order[this.#oldest++] = undefined;
      if (this.#answers.get(entry.key) === entry) return entry;
    }
    return undefined;
  }

  /** Count an answer of `key`'s scope in (`by` 1) or out (-1); returns the scope's record. */
  #countScope(key, by) {
    const at = key.indexOf(':');
    const name = at < 0 ? '' : key.slice(0, at);
    let scope = this.#scopes.get(name);
    if (scope === undefined) this.#scopes.set(name, (scope = { count: 0, queue: [], head: 0 }));
    const from = scope.count;
    const to = from + by;
    if (from > 0) {
      const bucket = this.#byCount.get(from);
      bucket.delete(scope);
      if (bucket.size === 0) {
        this.#byCount.delete(from);
        if (this.#maxCount === from && to < from) this.#maxCount = to;
      }
    }
    scope.count = to;
    if (to > 0) {
      let bucket = this.#byCount.get(to);
      if (bucket === undefined) this.#byCount.set(to, (bucket = new Set()));
      bucket.add(scope);
      if (to > this.#maxCount) this.#maxCount = to;
    } else {
      this.#scopes.delete(name);
    }
    return scope;
  }

  async acquire(key, lock, lockTimeoutMs) {
    return this.#acquire(key, lock, lockTimeoutMs);
  }

  async renew(key, token, lock, lockTimeoutMs) {
    return this.#renew(key, token, lock, lockTimeoutMs);
  }

  async complete(key, token, record, ttlMs) {
    return this.#complete(key, token, record, ttlMs);
  }

  async release(key, token) {
    return this.#release(key, token);
  }

  /**
   * Keep `run` (a copy), replacing the run with the same id in its place. When the ring holds
   * `maxRunRecords` runs, a new one takes the place of the oldest (by when it was first recorded).
   */
  async recordRun(run) {
    this.#recordRun(run);
  }

  /** The kept runs of `key` (every scope), oldest `startedAt` first (then by id): copies. */
  async runs(key) {
    return this.#runsOf(key);
  }

  // The same methods, synchronous, for the companion (one await fewer per call; not public
  // API): each public method carries its twin at SYNC_STORE, which the companion calls instead
  // when the store's method is that very function (a wrapper's or a subclass's own method is
  // another function, without it, and is called as it is).
  static {
    const twins = {
      acquire(key, lock, lockTimeoutMs) {
        return this.#acquire(key, lock, lockTimeoutMs);
      },
      renew(key, token, lock, lockTimeoutMs) {
        return this.#renew(key, token, lock, lockTimeoutMs);
      },
      complete(key, token, record, ttlMs) {
        return this.#complete(key, token, record, ttlMs);
      },
      release(key, token) {
        return this.#release(key, token);
      },
      recordRun(run) {
        this.#recordRun(run);
      },
      runs(key) {
        return this.#runsOf(key);
      },
    };
    for (const [name, twin] of Object.entries(twins)) {
      Object.defineProperty(MemoryStore.prototype[name], SYNC_STORE, { value: twin });
    }
    // The same, synchronous, with the record as its JSON text (the companion writes it as text:
    // no JSON.parse there, no JSON.stringify here); acquire's takes the lock's token last.
    const textTwins = {
      acquire(key, text, lockTimeoutMs, token) {
        return this.#acquire(key, undefined, lockTimeoutMs, text, token);
      },
      renew(key, token, text, lockTimeoutMs) {
        return this.#renew(key, token, undefined, lockTimeoutMs, text);
      },
      complete(key, token, text, ttlMs) {
        return this.#complete(key, token, undefined, ttlMs, text);
      },
    };
    for (const [name, twin] of Object.entries(textTwins)) {
      Object.defineProperty(MemoryStore.prototype[name], TEXT_STORE, { value: twin });
    }
    // runs(run.key), then recordRun(run), in one synchronous call: the key's runs before `run`.
    // The companion calls it where `runs` and `recordRun` both carry it, for the start of each run.
    const startRun = function (run) {
      const before = this.#runsOf(run?.key);
      this.#recordRun(run);
      return before;
    };
    Object.defineProperty(MemoryStore.prototype.runs, START_RUN, { value: startRun });
    Object.defineProperty(MemoryStore.prototype.recordRun, START_RUN, { value: startRun });
  }

  // `text`: the record's JSON text, given instead of the record (the text twins).
  #acquire(key, lock, lockTimeoutMs, text, token) {
    const now = performance.now();
    this.#dropExpired(now);
    const entry = this.#records.get(key);
    if (entry !== undefined) return JSON.parse(entry.json);
    if (text === undefined) this.#putRecord(key, lock, lockTimeoutMs, now, true);
    else this.#put(key, text, 'in-progress', token, lockTimeoutMs, now, true);
    return null;
  }

  #putRecord(key, record, ms, now, newLock) {
    const json = JSON.stringify(record);
    this.#put(key, json, record.state, record.token, ms, now, newLock);
  }

  // Only the live lock of `token` is replaced: a holder whose lock expired (and was maybe taken
  // over) cannot extend its successor's.
  #renew(key, token, lock, lockTimeoutMs, text) {
    const now = performance.now();
    this.#dropExpired(now);
    if (!holds(this.#records.get(key), token)) return false;
    if (text === undefined) this.#putRecord(key, lock, lockTimeoutMs, now, false);
    else this.#put(key, text, 'in-progress', token, lockTimeoutMs, now, false);
    return true;
  }

  // Never takes a lock over. A lock still here is live by this store's own (monotonic) clock;
  // the caller judged it expired by its wall clock (the lock's lockExpiresAt), which a clock
  // step can move: taking it over would run the handler twice. An expired lock is dropped by
  // the store itself, and acquire() then succeeds.
  async reclaim() {
    return false;
  }

  #complete(key, token, record, ttlMs, text) {
    const now = performance.now();
    this.#dropExpired(now);
    if (!holds(this.#records.get(key), token)) return false;
    if (text === undefined) this.#putRecord(key, record, ttlMs, now, false);
    else this.#put(key, text, 'completed', undefined, ttlMs, now, false);
    return true;
  }

  #release(key, token) {
    this.#dropExpired(performance.now());
    if (!holds(this.#records.get(key), token)) return false;
    this.#remove(key);
    return true;
  }

  #recordRun(run) {
    const record = Object.freeze(runRecord('MemoryStore', run));
    const slot = this.#runSlots.get(record.id);
    if (slot !== undefined) {
      const old = this.#runs[slot];
      if (old.key !== record.key) {
        this.#unindexRun(old);
        this.#indexRun(record);
      }
      this.#runs[slot] = record;
      return;
    }
    let at;
    if (this.#runs.length < this.#maxRunRecords) {
      at = this.#runs.push(record) - 1;
    } else {
      at = this.#runStart;
      const dropped = this.#runs[at];
      this.#runSlots.delete(dropped.id);
      this.#unindexRun(dropped);
      this.#runs[at] = record;
      this.#runStart = (at + 1) % this.#maxRunRecords;
    }
    this.#runSlots.set(record.id, at);
    this.#indexRun(record);
  }

  #indexRun(record) {
    let ids = this.#runIds.get(record.key);
    if (ids === undefined) this.#runIds.set(record.key, (ids = new Set()));
    ids.add(record.id);
  }

  #unindexRun(record) {
    const ids = this.#runIds.get(record.key);
    ids.delete(record.id);
    if (ids.size === 0) this.#runIds.delete(record.key);
  }

  #runsOf(key) {
    const ids = this.#runIds.get(runsKey('MemoryStore', key));
    if (ids === undefined) return [];
    const runs = [];
    for (const id of ids) runs.push({ ...this.#runs[this.#runSlots.get(id)] });
    return runs.sort(byStart);
  }

  /**
   * The HMAC key with which the companion hashes a caller's identity into the store key's
   * scope: 64 hex digits, random, made when the store was. Never changes.
   */
  secret() {
    return this.#secret;
  }

  /** How many records (locks and completed responses) are live. */
  get size() {
    this.#dropExpired(performance.now());
    return this.#records.size;
  }

  /** The size of the live records: the sum of the lengths of their JSON. */
  get bytes() {
    this.#dropExpired(performance.now());
    return this.#bytes;
  }

  /** The most records kept (default 10000). */
  get maxEntries() {
    return this.#maxEntries;
  }

  /** The most bytes of records kept (default 67108864, 64 MiB). */
  get maxBytes() {
    return this.#maxBytes;
  }

  /** The most runs kept in the run history, of every key (default 10000). */
  get maxRunRecords() {
    return this.#maxRunRecords;
  }

  /** Forget every record and the run history (the secret stays). */
  clear() {
    this.#runs = [];
    this.#runStart = 0;
    this.#runSlots.clear();
    this.#runIds.clear();
    this.#records.clear();
    this.#answers.clear();
    this.#order = [];
    this.#oldest = 0;
    this.#scopes.clear();
    this.#byCount.clear();
    this.#maxCount = 0;
    this.#heap = [];
    this.#bytes = 0;
    this.#answerBytes = 0;
  }
}
