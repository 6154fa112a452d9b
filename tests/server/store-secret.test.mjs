// Every store keeps a secret (secret()): the HMAC key with which the companion hashes a caller's
// identity into the store key's scope. 64 hex digits, stable, the same for every instance on one
// backend (Redis: `<prefix>secret`; PostgreSQL: a row of the table, scope ''), created once,
// cached by the instance once read (a failure is not). MemoryStore has one of its own. Against a
// real redis-server and PostgreSQL (REDIS_URL, DATABASE_URL: tests/support/services.mjs; each
// part is skipped without its URL when run by hand).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import pg from 'pg';
import { createClient } from 'redis';
import { idempotency, MemoryStore, RedisStore, PostgresStore } from 'retry-fetch/server';
import { sleep } from './support.mjs';
import { REDIS_URL, DATABASE_URL, needs } from '../support/services.mjs';

const redisSkip = needs('REDIS_URL');
const pgSkip = needs('DATABASE_URL');

const HEX64 = /^[0-9a-f]{64}$/;
const t = (name, options, fn) => test(`store secret: ${name}`, { timeout: 60_000, ...options }, fn);

const clients = [];
const pools = [];
const tables = [];
let redis;
let pool;

async function connect() {
  const client = createClient({ url: REDIS_URL });
  client.on('error', () => {});
  await client.connect();
  clients.push(client);
  return client;
}

function newPool() {
  const p = new pg.Pool({ connectionString: DATABASE_URL, max: 10 });
  p.on('error', () => {});
  pools.push(p);
  return p;
}

before(async () => {
  if (!redisSkip) redis = await connect();
  if (!pgSkip) pool = newPool();
});

after(async () => {
  await Promise.all(clients.filter((c) => c.isOpen).map((c) => c.quit()));
  if (pool) for (const name of tables) await pool.query(`DROP TABLE IF EXISTS "${name}"`);
  await Promise.all(pools.map((p) => p.end()));
});

const prefix = () => `idem:secret-${crypto.randomUUID()}:`;
const table = () => {
  const name = `secret_${crypto.randomUUID().replaceAll('-', '')}`;
  tables.push(name);
  return name;
};

const lockOf = (token) => ({ state: 'in-progress', token, fingerprint: 'f'.repeat(64), lockExpiresAt: Date.now() + 60_000 });
const answerOf = () => ({
  state: 'completed',
  fingerprint: 'f'.repeat(64),
  response: { status: 200, statusText: '', headers: [], body: '' },
  completedAt: Date.now(),
});

/** `target` with calls of `methods` counted in `counts` (and `fail[method]` > 0 failing that many calls first). */
function counting(target, methods, fail = {}) {
  const counts = Object.fromEntries(methods.map((m) => [m, 0]));
  const wrapped = new Proxy(target, {
    get(obj, prop) {
      const value = Reflect.get(obj, prop, obj);
      if (!methods.includes(prop)) return typeof value === 'function' ? value.bind(obj) : value;
      return (...args) => {
        counts[prop]++;
        if (fail[prop] > 0) {
          fail[prop]--;
          return Promise.reject(new Error(`${prop} failed (planned)`));
        }
        return value.apply(obj, args);
      };
    },
  });
  return { wrapped, counts };
}

/** The scope the companion gives `identity` with `secret` (store.d.ts: HMAC-SHA-256, hex). */
const scopeOf = (secret, identity) => createHmac('sha256', secret).update(identity).digest('hex');

/** A keyed POST with the caller named in `X-User` (the tests' identity). */
const post = (key, user = 'user-7') =>
  new Request('http://api.test/orders', { method: 'POST', headers: { 'Idempotency-Key': key, 'X-User': user }, body: '{}' });
const identity = (request) => request.headers.get('x-user');

// ---------------------------------------------------------------------------------------------

t('MemoryStore: 64 hex digits, the same on every call, another for another store', {}, () => {
  const a = new MemoryStore();
  const b = new MemoryStore();
  const secret = a.secret();
  assert.match(secret, HEX64);
  assert.equal(a.secret(), secret);
  assert.match(b.secret(), HEX64);
  assert.notEqual(b.secret(), secret);
});

t('MemoryStore through the companion: the scope is the HMAC of the identity keyed with the store\'s secret; two instances on one store share it', {}, async () => {
  const store = new MemoryStore();
  const { wrapped, counts } = counting(store, ['acquire', 'secret']);
  const keys = [];
  const recording = new Proxy(wrapped, {
    get(obj, prop) {
      if (prop === 'acquire') return (key, ...rest) => (keys.push(key), obj.acquire(key, ...rest));
      return Reflect.get(obj, prop);
    },
  });
  let runs = 0;
  const handler = () => Response.json({ run: ++runs });
  const one = idempotency(handler, { store: recording, identity });
  const two = idempotency(handler, { store: recording, identity });
  assert.equal((await one(post('order-1'))).status, 200);
  const replay = await two(post('order-1'));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true', 'the same scope on the other instance');
  assert.equal((await one(post('order-2'))).status, 200);
  assert.equal((await one(post('order-1', 'user-8'))).headers.get('idempotent-replayed'), null, 'another caller, another scope');
  assert.equal(runs, 3);
  assert.equal(keys[0], `${scopeOf(store.secret(), 'user-7')}:order-1`);
  assert.ok(counts.secret >= 1 && counts.secret <= 2, `secret() asked once per idempotency() instance, not per request: ${counts.secret}`);
});

t('RedisStore: 64 hex at <prefix>secret, no expiry; the same for two instances; another prefix, another secret', { skip: redisSkip }, async () => {
  const p = prefix();
  const a = new RedisStore({ client: redis, prefix: p });
  const b = new RedisStore({ client: await connect(), prefix: p });
  const secret = await a.secret();
  assert.match(secret, HEX64);
  assert.equal(await a.secret(), secret);
  assert.equal(await b.secret(), secret, 'a second instance on the same Redis and prefix');
  assert.equal(await new RedisStore({ client: redis, prefix: p }).secret(), secret, 'and a third, later');
  assert.equal(await redis.get(`${p}secret`), secret);
  assert.equal(await redis.pTTL(`${p}secret`), -1, 'no expiry');
  const other = await new RedisStore({ client: redis, prefix: prefix() }).secret();
  assert.match(other, HEX64);
  assert.notEqual(other, secret);
  // The secret is not a record: no key reads it.
  assert.equal(await a.acquire('-:secret', lockOf('a'), 60_000), null);
  assert.equal(await a.release('-:secret', 'a'), true);
  assert.equal(await redis.get(`${p}secret`), secret);
});

t('RedisStore: concurrent first calls share one read; cached after it; a failure is not cached', { skip: redisSkip }, async () => {
  const p = prefix();
  const { wrapped, counts } = counting(redis, ['set', 'get']);
  const store = new RedisStore({ client: wrapped, prefix: p });
  const [x, y, z] = await Promise.all([store.secret(), store.secret(), store.secret()]);
  assert.match(x, HEX64);
  assert.equal(y, x);
  assert.equal(z, x);
  assert.deepEqual(counts, { set: 1, get: 1 }, 'one SET NX and one GET for the three');
  assert.equal(await store.secret(), x);
  assert.deepEqual(counts, { set: 1, get: 1 }, 'cached');

  const failing = counting(redis, ['set', 'get'], { get: 1 });
  const flaky = new RedisStore({ client: failing.wrapped, prefix: p });
  await assert.rejects(flaky.secret(), /get failed \(planned\)/);
  assert.equal(await flaky.secret(), x, 'asked again after a failure, and the secret did not change');
  assert.equal(failing.counts.get, 2);
});

t('RedisStore: a value at <prefix>secret that is not a secret is refused, not used', { skip: redisSkip }, async () => {
  const p = prefix();
  await redis.set(`${p}secret`, 'short');
  await assert.rejects(new RedisStore({ client: redis, prefix: p }).secret(), { name: 'TypeError', message: /is not a store secret/ });
});

t('RedisStore through the companion: two instances give a caller the same scope, keyed with the stored secret', { skip: redisSkip }, async () => {
  const p = prefix();
  let runs = 0;
  const handler = () => Response.json({ run: ++runs }, { status: 201 });
  const one = idempotency(handler, { store: new RedisStore({ client: redis, prefix: p }), identity });
  const two = idempotency(handler, { store: new RedisStore({ client: await connect(), prefix: p }), identity });
  assert.equal((await one(post('order-1'))).status, 201);
  const replay = await two(post('order-1'));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(runs, 1);
  const secret = await redis.get(`${p}secret`);
  assert.match(secret, HEX64);
  const keys = (await redis.keys(`${p}*`)).filter((k) => !k.startsWith(`${p}runs:`)).sort();
  assert.deepEqual(keys, [`${p}${scopeOf(secret, 'user-7')}:order-1`, `${p}secret`].sort());
});

t('RedisStore: a lost secret is put back by a running instance\'s next request, so an instance started later hashes the caller into the same scope (the retry is a replay, not a second run)', { skip: redisSkip }, async () => {
  const p = prefix();
  let runs = 0;
  const handler = () => Response.json({ run: ++runs }, { status: 201 });
  const running = idempotency(handler, { store: new RedisStore({ client: redis, prefix: p }), identity });
  assert.equal((await running(post('order-1'))).status, 201);
  const secret = await redis.get(`${p}secret`);
  // Lost: an eviction, a manual delete. The running instance's next keyed request puts it back.
  await redis.del(`${p}secret`);
  assert.equal((await running(post('order-2'))).status, 201);
  assert.equal(await redis.get(`${p}secret`), secret, 'put back as it was');
  assert.equal(await redis.pTTL(`${p}secret`), -1, 'no expiry');
  // An instance started after that (a deploy, a scale-out) reads the same secret: the retry of
  // the first request is a replay.
  const later = idempotency(handler, { store: new RedisStore({ client: await connect(), prefix: p }), identity });
  const retry = await later(post('order-1'));
  assert.equal(retry.status, 201);
  assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  assert.equal(runs, 2, 'order-1 ran once, order-2 once');
});

t('RedisStore: an instance reads the secret when its handler is made, so one that had served no keyed request yet puts a lost secret back as it was too (the others do not go 503)', { skip: redisSkip }, async () => {
  const p = prefix();
  let runs = 0;
  const handler = () => Response.json({ run: ++runs }, { status: 201 });
  const errors = [];
  const onStoreError = (error, operation) => errors.push(`${operation}: ${error.message}`);
  const a = idempotency(handler, { store: new RedisStore({ client: redis, prefix: p }), identity, onStoreError });
  assert.equal((await a(post('order-1'))).status, 201);
  const secret = await redis.get(`${p}secret`);
  // B runs, but has served nothing yet.
  const b = idempotency(handler, { store: new RedisStore({ client: await connect(), prefix: p }), identity, onStoreError });
  await sleep(100);
  // Lost (a Redis restart without persistence); B's request comes first.
  await redis.del(`${p}secret`);
  assert.equal((await b(post('order-2'))).status, 201);
  assert.equal(await redis.get(`${p}secret`), secret, 'put back as it was');
  const retry = await a(post('order-2'));
  assert.equal(retry.status, 201, `A: ${retry.status} ${errors.join('; ')}`);
  assert.equal(retry.headers.get('idempotent-replayed'), 'true', 'the same scope on both');
  assert.deepEqual(errors, []);
});

t('RedisStore: an instance that finds another secret at <prefix>secret refuses keyed requests (503, the store error says why) rather than scope callers apart; the handler does not run', { skip: redisSkip }, async () => {
  const p = prefix();
  let runs = 0;
  const errors = [];
  const handler = () => Response.json({ run: ++runs }, { status: 201 });
  const running = idempotency(handler, {
    store: new RedisStore({ client: redis, prefix: p }),
    identity,
    onStoreError: (error, operation) => errors.push([operation, error.message]),
  });
  assert.equal((await running(post('order-1'))).status, 201);
  // Lost, and another instance made a new one before the running one's next request.
  await redis.del(`${p}secret`);
  const other = await new RedisStore({ client: redis, prefix: p }).secret();
  const refused = await running(post('order-1'));
  assert.equal(refused.status, 503);
  assert.equal(runs, 1, 'the retry did not run the handler again');
  assert.equal(errors.length, 1);
  assert.equal(errors[0][0], 'acquire');
  assert.match(errors[0][1], /^RedisStore: the secret at ".*secret" is not the one this instance read: .* restart every instance, or give idempotency\(\) a secret option$/);
  assert.equal(await redis.get(`${p}secret`), other, 'the other secret is left as it is');
  const keys = (await redis.keys(`${p}*`)).filter((k) => !k.startsWith(`${p}runs:`) && k !== `${p}secret`);
  assert.equal(keys.length, 1, 'no lock was taken by the refused request');
});

t('RedisStore: each keyed request uses the secret, so an LRU eviction does not pick it first; a store whose secret is not read (the secret option) does not touch it', { skip: redisSkip }, async () => {
  const p = prefix();
  const store = new RedisStore({ client: redis, prefix: p });
  const app = idempotency(() => new Response('ok', { status: 201 }), { store, identity });
  assert.equal((await app(post('order-1'))).status, 201);
  await sleep(2100);
  assert.ok((await redis.sendCommand(['OBJECT', 'IDLETIME', `${p}secret`])) >= 2, 'idle while no request came');
  assert.equal((await app(post('order-2'))).status, 201);
  // Idle time has a resolution of a second: a second boundary between the use and this read
  // says 1 (a loaded machine widens that window); 2 or more would be unused.
  assert.ok((await redis.sendCommand(['OBJECT', 'IDLETIME', `${p}secret`])) <= 1, 'used by the request');

  const q = prefix();
  const own = idempotency(() => new Response('ok', { status: 201 }), { store: new RedisStore({ client: redis, prefix: q }), identity, secret: 's'.repeat(32) });
  assert.equal((await own(post('order-1'))).status, 201);
  assert.equal(await redis.exists(`${q}secret`), 0, 'never made');
});

t('PostgresStore: 64 hex in the table\'s secret row; the same for two instances (and pools); another table, another secret', { skip: pgSkip }, async () => {
  const name = table();
  const a = new PostgresStore({ pool, table: name });
  await a.migrate();
  const b = new PostgresStore({ pool: newPool(), table: name });
  // The first calls race: both INSERT ... ON CONFLICT DO NOTHING, one wins, both read it.
  const [x, y] = await Promise.all([a.secret(), b.secret()]);
  assert.match(x, HEX64);
  assert.equal(y, x);
  assert.equal(await a.secret(), x);
  assert.equal(await new PostgresStore({ pool, table: name }).secret(), x, 'a later instance');
  const { rows } = await pool.query(`SELECT scope, key, fingerprint, response, expires_at = 'infinity' AS forever FROM "${name}" WHERE scope = ''`);
  assert.deepEqual(rows, [{ scope: '', key: 'secret', fingerprint: x, response: null, forever: true }]);
  const otherName = table();
  const other = new PostgresStore({ pool, table: otherName });
  await other.migrate();
  assert.notEqual(await other.secret(), x);
});

t('PostgresStore: the secret row survives cleanup() and is never a key', { skip: pgSkip }, async () => {
  const name = table();
  const store = new PostgresStore({ pool, table: name });
  await store.migrate();
  const secret = await store.secret();
  // The first acquire() starts a cleanup in the background: let it pass first.
  assert.equal(await store.acquire('-:first', lockOf('f'), 60_000), null);
  assert.equal(await store.release('-:first', 'f'), true);
  await sleep(100);
  // An expired answer for cleanup() to delete.
  assert.equal(await store.acquire('-:brief', lockOf('a'), 60_000), null);
  assert.equal(await store.complete('-:brief', 'a', answerOf(), 1), true);
  await sleep(20);
  assert.equal(await store.cleanup(), 1, 'the expired answer, and only it');
  assert.equal(await store.cleanup(), 0);
  // Keys named like it, in any real scope, are keys of their own.
  assert.equal(await store.acquire('-:secret', lockOf('b'), 60_000), null);
  assert.equal(await store.complete('-:secret', 'b', answerOf(), 60_000), true);
  assert.equal(await store.acquire(`${'ab'.repeat(32)}:secret`, lockOf('c'), 60_000), null);
  assert.equal(await store.release(`${'ab'.repeat(32)}:secret`, 'c'), true);
  // The empty scope is refused: no key can reach the secret's row.
  await assert.rejects(store.acquire(':secret', lockOf('d'), 60_000), { name: 'TypeError', message: /scope must not be empty/ });
  assert.equal(await new PostgresStore({ pool, table: name }).secret(), secret, 'unchanged');
  const { rows } = await pool.query(`SELECT fingerprint FROM "${name}" WHERE scope = '' AND key = 'secret'`);
  assert.deepEqual(rows, [{ fingerprint: secret }]);
});

t('PostgresStore: concurrent first calls share one read; cached after it; a failure is not cached', { skip: pgSkip }, async () => {
  const name = table();
  await new PostgresStore({ pool, table: name }).migrate();
  const { wrapped, counts } = counting(pool, ['query']);
  const store = new PostgresStore({ pool: wrapped, table: name });
  const [x, y] = await Promise.all([store.secret(), store.secret()]);
  assert.equal(y, x);
  assert.equal(counts.query, 2, 'one INSERT and one SELECT for both');
  assert.equal(await store.secret(), x);
  assert.equal(counts.query, 2, 'cached');
  const failing = counting(pool, ['query'], { query: 1 });
  const flaky = new PostgresStore({ pool: failing.wrapped, table: name });
  await assert.rejects(flaky.secret(), /query failed \(planned\)/);
  assert.equal(await flaky.secret(), x);
});

t('PostgresStore through the companion: two instances give a caller the same scope, keyed with the stored secret', { skip: pgSkip }, async () => {
  const name = table();
  const first = new PostgresStore({ pool, table: name });
  await first.migrate();
  let runs = 0;
  const handler = () => Response.json({ run: ++runs }, { status: 201 });
  const one = idempotency(handler, { store: first, identity });
  const two = idempotency(handler, { store: new PostgresStore({ pool: newPool(), table: name }), identity });
  assert.equal((await one(post('order-1'))).status, 201);
  const replay = await two(post('order-1'));
  assert.equal(replay.headers.get('idempotent-replayed'), 'true');
  assert.equal(runs, 1);
  const secret = await first.secret();
  const { rows } = await pool.query(`SELECT scope, key FROM "${name}" WHERE scope <> '' ORDER BY key`);
  assert.deepEqual(rows, [{ scope: scopeOf(secret, 'user-7'), key: 'order-1' }]);
});
