// Hardening: random options never crash the wasm instance; many concurrent calls with
// interleaved aborts all settle exactly once; 100,000 calls keep wasm memory and the JS heap
// flat. These use an in-memory transport (the `fetch` option), so they measure retryFetch
// itself, not sockets.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as api from 'retry-fetch';
import { initSync } from './node_modules/retry-fetch/retry_fetch.js';

const wasmBytes = readFileSync(new URL('./node_modules/retry-fetch/retry_fetch_bg.wasm', import.meta.url));
// The package already instantiated the module; initSync hands back the same instance.
const wasm = initSync({ module: wasmBytes });

/** A transport that answers from memory: `plan(n)` gives the status of the n-th call. */
function memoryFetch(plan) {
  let n = 0;
  return async (_input, init) => {
    n += 1;
    if (init?.signal?.aborted) throw init.signal.reason;
    const status = plan(n);
    if (status === 'error') throw new TypeError('fetch failed');
    return new Response(null, { status });
  };
}

// A small deterministic PRNG for reproducible fuzzing.
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WEIRD = [
  undefined, null, true, false, 0, -0, 1, -1, 2.5, 3, 100, 101, 1e308, -1e308, NaN, Infinity, -Infinity,
  '', 'auto', 'full', 'none', 'equal', 'decorrelated', 'additive', 'sf-string', 'plain', 'Idempotency-Key',
  'bad header', '\u0000', 'x'.repeat(300), [], [503], [99], [503, 'x'], {}, { valueOf: () => 3 },
  Symbol('s'), 10n, () => true, async () => false, Object.create(null), new Date(0), /re/,
  new AbortController().signal,
];
const OPTION_NAMES = [
  'maxAttempts', 'baseDelayMs', 'factor', 'maxDelayMs', 'jitter', 'retryOnStatus', 'retryOnNetworkError',
  'retryOnTimeout', 'timeoutMs', 'deadlineMs', 'signal', 'respectRetryAfter', 'maxRetryAfterMs',
  'idempotencyKey', 'idempotencyHeader', 'idempotencyKeyFormat', 'retryHeaders', 'maxBufferedBodyBytes',
  'shouldRetry', 'onRetry', 'budget', 'throttle', 'breaker',
];

test('fuzz: 5,000 random option objects never crash the instance', async () => {
  const random = rng(42);
  const pick = (xs) => xs[Math.floor(random() * xs.length)];
  let resolved = 0;
  let typeErrors = 0;
  for (let i = 0; i < 5000; i++) {
    const options = {};
    const n = 1 + Math.floor(random() * 4);
    for (let k = 0; k < n; k++) options[pick(OPTION_NAMES)] = pick(WEIRD);
    // keep every call fast: no waits, few attempts, an in-memory transport
    options.baseDelayMs = 0;
    options.maxAttempts = pick([1, 2]);
    options.timeoutMs = undefined;
    options.deadlineMs = undefined;
    if (options.signal && !(options.signal instanceof AbortSignal)) delete options.signal;
    options.fetch = memoryFetch(() => pick([200, 503, 'error']));
    try {
      const res = await api.retryFetch('https://fuzz.invalid/', { method: pick(['GET', 'POST']) }, options);
      assert.ok(res instanceof Response);
      resolved += 1;
    } catch (e) {
      if (e?.name === 'TypeError') typeErrors += 1;
      else assert.ok(['RetryError', 'AbortError', 'Error'].includes(e?.name), `unexpected ${e?.name}: ${e?.message}`);
    }
    if (i % 500 === 0) {
      // backoffDelays with the same random options: a TypeError or numbers in range
      try {
        const d = api.backoffDelays({ ...options, fetch: undefined }, 10, i);
        assert.ok(d.every((x) => Number.isInteger(x) && x >= 0 && x <= 2147483647));
      } catch (e) {
        assert.equal(e.name, 'TypeError');
      }
    }
  }
  assert.ok(resolved > 100 && typeErrors > 100, `resolved ${resolved}, TypeErrors ${typeErrors}`);
  // the instance is alive and correct afterwards
  // (budget: false: the fuzz's failures above drained the default budget of this origin)
  const res = await api.retryFetch('https://fuzz.invalid/', undefined, { baseDelayMs: 0, budget: false, fetch: memoryFetch((n) => (n < 3 ? 503 : 200)) });
  assert.equal(res.status, 200);
});

test('fuzz: random header values for Retry-After and RateLimit never crash the instance', async () => {
  const random = rng(7);
  const alphabet = '0123456789 ,;=-:"abcdefGMTSunNov\t.';
  for (let i = 0; i < 3000; i++) {
    const len = Math.floor(random() * 40);
    let v = '';
    for (let k = 0; k < len; k++) v += alphabet[Math.floor(random() * alphabet.length)];
    const header = ['Retry-After', 'RateLimit-Reset', 'RateLimit'][i % 3];
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      return calls === 1 ? new Response(null, { status: 429, headers: { [header]: v } }) : new Response(null, { status: 200 });
    };
    const res = await api.retryFetch('https://fuzz.invalid/', undefined, { baseDelayMs: 0, maxRetryAfterMs: 0, fetch });
    assert.ok(res.status === 200 || res.status === 429, `${header}: ${JSON.stringify(v)} -> ${res.status}`);
  }
});

test('1,000 concurrent calls with interleaved aborts all settle, each exactly once', async () => {
  const settled = new Array(1000).fill(0);
  const controllers = [];
  const calls = [];
  for (let i = 0; i < 1000; i++) {
    const controller = new AbortController();
    controllers.push(controller);
    const fetch = memoryFetch((n) => (n < 3 ? 503 : 200));
    calls.push(
      api
        // budget: false, throttle: false: 1,000 calls failing twice each at one origin are what
        // the default budget refuses and the default throttle paces (tested in
        // default-budget.test.mjs and default-throttle.test.mjs); this test is about settling
        // exactly once.
        .retryFetch('https://many.invalid/', { method: i % 2 ? 'POST' : 'GET' }, { baseDelayMs: i % 7, jitter: 'full', signal: controller.signal, fetch, budget: false, throttle: false })
        .then(
          (r) => {
            settled[i] += 1;
            return r.status;
          },
          (e) => {
            settled[i] += 1;
            return e.name;
          },
        ),
    );
    if (i % 3 === 0) setTimeout(() => controller.abort(), i % 11);
  }
  const outcomes = await Promise.all(calls);
  await new Promise((r) => setTimeout(r, 50)); // let any late (wrong) settlement happen
  assert.ok(settled.every((n) => n === 1), 'every call settled exactly once');
  assert.ok(outcomes.every((o) => o === 200 || o === 'AbortError'), JSON.stringify([...new Set(outcomes)]));
  assert.ok(outcomes.filter((o) => o === 200).length >= 600);
});

test('leak: 100,000 calls mixing success, retries and aborts keep wasm memory and the JS heap flat', async () => {
  const gc = globalThis.gc ?? (() => {});
  const batch = async (from, count) => {
    const work = [];
    for (let i = from; i < from + count; i++) {
      const kind = i % 4;
      const controller = new AbortController();
      const fetch = memoryFetch((n) => (kind === 1 && n === 1 ? 503 : kind === 2 && n === 1 ? 'error' : 200));
      if (kind === 3) controller.abort();
      work.push(
        api
          .retryFetch('https://leak.invalid/', { method: 'POST', body: 'x' }, { baseDelayMs: 0, signal: controller.signal, fetch })
          .then((r) => r.status, (e) => e.name),
      );
      if (work.length === 500) await Promise.all(work.splice(0));
    }
    await Promise.all(work);
  };
  await batch(0, 10_000); // warm-up: the allocator reaches its working size
  gc();
  const wasmStart = wasm.memory.buffer.byteLength;
  const heapStart = process.memoryUsage().heapUsed;
  await batch(10_000, 90_000);
  gc();
  await new Promise((r) => setTimeout(r, 20));
  gc();
  const wasmEnd = wasm.memory.buffer.byteLength;
  const heapEnd = process.memoryUsage().heapUsed;
  console.log(`wasm linear memory: ${wasmStart} -> ${wasmEnd} bytes; JS heap used: ${(heapStart / 1e6).toFixed(1)} -> ${(heapEnd / 1e6).toFixed(1)} MB`);
  assert.equal(wasmEnd, wasmStart, 'wasm linear memory grew');
  assert.ok(heapEnd - heapStart < 20e6, `JS heap grew by ${((heapEnd - heapStart) / 1e6).toFixed(1)} MB`);
});

// ---- the loop's resources and odd transports (src/wasm/client/call.rs) ----------------------

const timeouts = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

test('a transport that throws synchronously is a network error: retried, then a RetryError, and no timer is left', async () => {
  const before = timeouts();
  let calls = 0;
  const thrown = new TypeError('no route');
  const err = await api
    .retryFetch('https://sync-throw.invalid/', undefined, {
      baseDelayMs: 0,
      timeoutMs: 60_000,
      fetch: () => {
        calls += 1;
        throw thrown;
      },
    })
    .then(() => assert.fail('expected a rejection'), (e) => e);
  assert.equal(err.name, 'RetryError');
  assert.equal(err.reason, 'attempts');
  assert.equal(err.cause, thrown);
  assert.equal(calls, 3);
  assert.equal(timeouts(), before, 'a timeoutMs timer outlived the call');
});

test('retryHeaders with headers that cannot be rebuilt: the call rejects and no timer is left', async () => {
  const before = timeouts();
  let calls = 0;
  const err = await api
    .retryFetch('https://attempt-throws.invalid/', { headers: { 'x-a': 'b' } }, {
      baseDelayMs: 0,
      timeoutMs: 60_000,
      retryHeaders: true,
      fetch: async () => {
        calls += 1;
        // After the first attempt, the X-Original-Request-At value cannot be set: make Headers throw.
        if (calls === 1) globalThis.Headers = class extends OriginalHeaders { set() { throw new RangeError('bad header'); } };
        return new Response(null, { status: 503 });
      },
    })
    .then(() => assert.fail('expected a rejection'), (e) => e)
    .finally(() => { globalThis.Headers = OriginalHeaders; });
  assert.equal(err.name, 'RangeError');
  assert.equal(calls, 1);
  assert.equal(timeouts(), before, 'a timeoutMs timer outlived the call');
});
const OriginalHeaders = globalThis.Headers;

test('a signal AbortSignal.any does not take (a polyfill) is linked by listeners, removed after the attempt', async () => {
  const any = AbortSignal.any;
  AbortSignal.any = () => { throw new TypeError("Failed to convert value to 'AbortSignal'"); };
  try {
    const listeners = new Set();
    const polyfill = {
      aborted: false,
      reason: undefined,
      addEventListener: (type, f) => listeners.add(f),
      removeEventListener: (type, f) => listeners.delete(f),
    };
    let seen;
    const res = await api.retryFetch('https://polyfill.invalid/', undefined, {
      signal: polyfill,
      timeoutMs: 60_000,
      fetch: async (_input, init) => {
        seen = init.signal;
        // The attempt's link, and the call's own (a custom transport is bounded by the
        // call's signals too: one that ignores its signal cannot hold the call).
        assert.equal(listeners.size, 2, 'linked while the attempt runs');
        return new Response('ok');
      },
    });
    assert.equal(res.status, 200);
    assert.ok(seen instanceof AbortSignal, 'the attempt got a real signal');
    assert.equal(listeners.size, 0, 'the listener was removed');
    // and aborting through the polyfill aborts the attempt in flight
    const err = await api
      .retryFetch('https://polyfill.invalid/', undefined, {
        signal: polyfill,
        fetch: (_input, init) =>
          new Promise((_, reject) => {
            init.signal.addEventListener('abort', () => reject(init.signal.reason));
            polyfill.aborted = true;
            polyfill.reason = new Error('stop');
            for (const f of [...listeners]) f();
          }),
      })
      .then(() => assert.fail('expected a rejection'), (e) => e);
    assert.equal(err.message, 'stop');
  } finally {
    AbortSignal.any = any;
  }
});

test('per-call options that hold a guard are read every call: a freed budget is refused', async () => {
  const budget = new api.RetryBudget();
  const options = { budget, fetch: async () => new Response('ok') };
  assert.equal((await api.retryFetch('https://guard.invalid/', undefined, options)).status, 200);
  budget.free();
  const err = await api.retryFetch('https://guard.invalid/', undefined, options).then(() => assert.fail('expected a rejection'), (e) => e);
  assert.equal(err.name, 'TypeError');
  assert.match(err.message, /invalid option "budget"/);
});

test('a call made from inside an options read (a signal getter) does not break either call', async () => {
  const fetch = async () => new Response('ok');
  let nested;
  const sneaky = {
    aborted: false,
    get addEventListener() {
      // runs while the wasm reads `signal`: start another call with other options
      nested ??= api.retryFetch('https://nested.invalid/', undefined, { maxAttempts: 2, fetch });
      return () => {};
    },
    removeEventListener() {},
  };
  const outer = await api.retryFetch('https://outer.invalid/', undefined, { signal: sneaky, fetch });
  assert.equal(outer.status, 200);
  assert.equal((await nested).status, 200);
  // and the client still works afterwards
  assert.equal((await api.retryFetch('https://after.invalid/', undefined, { maxAttempts: 2, fetch })).status, 200);
});

test('hostile objects (a revoked proxy, a list whose length or item throws) reject the call; 3,000 of them leave the instance working', async () => {
  const { proxy: revoked, revoke } = Proxy.revocable({}, {});
  revoke();
  const { proxy: revokedList, revoke: revokeList } = Proxy.revocable([503], {});
  revokeList();
  const lengthThrows = new Proxy([503], { get: (t, k) => { if (k === 'length') throw new Error('length trap'); return t[k]; } });
  const itemThrows = new Proxy([503], { get: (t, k) => { if (k === '0') throw new Error('item trap'); return t[k]; } });
  const fetch = memoryFetch(() => 200);
  const client = api.createRetryFetch({ fetch });
  const hostile = [
    ['options', () => api.retryFetch('http://x.test/', undefined, revoked), TypeError],
    ['an option value', () => api.retryFetch('http://x.test/', undefined, { fetch, maxAttempts: revoked }), TypeError],
    ['headers', () => api.retryFetch('http://x.test/', undefined, { fetch, headers: revoked }), TypeError],
    ['retryOnStatus revoked', () => api.retryFetch('http://x.test/', undefined, { fetch, retryOnStatus: revokedList }), TypeError],
    ['retryOnStatus length', () => api.retryFetch('http://x.test/', undefined, { fetch, retryOnStatus: lengthThrows }), /length trap/],
    ['retryOnStatus item', () => api.retryFetch('http://x.test/', undefined, { fetch, retryOnStatus: itemThrows }), /item trap/],
    // A list's proxy whose length is no array length: refused (it was read as 0 items, or cut).
    ...[NaN, -1, 2.5, '2', Infinity].map((length) => [`retryOnStatus length ${String(length)}`,
      () => api.retryFetch('http://x.test/', undefined, { fetch, retryOnStatus: new Proxy([503, 502, 504], { get: (t, k) => (k === 'length' ? length : t[k]) }) }),
      (e) => e instanceof TypeError && /retryOnStatus/.test(e.message)]),
    ['retryOnStatus of 1e12 items', () => api.retryFetch('http://x.test/', undefined, { fetch, retryOnStatus: new Proxy([503], { get: (t, k) => (k === 'length' ? 1e12 : t[k]) }) }),
      /"retryOnStatus": 1000000000000 items; expected at most 500/],
    // A client's cached per-call options compared with a hostile list.
    ['a client, cached list then a hostile one', async () => {
      await client('http://x.test/', undefined, { retryOnStatus: [503] });
      return client('http://x.test/', undefined, { retryOnStatus: lengthThrows });
    }, /length trap/],
    ['createRetryFetch', () => Promise.resolve().then(() => api.createRetryFetch(revoked)), TypeError],
    ['a guard', () => Promise.resolve().then(() => new api.RetryBudget(revoked)), TypeError],
    ['backoffDelays', () => Promise.resolve().then(() => api.backoffDelays({ retryOnStatus: lengthThrows }, 3)), /length trap|retryOnStatus/],
  ];
  for (const [what, call, expected] of hostile) {
    let promise;
    assert.doesNotThrow(() => { promise = call(); }, `${what}: no synchronous throw`);
    await assert.rejects(promise, expected, what);
  }
  for (let i = 0; i < 3000; i++) {
    const [, call] = hostile[i % hostile.length];
    await call().catch(() => {});
  }
  const res = await api.retryFetch('http://x.test/', undefined, { fetch, retryOnStatus: [503] });
  assert.equal(res.status, 200);
  assert.deepEqual(api.backoffDelays({ jitter: 'none', baseDelayMs: 100 }, 3), [100, 200, 400]);
});

test('a retryOnStatus list is read once, by index: one that answers otherwise on a second read, or iterates otherwise, never hands its policy to a later call', async () => {
  // Sends to a server that always answers `status`; how many attempts the call made.
  const attempts = async (client, status, retryOnStatus) => {
    let n = 0;
    const fetch = async () => (n++, new Response(null, { status }));
    await client('http://x.test/', undefined, { fetch, retryOnStatus, maxAttempts: 3, baseDelayMs: 0, budget: false, throttle: false });
    return n;
  };
  // Reads as [503] the first time, as [429] after.
  let reads = 0;
  const fickle = new Proxy([503], { get: (t, k) => (k === '0' ? (reads++ === 0 ? 503 : 429) : Reflect.get(t, k)) });
  const client = api.createRetryFetch();
  assert.equal(await attempts(client, 503, fickle), 3, 'read as [503]: 503 retried');
  assert.equal(reads, 1, 'the item was read once');
  assert.equal(await attempts(client, 429, [429]), 3, 'a plain [429] next: 429 retried (not the first call\'s policy)');
  assert.equal(await attempts(client, 503, [429]), 1, 'and 503 not retried');
  // Items [503], iterating as [429]: read by index, on a miss as on a hit.
  const odd = Object.assign([503], { [Symbol.iterator]: function* () { yield 429; } });
  assert.equal(await attempts(api.createRetryFetch(), 503, odd), 3, 'a fresh client');
  const warm = api.createRetryFetch();
  assert.equal(await attempts(warm, 503, [503]), 3);
  assert.equal(await attempts(warm, 503, odd), 3, 'after a plain [503]: the same');
});

test('a guard method called on another guard or on a forged object is a TypeError; the guards stay usable', async () => {
  const budget = new api.RetryBudget();
  const throttle = new api.AdaptiveThrottle();
  const breaker = new api.CircuitBreaker();
  const forged = Object.assign(Object.create(api.AdaptiveThrottle.prototype), { __wbg_ptr: 8 });
  const wrong = [
    () => api.RetryBudget.prototype.tokens.call(throttle, 'http://x.test/'),
    () => api.AdaptiveThrottle.prototype.rate.call(breaker, 'http://x.test/'),
    () => api.CircuitBreaker.prototype.state.call(budget, 'http://x.test/'),
    () => api.RetryBudget.prototype.free.call(breaker),
    () => forged.rate('http://x.test/'),
  ];
  for (const call of wrong) assert.throws(call, TypeError);
  await assert.rejects(
    api.retryFetch('http://x.test/', undefined, { fetch: memoryFetch(() => 200), throttle: forged }),
    TypeError,
  );
  assert.equal(typeof budget.tokens('http://x.test/'), 'number');
  assert.equal(throttle.rate('http://x.test/'), undefined);
  assert.equal(breaker.state('http://x.test/'), 'closed');
  breaker.free();
  assert.throws(() => breaker.state('http://x.test/'), /freed/);
});

test('idempotencyHeader cannot be a header that already means something (Content-Type, Authorization, If-Match...)', async () => {
  for (const name of ['Content-Type', 'authorization', 'If-Match', 'Accept', 'X-Retry-Count']) {
    await assert.rejects(
      api.retryFetch('http://x.test/', { method: 'POST', body: 'x' }, { fetch: memoryFetch(() => 200), idempotencyHeader: name }),
      (e) => e instanceof TypeError && /idempotencyHeader/.test(e.message),
      name,
    );
  }
});

test('a client\'s defaults cannot hold one key for every call (idempotencyKey, or the header in headers); per call they can', async () => {
  const attempts = [
    () => api.createRetryFetch({ idempotencyKey: 'order-1' }),
    () => api.createRetryFetch({ headers: { 'Idempotency-Key': 'order-1' } }),
    () => api.createRetryFetch({ idempotencyHeader: 'X-Op-Key', headers: { 'x-op-key': 'order-1' } }),
    () => api.createRetryFetch().extend({ idempotencyKey: 'order-1' }),
  ];
  for (const make of attempts) {
    assert.throws(make, (e) => e instanceof TypeError && /per call/.test(e.message));
  }
  const seen = [];
  const client = api.createRetryFetch({ fetch: async (request) => { seen.push(request.headers.get('idempotency-key')); return new Response('ok'); } });
  await client('http://x.test/pay', { method: 'POST', body: 'a' }, { idempotencyKey: 'order-1' });
  await client('http://x.test/pay', { method: 'POST', body: 'b' });
  assert.equal(seen[0], 'order-1');
  assert.match(seen[1], /^[0-9a-f-]{36}$/);
  // Nor a call's idempotencyHeader naming one of the client's default headers: its value
  // would be every payment's key. Nothing is sent.
  const tokened = api.createRetryFetch({ headers: { 'X-Client-Token': 'tok-123' }, fetch: async () => (seen.push('sent'), new Response('ok')) });
  await assert.rejects(
    tokened('http://x.test/pay', { method: 'POST', body: 'a' }, { idempotencyHeader: 'x-client-token' }),
    (e) => e instanceof TypeError && /idempotencyHeader/.test(e.message) && /x-client-token/.test(e.message),
  );
  assert.equal(seen.length, 2, 'nothing was sent');
});

test("a client's default Content-Type (or a call's headers option) is sent with a string body; the call's own and FormData's win", async () => {
  const seen = [];
  const fetch = async (input, init) => {
    const request = new Request(input, init);
    seen.push([request.headers.get('content-type'), await request.text()]);
    return new Response('ok');
  };
  const json = api.createRetryFetch({ headers: { 'Content-Type': 'application/json' }, fetch });
  await json('http://x.test/', { method: 'POST', body: '{"a":1}' });
  await json('http://x.test/', { method: 'POST', body: new URLSearchParams('a=1') });
  await json(new Request('http://x.test/', { method: 'POST', body: '{"b":2}' }));
  await api.retryFetch('http://x.test/', { method: 'POST', body: '{"c":3}' }, { headers: { 'content-type': 'application/json' }, fetch });
  await json('http://x.test/', { method: 'POST', body: 'x', headers: { 'Content-Type': 'text/csv' } });
  await json(new Request('http://x.test/', { method: 'POST', body: 'y', headers: { 'Content-Type': 'text/csv' } }));
  const form = new FormData();
  form.append('a', '1');
  await json('http://x.test/', { method: 'POST', body: form });
  assert.deepEqual(seen.slice(0, 6), [
    ['application/json', '{"a":1}'],
    ['application/json', 'a=1'],
    ['text/plain;charset=UTF-8', '{"b":2}'], // a Request input's headers are all its own
    ['application/json', '{"c":3}'],
    ['text/csv', 'x'],
    ['text/csv', 'y'],
  ]);
  assert.match(seen[6][0], /^multipart\/form-data; boundary=/, 'a FormData body keeps its multipart type');
  assert.ok(seen[6][1].includes('name="a"'), 'and its bytes');
});

test("with idempotencyKeyFormat 'sf-string', a key the caller put in the header is reported unquoted: given back, it sends the same header", async () => {
  const sent = [];
  const fetch = async (input, init) => {
    sent.push(new Request(input, init).headers.get('idempotency-key'));
    throw new TypeError('fetch failed');
  };
  const options = { idempotencyKeyFormat: 'sf-string', maxAttempts: 1, fetch };
  const first = await api.retryFetch('http://x.test/pay', { method: 'POST', body: 'pay', headers: { 'Idempotency-Key': '"order-42"' } }, options).then(() => assert.fail('resolved'), (e) => e);
  assert.equal(first.idempotencyKey, 'order-42');
  await api.retryFetch('http://x.test/pay', { method: 'POST', body: 'pay' }, { ...options, idempotencyKey: first.idempotencyKey }).catch(() => {});
  assert.deepEqual(sent, ['"order-42"', '"order-42"']);
});

test("every client signal in an extend chain still cancels a call that gives its own", async () => {
  const hanging = (input, init) =>
    new Promise((_, reject) => {
      const signal = init?.signal ?? input.signal;
      signal.addEventListener('abort', () => reject(signal.reason));
    });
  for (const which of [0, 1, 2]) {
    const controllers = [new AbortController(), new AbortController(), new AbortController()];
    const client = api.createRetryFetch({ signal: controllers[0].signal, fetch: hanging }).extend({ signal: controllers[1].signal });
    const call = client('http://x.test/', undefined, { signal: controllers[2].signal });
    const reason = new Error(`signal ${which}`);
    setTimeout(() => controllers[which].abort(reason), 10);
    assert.equal(await Promise.race([call.catch((e) => e), new Promise((r) => setTimeout(r, 3_000, 'still running'))]), reason, `signal ${which}`);
  }
});

test("a polyfill's signal without a reason rejects the call with an AbortError (already aborted, or during a wait)", async () => {
  class PolyfillSignal {
    aborted = false;
    listeners = [];
    addEventListener(_type, f) { this.listeners.push(f); }
    removeEventListener(_type, f) { this.listeners = this.listeners.filter((g) => g !== f); }
    abort() { this.aborted = true; for (const f of this.listeners) f({ type: 'abort' }); }
  }
  const already = new PolyfillSignal();
  already.aborted = true;
  const first = await api.retryFetch('http://x.test/', undefined, { signal: already, fetch: memoryFetch(() => 503) }).catch((e) => e);
  assert.equal(first?.name, 'AbortError', `already aborted: ${first}`);
  const later = new PolyfillSignal();
  setTimeout(() => later.abort(), 30);
  const waiting = await api.retryFetch('http://x.test/', undefined, { signal: later, baseDelayMs: 1_000, jitter: 'none', fetch: memoryFetch(() => 503) }).catch((e) => e);
  assert.equal(waiting?.name, 'AbortError', `aborted during the wait: ${waiting}`);
});

test('a Map or a Date as the options is a TypeError, not read as no options', async () => {
  for (const options of [new Map([['maxAttempts', 0]]), new Date(0)]) {
    const kind = options.constructor.name;
    await assert.rejects(api.retryFetch('http://x.test/', undefined, options), (e) => e instanceof TypeError && e.message.includes(`a ${kind}`), kind);
    assert.throws(() => api.createRetryFetch(options), TypeError, kind);
    assert.throws(() => api.backoffDelays(options, 1), TypeError, kind);
    assert.throws(() => new api.RetryBudget(options), TypeError, kind);
  }
});

test('a BigInt option value is shown with its n in the TypeError, not as the number it looks like', async () => {
  await assert.rejects(api.retryFetch('http://x.test/', undefined, { maxAttempts: 3n }), {
    name: 'TypeError',
    message: /invalid option "maxAttempts": got 3n; expected an integer from 1 to 100/,
  });
  await assert.rejects(api.retryFetch('http://x.test/', undefined, { retryOnStatus: [503n] }), { name: 'TypeError', message: /item \[0\] is 503n;/ });
});

test('an abort from a breaker\'s onStateChange as the call ends rejects the call with its reason (it resolved with the answer)', async () => {
  const controller = new AbortController();
  const reason = new Error('user-cancel');
  const breaker = new api.CircuitBreaker({ failureThreshold: 1, onStateChange: (e) => { if (e.to === 'open') controller.abort(reason); } });
  const fetch = memoryFetch((n) => (n === 1 ? 503 : 200));
  await assert.rejects(api.retryFetch('http://osc.test/', undefined, { fetch, breaker, signal: controller.signal, baseDelayMs: 1 }), (e) => e === reason);
  // An abort of another call's signal leaves this one alone.
  const other = new AbortController();
  const breaker2 = new api.CircuitBreaker({ failureThreshold: 1, onStateChange: () => other.abort() });
  const res = await api.retryFetch('http://osc2.test/', undefined, { fetch: memoryFetch(() => 503), breaker: breaker2, baseDelayMs: 1 });
  assert.equal(res.status, 503);
});
