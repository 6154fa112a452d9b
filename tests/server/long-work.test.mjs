// Long work and its trace: `acceptAfterMs` (202 Accepted while the handler goes on, the same
// key polled to the stored answer, across instances and stores), the run history
// (`store.runs(key)`, `onEvent`) and dead letters for jobs (`maxRuns`, `onDeadLetter`).
// MemoryStore everywhere; RedisStore (REDIS_URL) and PostgresStore (DATABASE_URL; see
// tests/support/services.mjs) where a shared store or a transaction is the point.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createClient } from 'redis';
import { idempotency, idempotent, MemoryStore, RedisStore, PostgresStore } from 'retry-fetch/server';
import { retryFetch } from 'retry-fetch';
import { serve, send, sleep, newKey, deferred, plantDeadLock, withServer } from './support.mjs';
import { REDIS_URL, DATABASE_URL, needs } from '../support/services.mjs';

const redisSkip = needs('REDIS_URL');
const pgSkip = needs('DATABASE_URL');

let pool;
const redisClients = [];
const tables = [];

async function redisClient() {
  const client = createClient({ url: REDIS_URL });
  client.on('error', () => {});
  await client.connect();
  redisClients.push(client);
  return client;
}

before(async () => {
  if (!pgSkip) {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20 });
    pool.on('error', () => {});
  }
});

after(async () => {
  await Promise.all(redisClients.filter((c) => c.isOpen).map((c) => c.quit()));
  if (pool) {
    for (const t of tables) await pool.query(`DROP TABLE IF EXISTS "${t}"`);
    await pool.end();
  }
});

function tableName(kind) {
  const name = `${kind}_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(name, `${name}_runs`);
  return name;
}

/** Each kind of store, made fresh; `shared()` a second object over the same backend. */
const STORES = [
  ['MemoryStore', false, async () => {
    const store = new MemoryStore();
    return { store, shared: () => store };
  }],
  ['RedisStore', redisSkip, async () => {
    const prefix = `lw:${newKey()}:`;
    const store = new RedisStore({ client: await redisClient(), prefix });
    return { store, shared: async () => new RedisStore({ client: await redisClient(), prefix }) };
  }],
  ['PostgresStore', pgSkip, async () => {
    const table = tableName('idem');
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    return { store, shared: () => new PostgresStore({ pool, table }) };
  }],
];

/** Polls `fn` until it returns a truthy value (10 s at most). */
async function eventually(fn, what) {
  const until = Date.now() + 10_000;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) assert.fail(`never: ${what}`);
    await sleep(20);
  }
}

test('RedisStore, acceptAfterMs: an instance whose clock runs ahead of the holder\'s by more than the lock answers a repeat 202 at once, not after waiting', { skip: redisSkip }, async () => {
  const prefix = `lw:${newKey()}:`;
  const release = deferred();
  let runs = 0;
  const handler = async () => {
    runs++;
    await release.promise;
    return Response.json({ charged: 42 }, { status: 201 });
  };
  // The holder renews every 2 s (a third of the lock): one process shares one clock, so until
  // then its lock, written by the real clock, reads as expired on the skewed one.
  const options = { identity: false, acceptAfterMs: 150, lockTimeoutMs: 6000 };
  const a = await serve(idempotency(handler, { ...options, store: new RedisStore({ client: await redisClient(), prefix }) }));
  const b = await serve(idempotency(handler, { ...options, store: new RedisStore({ client: await redisClient(), prefix }) }));
  const realNow = Date.now;
  try {
    const key = newKey();
    assert.equal((await send(a.url, { key })).status, 202);
    // B's clock 7 s ahead: A's live lock (its Redis TTL runs) reads as expired there.
    Date.now = () => realNow() + 7_000;
    const t = performance.now();
    const repeat = await send(b.url, { key });
    Date.now = realNow;
    assert.equal(repeat.status, 202);
    assert.ok(performance.now() - t < 1_000, `the repeat waited ${Math.round(performance.now() - t)} ms`);
    assert.equal(runs, 1, 'the handler ran again');
  } finally {
    Date.now = realNow;
    release.resolve();
    await a.close();
    await b.close();
  }
});

for (const [name, skip, make] of STORES) {
  test(`${name}: acceptAfterMs answers 202 while the handler runs on; repeats get 202 at once, then the stored answer, on any instance`, { skip }, async () => {
    const { store, shared } = await make();
    const release = deferred();
    let runs = 0;
    const events = [];
    const handler = async () => {
      runs++;
      await release.promise;
      return Response.json({ charged: 42 }, { status: 201 });
    };
    // acceptAfterMs long enough that a repeat answered at once is told apart from one that
    // waited it, on a loaded machine too.
    const a = await serve(idempotency(handler, { store, identity: false, acceptAfterMs: 1_000, onEvent: (e) => events.push(e) }));
    const b = await serve(idempotency(handler, { store: await shared(), identity: false, acceptAfterMs: 1_000 }));
    try {
      const key = newKey();
      const started = Date.now();
      const first = await send(a.url, { key });
      assert.equal(first.status, 202);
      assert.ok(Date.now() - started < 5_000, 'the 202 came after acceptAfterMs, not after the handler');
      assert.equal(first.headers.get('retry-after'), '1');
      assert.equal((await first.json()).code, 'idempotency-accepted');
      // A repeat on the other instance while the run goes on: 202 at once, nothing run again.
      const t = Date.now();
      const repeat = await send(b.url, { key });
      assert.equal(repeat.status, 202);
      assert.ok(Date.now() - t < 700, `a repeat waited ${Date.now() - t} ms`);
      await repeat.arrayBuffer();
      release.resolve();
      const done = await eventually(async () => {
        const r = await send(b.url, { key });
        if (r.status === 202) return (await r.arrayBuffer(), false);
        return r;
      }, 'the stored answer');
      assert.equal(done.status, 201);
      assert.equal(done.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await done.json(), { charged: 42 });
      assert.equal(runs, 1, 'the handler ran once');
      assert.ok(events.some((e) => e.type === 'accepted' && e.run.key === key));
      const ended = await eventually(() => events.find((e) => e.type === 'run-ended'), 'run-ended');
      assert.equal(ended.run.outcome, 'stored');
      // The history: one stored run, and the replay.
      const history = await eventually(async () => {
        const h = await store.runs(key);
        return h.some((r) => r.outcome === 'stored') && h.some((r) => r.outcome === 'replayed') && h;
      }, 'the history');
      assert.equal(history.filter((r) => r.outcome === 'stored').length, 1);
      for (const r of history) {
        assert.equal(r.key, key);
        assert.equal(r.scope, '-');
        assert.match(r.instance, /:\d+$/, 'host:pid');
        assert.ok(r.endedAt >= r.startedAt);
      }
    } finally {
      release.resolve();
      await a.close();
      await b.close();
    }
  });
}

test('acceptAfterMs: a handler that settles in time answers as without it; a bad value is a TypeError naming it', async () => {
  const store = new MemoryStore();
  const wrapped = idempotency(async () => new Response('ok', { status: 201 }), { store, identity: false, acceptAfterMs: 2_000 });
  const res = await wrapped(new Request('http://x/pay', { method: 'POST', body: '1', headers: { 'Idempotency-Key': newKey() } }));
  assert.equal(res.status, 201);
  assert.equal(await res.text(), 'ok');
  for (const bad of [0, -1, 1.5, '100', Infinity]) {
    assert.throws(() => idempotency(async () => new Response(''), { acceptAfterMs: bad }), { name: 'TypeError', message: /"acceptAfterMs"/ });
  }
});

test('acceptAfterMs with retryFetch({ followAccepted: true }): the caller gets the final answer, the handler runs once', async () => {
  const store = new MemoryStore();
  let runs = 0;
  const server = await serve(idempotency(async () => {
    runs++;
    await sleep(1_200);
    return Response.json({ receipt: 'r-1' }, { status: 201 });
  }, { store, identity: false, acceptAfterMs: 100 }));
  try {
    const res = await retryFetch(`${server.url}/pay`, { method: 'POST', body: '{"amount":1}' }, { followAccepted: true, deadlineMs: 15_000 });
    assert.equal(res.status, 201);
    assert.deepEqual(await res.json(), { receipt: 'r-1' });
    assert.equal(runs, 1);
  } finally {
    await server.close();
  }
});

test('acceptAfterMs with followAccepted: a run that ends in a stored failure is the caller\'s answer (its replayed 500), not the 202; the handler runs once', async () => {
  for (const [name, skip, make] of STORES) {
    if (skip) continue;
    const { store } = await make();
    let runs = 0;
    const server = await serve(idempotency(async () => {
      runs++;
      await sleep(600);
      throw new Error('card declined by the provider');
    }, { store, identity: false, acceptAfterMs: 100, onError: () => {} }));
    try {
      const statuses = [];
      const res = await retryFetch(`${server.url}/pay`, { method: 'POST', body: '{"amount":1}' }, {
        followAccepted: true,
        deadlineMs: 15_000,
        fetch: async (input, init) => {
          const answer = await fetch(input, init);
          statuses.push(`${answer.status}${answer.headers.get('idempotent-replayed') ? ' replayed' : ''}`);
          return answer;
        },
      });
      assert.equal(res.status, 500, `${name}: ${statuses.join(', ')}`);
      assert.equal(res.headers.get('idempotent-replayed'), 'true');
      assert.equal((await res.json()).code, 'idempotency-handler-failed');
      assert.deepEqual(statuses.slice(-1), ['500 replayed'], `${name}: the replay is not sent again: ${statuses.join(', ')}`);
      assert.equal(statuses.filter((s) => s === '500 replayed').length, 1, name);
      assert.equal(runs, 1, name);
    } finally {
      await server.close();
    }
  }
});

test('history: false writes nothing; onEvent still hears every run, and a throwing listener changes nothing', async () => {
  const store = new MemoryStore();
  const events = [];
  const wrapped = idempotency(async () => new Response('ok', { status: 201 }), {
    store, identity: false, history: false, onEvent: (e) => { events.push(e.type); throw new Error('listener'); },
  });
  const key = newKey();
  const req = () => new Request('http://x/pay', { method: 'POST', body: '1', headers: { 'Idempotency-Key': key } });
  assert.equal((await wrapped(req())).status, 201);
  assert.equal((await wrapped(req())).status, 201);
  await sleep(50);
  assert.deepEqual(await store.runs(key), []);
  assert.deepEqual(events, ['run-started', 'run-ended', 'replayed']);
});

test('PostgresStore: a handler rolled back is recorded rolled-back; a store-kept failure failed', { skip: pgSkip }, async () => {
  const table = tableName('idem');
  const store = new PostgresStore({ pool, table });
  await store.migrate();
  let n = 0;
  const wrapped = idempotency(async (request, ctx) => {
    n++;
    if (n === 1) {
      await ctx.tx.query('SELECT 1');
      throw new Error('declined');
    }
    if (n === 2) throw new Error('after an effect');
    return new Response('ok');
  }, { store, identity: false, onError: () => {} });
  const key = newKey();
  const req = (k = key) => new Request('http://x/pay', { method: 'POST', body: '1', headers: { 'Idempotency-Key': k } });
  assert.equal((await wrapped(req())).status, 500); // rolled back, key freed
  const other = newKey();
  assert.equal((await wrapped(req(other))).status, 500); // stored failure
  const rolled = await eventually(async () => (await store.runs(key)).find((r) => r.outcome), 'rolled-back');
  assert.equal(rolled.outcome, 'rolled-back');
  assert.equal(rolled.detail, 'declined');
  const failed = await eventually(async () => (await store.runs(other)).find((r) => r.outcome), 'failed');
  assert.equal(failed.outcome, 'failed');
});

test('idempotent maxRuns (PostgresStore, ctx.tx): after maxRuns rolled-back runs the job is dead-lettered once; later deliveries fail at once', { skip: pgSkip }, async () => {
  const table = tableName('idem');
  const store = new PostgresStore({ pool, table });
  await store.migrate();
  let runs = 0;
  const letters = [];
  const events = [];
  const job = idempotent(async (message, ctx) => {
    runs++;
    await ctx.tx.query('SELECT 1');
    throw new Error(`poison ${runs}`);
  }, { store, key: (m) => m.id, maxRuns: 3, onDeadLetter: (record) => { letters.push(record); }, onEvent: (e) => events.push(e.type) });
  const message = { id: newKey(), body: 'poison' };
  for (let i = 1; i <= 3; i++) {
    await assert.rejects(job(message), { message: `poison ${i}` });
  }
  assert.equal(runs, 3);
  const err = await job(message).then(() => assert.fail('ran'), (e) => e);
  assert.equal(err.name, 'IdempotencyError');
  assert.equal(err.code, 'previous-run-failed');
  assert.match(err.message, /dead-lettered after 3 failed runs/);
  assert.equal(runs, 3, 'not run a fourth time');
  assert.equal(letters.length, 1);
  assert.equal(letters[0].key, message.id);
  assert.deepEqual(letters[0].input, message);
  assert.equal(letters[0].failedRuns, 3);
  assert.deepEqual(letters[0].runs.map((r) => r.outcome), ['rolled-back', 'rolled-back', 'rolled-back']);
  assert.deepEqual(err.deadLetter.key, message.id);
  for (let i = 0; i < 2; i++) {
    await assert.rejects(job(message), { code: 'previous-run-failed', message: /dead-lettered/ });
  }
  assert.equal(letters.length, 1, 'onDeadLetter is called once');
  assert.equal(runs, 3);
  assert.ok(events.includes('dead-lettered'));
});

/**
 * Deliveries of one message that arrive while its first run goes on (a queue redelivering
 * after its visibility timeout) wait for the key; the first run fails once and frees it
 * (`fail()` makes that failure: a rollback, or a "not processed" answer). With maxRuns: 2,
 * the waiting deliveries are not failed runs: the next one runs fn, which succeeds, and the
 * last is answered from the store. Nothing is dead-lettered.
 */
async function waitingDeliveries(store, fail) {
  let attempt = 0;
  const letters = [];
  const events = [];
  const first = deferred();
  const job = async (message, ctx) => {
    const n = ++attempt;
    if (n === 1) {
      await first.promise;
      return fail(ctx);
    }
    return { shipped: message.id, attempt: n };
  };
  const options = {
    store, key: (m) => m.id, maxRuns: 2,
    onDeadLetter: (record) => { letters.push(record); },
    onEvent: (e) => events.push(`${e.type}:${e.run.outcome ?? ''}`),
  };
  const slow = idempotent(job, { ...options, pollMs: 200 });
  const fast = idempotent(job, { ...options, pollMs: 10 });
  const message = { id: newKey() };
  const settle = (p) => p.then((value) => ({ value }), (error) => ({ code: error.code ?? error.message }));
  const a = settle(fast(message));
  await sleep(50);
  const b = settle(slow(message));
  await sleep(50);
  const c = settle(fast(message));
  await sleep(100); // both wait for the key
  first.resolve();
  const [ra, rb, rc] = [await a, await b, await c];
  assert.equal(attempt, 2, 'fn ran twice: the failed run and one more');
  assert.deepEqual(letters, [], 'nothing dead-lettered');
  assert.deepEqual(rc, { value: { shipped: message.id, attempt: 2 } });
  assert.deepEqual(rb, { value: { shipped: message.id, attempt: 2 } }, 'the slow waiter gets the stored result');
  const history = await eventually(async () => {
    const runs = await store.runs(message.id);
    return runs.length === 3 && runs.every((r) => r.outcome) && runs;
  }, 'three ended runs');
  const outcomes = history.map((r) => r.outcome).sort();
  assert.ok(!outcomes.includes('crashed'), `no run marked crashed: ${outcomes}`);
  assert.equal(outcomes.filter((o) => o === 'stored').length, 1);
  assert.equal(outcomes.filter((o) => o === 'replayed').length, 1);
  assert.ok(!events.some((e) => e.startsWith('holder-crashed')), events.join(' '));
  return { first: ra, history };
}

test('idempotent maxRuns (MemoryStore): redeliveries waiting for a dead worker\'s key are not failed runs; one runs, one replays', async () => {
  const store = new MemoryStore();
  const message = { id: newKey() };
  // A worker died holding the key: its lock (lapsing in 600 ms) and its open run, as it leaves them.
  await plantDeadLock(store, message.id, 600, { method: 'JOB', path: '', body: JSON.stringify(message) });
  await store.recordRun({ id: newKey(), key: message.id, scope: '-', instance: 'dead:1', startedAt: Date.now() - 100, endedAt: null, outcome: null });
  let attempt = 0;
  const letters = [];
  const events = [];
  const options = {
    store, key: (m) => m.id, maxRuns: 2, lockTimeoutMs: 1000, waitTimeoutMs: 5000,
    onDeadLetter: (record) => { letters.push(record); },
    onEvent: (e) => events.push(e.type),
  };
  const job = async (m) => ({ shipped: m.id, attempt: ++attempt });
  const slow = idempotent(job, { ...options, pollMs: 200 });
  const fast = idempotent(job, { ...options, pollMs: 10 });
  // Two redeliveries wait for the dead worker's lock to lapse.
  const settle = (p) => p.then((value) => ({ value }), (error) => ({ code: error.code ?? error.message }));
  const results = await Promise.all([settle(slow(message)), settle(fast(message))]);
  assert.deepEqual(letters.map((r) => [r.failedRuns, r.runs.map((x) => x.outcome)]), [], 'one crashed run of maxRuns 2: not dead-lettered');
  assert.equal(attempt, 1, 'fn ran once');
  for (const r of results) assert.deepEqual(r, { value: { shipped: message.id, attempt: 1 } });
  const history = await eventually(async () => {
    const runs = await store.runs(message.id);
    return runs.length === 3 && runs.every((r) => r.outcome) && runs;
  }, 'three ended runs');
  assert.deepEqual(history.map((r) => r.outcome).sort(), ['crashed', 'replayed', 'stored']);
  assert.equal(history.find((r) => r.outcome === 'crashed').instance, 'dead:1', 'only the dead worker\'s run is crashed');
  assert.equal(events.filter((e) => e === 'holder-crashed').length, 1);
});

test('idempotent maxRuns (MemoryStore): a dead-lettered key whose onDeadLetter threw is counted again without the deliveries that waited', async () => {
  const store = new MemoryStore();
  const message = { id: newKey() };
  await store.recordRun({ id: newKey(), key: message.id, scope: '-', instance: 'dead:1', startedAt: Date.now() - 5000, endedAt: null, outcome: null });
  const letters = [];
  const handing = deferred();
  let calls = 0;
  const options = {
    store, key: (m) => m.id, maxRuns: 1, lockTimeoutMs: 1000, waitTimeoutMs: 5000, pollMs: 10,
    onDeadLetter: async (record) => {
      letters.push(record);
      if (++calls === 1) {
        await handing.promise;
        throw new Error('queue down'); // frees the key: a waiting delivery hands it over again
      }
    },
  };
  const job = idempotent(async () => 'never', options);
  const first = job(message).catch((e) => e);
  await sleep(50);
  const waiting = [job(message).catch((e) => e), job(message).catch((e) => e)];
  await sleep(100);
  handing.resolve();
  assert.equal((await first).message, 'queue down');
  for (const e of await Promise.all(waiting)) assert.equal(e.code, 'previous-run-failed');
  assert.equal(letters.length, 2);
  assert.equal(letters[1].failedRuns, 1, 'the dead worker\'s run only: not the deliveries that waited');
  assert.deepEqual(letters[1].runs.map((r) => r.outcome), ['crashed', 'freed']);
});

test('idempotent maxRuns (PostgresStore, ctx.tx): deliveries waiting for the key are not failed runs; after one rollback the next runs', { skip: pgSkip }, async () => {
  const table = tableName('idem');
  const store = new PostgresStore({ pool, table });
  await store.migrate();
  const { first, history } = await waitingDeliveries(store, async (ctx) => {
    await ctx.tx.query('SELECT 1');
    throw new Error('transient failure'); // rolled back, the key freed
  });
  assert.equal(first.code, 'transient failure');
  assert.deepEqual(history.map((r) => r.outcome).sort(), ['replayed', 'rolled-back', 'stored']);
});

test('idempotent maxRuns: an onDeadLetter that throws frees the key; the next delivery hands it over again', async () => {
  const store = new MemoryStore();
  let calls = 0;
  let crash = true;
  // A run whose holder "died": its start is recorded, it never ends (the key left to lapse).
  const job = idempotent(async () => 'never', {
    store, key: (m) => m.id, maxRuns: 1, lockTimeoutMs: 1000,
    onDeadLetter: () => { calls++; if (crash) throw new Error('queue down'); },
  });
  const id = newKey();
  // Plant a crashed run in the history, as a dead process leaves it.
  await store.recordRun({ id: newKey(), key: id, scope: '-', instance: 'dead:1', startedAt: Date.now() - 5000, endedAt: null, outcome: null });
  await assert.rejects(job({ id }), { message: 'queue down' });
  crash = false;
  await assert.rejects(job({ id }), { code: 'previous-run-failed' });
  await assert.rejects(job({ id }), { code: 'previous-run-failed' });
  assert.equal(calls, 2);
  const history = await store.runs(id);
  assert.equal(history.find((r) => r.instance === 'dead:1').outcome, 'crashed');
});

test('idempotent maxRuns: a throw whose failure is stored (no ctx.tx) ends the job: onDeadLetter at once, with the run; never run again', async () => {
  for (const storeOf of [() => new MemoryStore(), redisSkip ? null : async () => new RedisStore({ client: await redisClient(), prefix: `idem:dl-${newKey()}:` })]) {
    if (!storeOf) continue;
    const store = await storeOf();
    let runs = 0;
    const letters = [];
    const events = [];
    const job = idempotent(async () => {
      runs++;
      throw new Error('card provider said: declined');
    }, { store, key: (m) => m.id, maxRuns: 3, onDeadLetter: (record) => { letters.push(record); }, onEvent: (e) => events.push(e.type) });
    const message = { id: newKey(), amount: 10 };
    await assert.rejects(job(message), { message: 'card provider said: declined' });
    assert.equal(letters.length, 1, 'handed to onDeadLetter by the run that failed');
    assert.equal(letters[0].key, message.id);
    assert.deepEqual(letters[0].input, message);
    assert.equal(letters[0].failedRuns, 1);
    assert.equal(letters[0].maxRuns, 3);
    assert.deepEqual(letters[0].runs.map((r) => [r.outcome, r.detail]), [['failed', 'card provider said: declined']]);
    assert.ok(events.includes('dead-lettered'));
    for (let i = 0; i < 2; i++) await assert.rejects(job(message), { code: 'previous-run-failed' });
    assert.equal(runs, 1, 'never run again');
    assert.equal(letters.length, 1, 'called once');
  }
  // onDeadLetter throwing: the delivery rejects with its error, and the failure stays stored
  // (the effect may have happened: never run again, nor handed on again).
  let runs = 0;
  let calls = 0;
  const events = [];
  const job = idempotent(async () => {
    runs++;
    throw new Error('boom');
  }, { store: new MemoryStore(), key: (m) => m.id, maxRuns: 2, onDeadLetter: () => { calls++; throw new Error('queue down'); }, onEvent: (e) => events.push(e.type) });
  const message = { id: newKey() };
  await assert.rejects(job(message), { message: 'queue down' });
  await assert.rejects(job(message), { code: 'previous-run-failed' });
  assert.equal(calls, 1);
  assert.ok(!events.includes('dead-lettered'), `not told dead-lettered when it was not handed on: ${events}`);
  assert.equal(runs, 1);
  // Without maxRuns: as before, no hand-over.
  const plain = idempotent(async () => { throw new Error('boom'); }, { store: new MemoryStore(), key: (m) => m.id });
  await assert.rejects(plain({ id: newKey() }), { message: 'boom' });
});

test('maxRuns and onDeadLetter are checked: a bad value, a store without a history, history: false, onDeadLetter without maxRuns', () => {
  const store = new MemoryStore();
  for (const bad of [0, 1001, 2.5, '3']) {
    assert.throws(() => idempotent(async () => 1, { store, key: () => 'k', maxRuns: bad }), { name: 'TypeError', message: /"maxRuns"/ });
  }
  assert.throws(() => idempotent(async () => 1, { store, key: () => 'k', maxRuns: 3, history: false }), { name: 'TypeError', message: /"maxRuns"/ });
  const bare = { acquire() { return null; }, reclaim() { return false; }, complete() { return true; }, release() { return true; } };
  assert.throws(() => idempotent(async () => 1, { store: bare, key: () => 'k', maxRuns: 3 }), { name: 'TypeError', message: /"maxRuns".*run history/ });
  assert.throws(() => idempotent(async () => 1, { store, key: () => 'k', onDeadLetter: 5 }), { name: 'TypeError', message: /"onDeadLetter"/ });
  // Without maxRuns nothing is ever dead-lettered, so an onDeadLetter would never be called.
  assert.throws(() => idempotent(async () => 1, { store, key: () => 'k', onDeadLetter: () => {} }), {
    name: 'TypeError',
    message: 'idempotent: invalid option "onDeadLetter": got a function; expected maxRuns beside it: onDeadLetter needs maxRuns (it is called when a job reaches maxRuns)',
  });
  idempotent(async () => 1, { store, key: () => 'k', maxRuns: 3, onDeadLetter: () => {} });
});

test('PostgresStore: a 202 leaves ctx.tx its meaning: the write commits with the stored answer, once', { skip: pgSkip }, async () => {
  const table = tableName('idem');
  const store = new PostgresStore({ pool, table });
  await store.migrate();
  const charges = tableName('charges');
  await pool.query(`CREATE TABLE "${charges}" (id serial PRIMARY KEY, key text NOT NULL)`);
  const wrapped = idempotency(async (request, ctx) => {
    await ctx.tx.query(`INSERT INTO "${charges}" (key) VALUES ($1)`, [ctx.key]);
    await sleep(600);
    return Response.json({ ok: true }, { status: 201 });
  }, { store, identity: false, acceptAfterMs: 100 });
  const key = newKey();
  const req = () => new Request('http://x/pay', { method: 'POST', body: '1', headers: { 'Idempotency-Key': key } });
  assert.equal((await wrapped(req())).status, 202);
  // Not committed while the run goes on.
  assert.equal((await pool.query(`SELECT count(*)::int AS n FROM "${charges}"`)).rows[0].n, 0);
  assert.equal((await wrapped(req())).status, 202);
  const done = await eventually(async () => {
    const r = await wrapped(req());
    return r.status !== 202 && r;
  }, 'the stored answer');
  assert.equal(done.status, 201);
  assert.equal((await pool.query(`SELECT count(*)::int AS n FROM "${charges}"`)).rows[0].n, 1);
});

test('acceptAfterMs: a run answered 202 whose store fails at complete() keeps trying while it holds the key: the caller following the 202 gets the one run\'s answer, the handler runs once', async () => {
  // The store is down for the first four complete() calls (about 1.5 s): more than the two
  // quick retries every answer gets, less than lockTimeoutMs.
  let failures = 4;
  class CompleteFails extends MemoryStore {
    async complete(...args) {
      if (failures-- > 0) throw new Error('store down at complete');
      return super.complete(...args);
    }
  }
  let runs = 0;
  const handler = idempotency(async () => {
    runs++;
    await sleep(300); // long work: the caller is answered 202 meanwhile
    return Response.json({ charge: runs }, { status: 201 });
  }, { store: new CompleteFails(), identity: false, acceptAfterMs: 100, lockTimeoutMs: 3000, onError: () => {}, onStoreError: () => {} });
  await withServer(handler, async ({ url }) => {
    const res = await retryFetch(`${url}/pay`, { method: 'POST', body: '{"amount":10}', headers: { 'content-type': 'application/json' } }, {
      followAccepted: true,
      deadlineMs: 20_000,
      baseDelayMs: 200,
    });
    assert.equal(res.status, 201);
    assert.deepEqual(await res.json(), { charge: 1 });
    assert.equal(runs, 1, 'the handler ran once');
  });
});

test('followAccepted: a 202 that says X-Should-Retry: false is the answer: the keyed request is not sent again', async () => {
  const { createServer } = await import('node:http');
  let hits = 0;
  const server = createServer((req, res) => {
    hits++;
    req.resume();
    res.writeHead(202, { 'Retry-After': '0', 'X-Should-Retry': 'false', 'Content-Type': 'application/json' }).end('{"queued":true}');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const res = await retryFetch(`http://127.0.0.1:${server.address().port}/pay`, { method: 'POST', body: 'pay' }, { followAccepted: true, deadlineMs: 5_000, baseDelayMs: 50 });
    assert.equal(res.status, 202);
    assert.equal(hits, 1, 'sent once');
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
