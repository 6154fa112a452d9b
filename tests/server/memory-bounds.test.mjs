// MemoryStore is bounded (maxEntries, maxBytes: completed answers are evicted oldest first, a
// heavy caller's first; a lock never is) and keeps time on the monotonic clock (a wall-clock step neither expires a
// live lock nor keeps an expired answer). Through idempotency() (its fetch-style handler,
// called directly: no HTTP, so 1,000 answers of 1 MiB stay quick) and on the store directly.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { idempotency, MemoryStore } from 'retry-fetch/server';
import { sleep, deferred, problemOf, DEFAULT_BODY } from './support.mjs';

const t = (name, fn) => test(`MemoryStore bounds: ${name}`, { timeout: 60_000 }, fn);

/** A keyed POST for the fetch-style handler, from the caller `who` (its Authorization). */
const post = (key, { body = DEFAULT_BODY, who = 'Bearer alice' } = {}) =>
  new Request('http://api.test/payments', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key, Authorization: who },
    body,
  });

const lockOf = (token, ms = 60_000) => ({ state: 'in-progress', token, fingerprint: 'f'.repeat(64), lockExpiresAt: Date.now() + ms });
const answerOf = (body = 'ok') => ({
  state: 'completed',
  fingerprint: 'f'.repeat(64),
  response: { status: 201, statusText: '', headers: [['content-type', 'text/plain']], body: Buffer.from(body).toString('base64') },
  completedAt: Date.now(),
});
const sizeOf = (record) => JSON.stringify(record).length;

/** Replace Date.now with `now()` while `fn` runs (the wall clock steps), restored after. */
async function withWallClock(now, fn) {
  const real = Date.now;
  Date.now = now;
  try {
    return await fn(real);
  } finally {
    Date.now = real;
  }
}

// ---------------------------------------------------------------------------------------------
// The store on its own.

t('options: defaults, getters, and TypeErrors for unknown or invalid ones', () => {
  const store = new MemoryStore();
  assert.equal(store.maxEntries, 10_000);
  assert.equal(store.maxBytes, 67_108_864);
  assert.equal(store.size, 0);
  assert.equal(store.bytes, 0);
  const small = new MemoryStore({ maxEntries: 3, maxBytes: 5_000 });
  assert.equal(small.maxEntries, 3);
  assert.equal(small.maxBytes, 5_000);
  assert.equal(new MemoryStore({ maxEntries: undefined }).maxEntries, 10_000, 'undefined is absent');
  assert.throws(() => new MemoryStore({ maxEntry: 3 }), { name: 'TypeError', message: 'MemoryStore: unknown option "maxEntry" (did you mean "maxEntries"?)' });
  for (const [options, option] of [
    [{ maxEntries: 0 }, 'maxEntries'],
    [{ maxEntries: 1.5 }, 'maxEntries'],
    [{ maxEntries: '10' }, 'maxEntries'],
    [{ maxEntries: Infinity }, 'maxEntries'],
    [{ maxBytes: -1 }, 'maxBytes'],
    [{ maxBytes: NaN }, 'maxBytes'],
  ]) {
    assert.throws(() => new MemoryStore(options), { name: 'TypeError', message: new RegExp(`^MemoryStore: invalid option "${option}": got .*; expected an integer`) }, JSON.stringify(options));
  }
  assert.throws(() => new MemoryStore(null), { name: 'TypeError', message: /MemoryStore: invalid option "options": got null/ });
});

t('size and bytes count the live records; bytes is the length of their JSON', async () => {
  const store = new MemoryStore();
  const lock = lockOf('a');
  assert.equal(await store.acquire('-:a', lock, 60_000), null);
  assert.equal(store.size, 1);
  assert.equal(store.bytes, sizeOf(lock));
  const answer = answerOf('x'.repeat(300));
  assert.equal(await store.complete('-:a', 'a', answer, 60_000), true);
  assert.equal(store.bytes, sizeOf(answer), 'the answer replaced the lock');
  assert.equal(await store.acquire('-:b', lockOf('b'), 60_000), null);
  assert.equal(await store.release('-:b', 'b'), true);
  assert.equal(store.size, 1);
  assert.equal(store.bytes, sizeOf(answer));
  store.clear();
  assert.equal(store.size, 0);
  assert.equal(store.bytes, 0);
});

t('maxEntries: completed answers are evicted oldest completion first; locks never; a lock that does not fit throws', async () => {
  const store = new MemoryStore({ maxEntries: 3 });
  // Completed in the order c, a, b (not the order they were locked in).
  for (const k of ['a', 'b', 'c']) assert.equal(await store.acquire(`-:${k}`, lockOf(k), 60_000), null);
  for (const k of ['c', 'a', 'b']) assert.equal(await store.complete(`-:${k}`, k, answerOf(k), 60_000), true);
  assert.equal(store.size, 3);
  assert.equal(await store.acquire('-:d', lockOf('d'), 60_000), null, 'room made');
  assert.equal(store.size, 3);
  assert.equal(await store.acquire('-:c', lockOf('c2'), 60_000), null, 'c, the oldest completion, was evicted');
  // ...and a, the next oldest, for that lock. Now: b (answer), d (lock), c (lock).
  assert.equal((await store.acquire('-:b', lockOf('x'), 60_000)).state, 'completed', 'b, the newest completion, is still there');
  assert.equal(await store.acquire('-:e', lockOf('e'), 60_000), null, 'b evicted for e');
  await assert.rejects(store.acquire('-:f', lockOf('f'), 60_000), { message: 'MemoryStore: full: 3 requests in progress (maxEntries 3)' });
  assert.equal(store.size, 3);
  for (const k of ['d', 'e']) assert.equal((await store.acquire(`-:${k}`, lockOf('y'), 60_000)).token, k, `lock ${k} survived`);
  assert.equal((await store.acquire('-:c', lockOf('y'), 60_000)).token, 'c2', 'lock c survived');
  // A completion replaces its own lock: it always fits.
  assert.equal(await store.complete('-:d', 'd', answerOf('d'), 60_000), true);
  assert.equal(await store.renew('-:e', 'e', lockOf('e'), 60_000), true);
  assert.equal(await store.acquire('-:f', lockOf('f'), 60_000), null, 'the answer d made way for f');
  // d's answer is gone (not replayed), and its new lock does not fit beside c, e and f.
  await assert.rejects(store.acquire('-:d', lockOf('z'), 60_000), { message: 'MemoryStore: full: 3 requests in progress (maxEntries 3)' });
});

t('maxBytes: answers are evicted to fit, locks never; an answer larger than maxBytes alone is kept', async () => {
  const lockBytes = sizeOf(lockOf('l1'));
  const body = 'y'.repeat(3_000);
  const answerBytes = sizeOf(answerOf(body));
  const maxBytes = 2 * lockBytes + 2 * answerBytes + 100; // two locks and two answers
  const store = new MemoryStore({ maxBytes });
  assert.equal(await store.acquire('-:l1', lockOf('l1'), 60_000), null);
  assert.equal(await store.acquire('-:l2', lockOf('l2'), 60_000), null);
  for (let i = 0; i < 6; i++) {
    assert.equal(await store.acquire(`-:a${i}`, lockOf(`a${i}`), 60_000), null, `a${i}`);
    assert.equal(await store.complete(`-:a${i}`, `a${i}`, answerOf(body), 60_000), true);
    assert.ok(store.bytes <= maxBytes, `${store.bytes} <= ${maxBytes} after a${i}`);
  }
  assert.equal(store.size, 4, 'two locks and the two newest answers');
  assert.equal((await store.acquire('-:l1', lockOf('x'), 60_000)).token, 'l1');
  assert.equal((await store.acquire('-:l2', lockOf('x'), 60_000)).token, 'l2');
  assert.equal((await store.acquire('-:a5', lockOf('x'), 60_000)).state, 'completed');
  assert.equal((await store.acquire('-:a4', lockOf('x'), 60_000)).state, 'completed');
  assert.equal(await store.acquire('-:a3', lockOf('a3'), 60_000), null, 'a3 was evicted');
  assert.equal(await store.release('-:a3', 'a3'), true);

  // An answer larger than maxBytes: every other answer goes, it stays (the bound is exceeded by it).
  const huge = answerOf('z'.repeat(maxBytes));
  assert.equal(await store.acquire('-:huge', lockOf('h'), 60_000), null);
  assert.equal(await store.complete('-:huge', 'h', huge, 60_000), true);
  assert.equal(store.size, 3, 'the two locks and the huge answer');
  assert.equal(store.bytes, 2 * lockBytes + sizeOf(huge));
  assert.ok(store.bytes > maxBytes);
  assert.deepEqual(await store.acquire('-:huge', lockOf('x'), 60_000), huge, 'it replays');
  // The next record evicts it (the oldest answer) to fit.
  assert.equal(await store.acquire('-:next', lockOf('n'), 60_000), null);
  assert.equal(await store.acquire('-:huge', lockOf('h2'), 60_000), null, 'evicted for the next record');
  assert.ok(store.bytes <= maxBytes);

  // Locks that alone fill maxBytes: a new lock is refused, not stored over the bound.
  const tight = new MemoryStore({ maxBytes: 2 * lockBytes + 10 });
  assert.equal(await tight.acquire('-:l1', lockOf('l1'), 60_000), null);
  assert.equal(await tight.acquire('-:l2', lockOf('l2'), 60_000), null);
  await assert.rejects(tight.acquire('-:l3', lockOf('l3'), 60_000), { message: `MemoryStore: full: 2 requests in progress (maxBytes ${2 * lockBytes + 10})` });
});

t('expired records are dropped before an answer is evicted', async () => {
  const store = new MemoryStore({ maxEntries: 3 });
  assert.equal(await store.acquire('-:old', lockOf('old'), 60_000), null);
  assert.equal(await store.complete('-:old', 'old', answerOf('old'), 60_000), true);
  assert.equal(await store.acquire('-:brief', lockOf('brief'), 60_000), null);
  assert.equal(await store.complete('-:brief', 'brief', answerOf('brief'), 50), true);
  assert.equal(await store.acquire('-:dead', lockOf('dead', 50), 50), null); // a dead holder's lock
  await sleep(80);
  assert.equal(store.size, 1, 'the answer and the lock of 50 ms expired');
  assert.equal(await store.acquire('-:n1', lockOf('n1'), 60_000), null);
  assert.equal(await store.acquire('-:n2', lockOf('n2'), 60_000), null);
  assert.equal((await store.acquire('-:old', lockOf('x'), 60_000)).state, 'completed', 'the oldest answer was not evicted: expired records made the room');
});

t('expiry runs on the monotonic clock: a wall-clock step neither expires a live record nor keeps an expired one', async () => {
  const store = new MemoryStore();
  assert.equal(await store.acquire('-:live', lockOf('live'), 60_000), null);
  assert.equal(await store.acquire('-:answered', lockOf('answered'), 60_000), null);
  assert.equal(await store.complete('-:answered', 'answered', answerOf(), 60_000), true);
  assert.equal(await store.acquire('-:brief', lockOf('brief', 100), 100), null);
  await withWallClock(() => performance.timeOrigin + performance.now() + 3_600_000, async () => {
    assert.equal((await store.acquire('-:live', lockOf('x'), 60_000)).token, 'live', 'an hour forward: the lock is live');
    assert.equal((await store.acquire('-:answered', lockOf('x'), 60_000)).state, 'completed', 'the answer too');
    assert.equal(await store.renew('-:live', 'live', lockOf('live'), 60_000), true);
    assert.equal(await store.complete('-:live', 'live', answerOf('late'), 60_000), true, 'the holder completes');
    // reclaim never takes a lock over: the caller judged it expired by its (stepped) clock.
    assert.equal(await store.reclaim('-:brief', 'brief', lockOf('taker'), 60_000), false);
    assert.equal((await store.acquire('-:brief', lockOf('y'), 60_000)).token, 'brief');
  });
  await withWallClock(() => performance.timeOrigin + performance.now() - 3_600_000, async () => {
    await sleep(150);
    assert.equal(await store.acquire('-:brief', lockOf('next'), 60_000), null, 'an hour back: the 100 ms lock expired anyway');
  });
  assert.equal(store.size, 3);
});

// ---------------------------------------------------------------------------------------------
// Through idempotency().

t('1,000 keyed POSTs with 1 MiB answers stay within maxBytes; the newest replay, the oldest were evicted', async () => {
  const store = new MemoryStore();
  const filler = Buffer.alloc(1024 * 1024, 'abcdefghijklmnopqrstuvwxyz0123456789');
  let runs = 0;
  const handler = idempotency(async (request) => {
    const { n } = await request.json();
    runs++;
    const body = Buffer.from(filler);
    body.write(`answer ${n};`, 0);
    return new Response(body, { status: 201, headers: { 'Content-Type': 'application/octet-stream' } });
  }, { store });
  const keyOf = (n) => `payment-${n}`;
  const bodyOf = (n) => JSON.stringify({ n });
  for (let n = 0; n < 1_000; n++) {
    const res = await handler(post(keyOf(n), { body: bodyOf(n) }));
    assert.equal(res.status, 201);
    const bytes = Buffer.from(await res.arrayBuffer());
    assert.equal(bytes.length, filler.length);
    if ((n + 1) % 100 === 0) {
      assert.ok(store.bytes <= store.maxBytes, `after ${n + 1}: ${store.bytes} bytes > maxBytes ${store.maxBytes}`);
      assert.ok(store.size <= store.maxEntries);
    }
  }
  assert.equal(runs, 1_000);
  // A 1 MiB answer is about 1.4 million characters of JSON (base64): some 47 fit in 64 MiB.
  const kept = store.size;
  const perAnswer = store.bytes / kept;
  assert.ok(perAnswer > 1_048_576 * 4 / 3, `${perAnswer} per answer`);
  assert.ok(kept >= Math.floor(store.maxBytes / perAnswer) - 1 && kept <= Math.floor(store.maxBytes / perAnswer), `${kept} answers kept`);
  for (let n = 999; n > 999 - 10; n--) {
    const res = await handler(post(keyOf(n), { body: bodyOf(n) }));
    assert.equal(res.status, 201);
    assert.equal(res.headers.get('idempotent-replayed'), 'true', `answer ${n} replays`);
    const bytes = Buffer.from(await res.arrayBuffer());
    assert.equal(bytes.length, filler.length);
    assert.ok(bytes.subarray(0, 20).toString().startsWith(`answer ${n};`), `the answer of ${n}`);
  }
  assert.equal(runs, 1_000, 'replays did not run the handler');
  for (const n of [0, 1, 500]) {
    const res = await handler(post(keyOf(n), { body: bodyOf(n) }));
    assert.equal(res.status, 201);
    assert.equal(res.headers.get('idempotent-replayed'), null, `answer ${n} was evicted: the handler ran again`);
    await res.arrayBuffer();
  }
  assert.equal(runs, 1_003);
  assert.ok(store.bytes <= store.maxBytes);
});

t('one caller sending many keys evicts its own answers, not another caller\'s: the other\'s retry is still a replay', async () => {
  const store = new MemoryStore({ maxEntries: 100 });
  const runs = new Map();
  const handler = idempotency(async (request) => {
    const who = request.headers.get('authorization');
    runs.set(who, (runs.get(who) ?? 0) + 1);
    return Response.json({ who, n: runs.get(who) }, { status: 201 });
  }, { store });
  // Three callers pay; then one of them sends 300 keyed requests (a flood, or a busy client).
  for (const who of ['Bearer alice', 'Bearer bob', 'Bearer carol']) {
    assert.equal((await handler(post('pay-1', { who }))).status, 201);
  }
  for (let i = 0; i < 300; i++) {
    const res = await handler(post(`flood-${i}`, { who: 'Bearer mallory' }));
    assert.equal(res.status, 201);
    await res.arrayBuffer();
  }
  assert.ok(store.size <= 100);
  for (const who of ['Bearer alice', 'Bearer bob', 'Bearer carol']) {
    const retry = await handler(post('pay-1', { who }));
    assert.equal(retry.headers.get('idempotent-replayed'), 'true', `${who}'s answer was kept`);
    assert.deepEqual(await retry.json(), { who, n: 1 });
    assert.equal(runs.get(who), 1, `${who} was charged once`);
  }
  // The flooding caller's newest answers replay, its oldest were evicted (its own).
  assert.equal((await handler(post('flood-299', { who: 'Bearer mallory' }))).headers.get('idempotent-replayed'), 'true');
  assert.equal((await handler(post('flood-0', { who: 'Bearer mallory' }))).headers.get('idempotent-replayed'), null);

  // Many callers of one answer each (no scope holds a tenth): the oldest answer of all goes.
  const fair = new MemoryStore({ maxEntries: 50 });
  const each = idempotency(() => new Response('ok', { status: 201 }), { store: fair });
  for (let i = 0; i < 60; i++) assert.equal((await each(post('pay-1', { who: `Bearer user-${i}` }))).status, 201);
  assert.equal((await each(post('pay-1', { who: 'Bearer user-59' }))).headers.get('idempotent-replayed'), 'true');
  assert.equal((await each(post('pay-1', { who: 'Bearer user-10' }))).headers.get('idempotent-replayed'), 'true');
  assert.equal((await each(post('pay-1', { who: 'Bearer user-0' }))).headers.get('idempotent-replayed'), null, 'the oldest was evicted');
});

t('locks are never evicted: a new request past maxEntries gets a 503 while the held ones keep their keys', async () => {
  const store = new MemoryStore({ maxEntries: 3 });
  const gate = deferred();
  const started = [];
  const storeErrors = [];
  let runs = 0;
  const handler = idempotency(async (request) => {
    const { n, wait } = await request.json();
    runs++;
    if (wait) {
      started.push(n);
      await gate.promise;
    }
    return Response.json({ n }, { status: 201 });
  }, { store, concurrent: 'reject', onStoreError: (error, operation) => storeErrors.push([operation, error.message]) });
  const send = (n, wait = false) => handler(post(`k${n}`, { body: JSON.stringify({ n, wait }) }));

  assert.equal((await send(1)).status, 201, 'a completed answer');
  const held = [send(2, true), send(3, true)];
  for (let i = 0; i < 100 && started.length < 2; i++) await sleep(10);
  assert.deepEqual(started.sort(), [2, 3], 'two handlers hold their locks');
  // A third lock: the completed answer of k1 is evicted for it.
  const third = send(4, true);
  for (let i = 0; i < 100 && started.length < 3; i++) await sleep(10);
  assert.equal(started.length, 3);
  assert.equal(store.size, 3);
  // Three locks: a fourth request is refused (503), k1 cannot be replayed nor run again.
  await problemOf(await send(5), 503, 'idempotency-store-unavailable', { retryAfter: true });
  await problemOf(await send(1), 503, 'idempotency-store-unavailable', { retryAfter: true });
  assert.equal(storeErrors.length, 2);
  for (const [operation, message] of storeErrors) {
    assert.equal(operation, 'acquire');
    assert.equal(message, 'MemoryStore: full: 3 requests in progress (maxEntries 3)');
  }
  // The held keys are still held: their duplicates are told so (409), not run.
  for (const n of [2, 3, 4]) await problemOf(await send(n, true), 409, 'idempotency-key-in-progress', { retryAfter: true });
  assert.equal(runs, 4, 'k1 once, k2, k3, k4');
  gate.resolve();
  for (const res of await Promise.all([...held, third])) assert.equal(res.status, 201);
  // Their answers were stored and replay.
  for (const n of [2, 3, 4]) {
    const res = await send(n, true);
    assert.equal(res.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await res.json(), { n });
  }
  assert.equal(runs, 4);
  assert.equal((await send(5)).status, 201, 'once answers can be evicted again, a new key works');
});

t('maxBytes through the companion: answers evicted to fit, held locks kept', async () => {
  const store = new MemoryStore({ maxBytes: 40_000 });
  const gate = deferred();
  let waiting = 0;
  const handler = idempotency(async (request) => {
    const { n, size, wait } = await request.json();
    if (wait) {
      waiting++;
      await gate.promise;
    }
    return new Response(`${n}:`.padEnd(size, '.'), { status: 200 });
  }, { store, concurrent: 'reject' });
  const send = (n, { size = 9_000, wait = false } = {}) => handler(post(`b${n}`, { body: JSON.stringify({ n, size, wait }) }));
  const held = [send(0, { wait: true }), send(1, { wait: true })];
  for (let i = 0; i < 100 && waiting < 2; i++) await sleep(10);
  for (let n = 2; n < 12; n++) {
    const res = await send(n);
    assert.equal(res.status, 200);
    await res.text();
    assert.ok(store.bytes <= store.maxBytes, `${store.bytes} <= 40000 after b${n}`);
  }
  for (const n of [0, 1]) await problemOf(await send(n, { wait: true }), 409, 'idempotency-key-in-progress', { retryAfter: true });
  const newest = await send(11);
  assert.equal(newest.headers.get('idempotent-replayed'), 'true');
  const oldest = await send(2);
  assert.equal(oldest.headers.get('idempotent-replayed'), null, 'b2 was evicted');
  await oldest.text();
  // One answer larger than maxBytes by itself is stored anyway, and replays.
  const big = await send(99, { size: 60_000 });
  assert.equal((await big.text()).length, 60_000);
  assert.ok(store.bytes > store.maxBytes, 'the one case the bound is exceeded');
  const again = await send(99, { size: 60_000 });
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal((await again.text()).length, 60_000);
  gate.resolve();
  for (const res of await Promise.all(held)) assert.equal(res.status, 200);
});

t('a wall-clock step forward while a handler runs: the duplicate waits and gets the replay, the handler runs once', async () => {
  const store = new MemoryStore();
  const started = deferred();
  const proceed = deferred();
  let runs = 0;
  const handler = idempotency(async () => {
    runs++;
    started.resolve();
    await proceed.promise;
    return Response.json({ run: runs }, { status: 201 });
  }, { store, pollMs: 10 });
  const first = handler(post('step-forward'));
  await started.promise;
  const [firstRes, dupRes] = await withWallClock(() => performance.timeOrigin + performance.now() + 120_000, async () => {
    // Two minutes later by the wall clock: past the lock's lockExpiresAt (60 s).
    const dup = handler(post('step-forward'));
    await sleep(200);
    assert.equal(runs, 1, 'the duplicate did not take the live lock over');
    proceed.resolve();
    return Promise.all([first, dup]);
  });
  assert.equal(firstRes.status, 201);
  assert.deepEqual(await firstRes.json(), { run: 1 });
  assert.equal(dupRes.status, 201);
  assert.equal(dupRes.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(await dupRes.json(), { run: 1 });
  assert.equal(runs, 1);
});

t('ttlMs still expires answers (on the monotonic clock, whatever the wall clock does)', async () => {
  const store = new MemoryStore();
  let runs = 0;
  const handler = idempotency(async () => Response.json({ run: ++runs }), { store, ttlMs: 2_000 });
  assert.deepEqual(await (await handler(post('ttl'))).json(), { run: 1 });
  const answered = performance.now(); // stored before this: expired by answered + 2 s
  const replay = await handler(post('ttl'));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true', 'inside its ttl of 2 s');
  assert.deepEqual(await replay.json(), { run: 1 });
  assert.equal(store.size, 1);
  await withWallClock(() => performance.timeOrigin + performance.now() - 120_000, async () => {
    // two minutes back by the wall clock, past the 2 s ttl by the monotonic one
    await sleep(answered + 2_000 + 250 - performance.now());
    assert.equal(store.size, 0, 'expired');
    const after = await handler(post('ttl'));
    assert.equal(after.headers.get('idempotent-replayed'), null);
    assert.deepEqual(await after.json(), { run: 2 });
  });
});

t('secret(): 64 hex digits, the same on every call, another for another MemoryStore', () => {
  const a = new MemoryStore();
  const b = new MemoryStore();
  assert.match(a.secret(), /^[0-9a-f]{64}$/);
  assert.equal(a.secret(), a.secret());
  assert.notEqual(a.secret(), b.secret());
  a.clear();
  assert.equal(a.secret(), a.secret(), 'clear() keeps it');
});

t('20,000 random operations agree with a plain model of the rules (bounds, eviction order by scope, expiry, tokens)', async () => {
  // The monotonic clock, driven by the test: performance.now() is what MemoryStore reads.
  let now = 1_000;
  const hadOwn = Object.hasOwn(performance, 'now');
  const realNow = performance.now;
  performance.now = () => now;
  try {
    const maxEntries = 10;
    const maxBytes = 2_500;
    const store = new MemoryStore({ maxEntries, maxBytes });
    // The model: every rule written the slow, obvious way.
    const model = new Map(); // key -> { json, state, token, exp, seq }
    let seq = 0;
    const modelBytes = () => [...model.values()].reduce((n, e) => n + e.json.length, 0);
    const drop = () => {
      for (const [k, e] of model) if (e.exp <= now) model.delete(k);
    };
    const put = (key, record, ms, newLock) => {
      const json = JSON.stringify(record);
      model.delete(key);
      const fits = () => model.size < maxEntries && modelBytes() + json.length <= maxBytes;
      if (!fits()) {
        if (newLock) {
          const locks = [...model.values()].filter((e) => e.state !== 'completed');
          if (locks.length >= maxEntries) throw new Error(`MemoryStore: full: ${locks.length} requests in progress (maxEntries ${maxEntries})`);
          if (locks.reduce((n, e) => n + e.json.length, 0) + json.length > maxBytes) {
            throw new Error(`MemoryStore: full: ${locks.length} requests in progress (maxBytes ${maxBytes})`);
          }
        }
        // Oldest completion first, but of the scopes holding the most answers when these
        // hold a tenth of them or more (and more than one).
        const scopeOf = (k) => k.slice(0, k.indexOf(':'));
        while (!fits()) {
          const answers = [...model].filter(([, e]) => e.state === 'completed');
          if (answers.length === 0) break;
          const counts = new Map();
          for (const [k] of answers) counts.set(scopeOf(k), (counts.get(scopeOf(k)) ?? 0) + 1);
          const most = Math.max(...counts.values());
          const pool = most > 1 && most * 10 >= answers.length ? answers.filter(([k]) => counts.get(scopeOf(k)) === most) : answers;
          pool.sort((a, b) => a[1].seq - b[1].seq);
          model.delete(pool[0][0]);
        }
      }
      model.set(key, { json, state: record.state, token: record.token, exp: now + ms, seq: record.state === 'completed' ? ++seq : 0 });
    };
    const holds = (key, token) => model.get(key)?.state === 'in-progress' && model.get(key).token === token;
    const modelOp = {
      acquire(key, lock, ms) {
        drop();
        if (model.has(key)) return JSON.parse(model.get(key).json);
        put(key, lock, ms, true);
        return null;
      },
      renew(key, token, lock, ms) {
        drop();
        if (!holds(key, token)) return false;
        put(key, lock, ms, false);
        return true;
      },
      complete(key, token, record, ms) {
        drop();
        if (!holds(key, token)) return false;
        put(key, record, ms, false);
        return true;
      },
      release(key, token) {
        drop();
        if (!holds(key, token)) return false;
        model.delete(key);
        return true;
      },
    };
    const outcome = async (fn) => {
      try {
        return { value: await fn() };
      } catch (error) {
        return { error: error.message };
      }
    };
    // A small deterministic generator, so that a failure can be replayed.
    let state = 42;
    const random = (n) => {
      state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
      return state % n;
    };
    const tokens = new Map(); // key -> the last token that acquired it
    for (let i = 0; i < 20_000; i++) {
      now += random(4);
      const n = random(30);
      const key = `${['-', 'a', 'b', 'c'][n % 4]}:k${n}`; // four scopes (callers)
      const token = random(5) === 0 ? 'stranger' : (tokens.get(key) ?? 'stranger');
      const which = random(10);
      let args;
      let op;
      if (which < 4) {
        op = 'acquire';
        const fresh = `t${i}`;
        args = [key, { state: 'in-progress', token: fresh, fingerprint: 'f', lockExpiresAt: i }, 1 + random(60)];
      } else if (which < 5) {
        op = 'renew';
        args = [key, token, { state: 'in-progress', token, fingerprint: 'f', lockExpiresAt: i }, 1 + random(60)];
      } else if (which < 9) {
        op = 'complete';
        const body = 'b'.repeat(random(random(20) === 0 ? 3_000 : 400));
        args = [key, token, { state: 'completed', fingerprint: 'f', response: { status: 200, statusText: '', headers: [], body }, completedAt: i }, 1 + random(400)];
      } else {
        op = 'release';
        args = [key, token];
      }
      const expected = await outcome(() => modelOp[op](...args));
      const actual = await outcome(() => store[op](...args));
      assert.deepEqual(actual, expected, `operation ${i}: ${op}(${args[0]}, ...)`);
      if (op === 'acquire' && actual.value === null) tokens.set(key, args[1].token);
      drop();
      assert.equal(store.size, model.size, `size after operation ${i}`);
      assert.equal(store.bytes, modelBytes(), `bytes after operation ${i}`);
    }
  } finally {
    if (hadOwn) performance.now = realNow;
    else delete performance.now;
  }
});

test('MemoryStore: a maxBytes no lock fits in says so, not that the store is full of requests', async () => {
  const store = new MemoryStore({ maxBytes: 50 });
  const lock = { state: 'in-progress', token: 'a-token-of-the-lock', fingerprint: 'f'.repeat(64), lockExpiresAt: Date.now() + 1000 };
  await assert.rejects(async () => store.acquire('-:k', lock, 1000), {
    message: /^MemoryStore: a lock of \d+ bytes does not fit in maxBytes 50: maxBytes must hold at least one request in progress$/,
  });
  assert.equal(store.size, 0);
});

test('MemoryStore: answers it evicted or replaced are not kept in memory beyond maxBytes', { timeout: 120_000 }, async () => {
  // The expiry heap and the eviction queue keep a removed record's place until they are
  // rebuilt (up to about a thousand): that place must not keep the answer. 300 answers of
  // 1 MiB (1.4 MB of JSON each) through a store of 16 MiB: about 11 are kept; the heap after a
  // collection grows by them, not by the 300 (420 MB when the removed ones kept their JSON).
  const v8 = await import('node:v8');
  const vm = await import('node:vm');
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  const store = new MemoryStore({ maxBytes: 16 * 1024 * 1024 });
  const filler = Buffer.alloc(1024 * 1024, 'abcdefghijklmnopqrstuvwxyz0123456789');
  const handler = idempotency(async () => new Response(filler, { status: 201 }), { store, history: false });
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let n = 0; n < 300; n++) {
    const res = await handler(post(`big-${n}`, { body: JSON.stringify({ n }) }));
    assert.equal(res.status, 201);
    await res.arrayBuffer();
  }
  await sleep(50);
  gc();
  const grown = process.memoryUsage().heapUsed - before;
  assert.ok(store.bytes <= store.maxBytes);
  assert.ok(grown < 100 * 1024 * 1024, `the heap grew by ${(grown / 1048576).toFixed(0)} MiB for a store of ${(store.bytes / 1048576).toFixed(0)} MiB`);
});
