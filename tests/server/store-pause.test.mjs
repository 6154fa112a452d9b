// A store that pauses (a Redis stopped, a connection stalled) and then answers every queued
// call at once, in order, as one read of the replies: what a holder and a duplicate of its key
// in the same process do then. The store is a MemoryStore behind a gate the test opens, so
// the timeline is exact; redis.test.mjs stops a real redis-server for the same path.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { idempotency, idempotent, MemoryStore } from 'retry-fetch/server';
import { newKey, sleep } from './support.mjs';

const METHODS = ['acquire', 'renew', 'reclaim', 'complete', 'release'];

/** A shared MemoryStore seen through store objects (one per instance) that can be paused. */
function pausable() {
  const memory = new MemoryStore();
  let queue = null;
  let failCompletes = 0;
  const call = (name, args) => {
    if (name === 'complete' && failCompletes > 0) {
      failCompletes--;
      return Promise.reject(new Error('connection lost'));
    }
    if (!queue) return memory[name](...args);
    return new Promise((resolve) => queue.push(() => resolve(memory[name](...args))));
  };
  return {
    /** A store object of one instance over the shared data. */
    instance: () => Object.fromEntries(METHODS.map((m) => [m, (...args) => call(m, args)])),
    pause: () => (queue ??= []),
    /** Every queued call runs, in order, and their replies are delivered together. */
    resume: () => {
      const q = queue ?? [];
      queue = null;
      for (const run of q) run();
    },
    failNextComplete: () => (failCompletes = 1),
  };
}

const pay = (handler, key) =>
  handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' }, body: '{"amount":10}' }));

test('a holder whose complete() failed, then found its lapsed key taken by a duplicate of its process that gives it back, asks again: its answer is stored, the handler runs once', { timeout: 30_000 }, async () => {
  const store = pausable();
  let runs = 0;
  const errors = [];
  const handler = idempotency(async () => {
    runs++;
    await sleep(2_100);
    return Response.json({ run: runs }, { status: 201 });
  }, { store: store.instance(), identity: false, lockTimeoutMs: 3_000, waitTimeoutMs: 10_000, onStoreError: (e, op) => errors.push(`${op}: ${e.message}`) });
  const key = newKey();
  const first = pay(handler, key);
  await sleep(2_100); // the handler is ending: its first complete() meets a dropped connection
  store.failNextComplete();
  await sleep(50);
  store.pause(); // its second complete() (after 100 ms) waits in the paused store
  await sleep(150);
  const retry = pay(handler, key); // the holder is not overdue: the retry's acquire waits too
  await sleep(3_200); // past the lease on the store's clock
  store.resume(); // complete() is refused (lapsed), the retry's acquire takes the key, gives it back
  const answer = await first;
  assert.equal(answer.status, 201);
  assert.equal(answer.headers.get('x-should-retry'), null, 'the answer was stored: nothing to refuse');
  const repeat = await retry;
  assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(await repeat.json(), { run: 1 });
  assert.equal(runs, 1, 'the handler ran once');
  assert.deepEqual(errors, [], 'the first failure was made good: nothing to report');
});

test('a key a duplicate gave back to its live holder is taken again at once, not at the holder\'s next renewal: a retry on another instance meanwhile waits for it', { timeout: 30_000 }, async () => {
  const store = pausable();
  let runs = 0;
  const handlerOn = (who) => async () => {
    runs++;
    await sleep(8_000);
    return Response.json({ run: runs, on: who }, { status: 201 });
  };
  const options = () => ({ store: store.instance(), identity: false, lockTimeoutMs: 3_000, waitTimeoutMs: 20_000, onStoreError: () => {} });
  const instanceA = idempotency(handlerOn('A'), options());
  const instanceB = idempotency(handlerOn('B'), options());
  const key = newKey();
  const first = pay(instanceA, key); // its lease runs to 3 s, renewed at 1 s
  await sleep(1_500);
  store.pause(); // its renewal at 2 s waits
  await sleep(550);
  const duplicate = pay(instanceA, key); // not overdue: its acquire waits too
  await sleep(2_450); // past the lease
  store.resume(); // the renewal is refused, the duplicate takes the key and gives it back
  await sleep(150);
  const other = pay(instanceB, key); // a retry on another instance, a third of a renewal interval later
  const answers = await Promise.all([first, duplicate, other]);
  const bodies = await Promise.all(answers.map((r) => r.json()));
  assert.deepEqual(bodies, [{ run: 1, on: 'A' }, { run: 1, on: 'A' }, { run: 1, on: 'A' }]);
  assert.equal(runs, 1, 'the handler ran once');
});

/** A Map store (store.d.ts's protocol) whose next call of a method can be held by the test. */
class GatedStore {
  rows = new Map();
  released = [];
  gate = {}; // method -> deferred: its next call waits for it
  #base = mapStore(this.rows);
  async #wait(method) {
    const gate = this.gate[method];
    if (gate) {
      delete this.gate[method];
      await gate.promise;
    }
  }
  async acquire(key, lock) {
    await this.#wait('acquire');
    return this.#base.acquire(key, lock);
  }
  async renew(key, token, lock) {
    await this.#wait('renew');
    return this.#base.renew(key, token, lock);
  }
  async reclaim(key, stale, lock) {
    const row = this.rows.get(key);
    if (row?.state !== 'in-progress' || row.token !== stale) return false;
    this.rows.set(key, structuredClone(lock));
    return true;
  }
  async complete(key, token, record) {
    await this.#wait('complete');
    return this.#base.complete(key, token, record);
  }
  async release(key, token) {
    await this.#wait('release');
    const ok = await this.#base.release(key, token);
    if (ok) this.released.push(token);
    return ok;
  }
}

function gate() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

test('a renewal whose run ended while it waited for a duplicate to give the key back does not take the key again: the retry of a "not processed" answer runs', { timeout: 30_000 }, async () => {
  const store = new GatedStore();
  const hold = gate();
  let runs = 0;
  const handler = idempotency(async () => {
    runs++;
    if (runs === 1) {
      await hold.promise;
      return new Response('busy, not processed', { status: 503, headers: { 'Retry-After': '1' } });
    }
    return new Response('charged', { status: 201 });
  }, { store, identity: false, lockTimeoutMs: 1_000, storeTimeoutMs: 50, concurrent: 'reject', onStoreError: () => {} });
  const post = () => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k1', 'Content-Type': 'application/json' }, body: '{}' }));
  const key = '-:k1';
  const first = post(); // holds the key, its handler waiting
  await sleep(30);
  const acquireGate = (store.gate.acquire = gate()); // a duplicate's acquire waits (a paused store)
  assert.equal((await post()).status, 503, 'the duplicate: storeTimeoutMs');
  // The pause outlasts the holder's lease: the row lapses, and the duplicate's queued acquire
  // takes the key late; its give-back (a release) is slow to answer.
  store.rows.delete(key);
  const releaseGate = (store.gate.release = gate());
  acquireGate.resolve();
  await sleep(400); // the holder's renewal finds the key with the duplicate, asks every 20 ms
  hold.resolve(); // the handler ends "not processed": its key is to be freed
  assert.equal((await first).status, 503);
  releaseGate.resolve(); // the give-back lands: the key is free
  await sleep(100);
  assert.equal(store.rows.get(key), undefined, 'nobody holds the key: the ended run\'s renewal did not take it again');
  const retry = await post();
  assert.equal(retry.status, 201, 'the retry runs');
  assert.equal(runs, 2);
});

test('an acquire that answers with the caller\'s own lock (a store that sent it again after a lost reply) grants it: in time the handler runs; late, the lock is given back', { timeout: 30_000 }, async () => {
  for (const late of [false, true]) {
    const store = new GatedStore();
    const inner = store.acquire.bind(store);
    const lostReply = gate();
    let first = true;
    store.acquire = async (key, lock, ms) => {
      if (!first) return inner(key, lock, ms);
      first = false;
      await inner(key, lock, ms); // the first send took the lock; its reply was lost
      if (late) await lostReply.promise;
      return inner(key, lock, ms); // sent again: finds the lock of its own token
    };
    let runs = 0;
    const handler = idempotency(async () => new Response(`run ${++runs}`, { status: 201 }), { store, identity: false, storeTimeoutMs: 50, lockTimeoutMs: 5_000, concurrent: 'reject', onStoreError: () => {} });
    const post = () => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k' }, body: '{}' }));
    if (!late) {
      const res = await post();
      assert.equal(res.status, 201, 'in time: the caller holds the key');
      assert.equal(await res.text(), 'run 1');
      continue;
    }
    assert.equal((await post()).status, 503);
    lostReply.resolve();
    await sleep(60);
    assert.equal(store.released.length, 1, 'the late lock is given back');
    const retry = await post();
    assert.equal(retry.status, 201, 'the retry runs, not a 409 for its own abandoned lock');
    assert.equal(runs, 1);
  }
});

test('the storing behind an answer holds the lock with the run\'s token: the run\'s own renewal, ending while it asked for the key back, does not give that lock away to another instance', { timeout: 30_000 }, async () => {
  const rows = new Map();
  let failCompletes = 0;
  let acquireGate = null; // the next acquire of instance A waits for it
  /** One instance's store object over the shared rows (two objects: two processes). */
  const instance = (who) => {
    const base = mapStore(rows);
    return {
      ...base,
      async acquire(key, lock) {
        if (who === 'A' && acquireGate) {
          const held = acquireGate;
          acquireGate = null;
          await held.promise;
        }
        return base.acquire(key, lock);
      },
      async complete(key, token, record) {
        if (failCompletes > 0) {
          failCompletes--;
          throw new Error('connection lost');
        }
        return base.complete(key, token, record);
      },
    };
  };
  let runs = 0;
  const handlerOn = (who) => idempotency(async () => {
    runs++;
    await sleep(who === 'A' ? 500 : 10);
    return new Response(`run ${runs} on ${who}`, { status: 201 });
  }, { store: instance(who), identity: false, lockTimeoutMs: 1_000, waitTimeoutMs: 5_000, onStoreError: () => {} });
  const [a, b] = [handlerOn('A'), handlerOn('B')];
  const post = (h) => h(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k' }, body: 'x' }));
  const first = post(a);
  await sleep(200);
  // The store loses the row (restarted, empty): A's renewal is refused and asks for the key
  // back, its acquire slow to answer; then every complete() of the quick retries fails.
  rows.clear();
  const held = (acquireGate = gate());
  failCompletes = 3;
  const answer = await first;
  assert.equal(answer.headers.get('x-should-retry'), 'false', 'unkept when answered');
  held.resolve(); // the ended renewal's acquire lands: the lock is the storing's now
  await sleep(5);
  assert.equal(rows.get('-:k')?.state, 'in-progress', 'the lock was not given away');
  const other = await post(b); // another instance, the same key: waits, then gets the answer
  assert.equal(other.headers.get('idempotent-replayed'), 'true');
  assert.equal(await other.text(), 'run 1 on A');
  assert.equal(runs, 1, 'the handler ran once');
});

/**
 * A store whose complete() fails `downFor` times (Redis down), then comes back empty (the lock's
 * row gone: complete() answers false), and whose next acquire (the key taken again) meets one
 * more dropped connection.
 */
function flappingStore(downFor) {
  const rows = new Map();
  const base = mapStore(rows);
  let completes = 0;
  let failNextAcquire = false;
  return {
    ...base,
    async acquire(key, lock) {
      if (failNextAcquire) {
        failNextAcquire = false;
        throw new Error('connection reset');
      }
      return base.acquire(key, lock);
    },
    async complete(key, token, record) {
      completes++;
      if (completes <= downFor) throw new Error('ECONNREFUSED');
      if (completes === downFor + 1) {
        rows.clear();
        failNextAcquire = true;
      }
      return base.complete(key, token, record);
    },
  };
}

/** store.d.ts's protocol over `rows` (a Map of records), each method atomic on its key. */
function mapStore(rows) {
  return {
    async acquire(key, lock) {
      const row = rows.get(key);
      if (row) return structuredClone(row);
      rows.set(key, structuredClone(lock));
      return null;
    },
    async renew(key, token, lock) {
      const row = rows.get(key);
      if (row?.state !== 'in-progress' || row.token !== token) return false;
      rows.set(key, structuredClone(lock));
      return true;
    },
    async reclaim() {
      return false;
    },
    async complete(key, token, record) {
      const row = rows.get(key);
      if (row?.state !== 'in-progress' || row.token !== token) return false;
      rows.set(key, structuredClone(record));
      return true;
    },
    async release(key, token) {
      const row = rows.get(key);
      return row?.state === 'in-progress' && row.token === token && rows.delete(key);
    },
  };
}

test('a store failing as a lapsed key is taken again is asked again like a failing complete(): the answer (a job\'s result too) is kept, nothing runs twice', { timeout: 60_000 }, async () => {
  for (const downFor of [0, 1, 3]) {
    let runs = 0;
    const h = idempotency(async () => Response.json({ charged: ++runs }, { status: 201 }), { store: flappingStore(downFor), identity: false, lockTimeoutMs: 3_000, onStoreError: () => {} });
    const pay = () => h(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': 'k1' }, body: 'x' }));
    const first = await pay();
    assert.equal(first.status, 201);
    // A blip as the key is taken again gets the quick retries too: kept before the answer.
    if (downFor === 0) assert.equal(first.headers.get('x-should-retry'), null, 'kept in time');
    await sleep(3_500); // past the lock: a repeat would run again if the answer were not kept
    const repeat = await pay();
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true', `HTTP, complete() down ${downFor}x`);
    assert.equal(runs, 1);
  }
  let jobRuns = 0;
  const job = idempotent(async () => ({ charged: ++jobRuns }), { store: flappingStore(3), key: (m) => m.id, lockTimeoutMs: 3_000, onStoreError: () => {} });
  assert.deepEqual(await job({ id: 'm1' }), { charged: 1 });
  await sleep(3_500);
  assert.deepEqual(await job({ id: 'm1' }), { charged: 1 }, 'the redelivery gets the kept result');
  assert.equal(jobRuns, 1);
});
