// The idempotency scenarios with RedisStore against a real redis-server (scripts/test.sh starts
// one and passes its URL in RETRY_FETCH_REDIS_URL), and two server instances sharing it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from 'redis';
import { idempotency, RedisStore } from 'retry-fetch/server';
import { storeScenarios } from './scenarios.mjs';
import { serve, withServer, send, snapshot, newKey } from './support.mjs';

const url = process.env.RETRY_FETCH_REDIS_URL;
const skip = url ? false : 'RETRY_FETCH_REDIS_URL is not set (scripts/test.sh server starts a redis-server)';

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
  await Promise.all(clients.map((c) => c.quit()));
});

// Every store gets a prefix of its own, so the scenarios never see each other's keys.
const prefix = () => `idem:test-${crypto.randomUUID()}:`;

if (skip) {
  test('RedisStore', { skip }, () => {});
} else {
  storeScenarios('RedisStore', () => new RedisStore({ client, prefix: prefix() }));

  test('RedisStore: two server instances, each with its own client, share one Redis: the handler runs once', async () => {
    const shared = prefix();
    let runs = 0;
    const app = async () => {
      const instances = [];
      for (let i = 0; i < 2; i++) {
        const handler = idempotency(async () => {
          const run = ++runs;
          await new Promise((resolve) => setTimeout(resolve, 150));
          return Response.json({ run, instance: i });
        }, { store: new RedisStore({ client: await connect(), prefix: shared }) });
        instances.push(await serve(handler));
      }
      return instances;
    };
    const [a, b] = await app();
    try {
      const key = newKey();
      const [ra, rb] = await Promise.all([send(a.url, { key }), send(b.url, { key })]);
      assert.equal(runs, 1);
      const [sa, sb] = [await snapshot(ra), await snapshot(rb)];
      assert.deepEqual(sa, sb, 'both instances answer with the one response');
      assert.deepEqual([ra, rb].map((r) => r.headers.get('idempotent-replayed')).sort(), ['true', null].sort());
      // A later retry to either instance replays it.
      const later = await send(b.url, { key });
      assert.equal(later.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(JSON.parse((await snapshot(later)).body), JSON.parse(sa.body));
      assert.equal(runs, 1);
    } finally {
      await a.close();
      await b.close();
    }
  });

  test('RedisStore: keys, TTLs and values in Redis', async () => {
    const p = prefix();
    const store = new RedisStore({ client, prefix: p });
    assert.equal(store.prefix, p);
    const handler = idempotency(async () => new Response('ok'), { store, ttlMs: 60_000, identity: () => 'user-7' });
    await withServer(handler, async (server) => {
      await (await send(server.url, { key: 'order-1' })).text();
      const keys = await client.keys(`${p}*`);
      assert.equal(keys.length, 1);
      assert.match(keys[0], new RegExp(`^${p}[0-9a-f]{64}:order-1$`), 'identity hashed, then the key');
      assert.ok(!keys[0].includes('user-7'), 'the identity is not stored in clear');
      const ttl = await client.pTTL(keys[0]);
      assert.ok(ttl > 55_000 && ttl <= 60_000, `TTL ${ttl}`);
      const record = JSON.parse(await client.get(keys[0]));
      assert.equal(record.state, 'completed');
      assert.equal(Buffer.from(record.response.body, 'base64').toString(), 'ok');
    });
  });

  test('RedisStore: a malformed value in Redis is an error, not a replay', async () => {
    const p = prefix();
    await client.set(`${p}-:broken`, 'not json');
    const store = new RedisStore({ client, prefix: p });
    await assert.rejects(store.acquire('-:broken', { state: 'in-progress', token: 't', fingerprint: 'f', lockExpiresAt: 0 }, 1000), {
      name: 'TypeError',
      message: /not a JSON idempotency record/,
    });
  });
}

test('RedisStore: bad options are TypeErrors naming the option and the value', () => {
  assert.throws(() => new RedisStore(), { name: 'TypeError', message: 'RedisStore: invalid option "options": got undefined; expected an object { client, prefix? }' });
  assert.throws(() => new RedisStore({}), { name: 'TypeError', message: /RedisStore: invalid option "client": got undefined; expected a connected node-redis client/ });
  assert.throws(() => new RedisStore({ client: 'redis://x' }), { name: 'TypeError', message: /invalid option "client": got "redis:\/\/x"/ });
  const fake = { set: async () => 'OK', get: async () => null, eval: async () => 1 };
  assert.throws(() => new RedisStore({ client: fake, prefix: 3 }), { name: 'TypeError', message: 'RedisStore: invalid option "prefix": got 3; expected a string' });
  assert.equal(new RedisStore({ client: fake }).prefix, 'idem:');
});
