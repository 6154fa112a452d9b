// The idempotency scenarios, run once per store (memory.test.mjs, redis.test.mjs,
// postgres.test.mjs): a real http server from toNodeHandler, real fetch, and the client
// package for the end-to-end checks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { idempotency, toNodeHandler } from 'retry-fetch/server';
import { retryFetch } from 'retry-fetch';
import {
  serve,
  withServer,
  send,
  snapshot,
  sleep,
  newKey,
  deferred,
  problemOf,
  plantDeadLock,
  withoutRenew,
  spyStore,
  watchAcquires,
  isHeld,
  DERIVED_KEY,
} from './support.mjs';

/**
 * Wait until `started` resolves (the first run of a handler began, so its request holds the
 * key's lock); fail at once instead if the request `sent` settles before that (it never
 * reached the handler, and waiting would hang the test).
 */
export async function holding(started, sent) {
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
 * Register the scenarios for one store kind. `makeStore()` returns (or resolves with) a fresh,
 * empty store. `transactional`: the store is a PostgresStore-like one (`ctx.tx` is its
 * transaction; a key in progress elsewhere is `{ state: 'held' }`). The store protocol itself
 * (tokens, renew, expiry, reclaim) is checked once, on the stores directly, in stores.test.mjs;
 * these are the companion's scenarios on top of it.
 */
export function storeScenarios(label, makeStore, { transactional = false } = {}) {
  const t = (name, fn) => test(`${label}: ${name}`, { timeout: 60_000 }, fn);

  // A payment endpoint that counts its runs; `delayMs` keeps it running for a while, `fail(run)`
  // makes a run throw, `answer(run, request)` replaces its Response. It never reads `ctx`.
  // `state.firstRun` resolves when the first run starts: the wrapped handler runs only once the
  // request holds the key's lock, so a duplicate sent after it is certain to find the lock.
  const payments = async (options = {}, { delayMs = 0, fail, answer } = {}) => {
    const first = deferred();
    const state = { runs: 0, bodies: [], firstRun: first.promise };
    const handler = idempotency(async (request) => {
      const run = ++state.runs;
      if (run === 1) first.resolve();
      state.bodies.push(await request.text());
      if (delayMs) await sleep(delayMs);
      if (fail?.(run)) throw new Error(`payment provider down (run ${run})`);
      return answer?.(run, request) ?? Response.json({ charge: `ch_${run}`, run }, { status: 201, headers: { 'X-Run': String(run) } });
    }, { store: await makeStore(), ...options });
    return { handler, state };
  };

  // The same endpoint for the tests whose duplicates must overlap its first run: that run does
  // not return until the test calls `release()` (after the duplicates were seen to find the
  // key held: `watch.overlapped(n, requests)`), so no timing decides whether they overlapped.
  // `watch` records every acquire() answer (tests/server/support.mjs: watchAcquires).
  const blocking = async (options = {}) => {
    const started = deferred();
    const released = deferred();
    const watch = watchAcquires(await makeStore());
    const state = { runs: 0, firstRun: started.promise, releasedAt: null };
    const handler = idempotency(async (request) => {
      const run = ++state.runs;
      await request.text();
      if (run === 1) {
        started.resolve();
        await released.promise;
      }
      return Response.json({ charge: `ch_${run}`, run }, { status: 201, headers: { 'X-Run': String(run) } });
    }, { store: watch.store, ...options });
    const release = () => {
      state.releasedAt ??= Date.now();
      released.resolve();
    };
    return { handler, state, watch, release };
  };

  /**
   * What a duplicate that waited for the first run was told, token by token: the key held
   * (once or more, never free) until the first run's answer was stored, then that answer, not
   * before the first run was released.
   */
  const assertWaited = (watch, state, token) => {
    const answers = watch.waiting(token);
    assert.ok(answers.length >= 2, `the duplicate asked ${answers.length} time(s)`);
    assert.ok(answers.slice(0, -1).every((a) => isHeld(a.answer)), `until the answer, the key was held: ${JSON.stringify(answers.map((a) => a.answer?.state ?? null))}`);
    const last = answers.at(-1);
    assert.equal(last.answer?.state, 'completed', 'then it got the stored answer');
    assert.ok(last.at >= state.releasedAt, 'no earlier than the first run ended');
  };

  t('two concurrent requests with one key: the duplicate finds the key held, waits, and gets the one run\'s answer', async () => {
    const { handler, state, watch, release } = await blocking();
    await withServer(handler, async (server) => {
      const key = newKey();
      const sent = [send(server.url, { key }), send(server.url, { key })];
      await watch.overlapped(1, sent); // the first run holds the key until the other has found it held
      release();
      const [a, b] = await Promise.all(sent);
      assert.equal(state.runs, 1);
      const [sa, sb] = [await snapshot(a), await snapshot(b)];
      assert.deepEqual(sa, sb);
      assert.equal(sa.status, 201);
      assert.deepEqual(JSON.parse(sa.body), { charge: 'ch_1', run: 1 });
      const replayed = [a, b].map((r) => r.headers.get('idempotent-replayed'));
      assert.deepEqual(replayed.sort(), ['true', null].sort());
      const [duplicate] = watch.heldTokens();
      assertWaited(watch, state, duplicate);
    }).finally(release); // never leave the first run blocked, whatever failed
  });

  t('50 concurrent requests with one key: 49 find the key held while the one run goes on, wait, and get the replay', async () => {
    const { handler, state, watch, release } = await blocking();
    await withServer(handler, async (server) => {
      const key = newKey();
      const sent = Array.from({ length: 50 }, () => send(server.url, { key }));
      await watch.overlapped(49, sent);
      release();
      const responses = await Promise.all(sent);
      assert.equal(state.runs, 1);
      const snaps = await Promise.all(responses.map(snapshot));
      for (const s of snaps) assert.deepEqual(s, snaps[0]);
      assert.deepEqual(JSON.parse(snaps[0].body), { charge: 'ch_1', run: 1 });
      assert.equal(responses.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 49);
      const duplicates = watch.heldTokens();
      assert.equal(duplicates.size, 49);
      for (const token of duplicates) assertWaited(watch, state, token);
    }).finally(release); // never leave the first run blocked, whatever failed
  });

  t('a replay is byte-identical (status, status text, headers, body) but for Set-Cookie, never stored nor replayed', async () => {
    let runs = 0;
    const bytes = Uint8Array.from({ length: 512 }, (_, i) => (i * 7) % 256); // every byte value, not UTF-8
    const spy = spyStore(await makeStore());
    const handler = idempotency(async () => {
      runs++;
      const headers = new Headers({ 'Content-Type': 'application/octet-stream', 'X-Charge': 'ch_1', ETag: '"v1"' });
      headers.append('Set-Cookie', 'sid=fresh-session; Path=/; HttpOnly');
      headers.append('Set-Cookie', 'b=2; Path=/');
      headers.append('Vary', 'Accept');
      headers.append('Vary', 'Origin');
      return new Response(bytes, { status: 202, statusText: 'Accepted For Charging', headers });
    }, { store: spy.store });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = await send(server.url, { key });
      const replay = await send(server.url, { key });
      assert.equal(runs, 1);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      // The first answer carries the handler's cookies; the replay none.
      assert.deepEqual(first.headers.getSetCookie(), ['sid=fresh-session; Path=/; HttpOnly', 'b=2; Path=/']);
      assert.deepEqual(replay.headers.getSetCookie(), []);
      const [s1, s2] = [await snapshot(first), await snapshot(replay)];
      assert.deepEqual(s2, { ...s1, headers: s1.headers.filter(([name]) => name !== 'set-cookie') });
      assert.equal(s1.status, 202);
      assert.equal(s1.statusText, 'Accepted For Charging');
      assert.deepEqual([...s1.body], [...bytes]);
      assert.equal(replay.headers.get('vary'), 'Accept, Origin');
      assert.equal(replay.headers.get('etag'), '"v1"');
      // What the store was given holds no cookie.
      const completes = spy.calls.filter(([method]) => method === 'complete');
      assert.equal(completes.length, 1);
      const stored = completes[0][3].response;
      assert.deepEqual(stored.headers.filter(([name]) => name.toLowerCase() === 'set-cookie'), []);
      assert.ok(!JSON.stringify(stored).includes('fresh-session'), 'the session cookie is not in the stored record');
    });
  });

  t('a 204 and a 5xx answer are stored and replayed too', async () => {
    let runs = 0;
    const handler = idempotency(async (request) => {
      runs++;
      return new URL(request.url).pathname === '/empty'
        ? new Response(null, { status: 204 })
        : new Response('upstream failed after charging', { status: 502 });
    }, { store: await makeStore() });
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

  // The handler answers `?status=N` (with `Retry-After` when `&retryAfter=S`) on its first run
  // for each URL, then 201.
  const statusEndpoint = async () => {
    const runs = new Map();
    const handler = idempotency(async (request) => {
      const url = new URL(request.url);
      const n = (runs.get(url.search) ?? 0) + 1;
      runs.set(url.search, n);
      if (n > 1) return Response.json({ run: n }, { status: 201 });
      const headers = { 'X-Run': String(n) };
      if (url.searchParams.has('retryAfter')) headers['Retry-After'] = url.searchParams.get('retryAfter');
      return new Response(`status ${url.searchParams.get('status')}`, { status: Number(url.searchParams.get('status')), headers });
    }, { store: await makeStore() });
    return { handler, runs };
  };

  t('answers that mean "not processed" (408, 425, 429, 503 with Retry-After) are not stored: the key is freed', async () => {
    const { handler, runs } = await statusEndpoint();
    await withServer(handler, async (server) => {
      for (const search of ['?status=408', '?status=425', '?status=429', '?status=503&retryAfter=2']) {
        const key = newKey();
        const path = `/payments${search}`;
        const first = await send(server.url, { key, path });
        const status = Number(new URLSearchParams(search).get('status'));
        assert.equal(first.status, status, search);
        assert.equal(await first.text(), `status ${status}`);
        assert.equal(first.headers.get('idempotent-replayed'), null);
        if (status === 503) assert.equal(first.headers.get('retry-after'), '2', 'the handler\'s Retry-After reaches the client');
        // The retry with the same key runs the handler again, and that answer is stored.
        const retried = await send(server.url, { key, path });
        assert.equal(retried.status, 201, search);
        assert.equal(retried.headers.get('idempotent-replayed'), null, `${search}: the refusal was not replayed`);
        assert.deepEqual(await retried.json(), { run: 2 });
        const third = await send(server.url, { key, path });
        assert.equal(third.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await third.json(), { run: 2 });
        assert.equal(runs.get(search), 2, search);
      }
    });
  });

  t('a 503 without Retry-After, a 500 and other 4xx answers are stored and replayed', async () => {
    const { handler, runs } = await statusEndpoint();
    await withServer(handler, async (server) => {
      for (const status of [503, 500, 400, 401, 404, 409, 410, 422]) {
        const key = newKey();
        const path = `/payments?status=${status}`;
        const first = await send(server.url, { key, path });
        assert.equal(first.status, status);
        assert.equal(await first.text(), `status ${status}`);
        const again = await send(server.url, { key, path });
        assert.equal(again.status, status, `${status} replayed`);
        assert.equal(again.headers.get('idempotent-replayed'), 'true', `${status} replayed`);
        assert.equal(await again.text(), `status ${status}`);
        assert.equal(runs.get(`?status=${status}`), 1, `${status}: the handler ran once`);
      }
    });
  });

  t('the same key with another payload, path, query or method is a 422', async () => {
    const { handler, state } = await payments();
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
        const problem = await problemOf(res, 422, 'idempotency-key-reused');
        assert.equal(problem.title, 'Idempotency-Key is already used');
      }
      assert.equal(state.runs, 1);
      // The original request still replays.
      assert.equal((await send(server.url, { key })).headers.get('idempotent-replayed'), 'true');
    });
  });

  t('the same key with another payload while the first request still runs is a 422 at once (acceptAfterMs, concurrent: reject, waiting); the same payload is not', async () => {
    const OTHER = '{"amount":9999,"currency":"EUR"}';
    // waitTimeoutMs bounds a duplicate that (wrongly) waited: a 409 after it, not a hang.
    for (const options of [{ acceptAfterMs: 100 }, { concurrent: 'reject' }, { waitTimeoutMs: 3_000 }]) {
      const what = JSON.stringify(options);
      const { handler, state, release } = await blocking(options);
      await withServer(handler, async (server) => {
        const key = newKey();
        const first = send(server.url, { key });
        await holding(state.firstRun, first);
        if (options.acceptAfterMs !== undefined) {
          const accepted = await first; // its run goes on
          assert.equal(accepted.status, 202, what);
          await accepted.arrayBuffer();
        }
        // The first run is blocked until release(): an answer before it did not wait for it.
        const other = await send(server.url, { key, body: OTHER });
        const problem = await problemOf(other, 422, 'idempotency-key-reused');
        assert.equal(problem.title, 'Idempotency-Key is already used', what);
        assert.equal(state.releasedAt, null, `${what}: answered while the first run went on`);
        // The same payload is the first request repeated: waited for, 409 or 202 as usual.
        const same = send(server.url, { key });
        if (options.concurrent === 'reject') {
          await problemOf(await same, 409, 'idempotency-key-in-progress', { retryAfter: true });
        } else if (options.acceptAfterMs !== undefined) {
          const accepted = await same;
          assert.equal(accepted.status, 202, what);
          assert.equal((await accepted.json()).code, 'idempotency-accepted');
        }
        release();
        if (options.acceptAfterMs === undefined) {
          const answer = await first;
          assert.equal(answer.status, 201, what);
          await answer.arrayBuffer();
        }
        if (options.concurrent === undefined && options.acceptAfterMs === undefined) {
          const waited = await same;
          assert.equal(waited.status, 201, what);
          assert.equal(waited.headers.get('idempotent-replayed'), 'true', what);
          await waited.arrayBuffer();
        }
        // Once the first run is stored (with acceptAfterMs, a moment after the handler
        // settled), the same payload replays it and the other one is still refused.
        for (;;) {
          const replay = await send(server.url, { key });
          await replay.arrayBuffer();
          if (replay.status !== 202) {
            assert.equal(replay.headers.get('idempotent-replayed'), 'true', what);
            break;
          }
          await sleep(20);
        }
        await problemOf(await send(server.url, { key, body: OTHER }), 422, 'idempotency-key-reused');
        assert.equal(state.runs, 1, `${what}: one run`);
      }).finally(release); // never leave the first run blocked, whatever failed
    }
  });

  t('a stored response expires after ttlMs; the key then runs the handler again', async () => {
    // 2 s: the replay must come inside it; then the test waits the rest out.
    const { handler, state } = await payments({ ttlMs: 2_000 });
    await withServer(handler, async (server) => {
      const key = newKey();
      assert.equal((await (await send(server.url, { key })).json()).run, 1);
      const answered = Date.now(); // the answer was stored before this: it expires by answered + 2 s
      const again = await send(server.url, { key });
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.equal((await again.json()).run, 1);
      await sleep(answered + 2_000 + 250 - Date.now());
      const after = await send(server.url, { key });
      assert.equal(after.headers.get('idempotent-replayed'), null);
      assert.equal((await after.json()).run, 2);
      assert.equal(state.runs, 2);
    });
  });

  t('a handler that throws after it started: a 500 problem, stored and replayed (it does not run again); onError is told', async () => {
    const told = [];
    const { handler, state } = await payments({ onError: (error) => told.push(error) }, { fail: (run) => run === 1 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const failed = await send(server.url, { key });
      assert.equal(failed.headers.get('idempotent-replayed'), null);
      const problem = await problemOf(failed, 500, 'idempotency-handler-failed');
      assert.equal(told.length, 1);
      assert.match(String(told[0]?.message), /payment provider down \(run 1\)/);
      assert.ok(!JSON.stringify(problem).includes('payment provider down'), 'the error is not shown to the client');
      assert.equal(server.errors.length, 0, 'the wrapped handler answered; nothing was thrown to toNodeHandler');
      const retried = await send(server.url, { key });
      assert.equal(retried.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await problemOf(retried, 500, 'idempotency-handler-failed'), problem);
      assert.equal(state.runs, 1, 'the failed run is not repeated');
      assert.equal(told.length, 1);
    });
  });

  t('a handler that resolves with something else than a Response: the same stored 500', async () => {
    const told = [];
    let runs = 0;
    const handler = idempotency(async () => (++runs, { status: 201, body: 'not a Response' }), {
      store: await makeStore(),
      onError: (error) => told.push(error),
    });
    await withServer(handler, async (server) => {
      const key = newKey();
      await problemOf(await send(server.url, { key }), 500, 'idempotency-handler-failed');
      const replay = await send(server.url, { key });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await problemOf(replay, 500, 'idempotency-handler-failed');
      assert.equal(runs, 1);
      assert.equal(told.length, 1);
      assert.equal(told[0].name, 'TypeError');
      assert.match(told[0].message, /the handler must resolve with a Response; got/);
    });
  });

  t('retryFetch retrying a 500 with the same key gets the stored 500 again: one run', async () => {
    const { handler, state } = await payments({ onError: () => {} }, { fail: () => true });
    let attempts = 0;
    const keys = new Set();
    const server = await serve(handler, {
      wrap(req, res, next) {
        attempts++;
        keys.add(req.headers['idempotency-key']);
        return next(req, res);
      },
    });
    try {
      const res = await retryFetch(`${server.url}/payments`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: '{"amount":4200,"currency":"EUR"}',
      }, { maxAttempts: 2, baseDelayMs: 10, jitter: 'none' });
      assert.equal(attempts, 2, 'the client retried the 500');
      assert.equal(keys.size, 1, 'with the same key');
      assert.equal(res.headers.get('idempotent-replayed'), 'true', 'the second 500 is the replay');
      await problemOf(res, 500, 'idempotency-handler-failed');
      assert.equal(state.runs, 1);
    } finally {
      await server.close();
    }
  });

  t('a missing key is a 400 problem on POST and PATCH; other methods pass through', async () => {
    const { handler, state } = await payments();
    await withServer(handler, async (server) => {
      for (const method of ['POST', 'PATCH']) {
        const res = await send(server.url, { method });
        const problem = await problemOf(res, 400, 'idempotency-key-missing');
        assert.equal(problem.title, 'Idempotency-Key is missing');
        assert.match(problem.detail, new RegExp(`${method} /payments requires an Idempotency-Key header`));
      }
      assert.equal(state.runs, 0);
      assert.equal((await send(server.url, { method: 'GET' })).status, 201);
      assert.equal((await send(server.url, { method: 'PUT' })).status, 201);
      assert.equal(state.runs, 2);
    });
  });

  t('an invalid key (empty, over 255 characters, not visible ASCII, bad sf-string) is a 400 problem; 255 characters pass', async () => {
    const { handler, state } = await payments();
    await withServer(handler, async (server) => {
      for (const key of ['', '   ', 'two words', 'k1, k2', 'k'.repeat(256), 'k'.repeat(1000), '"unterminated', '"bad\\escape"']) {
        const res = await send(server.url, { key });
        await problemOf(res, 400, 'idempotency-key-invalid');
      }
      assert.equal(state.runs, 0);
      const longest = 'k'.repeat(254) + newKey().slice(0, 1);
      assert.equal(longest.length, 255);
      assert.equal((await send(server.url, { key: longest })).status, 201);
      assert.equal((await send(server.url, { key: longest })).headers.get('idempotent-replayed'), 'true');
      assert.equal(state.runs, 1);
    });
  });

  t("concurrent: 'reject' answers 409 to a request that finds the key held while the first runs", async () => {
    const { handler, state, watch, release } = await blocking({ concurrent: 'reject' });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = send(server.url, { key });
      await holding(state.firstRun, first);
      const second = await send(server.url, { key }); // the first run is blocked: it holds the key
      await problemOf(second, 409, 'idempotency-key-in-progress', { retryAfter: true });
      const [token] = watch.heldTokens();
      assert.equal(watch.waiting(token).length, 1, 'refused at its first look, no wait');
      release();
      assert.equal((await first).status, 201);
      assert.equal(state.runs, 1);
      assert.equal((await send(server.url, { key })).headers.get('idempotent-replayed'), 'true');
    }).finally(release); // never leave the first run blocked, whatever failed
  });

  t("concurrent: 'wait' answers 409 when waitTimeoutMs runs out first", async () => {
    const { handler, state, watch, release } = await blocking({ waitTimeoutMs: 100 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = send(server.url, { key });
      await holding(state.firstRun, first);
      const started = Date.now();
      const second = await send(server.url, { key }); // the first run is blocked until released below
      await problemOf(second, 409, 'idempotency-key-in-progress', { retryAfter: true });
      // Date.now() has whole ms: the 100 ms wait shows as 99 at the least.
      assert.ok(Date.now() - started >= 99, `it waited ${Date.now() - started} ms of waitTimeoutMs 100`);
      const [token] = watch.heldTokens();
      const looks = watch.waiting(token);
      assert.ok(looks.length >= 2 && looks.every((a) => isHeld(a.answer)), `it polled the held key: ${looks.length} look(s)`);
      release();
      assert.equal((await first).status, 201);
      assert.equal(state.runs, 1);
    }).finally(release); // never leave the first run blocked, whatever failed
  });

  t('a live holder renews its lock: a handler slower than lockTimeoutMs keeps its key (a duplicate at 1.5 s finds it held and gets the replay)', async () => {
    const storeErrors = [];
    const { handler, state, watch, release } = await blocking({ lockTimeoutMs: 1000, onStoreError: (e, op) => storeErrors.push([op, e]) });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = send(server.url, { key });
      await holding(state.firstRun, first);
      await sleep(1500); // past lockTimeoutMs: without renewal the lock would have lapsed
      const second = send(server.url, { key });
      await watch.overlapped(1, [first, second]); // still held by the first run, 1.5 s on
      release();
      assert.equal((await second).status, 201);
      assert.equal((await second).headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await (await second).json(), { charge: 'ch_1', run: 1 });
      assert.equal((await first).headers.get('idempotent-replayed'), null);
      assert.equal(state.runs, 1, 'the handler ran once');
      assert.deepEqual(storeErrors, []);
    }).finally(release); // never leave the first run blocked, whatever failed
  });

  t('a live holder renews its lock: a duplicate already waiting when the lock would have expired finds it held on, and gets the replay', async () => {
    const storeErrors = [];
    const { handler, state, watch, release } = await blocking({ lockTimeoutMs: 1000, waitTimeoutMs: 30_000, onStoreError: (e, op) => storeErrors.push([op, e]) });
    await withServer(handler, async (server) => {
      const key = newKey();
      const first = send(server.url, { key });
      await holding(state.firstRun, first);
      const took = watch.answers.find((a) => a.answer === null); // the first request's acquire
      const second = send(server.url, { key });
      await watch.overlapped(1, [first, second]);
      const [token] = watch.heldTokens();
      // Polling on past the first lock's lifetime (1000 ms), by more than a second: still held.
      await Promise.race([
        watch.until((answers) => answers.some((a) => a.token === token && isHeld(a.answer) && a.at >= took.at + 2_000)),
        second.then((res) => assert.fail(`the duplicate ended (${res.status}) before the first run did`)),
      ]);
      release();
      assert.equal((await second).status, 201);
      assert.equal((await second).headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await (await second).json(), { charge: 'ch_1', run: 1 });
      assert.equal((await first).status, 201);
      assert.equal(state.runs, 1);
      assertWaited(watch, state, token);
      assert.deepEqual(storeErrors, []);
    }).finally(release); // never leave the first run blocked, whatever failed
  });

  t('with a store that cannot renew, a holder slower than lockTimeoutMs loses its key: the duplicate runs, the late answer is not stored', async () => {
    // The control for the two tests above: the same timing without renew() runs twice.
    const store = await makeStore();
    const storeErrors = [];
    const release = deferred();
    const first = deferred();
    let runs = 0;
    const handler = idempotency(async () => {
      const run = ++runs;
      if (run === 1) {
        first.resolve();
        await release.promise; // still running (alive, but it cannot renew) long after the lock lapsed
      }
      return Response.json({ run });
    }, { store: withoutRenew(store), lockTimeoutMs: 1000, waitTimeoutMs: 10_000, onStoreError: (e, op) => storeErrors.push(op) });
    const server = await serve(handler);
    try {
      const key = newKey();
      const sent = send(server.url, { key });
      await holding(first.promise, sent);
      const started = Date.now();
      const second = await send(server.url, { key });
      assert.equal(second.status, 200);
      assert.equal(second.headers.get('idempotent-replayed'), null);
      assert.deepEqual(await second.json(), { run: 2 });
      assert.ok(Date.now() - started >= 700, 'the duplicate waited for the lock to lapse');
      // The late holder finishes: its client gets its answer, but it is not stored over the new one.
      release.resolve();
      const late = await sent;
      // Its answer is the truth (the handler wrote nothing through ctx.tx: with PostgresStore
      // the lapsed holder's transaction, ended by the server, held none of its effects), but
      // not stored: a retry would run it again, so it says not to retry.
      assert.deepEqual(await late.json(), { run: 1 });
      assert.equal(late.headers.get('x-should-retry'), 'false');
      assert.deepEqual(storeErrors, ['complete']);
      const third = await send(server.url, { key });
      assert.equal(third.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await third.json(), { run: 2 });
      assert.equal(runs, 2);
    } finally {
      release.resolve();
      await server.close();
    }
  });

  t('a dead holder\'s lock (planted in the store) expires after its lockTimeoutMs: a waiting duplicate then processes', async () => {
    const store = await makeStore();
    const watch = watchAcquires(store);
    let runs = 0;
    const handler = idempotency(async () => Response.json({ run: ++runs }), { store: watch.store, waitTimeoutMs: 10_000 });
    await withServer(handler, async (server) => {
      const key = newKey();
      const planted = Date.now();
      await plantDeadLock(store, key, 2_000); // 2 s for the request to find it live
      const res = await send(server.url, { key });
      assert.equal(res.status, 200, `got ${res.status}`);
      assert.deepEqual(await res.json(), { run: 1 });
      const looks = watch.answers.map((a) => (a.answer === null ? 'free' : a.answer.state));
      assert.ok(looks.length >= 2 && looks.slice(0, -1).every((l) => l !== 'free' && l !== 'completed') && looks.at(-1) === 'free', `the request found the dead holder's key held, waited, then took it: ${looks.join(', ')}`);
      const waited = watch.answers.at(-1).at - planted;
      assert.ok(waited >= 1_990, `it took the key once the lock had expired, ${waited} ms after it was planted for 2000`);
      assert.equal((await send(server.url, { key })).headers.get('idempotent-replayed'), 'true');
      assert.equal(runs, 1);
    });
  });

  t('a dead holder\'s lock (planted): 409 while it is live with concurrent: reject, processed at once after', async () => {
    const store = await makeStore();
    let runs = 0;
    const handler = idempotency(async () => Response.json({ run: ++runs }), { store, concurrent: 'reject' });
    await withServer(handler, async (server) => {
      const key = newKey();
      const planted = Date.now();
      await plantDeadLock(store, key, 2_000); // 2 s for the 409 to come inside it
      await problemOf(await send(server.url, { key }), 409, 'idempotency-key-in-progress', { retryAfter: true });
      assert.equal(runs, 0);
      await sleep(planted + 2_000 + 250 - Date.now());
      const next = await send(server.url, { key });
      assert.equal(next.status, 200);
      assert.deepEqual(await next.json(), { run: 1 });
    });
  });

  t('keys are scoped by identity: the same key from two users is two operations', async () => {
    const { handler, state } = await payments({ identity: (request) => request.headers.get('X-User') ?? undefined });
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

  t('without an identity option, keys are scoped by the credentials: Authorization, else the session cookie', async () => {
    const { handler, state } = await payments();
    await withServer(handler, async (server) => {
      const run = async (key, headers) => {
        const res = await send(server.url, { key, headers });
        assert.equal(res.status, 201);
        return [(await res.json()).run, res.headers.get('idempotent-replayed') === 'true'];
      };
      const k1 = newKey();
      assert.deepEqual(await run(k1, { Authorization: 'Bearer alice' }), [1, false]);
      assert.deepEqual(await run(k1, { Authorization: 'Bearer bob' }), [2, false], 'another token: another operation');
      assert.deepEqual(await run(k1, { Authorization: 'Bearer alice' }), [1, true]);
      assert.deepEqual(await run(k1, {}), [3, false], 'no credentials: unscoped, another operation again');
      // Authorization wins over the cookie.
      assert.deepEqual(await run(k1, { Authorization: 'Bearer alice', Cookie: 'sid=zzz' }), [1, true]);

      const k2 = newKey();
      assert.deepEqual(await run(k2, { Cookie: 'sid=a; _ga=GA1.1' }), [4, false]);
      assert.deepEqual(await run(k2, { Cookie: 'sid=b; _ga=GA1.1' }), [5, false], 'another session: another operation');
      assert.deepEqual(await run(k2, { Cookie: '_ga=GA1.2; theme=dark; sid=a' }), [4, true], 'other cookies do not change the scope');
      assert.deepEqual(await run(k2, { Cookie: '_ga=GA1.1' }), [6, false], 'no session cookie: unscoped');
      assert.deepEqual(await run(k2, { Cookie: '_ga=GA1.9; theme=light' }), [6, true], 'unscoped, whatever the other cookies');

      const k3 = newKey();
      assert.deepEqual(await run(k3, { Cookie: '__Host-next-auth.session-token=t1' }), [7, false]);
      assert.deepEqual(await run(k3, { Cookie: '__Host-next-auth.session-token=t2' }), [8, false]);
      assert.deepEqual(await run(k3, { Cookie: 'JSESSIONID=j1' }), [9, false]);
      assert.deepEqual(await run(k3, { Cookie: 'x=1; JSESSIONID=j1' }), [9, true]);
      assert.equal(state.runs, 9);
    });
  });

  t('identity: false shares keys between callers (unscoped)', async () => {
    const { handler, state } = await payments({ identity: false });
    await withServer(handler, async (server) => {
      const key = newKey();
      assert.equal((await send(server.url, { key, headers: { Authorization: 'Bearer alice' } })).status, 201);
      const bob = await send(server.url, { key, headers: { Authorization: 'Bearer bob', Cookie: 'sid=b' } });
      assert.equal(bob.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await bob.json(), { charge: 'ch_1', run: 1 });
      assert.equal(state.runs, 1);
    });
  });

  t('ctx: key as sent; keyFor(name) is stable across retries and instances, differs per name and scope; tx', async () => {
    const seen = [];
    const app = async () =>
      idempotency(async (request, ctx) => {
        const entry = { key: ctx.key, charge: ctx.keyFor('charge'), refund: ctx.keyFor('refund'), badNames: [] };
        const tx = ctx.tx;
        entry.tx = tx === undefined ? 'undefined' : typeof tx?.query;
        for (const bad of ['', 42, undefined]) {
          try {
            ctx.keyFor(bad);
            entry.badNames.push('no throw');
          } catch (error) {
            entry.badNames.push(error.name);
          }
        }
        seen.push(entry);
        // The first run says "not processed" (429), so the client's retry runs the handler again.
        return seen.length === 1 ? new Response('slow down', { status: 429 }) : Response.json({ n: seen.length }, { status: 201 });
      }, { store: await makeStore() });
    const a = await serve(await app());
    const b = await serve(await app()); // another instance (another store even: keyFor needs none)
    try {
      const key = newKey();
      assert.equal((await send(a.url, { key })).status, 429);
      assert.equal((await send(a.url, { key })).status, 201);
      assert.equal((await send(b.url, { key: `"${key}"` })).status, 201, 'the sf-string form of the same key');
      assert.equal((await send(a.url, { key, headers: { Authorization: 'Bearer someone' } })).status, 201);
      const other = newKey();
      assert.equal((await send(a.url, { key: other })).status, 201);
      assert.equal(seen.length, 5);
      const [retry1, retry2, instanceB, scoped, otherKey] = seen;
      for (const e of seen) {
        assert.match(e.charge, DERIVED_KEY);
        assert.match(e.refund, DERIVED_KEY);
        assert.notEqual(e.charge, e.refund, 'another name, another key');
        assert.deepEqual(e.badNames, ['TypeError', 'TypeError', 'TypeError']);
        assert.equal(e.tx, transactional ? 'function' : 'undefined');
      }
      assert.deepEqual([retry1.key, retry2.key, instanceB.key, scoped.key, otherKey.key], [key, key, key, key, other]);
      assert.equal(retry2.charge, retry1.charge, 'the same on a retry');
      assert.equal(retry2.refund, retry1.refund);
      assert.equal(instanceB.charge, retry1.charge, 'the same on another instance');
      assert.notEqual(scoped.charge, retry1.charge, 'another scope (credentials), another key');
      assert.notEqual(otherKey.charge, retry1.charge, 'another idempotency key, another derived key');
      assert.notEqual(retry1.charge, key);
    } finally {
      await a.close();
      await b.close();
    }
  });

  t('ctx of a request without a key: key null, keyFor throws a TypeError, tx undefined', async () => {
    const seen = [];
    const handler = idempotency(async (request, ctx) => {
      let keyFor;
      try {
        keyFor = ctx.keyFor('charge');
      } catch (error) {
        keyFor = error;
      }
      seen.push({ key: ctx.key, keyFor, tx: ctx.tx });
      return new Response('ok');
    }, { store: await makeStore() });
    await withServer(handler, async (server) => {
      assert.equal((await send(server.url, { method: 'GET' })).status, 200);
      assert.equal(seen.length, 1);
      assert.equal(seen[0].key, null);
      assert.ok(seen[0].keyFor instanceof TypeError, `keyFor: ${seen[0].keyFor}`);
      assert.match(seen[0].keyFor.message, /no idempotency key/);
      assert.equal(seen[0].tx, undefined);
    });
  });

  t('the sf-string key form ("abc", with escapes) is the same key as the plain form', async () => {
    const { handler, state } = await payments();
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
    }, { store: await makeStore() });
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
}
