// Soak: 1,000 payments through the worst network there is for a payment, the ambiguous one.
// The server charges, then the connection dies before the answer leaves; the
// client cannot tell whether it was charged and retries. `retryFetch` (the package, in Node)
// sends the same Idempotency-Key on every attempt, and the server's charge handler is wrapped
// by the package's idempotency companion, so the retry gets the stored answer:
//
//   - every payment's first attempt is charged, then its connection is destroyed;
//   - every fourth payment's second attempt is answered from the store, then dropped too;
//   - 100 more payments are double-submitted: two concurrent calls with one key (the
//     companion's lock makes the second wait for the first).
//
// Expected: every call succeeds, exactly one charge per payment, 0 duplicates, and each call's
// chargeId is the charge in the ledger. Once with MemoryStore, once with RedisStore (the Redis
// URL from REDIS_URL; skipped with a message when it is unset). Bounded: 50 calls at a time,
// millisecond backoff, every attempt with a timeout, the server on 127.0.0.1 only.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { AsyncLocalStorage } from 'node:async_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { retryFetch } from '../../pkg/index.node.js';
import { idempotency, MemoryStore, RedisStore, toNodeHandler } from '../../pkg/server.js';
import { pool } from '../crash/harness.mjs';
import { REDIS_URL, needs } from '../support/services.mjs';

const PAYMENTS = 1000;
const DOUBLE_SUBMITS = 100;
const CONCURRENCY = 50;
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const POLICY = {
  maxAttempts: 6,
  baseDelayMs: 5,
  maxDelayMs: 50,
  jitter: 'full',
  timeoutMs: 10_000, // per attempt: nothing here may hang the soak
  deadlineMs: 30_000,
  // Every payment's first attempt fails here by design: to the default retry budget that is
  // a sustained failure of this origin, which it would (rightly) stop retrying into. The soak
  // is about exactly-once through retries, so it retries freely.
  budget: false,
};

/**
 * A payments server on 127.0.0.1: a charge handler behind the companion, a ledger, and the
 * faults above. Resolves with `{ url, ledger, requests, close() }`.
 */
async function startPaymentServer(store) {
  const ledger = []; // { id, key, amount }
  const requests = new Map(); // Idempotency-Key -> requests received
  const context = new AsyncLocalStorage(); // { req, n } of the request being handled
  let replayDrops = 0;
  let seq = 0;

  // The protected handler: it charges, and on a payment's first attempt the connection dies
  // right after the charge, before the answer is written.
  const charge = async (request) => {
    const { amount } = await request.json();
    await sleep(1 + (seq % 3)); // some work, so that concurrent duplicates really overlap
    const entry = { id: `ch_${++seq}`, key: request.headers.get('idempotency-key'), amount };
    ledger.push(entry);
    const ctx = context.getStore();
    if (ctx.n === 1) ctx.req.socket.destroy();
    return Response.json({ chargeId: entry.id, amount }, { status: 201 });
  };
  const storeErrors = [];
  const protectedCharge = idempotency(charge, { store, onStoreError: (e, op) => storeErrors.push(`${op}: ${e?.message ?? e}`) });

  // Around the companion, as a proxy would: some answers (replays included) are lost too.
  const node = toNodeHandler(async (request) => {
    const response = await protectedCharge(request);
    const { req, n } = context.getStore();
    if (n === 2 && replayDrops++ % 4 === 0) req.socket.destroy();
    return response;
  }, { onError: (e) => { if (e?.name !== 'AbortError') console.error('soak server:', e); } });

  const server = http.createServer((req, res) => {
    const key = req.headers['idempotency-key'] ?? '';
    const n = (requests.get(key) ?? 0) + 1;
    requests.set(key, n);
    context.run({ req, n }, () => node(req, res));
  });
  const sockets = new Set();
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}/api/payments`,
    ledger,
    requests,
    storeErrors,
    close: () => new Promise((done) => {
      server.close(() => done());
      for (const s of sockets) s.destroy();
    }),
  };
}

/** One payment: a retryFetch POST; resolves with what the client saw. */
async function pay(url, amount, key) {
  const keys = new Set();
  let retries = 0;
  const res = await retryFetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ amount, currency: 'EUR' }),
  }, {
    ...POLICY,
    idempotencyKey: key ?? 'auto',
    onRetry: (info) => { retries++; keys.add(info.idempotencyKey); },
  });
  const body = await res.json();
  return { status: res.status, replayed: res.headers.get('idempotent-replayed') === 'true', body, keys: [...keys], retries };
}

/** Checks the ledger: one charge per key, `expected` charges, no duplicates. */
function assertExactlyOnce(ledger, expected) {
  const byKey = new Map();
  for (const c of ledger) byKey.set(c.key, [...(byKey.get(c.key) ?? []), c]);
  const duplicates = [...byKey].filter(([, charges]) => charges.length > 1);
  assert.equal(duplicates.length, 0, `duplicate charges: ${JSON.stringify(duplicates.slice(0, 3))}`);
  assert.equal(ledger.length, expected, 'charges in the ledger');
  return new Map([...byKey].map(([key, [charge]]) => [key, charge]));
}

async function soak(store, label) {
  const server = await startPaymentServer(store);
  const started = performance.now();
  try {
    // 1,000 payments, each one through a dropped connection after its charge.
    const amounts = Array.from({ length: PAYMENTS }, (_, i) => 100 + i);
    const results = await pool(amounts.map((amount) => () => pay(server.url, amount)), CONCURRENCY);

    const failed = results.filter((r) => r.status !== 201);
    assert.equal(failed.length, 0, `calls that did not succeed: ${JSON.stringify(failed.slice(0, 3))}`);
    const charges = assertExactlyOnce(server.ledger, PAYMENTS);
    const keys = new Set();
    for (const [i, r] of results.entries()) {
      assert.equal(r.keys.length, 1, 'one key on every attempt of a call');
      const [key] = r.keys;
      assert.match(key, UUID_V4);
      keys.add(key);
      assert.ok(r.retries >= 1, 'the first attempt was dropped, so the call retried');
      assert.ok(r.replayed, 'the answer that reached the client is the stored one');
      const charge = charges.get(key);
      assert.ok(charge, `a charge for the key of payment ${i}`);
      assert.equal(r.body.chargeId, charge.id, 'the client got the id of the real charge');
      assert.equal(charge.amount, amounts[i]);
      assert.ok(server.requests.get(key) >= 2);
    }
    assert.equal(keys.size, PAYMENTS, 'a fresh key per payment');
    const attempts = results.reduce((sum, r) => sum + r.retries + 1, 0);
    assert.ok(attempts >= PAYMENTS * 2 + PAYMENTS / 4 - 1, `attempts ${attempts}`);

    // Double submits: two concurrent calls with one key (a double click, two tabs).
    const before = server.ledger.length;
    const doubles = await pool(Array.from({ length: DOUBLE_SUBMITS }, (_, i) => async () => {
      const key = crypto.randomUUID();
      const pair = await Promise.all([pay(server.url, 5000 + i, key), pay(server.url, 5000 + i, key)]);
      return { key, pair };
    }), CONCURRENCY / 2);
    const after = server.ledger.slice(before);
    const doubleCharges = assertExactlyOnce(after, DOUBLE_SUBMITS);
    for (const { key, pair } of doubles) {
      assert.deepEqual(pair.map((r) => r.status), [201, 201]);
      assert.equal(pair[0].body.chargeId, pair[1].body.chargeId, 'both calls answered with the one charge');
      assert.equal(doubleCharges.get(key).id, pair[0].body.chargeId);
    }

    assert.deepEqual(server.storeErrors, [], 'the store never failed');
    const seconds = (performance.now() - started) / 1000;
    const requests = [...server.requests.values()].reduce((a, b) => a + b, 0);
    console.log(`# soak ${label}: ${PAYMENTS} payments + ${DOUBLE_SUBMITS} double submits, ${requests} requests, ${server.ledger.length} charges, 0 duplicates, ${seconds.toFixed(1)} s`);
  } finally {
    await server.close();
  }
}

test(`MemoryStore: ${PAYMENTS} payments through "charge, then drop", exactly ${PAYMENTS} charges`, { timeout: 120_000 }, async () => {
  await soak(new MemoryStore(), 'MemoryStore');
});

const redisSkip = needs('REDIS_URL');

let redis = null;
after(async () => { await redis?.close().catch(() => redis.destroy()); });

test(`RedisStore: ${PAYMENTS} payments through "charge, then drop", exactly ${PAYMENTS} charges`, { timeout: 120_000, skip: redisSkip }, async () => {
  const { createClient } = await import('redis');
  redis = createClient({ url: REDIS_URL, socket: { connectTimeout: 5_000, reconnectStrategy: false } });
  redis.on('error', () => {}); // surfaced by the failing command instead
  await redis.connect();
  const prefix = `retry-fetch-soak:${process.pid}:${Date.now()}:`;
  try {
    await soak(new RedisStore({ client: redis, prefix }), 'RedisStore');
    let stored = 0;
    // (the run history's streams, <prefix>runs:<key>, and the store's secret, read when the
    // handler is made, are not records)
    for await (const keys of redis.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) stored += keys.filter((k) => !k.startsWith(`${prefix}runs:`) && k !== `${prefix}secret`).length;
    assert.equal(stored, PAYMENTS + DOUBLE_SUBMITS, 'one record per key in Redis');
  } finally {
    for await (const keys of redis.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
      if (keys.length) await redis.del(keys);
    }
  }
});
