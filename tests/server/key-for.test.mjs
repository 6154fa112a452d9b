// `ctx.keyFor(name)` is the same on every retry and every instance, whatever the store and its
// secret: a restarted process (a new MemoryStore, whose secret is random), another store
// object, a RedisStore whose stored secret was lost all derive the same key for the same
// idempotency key, scope and name, so a payment provider that deduplicates on it never
// charges twice. Different scopes still get different keys.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { idempotency, idempotent, MemoryStore, RedisStore } from 'retry-fetch/server';
import { newKey, DERIVED_KEY } from './support.mjs';
import { REDIS_URL, needs } from '../support/services.mjs';

const redisSkip = needs('REDIS_URL');

/** The `ctx.keyFor(name)` a fresh `idempotency()` on `store` gives a POST with `headers`. */
async function keyForOn(store, headers, { name = 'charge', ...options } = {}) {
  let derived;
  const handler = idempotency(async (request, ctx) => {
    derived = ctx.keyFor(name);
    return new Response('ok', { status: 201 });
  }, { store, ...options });
  const response = await handler(new Request('http://x/pay', { method: 'POST', headers, body: '{"amount":100}' }));
  assert.equal(response.status, 201, await response.text());
  return derived;
}

test('keyFor: two MemoryStores (a restart) give the same key for the same key, credentials and name; another caller, another key', async () => {
  const key = newKey();
  const alice = { 'Idempotency-Key': key, Authorization: 'Bearer alice-token' };
  const bob = { 'Idempotency-Key': key, Authorization: 'Bearer bob-token' };
  const before = await keyForOn(new MemoryStore(), alice);
  const restarted = await keyForOn(new MemoryStore(), alice);
  assert.match(before, DERIVED_KEY);
  assert.equal(restarted, before, 'the same after a restart');
  assert.equal(await keyForOn(new MemoryStore(), alice, { secret: 'another secret, 16+ chars' }), before, 'the same whatever the secret');
  assert.notEqual(await keyForOn(new MemoryStore(), bob), before, 'another caller, another key');
  assert.notEqual(await keyForOn(new MemoryStore(), alice, { name: 'refund' }), before, 'another name, another key');
  assert.notEqual(await keyForOn(new MemoryStore(), { ...alice, 'Idempotency-Key': newKey() }), before, 'another key, another derived key');
  const unscoped = await keyForOn(new MemoryStore(), { 'Idempotency-Key': key }, { identity: false });
  assert.notEqual(unscoped, before, 'a scoped key and an unscoped one differ');
});

test('keyFor: with the identity option, the default store of two idempotency() instances gives the same key; another user, another key', async () => {
  const headers = { 'Idempotency-Key': newKey() };
  const as = (user) => ({ identity: () => user });
  const first = await keyForOn(undefined, headers, as('user-7'));
  assert.equal(await keyForOn(undefined, headers, as('user-7')), first);
  assert.notEqual(await keyForOn(undefined, headers, as('user-8')), first);
  // The identity is not sent in clear: the derived key is a UUID whatever the identity.
  assert.match(first, DERIVED_KEY);
});

test('keyFor: idempotent() jobs on two MemoryStores give the same key per scope, another scope another key', async () => {
  const run = (scope) => idempotent(async (input, ctx) => ctx.keyFor('charge'), { store: new MemoryStore(), key: (m) => m.id, scope });
  const message = { id: newKey() };
  const a = await run('shipments')(message);
  assert.equal(await run('shipments')(message), a);
  assert.notEqual(await run('refunds')(message), a);
});

const redisClients = [];
after(() => Promise.all(redisClients.map((c) => c.quit().catch(() => {}))));

test('keyFor: a RedisStore whose stored secret was lost still gives the same key', { skip: redisSkip }, async () => {
  const client = createClient({ url: REDIS_URL });
  client.on('error', () => {});
  await client.connect();
  redisClients.push(client);
  const prefix = `idem:keyfor-${newKey()}:`;
  const headers = { 'Idempotency-Key': newKey(), 'X-API-Key': 'alice' };
  const store = new RedisStore({ client, prefix });
  const before = await keyForOn(store, headers);
  const secret = await store.secret();
  await client.del(`${prefix}secret`);
  // A restart: the new secret scopes the key anew, so the retry runs the handler again.
  const restarted = new RedisStore({ client, prefix });
  assert.equal(await keyForOn(restarted, headers), before, 'the same key after the secret was lost');
  assert.notEqual(await restarted.secret(), secret, 'the store made a new secret');
  assert.match(before, DERIVED_KEY);
});

// A payment server (MemoryStore, the default) in a process of its own: it charges a provider
// that deduplicates on its Idempotency-Key (as Stripe does) with ctx.keyFor('charge'); with
// CRASH=1 it kills itself with SIGKILL after the charge, before its answer is stored.
const PAYMENT_SERVER = `
import http from 'node:http';
import { idempotency, toNodeHandler } from 'retry-fetch/server';
const handler = idempotency(async (request, ctx) => {
  const order = await request.json();
  const r = await fetch(process.env.PROVIDER, { method: 'POST', headers: { 'Idempotency-Key': ctx.keyFor('charge') }, body: JSON.stringify(order) });
  const charge = await r.json();
  if (process.env.CRASH === '1') process.kill(process.pid, 'SIGKILL');
  return Response.json(charge, { status: 201 });
});
const server = http.createServer(toNodeHandler(handler));
server.listen(0, '127.0.0.1', () => console.log(String(server.address().port)));
`;

/** Start the payment server; resolves with its process and URL once it listens. */
async function startPaymentServer(provider, crash) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', PAYMENT_SERVER], {
    cwd: fileURLToPath(new URL('.', import.meta.url)),
    env: { ...process.env, PROVIDER: provider, CRASH: crash ? '1' : '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.setEncoding('utf8');
  const port = await new Promise((resolve, reject) => {
    child.stdout.on('data', (chunk) => {
      out += chunk;
      if (out.includes('\n')) resolve(Number(out.trim()));
    });
    child.on('exit', (code, signal) => reject(new Error(`the payment server exited (${code ?? signal}) before it listened`)));
  });
  return { child, url: `http://127.0.0.1:${port}` };
}

test('keyFor: a payment server killed with SIGKILL after the charge and restarted charges the provider once', { timeout: 30_000 }, async () => {
  const charges = new Map();
  const provider = http.createServer((req, res) => {
    const key = req.headers['idempotency-key'];
    if (!charges.has(key)) charges.set(key, `ch_${charges.size + 1}`);
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ charge: charges.get(key) }));
  });
  await new Promise((resolve) => provider.listen(0, '127.0.0.1', resolve));
  const children = [];
  try {
    const providerUrl = `http://127.0.0.1:${provider.address().port}/charge`;
    const key = newKey();
    const pay = (url) => fetch(`${url}/pay`, {
      method: 'POST',
      headers: { 'Idempotency-Key': key, Authorization: 'Bearer alice-token', 'Content-Type': 'application/json' },
      body: '{"amount":100}',
    });
    const crashing = await startPaymentServer(providerUrl, true);
    children.push(crashing.child);
    const exited = once(crashing.child, 'exit');
    await assert.rejects(pay(crashing.url), 'the first instance dies before it answers');
    assert.deepEqual((await exited).slice(1), ['SIGKILL']);
    const restarted = await startPaymentServer(providerUrl, false);
    children.push(restarted.child);
    const retry = await pay(restarted.url);
    assert.equal(retry.status, 201);
    assert.deepEqual(await retry.json(), { charge: 'ch_1' }, 'the provider answered the repeat with its first charge');
    assert.equal(charges.size, 1, `one charge at the provider; keys: ${[...charges.keys()]}`);
    assert.match([...charges.keys()][0], DERIVED_KEY);
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    provider.closeAllConnections();
    await new Promise((resolve) => provider.close(resolve));
  }
});

test('identities and keyFor names that differ only in a lone surrogate stay apart (never one scope, never one key)', async () => {
  const store = new MemoryStore();
  let runs = 0;
  const h = idempotency(async (request, ctx) => {
    runs++;
    return Response.json({ user: request.headers.get('x-user'), a: ctx.keyFor('pay-\ud800'), b: ctx.keyFor('pay-\udbff'), c: ctx.keyFor('pay-\ufffd') });
  }, { store, identity: (request) => JSON.parse(request.headers.get('x-user')) });
  const call = (user) => h(new Request('http://localhost/pay', { method: 'POST', headers: { 'Idempotency-Key': 'same-key', 'x-user': user }, body: '' }));
  const a = await call('"user-\\ud800"');
  const b = await call('"user-\\udbff"');
  assert.equal(b.headers.get('idempotent-replayed'), null, 'the second caller got the first one\'s answer');
  assert.equal(runs, 2);
  const keys = await a.json();
  assert.equal(new Set([keys.a, keys.b, keys.c]).size, 3, `keyFor: ${JSON.stringify(keys)}`);
  // A well-formed identity hashes as before (its UTF-8): the same scope as an equal header-derived one.
  const again = await call('"user-\\ud800"');
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  // A job's scope likewise.
  const jobStore = new MemoryStore();
  const ran = [];
  for (const scope of ['tenant\ud800', 'tenant\udbff', 'tenant\ufffd']) {
    const job = idempotent(async () => ran.push(scope), { store: jobStore, scope, key: () => 'same-message' });
    await job({});
  }
  assert.equal(ran.length, 3, 'three scopes, three runs');
});
