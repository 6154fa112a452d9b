// The idempotency scenarios, run once per store (memory.test.mjs, redis.test.mjs): a real
// http server from toNodeHandler, real fetch, and the client package for the end-to-end check.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { idempotency, toNodeHandler } from 'retry-fetch/server';
import { retryFetch } from 'retry-fetch';
import { serve, withServer, send, snapshot, sleep, newKey } from './support.mjs';

/**
 * Wait until `started` resolves (the first run of a handler began, so its request holds the
 * key's lock); fail at once instead if the request `sent` settles before that (it never
 * reached the handler, and waiting would hang the test).
 */
async function holding(started, sent) {
  let running = false;
  await Promise.race([
    started.then(() => (running = true)),
    Promise.resolve(sent).then(async (outcome) => {
      if (running) return;
      const detail = outcome instanceof Response ? `${outcome.status} ${await outcome.text()}` : String(outcome);
      throw new Error(`the first request ended before its handler ran: ${detail}`);
    }),
  ]);
}

/**
 * Register the scenarios for one store kind. `makeStore()` returns a fresh, empty store.
 */
export function storeScenarios(label, makeStore) {
  const t = (name, fn) => test(`${label}: ${name}`, fn);

  // A payment endpoint that counts its runs; `delayMs` keeps it running for a while.
  // `firstRun` resolves when the first run starts: the wrapped handler runs only once the
  // request holds the key's lock, so a duplicate sent after it is certain to find the lock.
  const payments = (options = {}, { delayMs = 0, fail } = {}) => {
    let firstStarted;
    const firstRun = new Promise((resolve) => (firstStarted = resolve));
    const state = { runs: 0, bodies: [], firstRun };
    const handler = idempotency(async (request) => {
      const run = ++state.runs;
      if (run === 1) firstStarted();
      state.bodies.push(await request.text());
      if (delayMs) await sleep(delayMs);
      if (fail?.(run)) throw new Error(`payment provider down (run ${run})`);
      return Response.json({ charge: `ch_${run}`, run }, { status: 201, headers: { 'X-Run': String(run) } });
    }, { store: makeStore(), ...options });
    return { handler, state };
  };

  // A lock holder that dies, as far as the lock goes: the handler's first run hangs until
  // `unblock()`; the runs after it answer { run } at once (`state.startedAt`: when each run
  // began). `holdLock(url, key)` sends the first request and resolves once its run has
  // started, so it holds the lock (no head start by a sleep: a duplicate that took the lock
  // first would hang as run 1); it resolves with `abandon()`, which aborts that request,
  // lets its run finish and waits.
  const deadHolder = (options) => {
    let unblock;
    const blocked = new Promise((resolve) => (unblock = resolve));
    let firstStarted;
    const firstRun = new Promise((resolve) => (firstStarted = resolve));
    const state = { runs: 0, startedAt: [] };
    const handler = idempotency(async () => {
      const run = ++state.runs;
      state.startedAt.push(Date.now());
      if (run === 1) {
        firstStarted();
        await blocked;
      }
      return Response.json({ run });
    }, { store: makeStore(), ...options });
    const holdLock = async (url, key) => {
      const controller = new AbortController();
      const first = send(url, { key, signal: controller.signal }).catch((e) => e);
      await holding(firstRun, first);
      return async () => {
        controller.abort();
        unblock();
        await first;
      };
    };
    return { handler, state, unblock, holdLock };
  };

  t('two concurrent requests with one key: the handler runs once, both get its answer', async () => {
    const { handler, state } = payments({}, { delayMs: 150 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const [a, b] = await Promise.all([send(server.url, { key }), send(server.url, { key })]);
      assert.equal(state.runs, 1);
      const [sa, sb] = [await snapshot(a), await snapshot(b)];
      assert.deepEqual(sa, sb);
      assert.equal(sa.status, 201);
      assert.deepEqual(JSON.parse(sa.body), { charge: 'ch_1', run: 1 });
      const replayed = [a, b].map((r) => r.headers.get('idempotent-replayed'));
      assert.deepEqual(replayed.sort(), ['true', null].sort());
    });
  });

  t('a replay is byte-identical (status, status text, headers, body) plus Idempotent-Replayed: true', async () => {
    let runs = 0;
    const bytes = Uint8Array.from({ length: 512 }, (_, i) => (i * 7) % 256); // every byte value, not UTF-8
    const handler = idempotency(async () => {
      runs++;
      const headers = new Headers({ 'Content-Type': 'application/octet-stream', 'X-Charge': 'ch_1', ETag: '"v1"' });
      headers.append('Set-Cookie', 'a=1; Path=/');
      headers.append('Set-Cookie', 'b=2; Path=/');
      headers.append('Vary', 'Accept');
      headers.append('Vary', 'Origin');
      return new Response(bytes, { status: 202, statusText: 'Accepted For Charging', headers });
    }, { store: makeStore() });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = await send(server.url, { key });
      const replay = await send(server.url, { key });
      assert.equal(runs, 1);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      const [s1, s2] = [await snapshot(first), await snapshot(replay)];
      assert.deepEqual(s2, s1);
      assert.equal(s1.status, 202);
      assert.equal(s1.statusText, 'Accepted For Charging');
      assert.deepEqual([...s1.body], [...bytes]);
      assert.deepEqual(replay.headers.getSetCookie(), ['a=1; Path=/', 'b=2; Path=/']);
      assert.equal(replay.headers.get('vary'), 'Accept, Origin');
      assert.equal(replay.headers.get('etag'), '"v1"');
    });
  });

  t('a 204 and a 5xx answer are stored and replayed too', async () => {
    let runs = 0;
    const handler = idempotency(async (request) => {
      runs++;
      return new URL(request.url).pathname === '/empty'
        ? new Response(null, { status: 204 })
        : new Response('upstream failed after charging', { status: 502 });
    }, { store: makeStore() });
    await withServer(handler, async (server) => {
      const k1 = newKey();
      const k2 = newKey();
      for (let i = 0; i < 2; i++) {
        const empty = await send(server.url, { key: k1, path: '/empty' });
        assert.equal(empty.status, 204);
        assert.equal(await empty.text(), '');
        const failed = await send(server.url, { key: k2, path: '/fail' });
        assert.equal(failed.status, 502);
        assert.equal(await failed.text(), 'upstream failed after charging');
        assert.equal(failed.headers.get('idempotent-replayed'), i === 0 ? null : 'true');
      }
      assert.equal(runs, 2);
    });
  });

  t('the same key with another payload, path, query or method is a 422', async () => {
    const { handler, state } = payments();
    await withServer(handler, async (server) => {
      const key = newKey();
      assert.equal((await send(server.url, { key })).status, 201);
      for (const changed of [
        { body: '{"amount":9999,"currency":"EUR"}' },
        { path: '/refunds' },
        { path: '/payments?currency=USD' },
        { method: 'PUT' },
      ]) {
        const res = await send(server.url, { key, ...changed });
        assert.equal(res.status, 422, JSON.stringify(changed));
        assert.equal(res.headers.get('content-type'), 'application/problem+json');
        const problem = await res.json();
        assert.equal(problem.status, 422);
        assert.equal(problem.code, 'idempotency-key-reused');
        assert.equal(problem.title, 'Idempotency-Key is already used');
      }
      assert.equal(state.runs, 1);
      // The original request still replays.
      assert.equal((await send(server.url, { key })).headers.get('idempotent-replayed'), 'true');
    });
  });

  t('a stored response expires after ttlMs; the key then runs the handler again', async () => {
    const { handler, state } = payments({ ttlMs: 300 });
    await withServer(handler, async (server) => {
      const key = newKey();
      assert.equal((await (await send(server.url, { key })).json()).run, 1);
      const again = await send(server.url, { key });
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.equal((await again.json()).run, 1);
      await sleep(450);
      const after = await send(server.url, { key });
      assert.equal(after.headers.get('idempotent-replayed'), null);
      assert.equal((await after.json()).run, 2);
      assert.equal(state.runs, 2);
    });
  });

  t('a handler that throws stores nothing and releases the lock: a retry runs it again', async () => {
    const { handler, state } = payments({}, { fail: (run) => run === 1 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const failed = await send(server.url, { key });
      assert.equal(failed.status, 500, 'toNodeHandler answers a thrown error with 500');
      await failed.arrayBuffer();
      assert.match(String(server.errors[0]?.message), /payment provider down \(run 1\)/, 'the error propagates');
      const retried = await send(server.url, { key });
      assert.equal(retried.status, 201);
      assert.equal(retried.headers.get('idempotent-replayed'), null);
      assert.equal((await retried.json()).run, 2);
      assert.equal((await send(server.url, { key })).headers.get('idempotent-replayed'), 'true');
      assert.equal(state.runs, 2);
    });
  });

  t('a missing key is a 400 problem on POST and PATCH; other methods pass through', async () => {
    const { handler, state } = payments();
    await withServer(handler, async (server) => {
      for (const method of ['POST', 'PATCH']) {
        const res = await send(server.url, { method });
        assert.equal(res.status, 400, method);
        assert.equal(res.headers.get('content-type'), 'application/problem+json');
        const problem = await res.json();
        assert.equal(problem.code, 'idempotency-key-missing');
        assert.equal(problem.title, 'Idempotency-Key is missing');
        assert.match(problem.detail, new RegExp(`${method} /payments requires an Idempotency-Key header`));
      }
      assert.equal(state.runs, 0);
      assert.equal((await send(server.url, { method: 'GET' })).status, 201);
      assert.equal((await send(server.url, { method: 'PUT' })).status, 201);
      assert.equal(state.runs, 2);
    });
  });

  t('an invalid key is a 400 problem', async () => {
    const { handler, state } = payments();
    await withServer(handler, async (server) => {
      for (const key of ['', 'two words', 'k1, k2', 'k'.repeat(256), '"unterminated', '"bad\\escape"']) {
        const res = await send(server.url, { key });
        assert.equal(res.status, 400, JSON.stringify(key));
        const problem = await res.json();
        assert.equal(problem.code, 'idempotency-key-invalid');
      }
      assert.equal(state.runs, 0);
    });
  });

  t("concurrent: 'reject' answers the second request 409 while the first runs", async () => {
    const { handler, state } = payments({ concurrent: 'reject' }, { delayMs: 200 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = send(server.url, { key });
      await holding(state.firstRun, first);
      const second = await send(server.url, { key });
      assert.equal(second.status, 409);
      assert.equal(second.headers.get('retry-after'), '1');
      const problem = await second.json();
      assert.equal(problem.code, 'idempotency-key-in-progress');
      assert.equal((await first).status, 201);
      assert.equal(state.runs, 1);
      assert.equal((await send(server.url, { key })).headers.get('idempotent-replayed'), 'true');
    });
  });

  t("concurrent: 'wait' answers 409 when waitTimeoutMs runs out first", async () => {
    const { handler, state } = payments({ waitTimeoutMs: 100 }, { delayMs: 400 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = send(server.url, { key });
      await holding(state.firstRun, first);
      const started = Date.now();
      const second = await send(server.url, { key });
      assert.equal(second.status, 409);
      assert.ok(Date.now() - started >= 90, 'it waited');
      assert.equal((await first).status, 201);
      assert.equal(state.runs, 1);
    });
  });

  t('a lock whose holder died expires after lockTimeoutMs and the next request processes', async () => {
    const storeErrors = [];
    // One wrapped handler whose first run hangs: a holder that died, as far as the lock goes.
    const { handler, state, unblock, holdLock } = deadHolder({ lockTimeoutMs: 300, onStoreError: (e, op) => storeErrors.push(op) });
    const server = await serve(handler);
    try {
      const key = newKey();
      const abandon = await holdLock(server.url, key);
      // While the lock is live a second request waits; once it expires, it processes.
      const second = await send(server.url, { key });
      assert.equal(second.status, 200);
      assert.deepEqual(await second.json(), { run: 2 });
      const gap = state.startedAt[1] - state.startedAt[0];
      assert.ok(gap >= 250, `the second run waited for the lock to expire (${gap} ms after the first)`);
      // The late holder finishes: its response is not stored over the new one.
      await abandon();
      await sleep(50);
      assert.deepEqual(storeErrors, ['complete']);
      const third = await send(server.url, { key });
      assert.equal(third.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await third.json(), { run: 2 });
      assert.equal(state.runs, 2);
    } finally {
      unblock();
      await server.close();
    }
  });

  t('a lock whose holder died: a request after lockTimeoutMs processes at once (concurrent: reject)', async () => {
    const { handler, unblock, holdLock } = deadHolder({ lockTimeoutMs: 200, concurrent: 'reject', onStoreError: () => {} });
    const server = await serve(handler);
    try {
      const key = newKey();
      const abandon = await holdLock(server.url, key);
      assert.equal((await send(server.url, { key })).status, 409, 'the lock is live');
      await sleep(250);
      const next = await send(server.url, { key });
      assert.equal(next.status, 200);
      assert.deepEqual(await next.json(), { run: 2 });
      await abandon();
    } finally {
      unblock();
      await server.close();
    }
  });

  t('keys are scoped by identity: the same key from two users is two operations', async () => {
    const { handler, state } = payments({ identity: (request) => request.headers.get('X-User') ?? undefined });
    await withServer(handler, async (server) => {
      const key = newKey();
      const alice = await send(server.url, { key, headers: { 'X-User': 'alice' } });
      const bob = await send(server.url, { key, headers: { 'X-User': 'bob' } });
      assert.equal((await alice.json()).run, 1);
      assert.equal((await bob.json()).run, 2);
      assert.equal(bob.headers.get('idempotent-replayed'), null);
      // Bob may even send another payload under the same key.
      const bobOther = await send(server.url, { key: newKey(), headers: { 'X-User': 'bob' }, body: '{"amount":1}' });
      assert.equal(bobOther.status, 201);
      const aliceAgain = await send(server.url, { key, headers: { 'X-User': 'alice' } });
      assert.equal(aliceAgain.headers.get('idempotent-replayed'), 'true');
      assert.equal((await aliceAgain.json()).run, 1);
      const anonymous = await send(server.url, { key });
      assert.equal((await anonymous.json()).run, 4, 'no identity is a scope of its own');
      assert.equal(state.runs, 4);
    });
  });

  t('the sf-string key form ("abc", with escapes) is the same key as the plain form', async () => {
    const { handler, state } = payments();
    await withServer(handler, async (server) => {
      const key = `k-${newKey()}`;
      const plain = await send(server.url, { key });
      assert.equal(plain.status, 201);
      const quoted = await send(server.url, { key: `"${key}"` });
      assert.equal(quoted.headers.get('idempotent-replayed'), 'true');
      const escaped = await send(server.url, { key: '"a\\"b\\\\c"' });
      assert.equal(escaped.status, 201);
      const escapedPlain = await send(server.url, { key: 'a"b\\c' });
      assert.equal(escapedPlain.headers.get('idempotent-replayed'), 'true');
      assert.equal(state.runs, 2);
      // The client's idempotencyKeyFormat: 'sf-string' sends the quoted form.
      const viaClient = await retryFetch(`${server.url}/payments`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: '{"amount":4200,"currency":"EUR"}',
      }, { idempotencyKey: 'a"b\\c', idempotencyKeyFormat: 'sf-string' });
      assert.equal(viaClient.headers.get('idempotent-replayed'), 'true');
      assert.equal(state.runs, 2);
    });
  });

  t('retryFetch end to end: charge, then the connection drops before the answer; one charge', async () => {
    let charges = 0;
    const app = idempotency(async (request) => {
      const { amount } = await request.json();
      charges++;
      return Response.json({ charged: amount, charges });
    }, { store: makeStore() });
    const node = toNodeHandler(app, { onError: () => {} });
    let attempts = 0;
    const server = http.createServer((req, res) => {
      if (++attempts === 1) {
        // The handler runs and its response is stored; the socket dies before a byte is sent.
        res.writeHead = () => {
          req.socket.destroy();
          return res;
        };
      }
      node(req, res);
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${server.address().port}/charges`;
      const res = await retryFetch(url, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ amount: 4200 }),
      }, { baseDelayMs: 20, maxAttempts: 4 });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await res.json(), { charged: 4200, charges: 1 });
      assert.equal(attempts, 2);
      assert.equal(charges, 1, 'charged exactly once');
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  t('the owner token guards complete, release and reclaim', async () => {
    const store = makeStore();
    const lock = (token, ms = 1000) => ({ state: 'in-progress', token, fingerprint: 'f', lockExpiresAt: Date.now() + ms });
    const done = { state: 'completed', fingerprint: 'f', completedAt: Date.now(), response: { status: 200, statusText: '', headers: [], body: '' } };
    assert.equal(await store.acquire('k', lock('A', 150), 150), null);
    assert.equal((await store.acquire('k', lock('B'), 1000)).token, 'A');
    assert.equal(await store.complete('k', 'B', done, 1000), false);
    assert.equal(await store.release('k', 'B'), false);
    assert.equal(await store.reclaim('k', 'B', lock('C'), 1000), false);
    assert.equal(await store.reclaim('k', 'A', lock('C'), 1000), true, 'a takeover compares the stale token');
    assert.equal(await store.complete('k', 'A', done, 1000), false, 'the old holder lost the lock');
    assert.equal(await store.complete('k', 'C', done, 1000), true);
    assert.equal(await store.release('k', 'C'), false, 'a completed record is not a lock');
    assert.equal((await store.acquire('k', lock('D'), 1000)).state, 'completed');
    // A lock expires by itself after lockTimeoutMs.
    assert.equal(await store.acquire('k2', lock('E', 100), 100), null);
    await sleep(200);
    assert.equal(await store.acquire('k2', lock('F'), 1000), null);
    assert.equal(await store.release('k2', 'F'), true);
    assert.equal(await store.acquire('k2', lock('G'), 1000), null);
  });
}
