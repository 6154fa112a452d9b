// idempotent(fn, { key, scope?, store, ... }): one effect per key for any async function (a
// queue consumer, a cron job), with MemoryStore, RedisStore (REDIS_URL) and PostgresStore
// (DATABASE_URL; tests/support/services.mjs); run by hand, a store whose server is not given
// is skipped.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createClient } from 'redis';
import { idempotent, MemoryStore, RedisStore, PostgresStore } from 'retry-fetch/server';
import { sleep, newKey, deferred, failing, watchAcquires, DERIVED_KEY } from './support.mjs';
import { REDIS_URL, DATABASE_URL, needs } from '../support/services.mjs';

const redisSkip = needs('REDIS_URL');
const pgSkip = needs('DATABASE_URL');

let redis;
let pool;
const tables = [];

before(async () => {
  if (!redisSkip) {
    redis = createClient({ url: REDIS_URL });
    redis.on('error', () => {});
    await redis.connect();
  }
  if (!pgSkip) {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 20 });
    pool.on('error', () => {});
  }
});

after(async () => {
  await redis?.quit();
  if (pool) {
    for (const t of tables) await pool.query(`DROP TABLE IF EXISTS "${t}"`);
    await pool.end();
  }
});

function tableName(kind) {
  const name = `${kind}_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(name);
  return name;
}

const stores = [
  ['MemoryStore', () => new MemoryStore(), false],
  ['RedisStore', () => new RedisStore({ client: redis, prefix: `idem:job-${crypto.randomUUID()}:` }), redisSkip],
  [
    'PostgresStore',
    async () => {
      const store = new PostgresStore({ pool, table: tableName('idem') });
      await store.migrate();
      return store;
    },
    pgSkip,
  ],
];

/** Assert `error` is an IdempotencyError with `code`. */
function isIdempotencyError(error, code) {
  assert.ok(error instanceof Error, `an Error: ${error}`);
  assert.equal(error.name, 'IdempotencyError');
  assert.equal(error.code, code);
  return true;
}

for (const [label, makeStore, skip] of stores) {
  const transactional = label === 'PostgresStore';
  const t = (name, fn) => test(`idempotent, ${label}: ${name}`, { skip, timeout: 60_000 }, fn);

  // A job that counts its runs and returns what it is told (`result(input, run)`).
  const job = async (options = {}, result = (input, run) => ({ shipped: input.orderId, run })) => {
    const state = { runs: 0, inputs: [] };
    const fn = idempotent(async (input, ctx) => {
      const run = ++state.runs;
      state.inputs.push(input);
      return result(input, run, ctx);
    }, { store: await makeStore(), key: (message) => message.id, ...options });
    return { fn, state };
  };

  t('the same input twice: fn runs once, the repeat gets the stored result (a JSON round trip)', async () => {
    const { fn, state } = await job({}, (input, run) => ({ shipped: input.orderId, run, at: new Date(0), gone: undefined, list: [1, 'a', null] }));
    const message = { id: newKey(), orderId: 'o-1' };
    const first = await fn(message);
    const stored = { shipped: 'o-1', run: 1, at: '1970-01-01T00:00:00.000Z', list: [1, 'a', null] };
    assert.deepEqual(first, stored, 'the first call gets what every repeat gets: the JSON round trip');
    const again = await fn({ ...message });
    assert.deepEqual(again, stored);
    assert.equal(state.runs, 1);
    assert.deepEqual(state.inputs, [message]);
  });

  t('undefined, null, a number and a string round-trip', async () => {
    for (const value of [undefined, null, 0, 42.5, '', 'done', false]) {
      const { fn, state } = await job({}, () => value);
      const message = { id: newKey() };
      assert.equal(await fn(message), value);
      assert.equal(await fn(message), value, `a replayed ${JSON.stringify(value)}`);
      assert.equal(state.runs, 1);
    }
  });

  t('the same key with another input rejects with IdempotencyError key-reused', async () => {
    const { fn, state } = await job();
    const id = newKey();
    await fn({ id, orderId: 'o-1' });
    await assert.rejects(fn({ id, orderId: 'o-2' }), (error) => isIdempotencyError(error, 'key-reused'));
    assert.equal(state.runs, 1);
    assert.deepEqual(await fn({ id, orderId: 'o-1' }), { shipped: 'o-1', run: 1 }, 'the original input still replays');
  });

  t('the same key with another input while the first run goes on rejects at once with key-reused (waiting or concurrent: reject); the same input waits', async () => {
    for (const options of [{ waitTimeoutMs: 3_000 }, { concurrent: 'reject' }]) {
      const started = deferred();
      const released = deferred();
      const { fn, state } = await job(options, async (input, run) => {
        started.resolve();
        await released.promise;
        return { shipped: input.orderId, run };
      });
      const id = newKey();
      const first = fn({ id, orderId: 'o-1' });
      try {
        await started.promise;
        // The first run goes on until released: a rejection before it did not wait for it.
        await assert.rejects(fn({ id, orderId: 'o-2' }), (error) => isIdempotencyError(error, 'key-reused'));
        const same = fn({ id, orderId: 'o-1' });
        if (options.concurrent === 'reject') await assert.rejects(same, (error) => isIdempotencyError(error, 'in-progress'));
        released.resolve();
        assert.deepEqual(await first, { shipped: 'o-1', run: 1 });
        if (options.concurrent !== 'reject') assert.deepEqual(await same, { shipped: 'o-1', run: 1 }, 'the same input waited for it');
        assert.equal(state.runs, 1);
      } finally {
        released.resolve();
        await first.catch(() => {});
      }
    }
  });

  t('fn throws: the error propagates; a repeat rejects with IdempotencyError previous-run-failed naming it, fn does not run again', async () => {
    const boom = new Error('warehouse API timed out');
    const { fn, state } = await job({}, () => {
      throw boom;
    });
    const message = { id: newKey(), orderId: 'o-1' };
    await assert.rejects(fn(message), (error) => error === boom);
    await assert.rejects(fn(message), (error) => {
      isIdempotencyError(error, 'previous-run-failed');
      assert.match(error.message, /warehouse API timed out/);
      return true;
    });
    assert.equal(state.runs, 1);
  });

  t('a result that is not JSON (a BigInt): rejects with the serialisation error, and a repeat with previous-run-failed', async () => {
    const { fn, state } = await job({}, () => ({ total: 10n }));
    const message = { id: newKey() };
    await assert.rejects(fn(message), TypeError);
    await assert.rejects(fn(message), (error) => isIdempotencyError(error, 'previous-run-failed'));
    assert.equal(state.runs, 1);
  });

  t("concurrent: 'reject' while a run is going on rejects with IdempotencyError in-progress", async () => {
    const started = deferred();
    const finish = deferred();
    const { fn, state } = await job({ concurrent: 'reject' }, async (input, run) => {
      started.resolve();
      await finish.promise;
      return { run };
    });
    const message = { id: newKey() };
    const first = fn(message);
    await started.promise;
    await assert.rejects(fn(message), (error) => isIdempotencyError(error, 'in-progress'));
    finish.resolve();
    assert.deepEqual(await first, { run: 1 });
    assert.deepEqual(await fn(message), { run: 1 });
    assert.equal(state.runs, 1);
  });

  t("concurrent: 'wait' (the default): a repeat while a run is going on waits for its result; waitTimeoutMs ends the wait with in-progress", async () => {
    // The run does not end until the repeat was seen waiting (its acquire() told the key is
    // held), so no timing decides whether the two overlapped.
    const watch = watchAcquires(await makeStore());
    const started = deferred();
    const finish = deferred();
    let runs = 0;
    const fn = idempotent(async () => {
      const run = ++runs;
      started.resolve();
      await finish.promise;
      return { run };
    }, { store: watch.store, key: (m) => m.id, waitTimeoutMs: 30_000 });
    const message = { id: newKey() };
    const first = fn(message);
    try {
      await started.promise;
      const repeat = fn(message);
      await watch.overlapped(1, [first, repeat]);
      finish.resolve();
      assert.deepEqual(await repeat, { run: 1 });
      assert.deepEqual(await first, { run: 1 });
      assert.equal(runs, 1);
    } finally {
      finish.resolve();
    }

    const slowStarted = deferred();
    const slowFinish = deferred();
    const slow = await job({ waitTimeoutMs: 50 }, async () => (slowStarted.resolve(), await slowFinish.promise, 'late'));
    const m2 = { id: newKey() };
    const running = slow.fn(m2);
    try {
      await slowStarted.promise;
      await assert.rejects(slow.fn(m2), (error) => isIdempotencyError(error, 'in-progress')); // the run is still blocked
    } finally {
      slowFinish.resolve();
    }
    assert.equal(await running, 'late');
  });

  t('a run slower than lockTimeoutMs keeps its key (the lock is renewed): a repeat 1.5 s on finds it held, waits and gets the result', async () => {
    const watch = watchAcquires(await makeStore());
    const started = deferred();
    const finish = deferred();
    let runs = 0;
    const fn = idempotent(async () => {
      const run = ++runs;
      started.resolve();
      await finish.promise; // until the repeat has found the key held
      return { run };
    }, { store: watch.store, key: (m) => m.id, lockTimeoutMs: 1000, waitTimeoutMs: 30_000 });
    const message = { id: newKey() };
    const first = fn(message);
    try {
      await started.promise;
      await sleep(1500); // past lockTimeoutMs: without renewal the lock would have lapsed
      const repeat = fn(message);
      await watch.overlapped(1, [first, repeat]);
      finish.resolve();
      assert.deepEqual(await repeat, { run: 1 });
      assert.deepEqual(await first, { run: 1 });
      assert.equal(runs, 1);
    } finally {
      finish.resolve();
    }
  });

  t('scope separates keys; the same scope shares them', async () => {
    const store = await makeStore();
    let runs = 0;
    const make = (scope) => idempotent(async (input, ctx) => ({ run: ++runs, scope, charge: ctx.keyFor('charge') }), { store, key: (m) => m.id, scope });
    const [a, b, a2, none] = [make('queue-a'), make('queue-b'), make('queue-a'), make(undefined)];
    const message = { id: newKey() };
    const ra = await a(message);
    const rb = await b(message);
    assert.equal(ra.run, 1);
    assert.equal(rb.run, 2, 'another scope: another operation');
    assert.notEqual(ra.charge, rb.charge, 'keyFor differs per scope');
    assert.deepEqual(await a2(message), ra, 'the same scope on another wrapper replays');
    assert.equal((await none(message)).run, 3, 'no scope is a scope of its own');
    assert.equal(runs, 3);
  });

  t('ctx: key, keyFor(name) (stable across calls and instances, per name), tx', async () => {
    const seen = [];
    const make = async () =>
      idempotent(async (input, ctx) => {
        const tx = ctx.tx;
        let bad;
        try {
          ctx.keyFor('');
        } catch (error) {
          bad = error.name;
        }
        seen.push({ key: ctx.key, charge: ctx.keyFor('charge'), refund: ctx.keyFor('refund'), tx: tx === undefined ? 'undefined' : typeof tx?.query, bad });
        return null;
      }, { store: await makeStore(), key: (m) => m.id, scope: 'shipments', secret });
    // Two instances, each its own store, with the same secret (the scope's HMAC key).
    let secret = 'a-secret-shared-by-the-instances';
    const [one, two] = [await make(), await make()];
    const id = newKey();
    await one({ id });
    await two({ id });
    await one({ id: `${id}-other` });
    assert.equal(seen.length, 3);
    assert.deepEqual(seen.map((s) => s.key), [id, id, `${id}-other`]);
    for (const s of seen) {
      assert.match(s.charge, DERIVED_KEY);
      assert.notEqual(s.charge, s.refund);
      assert.equal(s.tx, transactional ? 'function' : 'undefined');
      assert.equal(s.bad, 'TypeError');
    }
    assert.equal(seen[1].charge, seen[0].charge, 'the same on another instance');
    assert.notEqual(seen[2].charge, seen[0].charge);
    // With another secret (a restart with a new MemoryStore, a store that lost its secret)
    // the scope is another HMAC, so the job runs again; its derived key is the same, so a
    // downstream service deduplicates the repeat.
    secret = 'another-secret-of-other-instances';
    await (await make())({ id });
    assert.equal(seen.length, 4);
    assert.equal(seen[3].charge, seen[0].charge, 'the derived key does not depend on the secret');
  });

  t('the key: missing is a TypeError at once; a key function returning "", 300 characters or a number rejects with a TypeError, fn does not run', async () => {
    const store = await makeStore();
    assert.throws(() => idempotent(async () => 1, { store }), {
      name: 'TypeError',
      message: 'idempotent: invalid option "key": got undefined; expected a function (input) => string, the job\'s key (1 to 255 visible ASCII characters)',
    });
    assert.throws(() => idempotent(async () => 1), { name: 'TypeError', message: /invalid option "key": got undefined/ });
    assert.throws(() => idempotent(async () => 1, { store, key: 'fixed' }), { name: 'TypeError', message: /invalid option "key": got "fixed"/ });
    assert.throws(() => idempotent('fn', { key: () => 'k' }), { name: 'TypeError', message: 'idempotent: the function must be a function (input, ctx) => Promise<result>; got "fn"' });
    assert.throws(() => idempotent(async () => 1, { key: () => 'k', scope: 3 }), { name: 'TypeError', message: 'idempotent: invalid option "scope": got 3; expected a non-empty string (e.g. the queue\'s or the tenant\'s name)' });
    // An empty scope would be no scope at all, silently: refused, as a wrong type is.
    assert.throws(() => idempotent(async () => 1, { store, key: () => 'k', scope: '' }), { name: 'TypeError', message: 'idempotent: invalid option "scope": got ""; expected a non-empty string (e.g. the queue\'s or the tenant\'s name)' });
    let runs = 0;
    const fn = idempotent(async () => ++runs, { store, key: (m) => m.key });
    for (const key of ['', 'k'.repeat(300), 'k'.repeat(256), 42, undefined, 'two words']) {
      await assert.rejects(fn({ key }), (error) => {
        assert.equal(error.name, 'TypeError');
        assert.match(error.message, /^idempotent: option "key" returned .*; expected a key of 1 to 255 visible ASCII characters$/);
        return true;
      }, JSON.stringify(key));
    }
    assert.equal(runs, 0);
    assert.equal(await fn({ key: 'k'.repeat(255) }), 1, '255 characters pass');
    // An async key function works too.
    const asyncKey = idempotent(async () => ++runs, { store, key: async (m) => m.id });
    const id = newKey();
    assert.equal(await asyncKey({ id }), 2);
    assert.equal(await asyncKey({ id }), 2);
  });

  t('an input that is not JSON rejects before fn runs', async () => {
    const { fn, state } = await job({ key: () => newKey() });
    const cyclic = { id: 'x' };
    cyclic.self = cyclic;
    await assert.rejects(fn(cyclic), TypeError);
    await assert.rejects(fn({ id: 'y', n: 1n }), TypeError);
    assert.equal(state.runs, 0);
  });

  t('an input holding a Map, a Set or another object whose JSON is {} rejects before fn runs; one with toJSON is read as its JSON', async () => {
    const { fn, state } = await job({ key: (m) => (m instanceof Map ? m.get('id') : m.id) });
    const id = newKey();
    for (const [kind, input] of [
      ['Map', { id, items: new Map([['sku-1', 2]]) }],
      ['Set', { id, tags: [new Set(['a'])] }],
      ['Error', { id, cause: new Error('declined') }],
      ['ArrayBuffer', { id, bytes: new ArrayBuffer(4) }],
      ['Map', new Map([['id', id]])],
    ]) {
      await assert.rejects(fn(input), (error) => {
        assert.equal(error.name, 'TypeError');
        assert.equal(error.message, `idempotent: the input holds a ${kind}, whose JSON is {} whatever it holds: the input's JSON is its fingerprint, so two inputs that differ inside it would look the same; pass plain objects, arrays and primitives (e.g. Object.fromEntries(map), [...set])`);
        return true;
      }, kind);
    }
    assert.equal(state.runs, 0);
    // Had the first been fingerprinted as {"id":...,"items":{}}, this one would replay its result.
    const items = new Map([['sku-1', 2]]);
    items.toJSON = () => Object.fromEntries(items);
    const first = await fn({ id, items, when: new Date(0) });
    assert.equal(state.runs, 1);
    const other = new Map([['sku-1', 3]]);
    other.toJSON = () => Object.fromEntries(other);
    await assert.rejects(fn({ id, items: other, when: new Date(0) }), (error) => isIdempotencyError(error, 'key-reused'));
    assert.deepEqual(await fn({ id, items, when: new Date(0) }), first);
    assert.equal(state.runs, 1);
  });
}

test('idempotent: a store that is down rejects with its error and fn does not run', async () => {
  const down = new Error('store down');
  let runs = 0;
  const fn = idempotent(async () => ++runs, { store: failing(new MemoryStore(), 'acquire', down), key: () => 'k' });
  await assert.rejects(fn({}), (error) => error === down);
  assert.equal(runs, 0);
});

test('idempotent: with the default store (a MemoryStore per wrapper)', async () => {
  let runs = 0;
  const fn = idempotent(async (n) => (runs++, n * 2), { key: (n) => `n-${n}` });
  assert.equal(await fn(21), 42);
  assert.equal(await fn(21), 42);
  assert.equal(runs, 1);
});

test('idempotent, PostgresStore: writes through ctx.tx commit with the result; a throw rolls them back and the repeat runs again', { skip: pgSkip, timeout: 60_000 }, async () => {
  const store = new PostgresStore({ pool, table: tableName('idem') });
  await store.migrate();
  const shipments = tableName('shipments');
  await pool.query(`CREATE TABLE "${shipments}" (id serial PRIMARY KEY, order_id text NOT NULL, run int NOT NULL)`);
  const rows = async () => (await pool.query(`SELECT order_id, run FROM "${shipments}" ORDER BY id`)).rows.map((r) => `${r.order_id}:${r.run}`);
  let runs = 0;
  const ship = idempotent(async (message, ctx) => {
    const run = ++runs;
    await ctx.tx.query(`INSERT INTO "${shipments}" (order_id, run) VALUES ($1, $2)`, [message.orderId, run]);
    if (message.failFirst && run === 1) throw new Error('carrier API down');
    return { shipped: message.orderId, run };
  }, { store, key: (m) => m.id, scope: 'shipments' });

  const ok = { id: newKey(), orderId: 'o-1' };
  assert.deepEqual(await ship(ok), { shipped: 'o-1', run: 1 });
  assert.deepEqual(await rows(), ['o-1:1'], 'committed with the result');
  assert.deepEqual(await ship(ok), { shipped: 'o-1', run: 1 });
  assert.equal(runs, 1);

  const flaky = { id: newKey(), orderId: 'o-2', failFirst: true };
  runs = 0;
  await assert.rejects(ship(flaky), /carrier API down/);
  assert.deepEqual(await rows(), ['o-1:1'], 'the throw rolled the insert back');
  assert.deepEqual(await ship(flaky), { shipped: 'o-2', run: 2 }, 'the redelivery runs fn again');
  assert.deepEqual(await rows(), ['o-1:1', 'o-2:2'], 'one row in the end');
  assert.deepEqual(await ship(flaky), { shipped: 'o-2', run: 2 });
});

test('idempotent, PostgresStore: fn that did not use ctx.tx and throws is a stored failure (previous-run-failed)', { skip: pgSkip, timeout: 60_000 }, async () => {
  const store = new PostgresStore({ pool, table: tableName('idem') });
  await store.migrate();
  let runs = 0;
  const fn = idempotent(async () => {
    runs++;
    throw new Error('sent the e-mail, then failed');
  }, { store, key: (m) => m.id });
  const message = { id: newKey() };
  await assert.rejects(fn(message), /sent the e-mail, then failed/);
  await assert.rejects(fn(message), (error) => isIdempotencyError(error, 'previous-run-failed') && /sent the e-mail/.test(error.message));
  assert.equal(runs, 1);
});

test('idempotent, PostgresStore: when the commit fails, the call does not resolve as if fn\'s writes were kept', {
  skip: pgSkip,
  timeout: 60_000,
}, async () => {
  const store = new PostgresStore({ pool, table: tableName('idem') });
  await store.migrate();
  const shipments = tableName('shipments');
  await pool.query(`CREATE TABLE "${shipments}" (id serial PRIMARY KEY, order_id text NOT NULL)`);
  const storeErrors = [];
  const ship = idempotent(async (message, ctx) => {
    await ctx.tx.query(`INSERT INTO "${shipments}" (order_id) VALUES ($1)`, [message.orderId]);
    await ctx.tx.query('SELECT 1 / 0').catch(() => {}); // swallowed; the transaction is aborted
    return { shipped: message.orderId };
  }, { store, key: (m) => m.id, onStoreError: (error, operation) => storeErrors.push(operation) });
  let outcome;
  try {
    outcome = { value: await ship({ id: newKey(), orderId: 'o-1' }) };
  } catch (error) {
    outcome = { error };
  }
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${shipments}"`);
  assert.equal(rows[0].n, 0, 'nothing was committed');
  assert.deepEqual(storeErrors, ['complete']);
  assert.ok(outcome.error, `the call resolved with ${JSON.stringify(outcome.value)} though nothing was committed`);
  isIdempotencyError(outcome.error, 'not-committed');
});

test('a store whose runs() gives no list (a forgotten return) is told failing through onStoreError, as one that throws', async () => {
  for (const gives of [undefined, null, 'r1']) {
    const inner = new MemoryStore();
    for (const id of ['r1', 'r2']) await inner.recordRun({ id, key: 'j2', scope: '-', instance: 'x', startedAt: id === 'r1' ? 1 : 2, endedAt: 3, outcome: 'rolled-back' });
    const store = {
      acquire: (...a) => inner.acquire(...a), reclaim: (...a) => inner.reclaim(...a), renew: (...a) => inner.renew(...a),
      complete: (...a) => inner.complete(...a), release: (...a) => inner.release(...a), recordRun: (...a) => inner.recordRun(...a),
      secret: () => inner.secret(),
      async runs() { return gives; },
    };
    const errors = [];
    const job = idempotent(async () => 'ok', { store, key: (x) => x.id, maxRuns: 2, onStoreError: (e, operation) => errors.push([operation, e.message]) });
    assert.equal(await job({ id: 'j2' }), 'ok');
    assert.equal(errors.length, 1, String(gives));
    assert.equal(errors[0][0], 'runs');
    assert.match(errors[0][1], /runs\(\) gave .*, not an array of run records; this run counts no earlier runs of the key \(maxRuns\)$/);
  }
});

test('a job whose failure the store keeps only after a few failed tries is still dead-lettered: the delivery waits for the store, then hands the dead letter on', { timeout: 30_000 }, async () => {
  const memory = new MemoryStore();
  let failCompletes = 3; // the first call and both quick retries
  // A plain object forwarding to a MemoryStore (no synchronous twins): complete() fails first.
  const store = {
    acquire: (...a) => memory.acquire(...a),
    renew: (...a) => memory.renew(...a),
    reclaim: (...a) => memory.reclaim(...a),
    release: (...a) => memory.release(...a),
    complete: (...a) => (failCompletes-- > 0 ? Promise.reject(new Error('connection lost')) : memory.complete(...a)),
    recordRun: (...a) => memory.recordRun(...a),
    runs: (...a) => memory.runs(...a),
  };
  const deadLetters = [];
  const job = idempotent(async () => {
    throw new Error('card declined (poison)');
  }, { store, key: (m) => m.id, maxRuns: 3, lockTimeoutMs: 3_000, onDeadLetter: (r) => deadLetters.push(r.key), onStoreError: () => {} });
  const codes = [];
  for (let delivery = 0; delivery < 3; delivery++) {
    codes.push(await job({ id: 'msg-1' }).then(() => 'ok', (e) => e.code ?? e.message));
  }
  assert.deepEqual(codes, ['card declined (poison)', 'previous-run-failed', 'previous-run-failed']);
  assert.deepEqual(deadLetters, ['msg-1'], 'handed to onDeadLetter once');
  assert.deepEqual((await memory.runs('msg-1')).map((r) => r.outcome), ['failed', 'replayed', 'replayed']);
});

test('idempotent: an input holding NaN, Infinity or a class instance whose JSON is {} rejects before fn runs (two such inputs would share a fingerprint); a class with own fields or a toJSON is read as its JSON', async () => {
  let runs = 0;
  const fn = idempotent(async (m) => ++runs, { store: new MemoryStore(), key: (m) => m.id });
  class Money {
    #cents;
    constructor(cents) { this.#cents = cents; }
    get cents() { return this.#cents; }
  }
  const prefix = 'idempotent: the input holds ';
  const tail = ": the input's JSON is its fingerprint, so two inputs that differ inside it would look the same; pass plain objects, arrays and primitives (e.g. Object.fromEntries(map), [...set])";
  for (const [input, what] of [
    [{ id: 'a', amount: new Money(100) }, 'an instance of Money whose JSON is {} (its state is not in own enumerable properties: private fields, getters; give it a toJSON)'],
    [{ id: 'b', limit: Infinity }, 'Infinity, whose JSON is null'],
    [{ id: 'c', list: [1, -Infinity] }, 'Infinity, whose JSON is null'],
    [{ id: 'd', ratio: NaN }, 'NaN, whose JSON is null'],
    [{ id: 'd2', ratio: new Number(NaN) }, 'a Number object of NaN or Infinity, whose JSON is null'],
    // A tag is no proof of what an object is: this one is no typed array.
    [{ id: 'd3', amount: new (class Tagged { #v = 1; get [Symbol.toStringTag]() { return 'ByteArray'; } })() }, 'an instance of Tagged whose JSON is {} (its state is not in own enumerable properties: private fields, getters; give it a toJSON)'],
  ]) {
    await assert.rejects(fn(input), (error) => error instanceof TypeError && error.message === prefix + what + tail, what);
  }
  assert.equal(runs, 0);
  // Its state in own fields, or a toJSON: fingerprinted as that (another amount is key-reused).
  class Fields { constructor(cents) { this.cents = cents; } }
  Money.prototype.toJSON = function () { return { cents: this.cents }; };
  for (const [id, make] of [['e', (c) => new Fields(c)], ['f', (c) => new Money(c)]]) {
    assert.equal(await fn({ id, amount: make(100) }), runs);
    await assert.rejects(fn({ id, amount: make(999) }), (error) => error.code === 'key-reused');
  }
  assert.equal(runs, 2);
  // Plain objects of any prototype-less kind, an empty plain object, boxed primitives (written
  // as their values) and typed arrays (as their items; two empty ones are equal) are fine.
  assert.equal(await fn({ id: 'g', meta: Object.create(null), empty: {} }), 3);
  assert.equal(await fn({ id: 'h', n: new Number(5), b: new Boolean(false), s: new String(''), bytes: new Uint8Array(0), floats: new Float64Array([1.5]) }), 4);
  await assert.rejects(fn({ id: 'h', n: new Number(6), b: new Boolean(false), s: new String(''), bytes: new Uint8Array(0), floats: new Float64Array([1.5]) }), (error) => error.code === 'key-reused');
});
