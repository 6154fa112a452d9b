// The idempotency scenarios with RedisStore against a real redis-server (scripts/test.sh starts
// one and passes its URL in REDIS_URL), and server instances sharing it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { createClient, createCluster } from 'redis';
import { idempotency, RedisStore } from 'retry-fetch/server';
import { storeScenarios, holding } from './scenarios.mjs';
import { serve, withServer, send, snapshot, newKey, sleep, deferred, problemOf, watchAcquires } from './support.mjs';
import { REDIS_URL as url, needs } from '../support/services.mjs';

const skip = needs('REDIS_URL');

const clients = [];
async function connect() {
  const client = createClient({ url });
  client.on('error', () => {}); // reconnects are the client's business; failures show in the tests
  await client.connect();
  clients.push(client);
  return client;
}

let client;
before(async () => {
  if (!skip) client = await connect();
});
after(async () => {
  await Promise.all(clients.filter((c) => c.isOpen).map((c) => c.quit()));
});

// Every store gets a prefix of its own, so the scenarios never see each other's keys.
const prefix = () => `idem:test-${crypto.randomUUID()}:`;

if (skip) {
  test('RedisStore', { skip }, () => {});
} else {
  storeScenarios('RedisStore', () => new RedisStore({ client, prefix: prefix() }));

  test('RedisStore: two server instances, each with its own client, share one Redis: 50 concurrent requests, 49 find the key held while the one run goes on', { timeout: 60_000 }, async () => {
    const shared = prefix();
    let runs = 0;
    const instances = [];
    const release = deferred();
    let watch;
    try {
      for (let i = 0; i < 2; i++) {
        const store = new RedisStore({ client: await connect(), prefix: shared });
        watch ??= watchAcquires(store); // both instances' acquire() answers in one record
        const handler = idempotency(async () => {
          const run = ++runs;
          await release.promise; // held until the 49 others have found the key held
          return Response.json({ run, instance: i }, { status: 201 });
        }, { store: i === 0 ? watch.store : watch.also(store) });
        instances.push(await serve(handler));
      }
      const [a, b] = instances;
      const key = newKey();
      const sent = Array.from({ length: 50 }, (_, i) => send((i % 2 ? a : b).url, { key }));
      await watch.overlapped(49, sent);
      release.resolve();
      const responses = await Promise.all(sent);
      assert.equal(runs, 1);
      const snaps = await Promise.all(responses.map(snapshot));
      for (const s of snaps) assert.deepEqual(s, snaps[0], 'every answer is the one response');
      assert.equal(snaps[0].status, 201);
      assert.equal(responses.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 49);
      // A later retry to either instance replays it.
      const later = await send(b.url, { key });
      assert.equal(later.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(JSON.parse((await snapshot(later)).body), JSON.parse(snaps[0].body));
      assert.equal(runs, 1);
    } finally {
      release.resolve(); // never leave the run blocked, whatever failed
      await Promise.all(instances.map((s) => s.close()));
    }
  });

  test('RedisStore: keys, TTLs and values in Redis; no Set-Cookie in the stored value', async () => {
    const p = prefix();
    const store = new RedisStore({ client, prefix: p });
    assert.equal(store.prefix, p);
    const handler = idempotency(async () => {
      const headers = new Headers({ 'X-Kept': 'yes' });
      headers.append('Set-Cookie', 'sid=s3cr3t; HttpOnly');
      return new Response('ok', { headers });
    }, { store, ttlMs: 60_000, identity: () => 'user-7' });
    await withServer(handler, async (server) => {
      const first = await send(server.url, { key: 'order-1' });
      assert.deepEqual(first.headers.getSetCookie(), ['sid=s3cr3t; HttpOnly']);
      await first.text();
      // The store's secret (at <prefix>secret) and the one record.
      const secret = await store.secret();
      assert.match(secret, /^[0-9a-f]{64}$/);
      assert.equal(await client.get(`${p}secret`), secret);
      // (and the run history's streams, <prefix>runs:<key>)
      const keys = (await client.keys(`${p}*`)).filter((k) => k !== `${p}secret` && !k.startsWith(`${p}runs:`));
      assert.equal(keys.length, 1);
      assert.match(keys[0], new RegExp(`^${p}[0-9a-f]{64}:order-1$`), 'identity hashed, then the key');
      assert.ok(!keys[0].includes('user-7'), 'the identity is not stored in clear');
      const scope = createHmac('sha256', secret).update('user-7').digest('hex');
      assert.equal(keys[0], `${p}${scope}:order-1`, 'the scope is HMAC-SHA-256(secret, identity)');
      assert.notEqual(scope, createHash('sha256').update('user-7').digest('hex'), 'not a plain hash');
      const ttl = await client.pTTL(keys[0]);
      assert.ok(ttl > 55_000 && ttl <= 60_000, `TTL ${ttl}`);
      const value = await client.get(keys[0]);
      assert.ok(!/set-cookie|s3cr3t/i.test(value), `no cookie in ${value}`);
      const record = JSON.parse(value);
      assert.equal(record.state, 'completed');
      assert.equal(Buffer.from(record.response.body, 'base64').toString(), 'ok');
      assert.deepEqual(record.response.headers.filter(([name]) => name === 'x-kept'), [['x-kept', 'yes']]);
    });
  });

  test('RedisStore: a slow handler\'s lock is renewed in Redis (PX lockTimeoutMs again and again, same token)', { timeout: 30_000 }, async () => {
    const p = prefix();
    const started = deferred();
    const finish = deferred();
    const handler = idempotency(async () => {
      started.resolve();
      await finish.promise;
      return new Response('done');
    }, { store: new RedisStore({ client, prefix: p }), lockTimeoutMs: 1000 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const sent = send(server.url, { key });
      await holding(started.promise, sent);
      const redisKey = `${p}-:${key}`;
      const lock = JSON.parse(await client.get(redisKey));
      assert.equal(lock.state, 'in-progress');
      const firstTtl = await client.pTTL(redisKey);
      assert.ok(firstTtl > 0 && firstTtl <= 1000, `PTTL ${firstTtl}`);
      await sleep(2500); // 2.5 lifetimes of the first lock
      const renewed = JSON.parse(await client.get(redisKey));
      assert.equal(renewed?.state, 'in-progress', 'the lock is still there');
      assert.equal(renewed.token, lock.token, 'held by the same holder');
      assert.ok(renewed.lockExpiresAt > lock.lockExpiresAt + 1500, 'with a later expiry');
      const ttl = await client.pTTL(redisKey);
      assert.ok(ttl > 0 && ttl <= 1000, `PTTL ${ttl}`);
      finish.resolve();
      assert.equal(await (await sent).text(), 'done');
      assert.equal(JSON.parse(await client.get(redisKey)).state, 'completed');
    });
  });

  test('RedisStore: a malformed value in Redis: the store rejects with a TypeError, idempotency answers 503', async () => {
    const p = prefix();
    await client.set(`${p}-:broken`, 'not json');
    const store = new RedisStore({ client, prefix: p });
    await assert.rejects(store.acquire('-:broken', { state: 'in-progress', token: 't', fingerprint: 'f', lockExpiresAt: 0 }, 1000), {
      name: 'TypeError',
      message: /not a JSON idempotency record/,
    });
    // JSON that is no record, `null` above all (it would read as "the lock is taken"), is one.
    for (const [i, value] of ['null', '5', '"in-progress"', '[]'].entries()) {
      await client.set(`${p}-:json-${i}`, value);
      await assert.rejects(store.acquire(`-:json-${i}`, { state: 'in-progress', token: 't', fingerprint: 'f', lockExpiresAt: 0 }, 1000), {
        name: 'TypeError',
        message: /not a JSON idempotency record/,
      }, value);
    }
    const told = [];
    let runs = 0;
    const handler = idempotency(async () => (runs++, new Response('ran')), { store, onStoreError: (e, op) => told.push([op, e.name]) });
    await withServer(handler, async (server) => {
      await problemOf(await send(server.url, { key: 'broken' }), 503, 'idempotency-store-unavailable', { retryAfter: true });
      assert.equal(runs, 0);
      assert.deepEqual(told, [['acquire', 'TypeError']]);
    });
  });

  test('RedisStore: Redis unreachable (a closed client): 503 problem with Retry-After: 1, the handler does not run', async () => {
    const down = await connect();
    const store = new RedisStore({ client: down, prefix: prefix() });
    down.destroy();
    const told = [];
    let runs = 0;
    const handler = idempotency(async () => (runs++, new Response('ran')), { store, onStoreError: (e, op) => told.push(op) });
    await withServer(handler, async (server) => {
      const problem = await problemOf(await send(server.url, { key: newKey() }), 503, 'idempotency-store-unavailable', { retryAfter: true });
      assert.match(problem.detail, /not processed/);
      assert.equal(runs, 0);
      assert.deepEqual(told, ['acquire']);
    });
  });
}

test('RedisStore: bad options are TypeErrors naming the option and the value', () => {
  assert.throws(() => new RedisStore(), { name: 'TypeError', message: 'RedisStore: invalid option "options": got undefined; expected an object { client, prefix?, runRetentionMs? }' });
  assert.throws(() => new RedisStore({}), { name: 'TypeError', message: /RedisStore: invalid option "client": got undefined; expected a connected node-redis client/ });
  assert.throws(() => new RedisStore({ client: 'redis://x' }), { name: 'TypeError', message: /invalid option "client": got "redis:\/\/x"/ });
  const fake = { set: async () => 'OK', get: async () => null, eval: async () => 1 };
  assert.throws(() => new RedisStore({ client: fake, prefix: 3 }), { name: 'TypeError', message: 'RedisStore: invalid option "prefix": got 3; expected a string' });
  assert.equal(new RedisStore({ client: fake }).prefix, 'idem:');
});

/** A redis-server of a test's own on a free port (`args(dir)` added): its URL, the process, `connect(client)` (retried while it starts) and `stop()`. */
/** Count the `release` calls of `store` that found the caller's lock (a lock given back). */
function countReleases(store) {
  const release = store.release.bind(store);
  const counted = { n: 0 };
  store.release = async (...args) => ((await release(...args)) && counted.n++, true);
  return counted;
}

async function ownRedis(args, dirPrefix) {
  const { spawn } = await import('node:child_process');
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const net = await import('node:net');
  const port = await new Promise((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port: p } = probe.address();
      probe.close(() => resolve(p));
    });
  });
  const dir = mkdtempSync(join(tmpdir(), dirPrefix));
  const start = () => spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', ...args(dir)], { stdio: 'ignore' });
  const server = start();
  let restarted;
  /** Connect `client` (retried while the server starts). */
  const connect = async (client) => {
    for (let i = 0; ; i++) {
      try {
        await client.connect();
        return client;
      } catch (error) {
        if (i > 50) throw error;
        await sleep(100);
      }
    }
  };
  /** Start it again on its port, empty (after the test killed it). */
  const restart = () => {
    restarted = start();
  };
  /** Kill it (and its restart) and remove its directory. */
  const stop = async () => {
    restarted?.kill('SIGKILL');
    if (server.exitCode === null && server.signalCode === null) {
      server.kill('SIGKILL');
      await new Promise((resolve) => server.once('exit', resolve));
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return { url: `redis://127.0.0.1:${port}`, server, connect, restart, stop };
}

test('RedisStore on a Redis Cluster (one node holding every slot; the default prefix): each script touches one key, so keyed requests are served and replayed, and the secret is checked', { skip, timeout: 60_000 }, async () => {
  const { url: nodeUrl, connect, stop } = await ownRedis((dir) => ['--cluster-enabled', 'yes', '--cluster-config-file', `${dir}/nodes.conf`], 'rf-cluster-');
  const port = new URL(nodeUrl).port;
  let cluster;
  try {
    const admin = createClient({ url: nodeUrl });
    admin.on('error', () => {});
    await connect(admin);
    await admin.sendCommand(['CLUSTER', 'ADDSLOTSRANGE', '0', '16383']);
    for (let i = 0; !/cluster_state:ok/.test(await admin.sendCommand(['CLUSTER', 'INFO'])); i++) {
      assert.ok(i < 100, 'the cluster did not come up');
      await sleep(100);
    }
    await admin.quit();
    cluster = createCluster({ rootNodes: [{ url: `redis://127.0.0.1:${port}` }] });
    cluster.on('error', () => {});
    await cluster.connect();
    let runs = 0;
    const errors = [];
    const handler = idempotency(async () => new Response(`paid ${++runs}`, { status: 201 }), {
      store: new RedisStore({ client: cluster }),
      onStoreError: (error) => errors.push(error.message),
    });
    const pay = () => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': 'order-1', Authorization: 'Bearer u1' }, body: '{}' }));
    assert.equal((await pay()).status, 201);
    const replay = await pay();
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(await replay.text(), 'paid 1');
    // A lost secret is put back there too.
    const secret = await cluster.get('idem:secret');
    await cluster.del('idem:secret');
    await pay();
    assert.equal(await cluster.get('idem:secret'), secret);
    assert.deepEqual(errors, []);
    assert.equal(runs, 1);
  } finally {
    await cluster?.quit().catch(() => {});
    await stop();
  }
});

test('RedisStore restarted (killed, empty) as a keyed handler ends: the answer goes out unkept (X-Should-Retry: false), the storing goes on behind it, and once Redis is back a repeat gets the answer, not a second run', { skip, timeout: 60_000 }, async () => {
  const { server, url: ownUrl, connect, restart, stop } = await ownRedis(() => [], 'rf-restarted-');
  const client = createClient({ url: ownUrl, disableOfflineQueue: true });
  client.on('error', () => {});
  try {
    await connect(client);
    let runs = 0;
    const told = [];
    const handler = idempotency(async () => {
      runs++;
      await sleep(300);
      return Response.json({ run: runs }, { status: 201 });
    }, { store: new RedisStore({ client }), identity: false, lockTimeoutMs: 6_000, onStoreError: (error, operation) => told.push(operation) });
    const pay = (key) => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{"amount":10}' }));
    await pay(newKey()); // the store's secret read
    runs = 0;
    const key = newKey();
    const answer = pay(key);
    await sleep(150);
    server.kill('SIGKILL'); // no persistence: it comes back empty
    await new Promise((resolve) => server.once('exit', resolve));
    const first = await answer;
    assert.equal(first.status, 201);
    assert.equal(first.headers.get('x-should-retry'), 'false', 'unkept when answered');
    assert.ok(told.includes('complete'), JSON.stringify(told));
    restart();
    // The client reconnects; the storing behind the answer takes the (lost) key again and stores.
    for (let i = 0; ; i++) {
      assert.ok(i < 100, 'the answer was never kept');
      await sleep(100);
      if (!client.isReady) continue;
      const value = await client.get(`idem:-:${key}`).catch(() => null);
      if (value && JSON.parse(value).state === 'completed') break;
    }
    const repeat = await pay(key);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await repeat.json(), { run: 1 });
    assert.equal(runs, 1, 'the handler ran once');
  } finally {
    await client.quit().catch(() => {});
    await stop();
  }
});

test('RedisStore down, its client queueing commands (node-redis\'s offline queue, the default): storeTimeoutMs answers 503, and the shed requests\' queued commands are dropped, so no lock is taken for them when Redis is back', { skip, timeout: 60_000 }, async () => {
  const { server, url: ownUrl, connect, restart, stop } = await ownRedis(() => [], 'rf-queued-');
  const client = createClient({ url: ownUrl }); // the offline queue on
  client.on('error', () => {});
  try {
    await connect(client);
    const store = new RedisStore({ client });
    const givenBack = countReleases(store);
    let runs = 0;
    const handler = idempotency(async () => Response.json({ run: ++runs }, { status: 201 }), { store, identity: false, storeTimeoutMs: 300, onStoreError: () => {} });
    const pay = (key) => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{"amount":10}' }));
    await pay(newKey()); // the store's secret read
    runs = 0;
    server.kill('SIGKILL');
    await new Promise((resolve) => server.once('exit', resolve));
    const keys = [newKey(), newKey()];
    for (const res of await Promise.all(keys.map(pay))) assert.equal(res.status, 503);
    restart();
    for (let i = 0; !client.isReady; i++) {
      assert.ok(i < 100, 'the client did not reconnect');
      await sleep(100);
    }
    await sleep(200);
    assert.equal(await client.exists(keys.map((k) => `idem:-:${k}`)), 0, 'no lock taken for a shed request');
    assert.equal(givenBack.n, 0, 'nothing taken, nothing to give back');
    const retry = await pay(keys[0]);
    assert.equal(retry.status, 201);
    assert.equal(runs, 1);
  } finally {
    await client.quit().catch(() => {});
    await stop();
  }
});

test('RedisStore stopped (SIGSTOP) before the handler runs: storeTimeoutMs answers 503 with Retry-After, nothing run; once Redis is back the lock taken late is given back and the retry runs once', { skip, timeout: 60_000 }, async () => {
  const { server, url: ownUrl, connect, stop } = await ownRedis(() => [], 'rf-stalled-');
  const client = createClient({ url: ownUrl, disableOfflineQueue: true });
  client.on('error', () => {});
  try {
    await connect(client);
    let runs = 0;
    const told = [];
    const store = new RedisStore({ client });
    const givenBack = countReleases(store); // the late locks' own
    const handler = idempotency(async () => Response.json({ run: ++runs }, { status: 201 }), {
      store, identity: false, storeTimeoutMs: 300,
      onStoreError: (error, operation) => told.push(`${operation} ${error.name}`),
    });
    const pay = (key) => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{"amount":10}' }));
    await pay(newKey()); // the store's secret read
    runs = 0;
    const key = newKey();
    process.kill(server.pid, 'SIGSTOP');
    let stopped = true;
    try {
      // The SET NX is written and waits in the stopped server; the request does not.
      const other = newKey();
      const shed = await Promise.all([pay(key), pay(other)]);
      for (const res of shed) {
        assert.equal(res.status, 503);
        assert.equal(res.headers.get('retry-after'), '1');
      }
      assert.deepEqual(told, ['acquire TimeoutError', 'acquire TimeoutError']);
      process.kill(server.pid, 'SIGCONT');
      stopped = false;
      // Redis runs the queued SET NX: the key is taken for the request answered 503, and given back.
      for (let i = 0; givenBack.n < 2; i++) {
        assert.ok(i < 100, `the locks taken late were not given back (${givenBack.n} of 2)`);
        await sleep(20);
      }
      assert.equal(await client.exists([`idem:-:${key}`, `idem:-:${other}`]), 0);
      const retry = await pay(key);
      assert.equal(retry.status, 201);
      assert.deepEqual(await retry.json(), { run: 1 });
      const replay = await pay(key);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await replay.json(), { run: 1 });
      assert.equal(runs, 1, 'the handler ran once, for the retry');
    } finally {
      if (stopped) process.kill(server.pid, 'SIGCONT');
    }
  } finally {
    await client.quit().catch(() => {});
    await stop();
  }
});

test('RedisStore stopped (SIGSTOP) past the lease while a keyed handler runs and a retry of its key waits in the same process: the retry gives the lapsed key back, the handler runs once, its answer is stored', { skip, timeout: 60_000 }, async () => {
  // A Redis of its own, to be stopped without stopping the other tests' one.
  const { server, url: ownUrl, connect, stop } = await ownRedis(() => [], 'rf-paused-');
  const client = createClient({ url: ownUrl, disableOfflineQueue: true });
  client.on('error', () => {});
  try {
    await connect(client);
    let runs = 0;
    const handler = idempotency(async () => {
      runs++;
      await sleep(1_000);
      return Response.json({ run: runs }, { status: 201 });
    }, { store: new RedisStore({ client }), identity: false, lockTimeoutMs: 1500, onStoreError: () => {} });
    const pay = (key) => handler(new Request('http://api.test/pay', { method: 'POST', headers: { 'Idempotency-Key': key }, body: '{"amount":10}' }));
    await pay(newKey()); // the store's secret read
    runs = 0;
    const key = newKey();
    const first = pay(key);
    await sleep(100);
    process.kill(server.pid, 'SIGSTOP');
    let stopped = true;
    try {
      await sleep(100);
      const retry = pay(key); // its acquire queues behind the pause, ahead of the holder's renewal
      await sleep(4_000); // past the lease on Redis's clock
      process.kill(server.pid, 'SIGCONT');
      stopped = false;
      const [a, r] = await Promise.all([first, retry]);
      assert.equal(a.status, 201);
      assert.deepEqual(await a.json(), { run: 1 });
      assert.equal(a.headers.get('x-should-retry'), null, 'stored: nothing to refuse');
      assert.ok(r.status === 409 || r.headers.get('idempotent-replayed') === 'true', `the retry: ${r.status}`);
      const later = await pay(key);
      assert.equal(later.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await later.json(), { run: 1 });
      assert.equal(runs, 1, 'the handler ran once');
    } finally {
      if (stopped) process.kill(server.pid, 'SIGCONT');
    }
  } finally {
    await client.quit().catch(() => {});
    await stop();
  }
});
