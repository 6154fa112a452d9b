// End-to-end scenarios of retryFetch's contract (the call is fixed at the call, replayed
// bodies are byte-identical, the deadline holds across hooks, requests fetch would refuse are
// TypeErrors before anything is sent, the caller's retryOnStatus is the whole list, redirected
// non-idempotent requests are not re-sent, unknown options are named, clear messages and guard
// errors) and the README promises that only the core and wasm tests saw before.
//
// Like tests/e2e/scenarios.mjs they use only web APIs and ./check.mjs, so they can run in Node
// (tests/e2e/contract.test.mjs) and in a browser page; `node: true` marks those that need Node
// (Chromium sends streaming uploads only over HTTP/2). Node-only APIs are in node-only.test.mjs.
//
// ctx = { api: the package's exports,
//         seq(steps) -> { url, log(): Promise<request[]> },  env: 'node' | 'browser' }
// A logged request: { hit, method, headers, body (UTF-8 text), bodyBase64 (exact bytes), at }.
import { CheckError, ok, equal, deepEqual, match, rejects, UUID_V4 } from './check.mjs';

const fast = { baseDelayMs: 5, jitter: 'none' };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (s) => new TextEncoder().encode(s);

/** The exact bytes the server received in a logged request. */
const received = (entry) => Uint8Array.from(atob(entry.bodyBase64), (c) => c.charCodeAt(0));

/** The bytes of a BufferSource (only the view's own bytes for a view into a larger buffer). */
const bytesOf = (source) =>
  source instanceof ArrayBuffer ? new Uint8Array(source) : new Uint8Array(source.buffer, source.byteOffset, source.byteLength);

const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');

/** The `to=` value of a redirect step that sends the client to scenario `s`. */
const redirectTo = (s) => {
  const u = new URL(s.url);
  return encodeURIComponent(u.pathname + u.search);
};

/** Call `fn`, expect it to throw synchronously, and return what it threw. */
function throws(fn, message = 'expected a throw') {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new CheckError(message);
}

/** Does `message` contain `word` as a whole name (not as the start of a longer one)? */
const names = (message, word) => new RegExp(`(^|[^A-Za-z0-9_])${word}([^A-Za-z0-9_]|$)`).test(String(message));

/**
 * `retryFetch(input, init)` must be a TypeError (not a RetryError) before anything is sent:
 * with the default transport, and with a counting `fetch` option that must never be called.
 */
async function refusedBeforeSending(api, input, init, label, options = {}) {
  const plain = await rejects(api.retryFetch(input, init, { ...fast, ...options }), `${label}: was accepted`);
  equal(plain?.name, 'TypeError', `${label}:`);
  ok(!api.isRetryError(plain), `${label}: a RetryError (${plain?.message}), as if a network error was retried`);
  let calls = 0;
  const counting = (i, n) => {
    calls += 1;
    return fetch(i, n);
  };
  const viaOption = await rejects(api.retryFetch(input, init, { ...fast, ...options, fetch: counting }), `${label}: was accepted (fetch option)`);
  equal(viaOption?.name, 'TypeError', `${label} (fetch option):`);
  ok(!api.isRetryError(viaOption), `${label} (fetch option): a RetryError (${viaOption?.message})`);
  equal(calls, 0, `${label}: the transport was called`);
}

export const scenarios = [
  // ---- the call is fixed when retryFetch is called --------------------------------------
  {
    name: 'contract: one init reused for three calls: each call replays its own body under its own key',
    async run({ api, seq }) {
      const init = { method: 'POST' };
      const calls = [];
      const seqs = [];
      for (const b of ['alice:10', 'bob:20', 'carol:30']) {
        const s = seq('reset,200');
        seqs.push(s);
        init.body = b;
        calls.push(api.retryFetch(s.url, init, fast));
      }
      const results = await Promise.all(calls);
      deepEqual(results.map((r) => r.status), [200, 200, 200]);
      const keys = [];
      for (const [i, b] of ['alice:10', 'bob:20', 'carol:30'].entries()) {
        const log = await seqs[i].log();
        deepEqual(log.map((r) => [r.method, r.body]), [['POST', b], ['POST', b]], `call ${i + 1} (${b}):`);
        const [k1, k2] = log.map((r) => r.headers['idempotency-key']);
        match(k1, UUID_V4, `call ${i + 1}:`);
        equal(k2, k1, `call ${i + 1}: both attempts carry one key:`);
        keys.push(k1);
      }
      equal(new Set(keys).size, 3, `three calls, three keys: ${keys.join(', ')}`);
    },
  },
  {
    name: 'contract: changing init.method, init.headers or the input URL after the call changes no retry',
    async run({ api, seq }) {
      // a plain object: method, headers and body replaced after the call
      const a = seq('503,200');
      const init = { method: 'POST', headers: { 'X-Order': 'first' }, body: 'order-1' };
      const call = api.retryFetch(a.url, init, fast);
      init.method = 'GET';
      init.headers = { 'X-Order': 'changed' };
      init.body = undefined;
      equal((await call).status, 200);
      const log = await a.log();
      deepEqual(log.map((r) => [r.method, r.body, r.headers['x-order']]), [
        ['POST', 'order-1', 'first'],
        ['POST', 'order-1', 'first'],
      ]);
      match(log[0].headers['idempotency-key'], UUID_V4);
      equal(log[1].headers['idempotency-key'], log[0].headers['idempotency-key'], 'the retry keeps the key:');

      // a Headers object changed in place, and a URL object pointed elsewhere
      const b = seq('503,200');
      const elsewhere = seq('200');
      const headers = new Headers({ 'X-Order': 'first' });
      const url = new URL(b.url);
      const second = api.retryFetch(url, { method: 'POST', headers, body: 'order-2' }, fast);
      headers.set('X-Order', 'changed');
      url.href = elsewhere.url;
      equal((await second).status, 200);
      deepEqual((await b.log()).map((r) => [r.method, r.body, r.headers['x-order']]), [
        ['POST', 'order-2', 'first'],
        ['POST', 'order-2', 'first'],
      ]);
      equal((await elsewhere.log()).length, 0, 'the URL was taken at the call:');

      // a URL string, and headers (an object, a Headers) changed in place after the call
      for (const headers of [{ 'X-Order': 'first' }, new Headers({ 'X-Order': 'first' })]) {
        const c = seq('503,200');
        const third = api.retryFetch(c.url, { method: 'POST', headers, body: 'order-3' }, fast);
        if (headers instanceof Headers) headers.set('X-Order', 'changed');
        else headers['X-Order'] = 'changed';
        equal((await third).status, 200);
        const sent = await c.log();
        deepEqual(sent.map((r) => [r.method, r.body, r.headers['x-order']]), [
          ['POST', 'order-3', 'first'],
          ['POST', 'order-3', 'first'],
        ], `${headers.constructor.name} headers:`);
        equal(sent[1].headers['idempotency-key'], sent[0].headers['idempotency-key'], 'the retry keeps the key:');
      }
    },
  },

  // ---- replayed bodies are byte-identical with the input --------------------------------
  {
    name: 'contract: replayed bodies are byte-identical with the input: typed arrays, DataView, ArrayBuffer, Blob, UTF-8 text',
    async run({ api, seq }) {
      // views into a larger buffer, so sending the whole buffer (or a copy of the wrong range) shows
      const backing = new ArrayBuffer(64);
      new Uint8Array(backing).forEach((_, i, a) => (a[i] = 0xa0 + (i % 16)));
      const u16 = new Uint16Array(backing, 2, 5);
      u16.set([1, 0x1234, 0xffff, 0x0100, 513]);
      const f32 = new Float32Array(backing, 16, 4);
      f32.set([1.5, -0, Math.PI, -1e30]);
      const view = new DataView(backing, 35, 7);
      view.setUint32(1, 0xdeadbeef);
      const buffer = text('array buffer \u00e9\u00e8').buffer;
      const blobParts = ['blob ', new Uint8Array([0, 255, 128, 10]), '\u00fc'];
      const utf8 = 'na\u00efve \u2014 \u652f\u4ed8 \ud83d\udcb3 done';
      const bodies = [
        ['Uint16Array', u16, bytesOf(u16)],
        ['Float32Array', f32, bytesOf(f32)],
        ['DataView', view, bytesOf(view)],
        ['Uint8Array', text('bytes \u00ff'), text('bytes \u00ff')],
        ['ArrayBuffer', buffer, bytesOf(buffer)],
        ['Blob', new Blob(blobParts), new Uint8Array(await new Blob(blobParts).arrayBuffer())],
        ['string (non-ASCII)', utf8, text(utf8)],
        ['URLSearchParams', new URLSearchParams({ a: '1', b: 'z\u00e9 &=' }), text(new URLSearchParams({ a: '1', b: 'z\u00e9 &=' }).toString())],
      ];
      for (const [kind, body, expected] of bodies) {
        const want = hex(expected.slice()); // copied now: the input must not change either
        const s = seq('503,reset,200');
        equal((await api.retryFetch(s.url, { method: 'PUT', body }, fast)).status, 200, `${kind}:`);
        const log = await s.log();
        equal(log.length, 3, `${kind}: attempts:`);
        for (const [i, r] of log.entries()) equal(hex(received(r)), want, `${kind}, attempt ${i + 1}:`);
      }
    },
  },
  {
    name: 'contract: a FormData body is serialised once: the same bytes and boundary on every attempt, every field intact',
    async run({ api, seq }) {
      const form = new FormData();
      form.set('amount', '42');
      form.set('note', 'caf\u00e9 \u2615');
      form.set('file', new Blob([new Uint8Array([0, 1, 2, 254, 255]), 'file-content']), 'a.txt');
      const s = seq('503,reset,200');
      equal((await api.retryFetch(s.url, { method: 'POST', body: form }, fast)).status, 200);
      const log = await s.log();
      equal(log.length, 3);
      const type = log[0].headers['content-type'];
      match(type, /^multipart\/form-data; *boundary=/);
      for (const [i, r] of log.entries()) {
        equal(r.headers['content-type'], type, `attempt ${i + 1}: the boundary changed:`);
        equal(r.bodyBase64, log[0].bodyBase64, `attempt ${i + 1}: the body changed:`);
      }
      // the received body, parsed with the received boundary, holds the input's fields
      const parsed = await new Response(received(log[2]), { headers: { 'content-type': type } }).formData();
      equal(parsed.get('amount'), '42');
      equal(parsed.get('note'), 'caf\u00e9 \u2615');
      const file = parsed.get('file');
      equal(file?.name, 'a.txt');
      equal(hex(new Uint8Array(await file.arrayBuffer())), hex(new Uint8Array(await form.get('file').arrayBuffer())));
    },
  },

  // ---- the deadline holds across hooks --------------------------------------------------
  {
    name: 'contract: the deadline holds across a slow onRetry: nothing is sent after it, the 503 is returned',
    async run({ api, seq }) {
      const s = seq('503');
      const res = await api.retryFetch(s.url, undefined, { deadlineMs: 300, baseDelayMs: 1, jitter: 'none', onRetry: () => sleep(350) });
      equal(res.status, 503);
      await sleep(50);
      equal((await s.log()).length, 1, 'an attempt was sent after the deadline:');
    },
  },
  {
    name: 'contract: the deadline holds across a slow shouldRetry: nothing is sent after it, the 503 is returned',
    async run({ api, seq }) {
      const s = seq('503');
      const res = await api.retryFetch(s.url, undefined, {
        deadlineMs: 300,
        baseDelayMs: 1,
        jitter: 'none',
        shouldRetry: async () => {
          await sleep(350);
          return true;
        },
      });
      equal(res.status, 503);
      await sleep(50);
      equal((await s.log()).length, 1, 'an attempt was sent after the deadline:');
    },
  },

  // ---- a request fetch can never accept is a TypeError before anything is sent ----------
  {
    name: 'contract: a request fetch would refuse is a TypeError before anything is sent, not a retried network error',
    async run({ api, seq }) {
      const s = seq('200');
      await refusedBeforeSending(api, s.url, { method: 'GET', body: 'x' }, 'a GET with a body');
      await refusedBeforeSending(api, s.url, { method: 'HEAD', body: 'x' }, 'a HEAD with a body');
      await refusedBeforeSending(api, s.url, { method: 'BAD METHOD' }, 'an invalid method');
      await refusedBeforeSending(api, s.url, { signal: {} }, 'an init.signal that is not an AbortSignal');
      await refusedBeforeSending(api, 'http://[oops/', undefined, 'an invalid URL');
      equal((await s.log()).length, 0, 'nothing was sent:');
    },
  },

  {
    name: 'contract: a request fetch refuses every time without sending it is a TypeError, not retried, no failure of the origin',
    async run({ api, seq, env }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 1 });
      const s = seq('200');
      // What fetch refuses on the request alone: a browser's rules for mode and keepalive (the
      // page's origin is not the fault server's), Node's headers its HTTP client never sends.
      const cases = env === 'browser'
        ? [
          [{ mode: 'same-origin' }, "mode 'same-origin' to another origin"],
          [{ method: 'POST', keepalive: true, body: 'x'.repeat(70_000) }, "a keepalive request's body over 64 KiB"],
          // 40,000 characters, 80,000 bytes of UTF-8: what fetch counts (was taken for 40,000).
          [{ method: 'POST', keepalive: true, body: '\u00e9'.repeat(40_000) }, "a keepalive request's body over 64 KiB"],
          [{ mode: 'no-cors', redirect: 'manual' }, "mode 'no-cors' to another origin with a redirect other than 'follow'"],
        ]
        : [
          [{ headers: { 'Transfer-Encoding': 'chunked' } }, 'invalid transfer-encoding header'],
          [{ method: 'POST', body: 'x', headers: { Expect: '100-continue' } }, 'expect header not supported'],
        ];
      for (const [init, why] of cases) {
        const err = await rejects(api.retryFetch(s.url, init, { ...fast, breaker }));
        equal(err?.name, 'TypeError', `${why}:`);
        equal(err.message, `retryFetch: fetch refuses to send this request (${why}); nothing was sent`);
        equal(err.cause?.name, 'TypeError', `${why}: the cause is fetch's own error:`);
      }
      equal(breaker.state(s.url), 'closed', 'a refusal is no failure of the origin:');
      equal((await s.log()).length, 0, 'nothing was sent:');
    },
  },
  {
    name: 'contract: the same mode and keepalive requests to a reachable target are sent as fetch sends them',
    async run({ api, seq, env }) {
      // Not over the limits: a keepalive body of 64 KiB exactly, a no-cors GET that follows.
      const s = seq('200');
      const res = await api.retryFetch(s.url, { method: 'POST', keepalive: true, body: 'x'.repeat(65_536) }, fast);
      equal(res.status, 200);
      const opaque = await api.retryFetch(s.url, { mode: 'no-cors' }, fast);
      equal(opaque.status, env === 'browser' ? 0 : 200);
      equal((await s.log()).length, 2);
    },
  },

  // ---- retryOnStatus given by the caller is the whole list ------------------------------
  {
    name: "contract: a keyed POST's 409 is not retried when the caller's retryOnStatus leaves it out",
    async run({ api, seq }) {
      for (const retryOnStatus of [[503], []]) {
        const s = seq('409,200');
        const res = await api.retryFetch(s.url, { method: 'POST', body: 'x' }, { ...fast, retryOnStatus });
        equal(res.status, 409, `retryOnStatus ${JSON.stringify(retryOnStatus)}:`);
        const log = await s.log();
        equal(log.length, 1, `retryOnStatus ${JSON.stringify(retryOnStatus)}: attempts:`);
        match(log[0].headers['idempotency-key'], UUID_V4, 'the POST was keyed:');
      }
      const d = seq('409,200');
      equal((await api.retryFetch(d.url, { method: 'POST', body: 'x' }, fast)).status, 200, 'the default list retries 409 when keyed:');
      equal((await d.log()).length, 2);
    },
  },

  // ---- a non-idempotent request that was redirected is not re-sent ----------------------
  {
    name: 'contract: a POST redirected (302, 303) to a 503 is not re-sent; the 503 is returned',
    async run({ api, seq }) {
      for (const status of [303, 302]) {
        const target = seq('503');
        const post = seq(`${status}+to=${redirectTo(target)}`);
        const res = await api.retryFetch(post.url, { method: 'POST', body: 'charge' }, fast);
        equal(res.status, 503, `${status}:`);
        equal(res.redirected, true, `${status}: res.redirected:`);
        const hits = await post.log();
        deepEqual(hits.map((r) => [r.method, r.body]), [['POST', 'charge']], `${status}: the POST was re-sent:`);
        equal((await target.log()).length, 1, `${status}: the redirect target:`);
      }
    },
  },
  {
    name: 'contract: a GET redirected to a 503 is retried (it is idempotent)',
    async run({ api, seq }) {
      const target = seq('503,200');
      const get = seq(`303+to=${redirectTo(target)}`);
      const res = await api.retryFetch(get.url, undefined, fast);
      equal(res.status, 200);
      equal(res.redirected, true);
      equal((await get.log()).length, 2, 'the GET was sent again:');
      deepEqual((await target.log()).map((r) => r.method), ['GET', 'GET']);
    },
  },

  // ---- unknown options are TypeErrors naming the bad name and the closest known one -----
  {
    name: 'contract: an unknown option is a TypeError naming it and the closest known name, before anything is sent',
    async run({ api, seq }) {
      const s = seq('200');
      const err = await rejects(api.retryFetch(s.url, undefined, { maxAttemps: 3 }), '{ maxAttemps: 3 } was accepted');
      equal(err?.name, 'TypeError');
      ok(names(err.message, 'maxAttemps') && names(err.message, 'maxAttempts'), `${err.message} names maxAttemps and maxAttempts`);

      const client = api.createRetryFetch(fast);
      const perCall = await rejects(client(s.url, undefined, { retryOnStatuses: [503] }), 'a per-call unknown option was accepted');
      equal(perCall?.name, 'TypeError');
      ok(names(perCall.message, 'retryOnStatuses') && names(perCall.message, 'retryOnStatus'), perCall.message);

      const defaults = throws(() => api.createRetryFetch({ timeout: 5 }), 'createRetryFetch({ timeout: 5 }) was accepted');
      equal(defaults?.name, 'TypeError');
      ok(names(defaults.message, 'timeout') && names(defaults.message, 'timeoutMs'), `${defaults.message} names timeout and timeoutMs`);
      equal((await s.log()).length, 0, 'nothing was sent:');
    },
  },
  {
    name: 'contract: an unknown guard option is a TypeError naming it and the closest known name',
    async run({ api }) {
      for (const [make, bad, good] of [
        [() => new api.RetryBudget({ maxToken: 5 }), 'maxToken', 'maxTokens'],
        [() => new api.CircuitBreaker({ failureTreshold: 2 }), 'failureTreshold', 'failureThreshold'],
        [() => new api.AdaptiveThrottle({ initalRate: 5 }), 'initalRate', 'initialRate'],
      ]) {
        const err = throws(make, `${bad} was accepted`);
        equal(err?.name, 'TypeError', `${bad}:`);
        ok(names(err.message, bad) && names(err.message, good), `${err.message} names ${bad} and ${good}`);
      }
    },
  },

  // ---- the idempotency header ---------------------------------------------------------------
  {
    name: 'contract: idempotencyHeader refuses forbidden request header names with a TypeError',
    async run({ api, seq }) {
      const s = seq('200');
      for (const header of ['Content-Length', 'host', 'Cookie', 'Transfer-Encoding']) {
        const err = await rejects(api.retryFetch(s.url, { method: 'POST', body: 'x' }, { idempotencyHeader: header }), `${header} was accepted`);
        equal(err?.name, 'TypeError', `${header}:`);
        ok(err.message.includes('"idempotencyHeader"'), `${err.message} names idempotencyHeader`);
        const threw = throws(() => api.createRetryFetch({ idempotencyHeader: header }), `createRetryFetch: ${header} was accepted`);
        equal(threw?.name, 'TypeError', `createRetryFetch, ${header}:`);
      }
      equal((await s.log()).length, 0, 'nothing was sent:');
    },
  },

  // ---- messages ---------------------------------------------------------------------------
  {
    name: 'contract: a bad retryOnStatus item is named with its index; options = [] is a TypeError',
    async run({ api, seq }) {
      const s = seq('200');
      const err = await rejects(api.retryFetch(s.url, undefined, { retryOnStatus: [503, '503'] }));
      equal(err?.name, 'TypeError');
      ok(err.message.includes('"retryOnStatus"'), `${err.message} names "retryOnStatus"`);
      ok(err.message.includes('[1]'), `${err.message} names the index [1]`);
      ok(err.message.includes('"503"'), `${err.message} shows the value "503"`);
      const array = await rejects(api.retryFetch(s.url, undefined, []), 'options = [] was accepted');
      equal(array?.name, 'TypeError', 'options = []:');
      equal((await s.log()).length, 0, 'nothing was sent:');
    },
  },
  {
    name: 'contract: a transport that resolves to something that is not a Response is a TypeError, not retried',
    async run({ api }) {
      for (const [label, value] of [['{}', {}], ['42', 42], ['{ status: 200 }', { status: 200 }], ...[NaN, 42, 200.5, 1000, '200'].map((status) => [`{ status: ${String(status)}, headers }`, { status, headers: new Headers() }])]) {
        let calls = 0;
        const fetch = async () => {
          calls += 1;
          return value;
        };
        const err = await rejects(api.retryFetch('https://example.invalid/', undefined, { ...fast, fetch }), `${label} was accepted`);
        equal(err?.name, 'TypeError', `${label}:`);
        ok(!api.isRetryError(err), `${label}: a RetryError`);
        equal(calls, 1, `${label}: transport calls:`);
      }
    },
  },

  // ---- guards ----------------------------------------------------------------------------
  {
    name: 'contract: a freed guard (as an option, its methods, a second free()) is a clear TypeError',
    async run({ api, seq }) {
      const s = seq('200');
      for (const [Class, option] of [[api.RetryBudget, 'budget'], [api.CircuitBreaker, 'breaker'], [api.AdaptiveThrottle, 'throttle']]) {
        const guard = new Class();
        guard.free();
        const err = await rejects(api.retryFetch(s.url, undefined, { [option]: guard }), `a freed ${Class.name} was accepted`);
        ok(err instanceof Error, `${Class.name}: ${String(err)} is not an Error`);
        ok(['Error', 'TypeError'].includes(err.name), `${Class.name}: ${err.name}`);
        ok(String(err.message).includes(Class.name), `${err.message} names ${Class.name}`);
        match(err.message, /freed/i, `${Class.name}:`);
        ok(!/null pointer/i.test(err.message), err.message);
        // its own methods, getters and a second free() say the same, and the instance lives on
        const method = { RetryBudget: 'tokens', AdaptiveThrottle: 'rate', CircuitBreaker: 'state' }[Class.name];
        const uses = [[method, () => guard[method](s.url)], ['free', () => guard.free()]];
        if (Class === api.RetryBudget) uses.push(['maxTokens', () => guard.maxTokens]);
        for (const [member, use] of uses) {
          let thrown;
          try { use(); } catch (e) { thrown = e; }
          equal(thrown?.name, 'TypeError', `${Class.name}.${member} after free():`);
          ok(String(thrown?.message).startsWith(`${Class.name}.${member}: `), thrown?.message);
          match(thrown.message, /was freed/, `${Class.name}.${member}:`);
        }
      }
      equal((await s.log()).length, 0, 'nothing was sent:');
      const alive = await api.retryFetch(s.url, undefined, { budget: new api.RetryBudget() });
      equal(alive.status, 200, 'a call after the freed guards:');
    },
  },
  {
    name: 'contract: a guard option that is no guard of this copy is a TypeError of the option naming what was given',
    async run({ api, seq }) {
      const s = seq('200');
      const cases = [
        ['breaker', Object.create(api.CircuitBreaker.prototype), /got an object with the prototype of CircuitBreaker, not made by new CircuitBreaker\(\); expected a CircuitBreaker/],
        ['budget', Object.create(api.RetryBudget.prototype), /got an object with the prototype of RetryBudget, not made by new RetryBudget\(\); expected a RetryBudget/],
        ['throttle', Object.create(api.AdaptiveThrottle.prototype), /got an object with the prototype of AdaptiveThrottle, not made by new AdaptiveThrottle\(\); expected an AdaptiveThrottle/],
        ['budget', { __retryFetchGuard: 1 }, /got \[object Object\]; expected a RetryBudget/],
        ['breaker', new Proxy(new api.CircuitBreaker(), {}), /got an object that is no guard made by new CircuitBreaker\(\) of this copy \(reading its guard id threw: /],
        ['budget', Object.create(new api.RetryBudget()), /got an object that is no guard made by new RetryBudget\(\) of this copy/],
      ];
      for (const [option, value, message] of cases) {
        const err = await rejects(api.retryFetch(s.url, undefined, { [option]: value }), `${option}: accepted`);
        equal(err.name, 'TypeError', `${option}: ${err.message}:`);
        ok(err.message.startsWith(`retryFetch: invalid option "${option}": `), err.message);
        match(err.message, message, `${option}:`);
      }
      let thrown;
      try { Object.create(api.AdaptiveThrottle.prototype).rate(s.url); } catch (e) { thrown = e; }
      match(String(thrown?.message), /called on an object that is not an AdaptiveThrottle/);
      equal((await s.log()).length, 0, 'nothing was sent:');
    },
  },
  {
    name: 'contract: guard methods given a bad argument throw TypeErrors naming it',
    async run({ api, seq }) {
      const s = seq('200');
      const budget = new api.RetryBudget();
      const breaker = new api.CircuitBreaker();
      const throttle = new api.AdaptiveThrottle();
      equal(budget.tokens(s.url), 10, 'a good argument still works:');
      equal(breaker.state(s.url), 'closed', 'a good argument still works:');
      for (const [label, fn] of [
        ['budget.tokens(42)', () => budget.tokens(42)],
        ['breaker.state(undefined)', () => breaker.state(undefined)],
        ['throttle.rate({})', () => throttle.rate({})],
        // A string that is no URL even against a page's location: no origin, not a default.
        ['budget.tokens("http://[")', () => budget.tokens('http://[')],
        ['breaker.state("http://[")', () => breaker.state('http://[')],
        ['throttle.rate("http://[")', () => throttle.rate('http://[')],
        // A URL of no origin (a host:port written without its scheme reads as one).
        ['budget.tokens("localhost:3000")', () => budget.tokens('localhost:3000')],
      ]) {
        const err = throws(fn, `${label} did not throw`);
        equal(err?.name, 'TypeError', `${label}:`);
        ok(names(err.message, 'url'), `${label}: ${err.message} names the argument url`);
      }
    },
  },

  // ---- README promises that only the core and wasm tests saw before -----------------------
  {
    name: "contract: a Request input's own signal aborts the call with its reason",
    async run({ api, seq }) {
      const s = seq('hang');
      const controller = new AbortController();
      const request = new Request(s.url, { signal: controller.signal });
      const call = api.retryFetch(request, undefined, { ...fast, timeoutMs: 60_000 });
      while ((await s.log()).length === 0) await sleep(5);
      const reason = new Error('the user closed the tab');
      controller.abort(reason);
      const err = await rejects(call);
      equal(err, reason, 'rejects with the exact reason:');
      await sleep(50);
      equal((await s.log()).length, 1, 'nothing more was sent:');
    },
  },
  {
    name: 'contract: an abort after the Response resolved cancels reading its body (options.signal and init.signal)',
    async run({ api, seq }) {
      for (const where of ['options', 'init']) {
        const s = seq('200+slowbody=100'); // 20 chunks, 2 s in all
        const controller = new AbortController();
        const res =
          where === 'options'
            ? await api.retryFetch(s.url, undefined, { ...fast, signal: controller.signal })
            : await api.retryFetch(s.url, { signal: controller.signal }, fast);
        equal(res.status, 200, `${where}:`);
        controller.abort();
        const err = await rejects(res.text(), `${where}.signal: the body was read to its end after the abort`);
        equal(err?.name, 'AbortError', `${where}.signal:`);
      }
    },
  },
  {
    name: 'contract: a promise returned by onRetry is awaited before the next attempt',
    async run({ api, seq }) {
      const s = seq('503,200');
      let settledAt;
      const res = await api.retryFetch(s.url, undefined, {
        baseDelayMs: 1,
        jitter: 'none',
        onRetry: () =>
          sleep(300).then(() => {
            settledAt = Date.now();
          }),
      });
      equal(res.status, 200);
      const log = await s.log();
      equal(log.length, 2);
      ok(settledAt !== undefined, 'the hook settled');
      // 2 ms for the clocks' millisecond ticks; without the await the retry would come ~300 ms early
      ok(log[1].at >= settledAt - 2, `the retry was sent ${settledAt - log[1].at} ms before onRetry's promise settled`);
    },
  },
  {
    name: 'contract: a rejecting onRetry promise rejects the call with its reason, and nothing more is sent',
    async run({ api, seq }) {
      const s = seq('503,200');
      const boom = new Error('onRetry said no');
      const err = await rejects(
        api.retryFetch(s.url, undefined, {
          ...fast,
          onRetry: async () => {
            await sleep(20);
            throw boom;
          },
        }),
      );
      equal(err, boom);
      await sleep(50);
      equal((await s.log()).length, 1);
    },
  },
  {
    name: 'contract: shouldRetry throwing (or rejecting) rejects with that error; a non-boolean is a TypeError',
    async run({ api, seq }) {
      for (const [label, shouldRetry] of [
        ['throws', () => { throw new RangeError('sync'); }],
        ['rejects', async () => { throw new RangeError('async'); }],
      ]) {
        const s = seq('503,200');
        const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, shouldRetry }), `${label}: resolved`);
        equal(err?.name, 'RangeError', `${label}:`);
        equal(err.message, label === 'throws' ? 'sync' : 'async');
        equal((await s.log()).length, 1, `${label}: attempts:`);
      }
      for (const verdict of ['yes', 1, undefined]) {
        const s = seq('503,200');
        const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, shouldRetry: () => verdict }), `${String(verdict)}: resolved`);
        equal(err?.name, 'TypeError', `shouldRetry returned ${JSON.stringify(verdict)}:`);
        match(err.message, /shouldRetry/, `${String(verdict)}:`);
        equal((await s.log()).length, 1, `${String(verdict)}: attempts:`);
      }
    },
  },
  {
    name: "contract: retryOnNetworkError: false ends a reset in a RetryError 'not-retryable' after 1 attempt",
    async run({ api, seq }) {
      const s = seq('reset,200');
      const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, retryOnNetworkError: false }));
      equal(err?.name, 'RetryError');
      ok(api.isRetryError(err));
      equal(err.reason, 'not-retryable');
      equal(err.attempts.length, 1);
      ok(err.cause !== undefined, 'the network error is the cause');
      equal((await s.log()).length, 1);
    },
  },
  {
    name: 'contract: a keyed call that gives up says its key; trying again with it sends the same key',
    async run({ api, seq }) {
      const s = seq('reset,reset,reset,reset,201');
      const err = await rejects(api.retryFetch(s.url, { method: 'POST', body: 'pay' }, { ...fast, maxAttempts: 2 }));
      equal(err?.name, 'RetryError');
      equal(err.reason, 'attempts');
      const sent = (await s.log()).map((r) => r.headers['idempotency-key']);
      equal(sent.length, 2);
      match(err.idempotencyKey, UUID_V4);
      deepEqual(sent, [err.idempotencyKey, err.idempotencyKey], 'the key every attempt carried:');
      const res = await api.retryFetch(s.url, { method: 'POST', body: 'pay' }, { ...fast, maxAttempts: 3, idempotencyKey: err.idempotencyKey });
      equal(res.status, 201);
      deepEqual([...new Set((await s.log()).map((r) => r.headers['idempotency-key']))], [err.idempotencyKey], 'one key for both calls:');
      // A call without a key says none.
      const g = seq('reset,reset');
      const plain = await rejects(api.retryFetch(g.url, undefined, { ...fast, maxAttempts: 2 }));
      equal(plain.idempotencyKey, undefined);
    },
  },
  {
    name: "contract: retryOnTimeout: false ends a timeout in a RetryError 'not-retryable' whose cause is a TimeoutError",
    async run({ api, seq }) {
      const s = seq('hang,200');
      const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, timeoutMs: 100, retryOnTimeout: false }));
      equal(err?.name, 'RetryError');
      equal(err.reason, 'not-retryable');
      equal(err.cause?.name, 'TimeoutError');
      equal(err.attempts.length, 1);
      await sleep(50);
      equal((await s.log()).length, 1);
    },
  },
  {
    name: "contract: a stream body above maxBufferedBodyBytes that meets a reset: RetryError 'body-not-replayable', 1 attempt",
    node: true, // Chromium sends streaming uploads only over HTTP/2
    async run({ api, seq }) {
      const stream = new ReadableStream({
        start(c) {
          c.enqueue(text('0123'));
          c.enqueue(text('456789'));
          c.close();
        },
      });
      const s = seq('reset,200');
      const err = await rejects(api.retryFetch(s.url, { method: 'PUT', body: stream, duplex: 'half' }, { ...fast, maxBufferedBodyBytes: 4 }));
      equal(err?.name, 'RetryError');
      equal(err.reason, 'body-not-replayable');
      equal(err.attempts.length, 1);
      deepEqual((await s.log()).map((r) => r.body), ['0123456789'], 'sent once, whole:');
    },
  },
  {
    name: "contract: a retry refused by the circuit it opened is a RetryError 'circuit-open'; CircuitOpenError.origin is the URL's origin",
    async run({ api, seq }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 60_000 });
      const s = seq('reset,reset');
      const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, breaker }));
      equal(err?.name, 'RetryError');
      equal(err.reason, 'circuit-open');
      equal(err.attempts.length, 1);
      equal((await s.log()).length, 1, 'the first failure opened it; the retry was not sent:');
      equal(breaker.state(s.url), 'open');

      const open = await rejects(api.retryFetch(s.url, undefined, { ...fast, breaker }));
      equal(open?.name, 'CircuitOpenError');
      ok(api.isCircuitOpenError(open));
      equal(open.origin, new URL(s.url).origin);
      ok(open.retryAfterMs > 0 && open.retryAfterMs <= 60_000, `retryAfterMs ${open.retryAfterMs}`);
      equal((await s.log()).length, 1, 'nothing was sent while open:');
    },
  },
  {
    name: 'contract: a call an open circuit refuses before anything is sent cancels the stream body it did not send (the caller\'s stream, or a Request input\'s)',
    async run({ api, seq }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 60_000 });
      const s = seq('reset');
      await rejects(api.retryFetch(s.url, undefined, { ...fast, breaker }));
      equal(breaker.state(s.url), 'open');
      const long = (cancelled) => new ReadableStream({
        pull(c) { c.enqueue(text('0123456789')); },
        cancel(reason) { cancelled.push(String(reason)); },
      });
      for (const input of ['init', 'Request']) {
        const cancelled = [];
        const body = long(cancelled);
        const call = input === 'init'
          ? api.retryFetch(s.url, { method: 'PUT', body, duplex: 'half' }, { ...fast, breaker, maxBufferedBodyBytes: 8 })
          : api.retryFetch(new Request(s.url, { method: 'PUT', body, duplex: 'half' }), undefined, { ...fast, breaker, maxBufferedBodyBytes: 8 });
        const err = await rejects(call);
        equal(err?.name, 'CircuitOpenError', `${input}:`);
        await sleep(20);
        equal(cancelled.length, 1, `${input}: the stream it did not send was cancelled:`);
      }
      equal((await s.log()).length, 1, 'nothing more was sent:');
    },
  },
  {
    name: "contract: a failure whose server says X-Should-Retry: false (or Stripe-Should-Retry) is the answer, not retried; 'true' changes nothing",
    async run({ api, seq }) {
      const a = seq('503+sr=false,200');
      equal((await api.retryFetch(a.url, { method: 'POST', body: 'pay' }, fast)).status, 503);
      equal((await a.log()).length, 1, 'X-Should-Retry: false:');
      const b = seq('500+ssr=False,200');
      equal((await api.retryFetch(b.url, undefined, fast)).status, 500);
      equal((await b.log()).length, 1, 'Stripe-Should-Retry: False:');
      const c = seq('503+sr=true,200');
      equal((await api.retryFetch(c.url, undefined, fast)).status, 200);
      equal((await c.log()).length, 2, 'a 503 with true is retried as any:');
      const d = seq('400+sr=true,200');
      equal((await api.retryFetch(d.url, undefined, fast)).status, 400);
      equal((await d.log()).length, 1, 'a 400 with true is not:');
    },
  },
  {
    name: 'contract: respectRetryAfter: false uses the computed delay, not Retry-After',
    async run({ api, seq }) {
      const s = seq('429+ra=1,200');
      const infos = [];
      const res = await api.retryFetch(s.url, undefined, { baseDelayMs: 5, jitter: 'none', respectRetryAfter: false, onRetry: (i) => infos.push(i) });
      equal(res.status, 200);
      deepEqual(infos.map((i) => [i.attempt, i.delayMs, i.reason, i.status]), [[1, 5, 'status', 429]]);
      equal((await s.log()).length, 2);
    },
  },

  // ---- a key is a key; aborts and deadlines end the call at once; stops keep the response --
  {
    name: 'contract: an empty, blank or over-long Idempotency-Key on a POST is a TypeError before sending',
    async run({ api, seq }) {
      const s = seq('reset,reset,200');
      for (const [value, label] of [['', 'empty'], ['   ', 'blank'], ['k'.repeat(300), '300 characters']]) {
        await refusedBeforeSending(api, s.url, { method: 'POST', body: 'pay', headers: { 'Idempotency-Key': value } }, `a key header ${label}`);
        // No body and idempotencyKey: false (the fast path's shape): the caller's key still counts.
        await refusedBeforeSending(api, s.url, { method: 'POST', headers: { 'Idempotency-Key': value } }, `a key header ${label}, no body`, { idempotencyKey: false });
      }
      equal((await s.log()).length, 0, 'nothing was sent:');
      for (const near of ['Auto', 'AUTO']) {
        const err = await rejects(api.retryFetch(s.url, { method: 'POST', body: 'pay' }, { idempotencyKey: near }), `idempotencyKey ${near}`);
        equal(err?.name, 'TypeError');
        ok(names(err.message, 'idempotencyKey'), err.message);
      }
      // A valid key of the caller's is used as it is, on every retry.
      const res = await api.retryFetch(s.url, { method: 'POST', body: 'pay', headers: { 'Idempotency-Key': 'order-42' } }, fast);
      equal(res.status, 200);
      deepEqual((await s.log()).map((r) => r.headers['idempotency-key']), ['order-42', 'order-42', 'order-42']);
    },
  },
  {
    name: 'contract: an abort or the deadline ends a call whose stream body never yields',
    node: true,
    async run({ api, seq }) {
      const s = seq('200');
      const never = () => new ReadableStream({ pull: () => new Promise(() => {}) });
      const controller = new AbortController();
      const reason = new Error('stop');
      const aborted = api.retryFetch(s.url, { method: 'POST', body: never(), duplex: 'half' }, { signal: controller.signal });
      setTimeout(() => controller.abort(reason), 30);
      equal(await settlesWithin(aborted, 2_000), 'rejected');
      equal(await aborted.catch((e) => e), reason, 'the abort reason is the error:');
      const late = api.retryFetch(s.url, { method: 'POST', body: never(), duplex: 'half' }, { deadlineMs: 100 });
      equal(await settlesWithin(late, 2_000), 'rejected');
      const err = await late.catch((e) => e);
      equal(err?.name, 'RetryError');
      equal(err.reason, 'deadline');
      equal((await s.log()).length, 0, 'nothing was sent:');
    },
  },
  {
    name: 'contract: a hook whose promise never settles cannot hold the call past an abort or the deadline',
    async run({ api, seq }) {
      const s = seq('503,200');
      const pending = () => new Promise(() => {});
      const byDeadline = api.retryFetch(s.url, undefined, { ...fast, deadlineMs: 300, onRetry: pending });
      equal(await settlesWithin(byDeadline, 2_000), 'fulfilled');
      const res = await byDeadline;
      equal(res.status, 503, 'the deadline returns the last response:');
      ok((await res.text()).includes('503'), 'its body is readable');
      const controller = new AbortController();
      const reason = new Error('user left');
      const byAbort = api.retryFetch(seq('503,200').url, undefined, { ...fast, signal: controller.signal, shouldRetry: pending });
      setTimeout(() => controller.abort(reason), 50);
      equal(await settlesWithin(byAbort, 2_000), 'rejected');
      equal(await byAbort.catch((e) => e), reason);
    },
  },
  {
    name: 'contract: a transport that ignores its signal cannot hold the call past an abort or the deadline',
    async run({ api, seq }) {
      const s = seq('200');
      const deaf = () => new Promise(() => {});
      const late = api.retryFetch(s.url, undefined, { deadlineMs: 100, fetch: deaf });
      equal(await settlesWithin(late, 2_000), 'rejected');
      const err = await late.catch((e) => e);
      equal(err?.name, 'RetryError');
      equal(err.reason, 'deadline');
      const controller = new AbortController();
      const reason = new Error('stop');
      const byAbort = api.retryFetch(s.url, undefined, { signal: controller.signal, fetch: deaf });
      setTimeout(() => controller.abort(reason), 30);
      equal(await settlesWithin(byAbort, 2_000), 'rejected');
      equal(await byAbort.catch((e) => e), reason);
    },
  },
  {
    name: 'contract: nothing is sent after the deadline, counted from the call (a blocked event loop)',
    async run({ api, seq }) {
      const s = seq('200');
      let calls = 0;
      const counting = (i, n) => {
        calls += 1;
        return fetch(i, n);
      };
      const call = api.retryFetch(s.url, undefined, { deadlineMs: 30, fetch: counting });
      const until = performance.now() + 100;
      while (performance.now() < until) {
        // the event loop is blocked past the deadline before the first attempt could go
      }
      const err = await rejects(call);
      equal(err?.name, 'RetryError');
      equal(err.reason, 'deadline');
      equal(err.attempts.length, 0);
      equal(calls, 0, 'the transport was called after the deadline');
    },
  },
  {
    name: 'contract: a deadline that passes between attempts is the cause: a pending hook, a late backoff timer',
    async run({ api, seq }) {
      // A connection reset, then the deadline passes before the retry can go: the RetryError's
      // cause is the deadline's TimeoutError, not the reset's error.
      const pending = () => new Promise(() => {});
      const s = seq('reset,200');
      const byHook = await rejects(api.retryFetch(s.url, undefined, { ...fast, deadlineMs: 300, onRetry: pending }));
      equal(byHook?.name, 'RetryError');
      equal(byHook.reason, 'deadline');
      equal(byHook.attempts.length, 1);
      equal(byHook.cause?.name, 'TimeoutError', `the cause was ${byHook.cause}:`);
      equal(byHook.cause.message, 'retryFetch: the deadline (deadlineMs 300) passed');
      // The backoff's timer fires after the deadline (the event loop was blocked meanwhile).
      const t = seq('reset,200');
      const late = api.retryFetch(t.url, undefined, { baseDelayMs: 100, factor: 1, jitter: 'none', deadlineMs: 150 });
      await sleep(40); // the reset is in, the 100 ms wait has begun
      const until = performance.now() + 200;
      while (performance.now() < until) {
        // blocked past the deadline while the wait's timer is due
      }
      const err = await rejects(late);
      equal(err?.name, 'RetryError');
      equal(err.reason, 'deadline');
      equal(err.cause?.name, 'TimeoutError', `the cause was ${err.cause}:`);
      equal((await t.log()).length, 1, 'a retry was sent after the deadline');
    },
  },
  {
    name: 'contract: a throttle refusal after a 503 returns that 503, its body readable, as every stop does',
    async run({ api, seq }) {
      const throttle = new api.AdaptiveThrottle({ initialRate: 1, minRate: 0.5, rampMs: 60_000, maxWaitMs: 200 });
      const s = seq('503,200');
      const res = await api.retryFetch(s.url, undefined, { ...fast, throttle });
      equal(res.status, 503);
      ok((await res.text()).includes('"status":503'), 'the body is readable');
      equal((await s.log()).length, 1, 'the retry was not sent:');
    },
  },
  {
    name: 'contract: a POST answered 307 or 308 reaches the target once, with its body, and succeeds',
    async run({ api, seq }) {
      for (const status of [307, 308]) {
        const target = seq('201');
        const old = seq(`${status}+to=${redirectTo(target)}`);
        const res = await api.retryFetch(old.url, { method: 'POST', body: 'pay' }, fast);
        equal(res.status, 201, `${status}:`);
        equal((await old.log()).length, 1, `${status}: POSTs to the old URL:`);
        const sent = await target.log();
        equal(sent.length, 1, `${status}: POSTs to the target:`);
        equal(sent[0].method, 'POST');
        equal(sent[0].body, 'pay');
      }
    },
  },
  {
    name: 'contract: a byte body through a 307 or 308 reaches the target whole, POST (followed by the call) and PUT (by fetch)',
    async run({ api, seq }) {
      const bytes = Uint8Array.from([0, 255, 1, 128, 10, 13, 0xef, 0xbb, 0xbf]);
      for (const [method, status] of [['POST', 307], ['PUT', 308], ['PUT', 307]]) {
        const target = seq('201');
        const old = seq(`${status}+to=${redirectTo(target)}`);
        const res = await api.retryFetch(old.url, { method, body: bytes }, fast);
        equal(res.status, 201, `${method} ${status}:`);
        const sent = await target.log();
        equal(sent.length, 1, `${method} ${status}: requests to the target:`);
        equal(sent[0].method, method);
        equal(sent[0].bodyBase64, btoa(String.fromCharCode(...bytes)), `${method} ${status}: the bytes sent:`);
      }
      equal(bytes.byteLength, 9, "the caller's bytes were detached");
    },
  },
  {
    name: "contract: a plain init's members are read once: every attempt sends what the first read gave",
    async run({ api, seq }) {
      const s = seq('503,200');
      let reads = 0;
      const init = {
        method: 'POST',
        headers: { 'X-Order': 'o-1' },
        get body() {
          reads += 1;
          return reads === 1 ? 'order-1' : `changed-${reads}`;
        },
      };
      equal((await api.retryFetch(s.url, init, fast)).status, 200);
      equal(reads, 1, 'the body getter ran');
      deepEqual((await s.log()).map((r) => [r.method, r.body, r.headers['x-order']]), [
        ['POST', 'order-1', 'o-1'],
        ['POST', 'order-1', 'o-1'],
      ]);
    },
  },
  {
    name: 'contract: every call gets a key of its own, however many calls (40 POSTs, 40 UUID v4 keys)',
    async run({ api, seq }) {
      const s = seq('200');
      for (let i = 0; i < 40; i += 1) await api.retryFetch(s.url, { method: 'POST', body: `n${i}` }, fast);
      const keys = (await s.log()).map((r) => r.headers['idempotency-key']);
      equal(keys.length, 40);
      for (const k of keys) match(k, UUID_V4);
      equal(new Set(keys).size, 40, 'two calls shared a key');
    },
  },
  {
    name: "contract: a client's default signal and a call's own signal both cancel the call",
    async run({ api, seq }) {
      const s = seq('hang');
      const client = new AbortController();
      const call = new AbortController();
      const retryFetch = api.createRetryFetch({ signal: client.signal });
      const reason = new Error('the page is closing');
      const pending = retryFetch(s.url, undefined, { signal: call.signal });
      setTimeout(() => client.abort(reason), 30);
      equal(await settlesWithin(pending, 2_000), 'rejected');
      equal(await pending.catch((e) => e), reason, "the client's signal was ignored:");
      const other = new AbortController();
      const own = new Error('this call only');
      const second = api.createRetryFetch({ signal: other.signal })(seq('hang').url, undefined, { signal: call.signal });
      setTimeout(() => call.abort(own), 30);
      equal(await second.catch((e) => e), own);
      // null clears both.
      const cleared = api.createRetryFetch({ signal: AbortSignal.abort(new Error('default')) });
      equal((await cleared(seq('200').url, undefined, { signal: null })).status, 200);
    },
  },
  {
    name: 'contract: retry options put in init (ours, or ky and axios names) are a TypeError pointing at the third argument',
    async run({ api, seq }) {
      const s = seq('503,200');
      for (const init of [{ maxAttempts: 5 }, { retry: { limit: 2 } }, { timeout: 1000 }, { retries: 3 }, { method: 'POST', body: 'x', timeoutMs: 100 }]) {
        const name = Object.keys(init).find((k) => k !== 'method' && k !== 'body');
        const err = await rejects(api.retryFetch(s.url, init), `init ${name} was accepted`);
        equal(err?.name, 'TypeError');
        ok(err.message.includes(`"${name}"`) && err.message.includes('third argument'), err.message);
      }
      equal((await s.log()).length, 0, 'nothing was sent:');
      // signal belongs to both; fetch's own members are fine.
      const res = await api.retryFetch(s.url, { signal: new AbortController().signal, headers: { 'X-A': '1' }, cache: 'no-store' }, fast);
      equal(res.status, 200);
    },
  },
  {
    name: "contract: onRetry sees the failed response's headers (Retry-After, a request id)",
    async run({ api, seq }) {
      const s = seq('503+ra=0,200');
      const seen = [];
      const res = await api.retryFetch(s.url, undefined, { ...fast, onRetry: (info) => seen.push([info.status, info.headers?.get('retry-after')]) });
      equal(res.status, 200);
      deepEqual(seen, [[503, '0']]);
    },
  },
  {
    name: 'contract: headers as a Map or any iterable of [name, value] pairs are sent, as fetch takes them (the option, a client\'s defaults, beforeRetry)',
    async run({ api, seq }) {
      const pairs = [['X-A', 'a'], ['X-B', 'b']];
      const iterable = { *[Symbol.iterator]() { yield* pairs; } };
      for (const [label, headers] of [['a Map', new Map(pairs)], ['a Set of pairs', new Set(pairs)], ['an iterable', iterable]]) {
        const s = seq('503,200');
        equal((await api.retryFetch(s.url, undefined, { ...fast, headers })).status, 200, `${label}:`);
        const c = seq('200');
        equal((await api.createRetryFetch({ headers })(c.url, undefined, fast)).status, 200, `${label}:`);
        const b = seq('503,200');
        equal((await api.retryFetch(b.url, undefined, { ...fast, beforeRetry: () => headers })).status, 200, `${label}:`);
        const sent = [...(await s.log()), ...(await c.log())].map((r) => [r.headers['x-a'], r.headers['x-b']]);
        deepEqual(sent, [['a', 'b'], ['a', 'b'], ['a', 'b']], `${label}, the option and a client's defaults:`);
        deepEqual((await b.log()).map((r) => [r.headers['x-a'], r.headers['x-b']]), [[undefined, undefined], ['a', 'b']], `${label}, beforeRetry:`);
      }
      for (const [label, headers] of [['a Map with a value not a string', new Map([['X-A', 1]])], ['an iterable of strings', new Set(['X-A'])], ['a string of two characters for a pair', new Set(['xy'])], ['an array with one', ['xy']]]) {
        const s = seq('200');
        const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, headers }));
        equal(err?.name, 'TypeError', `${label}:`);
        ok(names(err.message, 'headers'), `${label}: ${err.message}`);
        equal((await s.log()).length, 0, `${label}: nothing was sent:`);
      }
      // A getter or an iterator of the caller's that throws: its error, as an option's own
      // getter's is (not a TypeError that hides it).
      const thrown = new Error('no token yet');
      const throwing = [
        ['a getter', () => ({ get Authorization() { throw thrown; } })],
        ['an iterator', () => ({ *[Symbol.iterator]() { yield ['X-A', 'a']; throw thrown; } })],
      ];
      for (const [label, make] of throwing) {
        const s = seq('200');
        equal(await rejects(api.retryFetch(s.url, undefined, { ...fast, headers: make() })), thrown, `${label}, the option:`);
        equal((await s.log()).length, 0, `${label}: nothing was sent:`);
        const b = seq('503,200');
        equal(await rejects(api.retryFetch(b.url, undefined, { ...fast, beforeRetry: make })), thrown, `${label}, beforeRetry:`);
        equal((await b.log()).length, 1, `${label}: the retry was not sent:`);
      }
    },
  },
  {
    name: 'contract: beforeRetry changes the headers of the retries (a refreshed token); the key and body stay fixed',
    async run({ api, seq }) {
      const s = seq('401,503,200');
      const infos = [];
      let token = 'old';
      const res = await api.retryFetch(s.url, { method: 'POST', body: 'pay', headers: { Authorization: 'Bearer old' } }, {
        ...fast,
        retryOnStatus: [401, 503],
        beforeRetry: async (info) => {
          infos.push([info.attempt, info.status]);
          if (info.status === 401) token = 'new';
          return { Authorization: `Bearer ${token}` };
        },
      });
      equal(res.status, 200);
      deepEqual(infos, [[2, 401], [3, 503]]);
      const log = await s.log();
      deepEqual(log.map((r) => r.headers.authorization), ['Bearer old', 'Bearer new', 'Bearer new']);
      equal(new Set(log.map((r) => r.headers['idempotency-key'])).size, 1, 'one key:');
      deepEqual(log.map((r) => r.body), ['pay', 'pay', 'pay']);
      const err = await rejects(api.retryFetch(seq('503,200').url, { method: 'POST', body: 'pay' }, { ...fast, beforeRetry: () => ({ 'Idempotency-Key': 'other' }) }));
      equal(err?.name, 'TypeError');
      ok(err.message.includes('Idempotency-Key'), err.message);
    },
  },
  {
    name: "contract: requests fetch can never send (ftp:, a bad port, redirect: 'error' meeting a redirect) are TypeErrors, never retried",
    async run({ api, seq }) {
      await refusedBeforeSending(api, 'ftp://example.com/file', undefined, 'an ftp: URL');
      await refusedBeforeSending(api, 'about:blank', undefined, 'an about: URL');
      await refusedBeforeSending(api, 'http://127.0.0.1:6000/', undefined, 'port 6000');
      const target = seq('200');
      const s = seq(`303+to=${redirectTo(target)}`);
      const err = await rejects(api.retryFetch(s.url, { redirect: 'error' }, fast));
      equal(err?.name, 'TypeError');
      ok(!api.isRetryError(err), err?.message);
      equal((await s.log()).length, 1, 'the request was sent again:');
      equal((await target.log()).length, 0, 'the redirect was followed:');
      const many = await rejects(api.retryFetch(target.url, undefined, { retryOnStatus: Array.from({ length: 501 }, () => 503) }));
      equal(many?.name, 'TypeError');
      ok(many.message.includes('501 items'), many.message);
    },
  },
  {
    name: 'contract: RetryError and CircuitOpenError are exported classes: instanceof works, and so do the name checks',
    async run({ api, seq }) {
      ok(typeof api.RetryError === 'function' && typeof api.CircuitOpenError === 'function', 'the classes are exported');
      const err = await rejects(api.retryFetch(seq('reset').url, undefined, { ...fast, maxAttempts: 2 }));
      ok(err instanceof api.RetryError, 'instanceof RetryError');
      ok(err instanceof Error);
      equal(err.name, 'RetryError');
      ok(api.isRetryError(err));
      const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 60_000 });
      const s = seq('reset');
      await rejects(api.retryFetch(s.url, undefined, { ...fast, breaker }));
      const open = await rejects(api.retryFetch(s.url, undefined, { ...fast, breaker }));
      ok(open instanceof api.CircuitOpenError, 'instanceof CircuitOpenError');
      equal(open.name, 'CircuitOpenError');
      ok(!(open instanceof api.RetryError));
    },
  },
  {
    name: 'contract: createRetryFetch(...).extend(options) is a new client over the old one\'s defaults; the old one is unchanged',
    async run({ api, seq }) {
      const base = api.createRetryFetch({ ...fast, maxAttempts: 1, retryOnStatus: [503] });
      const more = base.extend({ maxAttempts: 3 });
      equal(typeof more.extend, 'function');
      const once = seq('503,503,200');
      equal((await base(once.url)).status, 503);
      equal((await once.log()).length, 1);
      const thrice = seq('503,503,200');
      equal((await more(thrice.url)).status, 200);
      equal((await thrice.log()).length, 3);
      const other = seq('500,200');
      equal((await more(other.url)).status, 500, 'the base retryOnStatus [503] still applies:');
      const err = await rejects(Promise.resolve().then(() => base.extend({ maxAttemps: 2 })));
      equal(err?.name, 'TypeError');
    },
  },
  {
    name: 'contract: onSettled tells how many attempts a call took, on success and on failure',
    async run({ api, seq }) {
      const seen = [];
      const onSettled = (info) => seen.push([info.attempts, info.response?.status ?? info.error?.name]);
      equal((await api.retryFetch(seq('200').url, undefined, { ...fast, onSettled })).status, 200);
      equal((await api.retryFetch(seq('503,503,200').url, undefined, { ...fast, onSettled })).status, 200);
      await rejects(api.retryFetch(seq('reset').url, undefined, { ...fast, maxAttempts: 2, onSettled: async (info) => { onSettled(info); throw new Error('ignored'); } }));
      // An abort ends the attempt in flight: it was sent, so it counts (the first, sent
      // straight to fetch; a retry).
      for (const steps of ['hang', '503,hang']) {
        const controller = new AbortController();
        setTimeout(() => controller.abort(new Error('stop')), 300);
        await rejects(api.retryFetch(seq(steps).url, undefined, { ...fast, signal: controller.signal, onSettled }));
      }
      // A repeat of a 202 (no URL named) that the abort ended was a poll, not an attempt.
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error('stop')), 300);
      await rejects(api.retryFetch(seq('202+ra=0,hang').url, { method: 'POST', body: 'pay' }, { ...fast, followAccepted: true, signal: controller.signal, onSettled }));
      deepEqual(seen, [[1, 200], [3, 200], [2, 'RetryError'], [1, 'Error'], [2, 'Error'], [1, 'Error']]);
    },
  },
  {
    name: 'contract: onSettled gives the key the attempts carried, so a call whose body could not be read can be sent again with it',
    async run({ api, seq }) {
      const infos = [];
      const onSettled = (info) => infos.push(info);
      const post = seq('503,201');
      equal((await api.retryFetch(post.url, { method: 'POST', body: 'pay' }, { ...fast, onSettled })).status, 201);
      const sent = (await post.log()).map((r) => r.headers['idempotency-key']);
      match(infos[0].idempotencyKey, UUID_V4);
      deepEqual(sent, [infos[0].idempotencyKey, infos[0].idempotencyKey]);
      // The caller's key, and a call that rejected.
      await rejects(api.retryFetch(seq('reset').url, { method: 'POST', body: 'pay', headers: { 'Idempotency-Key': 'order-7' } }, { ...fast, maxAttempts: 1, onSettled }));
      equal(infos[1].idempotencyKey, 'order-7');
      equal(infos[1].error?.idempotencyKey, 'order-7');
      // A GET carries none; nor does a POST that sent nothing.
      await api.retryFetch(seq('200').url, undefined, { onSettled });
      equal('idempotencyKey' in infos[2], false);
      const aborted = new AbortController();
      aborted.abort(new Error('stop'));
      await rejects(api.retryFetch(seq('200').url, { method: 'POST', body: 'pay' }, { ...fast, signal: aborted.signal, onSettled }));
      equal(infos[3].attempts, 0);
      equal('idempotencyKey' in infos[3], false);
    },
  },
  {
    name: "contract: shouldRetry may read ctx.response's body; the response the call returns stays readable",
    async run({ api, seq }) {
      const s = seq('503');
      let read;
      const res = await api.retryFetch(s.url, undefined, { ...fast, shouldRetry: async (ctx) => ((read = await ctx.response.text()), false) });
      equal(res.status, 503);
      ok(read.includes('"status":503'), 'the hook read the body');
      equal(await res.text(), read, 'and the caller can read it too');
    },
  },
  {
    name: "contract: a client's default headers go on every call unless the call sets them; extend merges over them",
    async run({ api, seq }) {
      const s = seq('200');
      const client = api.createRetryFetch({ headers: { 'X-Client': 'web', Authorization: 'Bearer default' } });
      await client(s.url);
      await client(s.url, { headers: { Authorization: 'Bearer mine' } });
      await client.extend({ headers: { 'X-Client': 'admin' } })(s.url);
      const log = await s.log();
      deepEqual(log.map((r) => [r.headers['x-client'], r.headers.authorization]), [
        ['web', 'Bearer default'],
        ['web', 'Bearer mine'],
        ['admin', 'Bearer default'],
      ]);
      const err = await rejects(Promise.resolve().then(() => api.createRetryFetch({ headers: 42 })));
      equal(err?.name, 'TypeError');

      // a keyed POST of a string body: a default Content-Type replaces text/plain; a retry
      // sends the same headers, key and body
      const p = seq('503,200');
      const json = api.createRetryFetch({ ...fast, headers: { 'Content-Type': 'application/json', 'X-Client': 'web' } });
      equal((await json(p.url, { method: 'POST', body: '{"a":1}', headers: { 'X-Client': 'mine' } })).status, 200);
      const posts = await p.log();
      deepEqual(posts.map((r) => [r.method, r.body, r.headers['content-type'], r.headers['x-client']]), [
        ['POST', '{"a":1}', 'application/json', 'mine'],
        ['POST', '{"a":1}', 'application/json', 'mine'],
      ]);
      match(posts[0].headers['idempotency-key'], UUID_V4);
      equal(posts[1].headers['idempotency-key'], posts[0].headers['idempotency-key'], 'the retry keeps the key:');
    },
  },
  {
    name: "contract: a string idempotencyKey replaces a key in the call's headers, on every attempt",
    async run({ api, seq }) {
      for (const method of ['POST', 'PUT']) {
        const s = seq('503,200');
        const init = { method, body: 'pay', headers: { 'Idempotency-Key': 'from-headers' } };
        equal((await api.retryFetch(s.url, init, { ...fast, idempotencyKey: 'order-7' })).status, 200);
        deepEqual((await s.log()).map((r) => r.headers['idempotency-key']), ['order-7', 'order-7'], `${method}:`);
      }
    },
  },

  // ---- followAccepted: a 202 Accepted followed to the final answer ------------------------
  {
    name: 'contract: followAccepted: a POST answered 202 + Location is polled with GETs (202, 202, 200); the 200 and its body, the POST sent once',
    async run({ api, seq }) {
      const op = seq('202+ra=0,202+ra=0,200');
      const post = seq(`202+to=${redirectTo(op)}+ra=0`);
      const headers = { 'Content-Type': 'application/json', Authorization: 'Bearer t0k3n', 'X-Trace': 'abc' };
      const res = await api.retryFetch(post.url, { method: 'POST', body: '{"amount":42}', headers }, { ...fast, followAccepted: true });
      equal(res.status, 200);
      const body = await res.json();
      deepEqual([body.hit, body.status], [3, 200], 'the body is the third poll answer:');
      const posts = await post.log();
      deepEqual(posts.map((r) => [r.method, r.body]), [['POST', '{"amount":42}']], 'the POST:');
      match(posts[0].headers['idempotency-key'], UUID_V4);
      const polls = await op.log();
      deepEqual(polls.map((r) => [r.method, r.body]), [['GET', ''], ['GET', ''], ['GET', '']], 'the polls:');
      for (const [i, r] of polls.entries()) {
        equal(r.headers['idempotency-key'], undefined, `poll ${i + 1}: the key:`);
        equal(r.headers['content-type'], undefined, `poll ${i + 1}: Content-Type:`);
        equal(r.headers.authorization, 'Bearer t0k3n', `poll ${i + 1} (same origin): Authorization:`);
        equal(r.headers['x-trace'], 'abc', `poll ${i + 1}: the request's other headers:`);
      }
    },
  },
  {
    name: 'contract: followAccepted: a call that ends before a final answer returns the 202 that said where to look, not a poll\'s 202 without a Location, a poll\'s 503 or a RetryError',
    async run({ api, seq }) {
      const where = (op) => decodeURIComponent(redirectTo(op));
      const cases = [
        // The deadline: the poll's own 202 (no Location) asks for a wait that does not fit.
        ['the deadline after a poll\'s 202', '202+ra=1', { deadlineMs: 600 }],
        // The poll URL fails until the attempts run out.
        ['a poll answered 503 until maxAttempts', '503,503,503', { maxAttempts: 2 }],
        ['a poll whose connection is reset until maxAttempts', 'reset,reset,reset', { maxAttempts: 3 }],
      ];
      for (const [label, steps, options] of cases) {
        const op = seq(steps);
        const post = seq(`202+to=${redirectTo(op)}+ra=0`);
        const res = await api.retryFetch(post.url, { method: 'POST', body: 'pay' }, { ...fast, followAccepted: true, ...options });
        equal(res.status, 202, `${label}:`);
        equal(new URL(res.headers.get('location'), post.url).pathname + new URL(res.headers.get('location'), post.url).search, where(op), `${label}: its Location:`);
        equal((await res.json()).status, 202, `${label}: its body is readable:`);
        equal((await post.log()).length, 1, `${label}: the POST was sent once:`);
        ok((await op.log()).length >= 1, `${label}: polled`);
      }
    },
  },
  {
    name: 'contract: followAccepted: Operation-Location wins over Location; a 303 from the poll URL is followed to the result',
    async run({ api, seq }) {
      const result = seq('200');
      const monitor = seq(`303+to=${redirectTo(result)}`);
      const resource = seq('404');
      const post = seq(`202+opl=${redirectTo(monitor)}+to=${redirectTo(resource)}+ra=0`);
      const res = await api.retryFetch(post.url, { method: 'POST', body: 'job' }, { ...fast, followAccepted: true });
      equal(res.status, 200);
      equal(res.redirected, true, 'res.redirected:');
      equal((await res.json()).hit, 1);
      equal((await post.log()).length, 1, 'POSTs:');
      deepEqual((await monitor.log()).map((r) => r.method), ['GET'], 'the Operation-Location:');
      deepEqual((await result.log()).map((r) => r.method), ['GET'], 'the 303 target:');
      equal((await resource.log()).length, 0, 'the Location was polled:');
    },
  },
  {
    name: 'contract: followAccepted: a keyed POST answered 202 without Location is repeated with the same key and bytes until 201, even with maxAttempts: 1',
    async run({ api, seq }) {
      const body = 'caf\u00e9 \u2615 amount=42';
      for (const [label, headers] of [['our key', {}], ["the caller's key", { 'Idempotency-Key': 'order-42' }]]) {
        const s = seq('202+ra=0,202,201');
        const res = await api.retryFetch(s.url, { method: 'POST', body, headers }, { ...fast, maxAttempts: 1, followAccepted: true });
        equal(res.status, 201, `${label}:`);
        const log = await s.log();
        deepEqual(log.map((r) => r.method), ['POST', 'POST', 'POST'], `${label}:`);
        const keys = log.map((r) => r.headers['idempotency-key']);
        if (label === 'our key') match(keys[0], UUID_V4, `${label}:`);
        else equal(keys[0], 'order-42', `${label}:`);
        deepEqual(keys, [keys[0], keys[0], keys[0]], `${label}: one key:`);
        for (const [i, r] of log.entries()) equal(hex(received(r)), hex(text(body)), `${label}, request ${i + 1}: the body:`);
      }
    },
  },
  {
    name: 'contract: followAccepted: a poll URL fetch cannot send (data:, ftp:, one with a user and password) names nothing: a keyed POST is repeated, a GET gets its 202',
    async run({ api, seq }) {
      const other = seq('200');
      const withCredentials = new URL(other.url);
      withCredentials.username = 'user';
      withCredentials.password = 'pass';
      for (const named of ['data:application/json,{"status":"succeeded","charged":true}', 'ftp://127.0.0.1/op', withCredentials.href]) {
        const opl = encodeURIComponent(named);
        const post = seq(`202+ra=0+opl=${opl},202+ra=0+to=${opl},201`);
        const res = await api.retryFetch(post.url, { method: 'POST', body: 'pay' }, { ...fast, followAccepted: true });
        equal(res.status, 201, `${named}: the POST's own answer:`);
        const log = await post.log();
        deepEqual(log.map((r) => r.method), ['POST', 'POST', 'POST'], `${named}:`);
        const keys = log.map((r) => r.headers['idempotency-key']);
        deepEqual(keys, [keys[0], keys[0], keys[0]], `${named}: one key:`);
        const get = seq(`202+opl=${opl}`);
        equal((await api.retryFetch(get.url, undefined, { ...fast, followAccepted: true })).status, 202, `${named}: a GET:`);
        equal((await get.log()).length, 1, `${named}: a GET:`);
      }
      equal((await other.log()).length, 0, 'the URL with a user and password was polled:');
    },
  },
  {
    name: 'contract: followAccepted is off by default: a 202 is returned after one request',
    async run({ api, seq }) {
      const op = seq('200');
      const post = seq(`202+to=${redirectTo(op)}+ra=0`);
      const res = await api.retryFetch(post.url, { method: 'POST', body: 'x' }, fast);
      equal(res.status, 202);
      equal(res.headers.get('location') !== null, true, 'the Location is there to read:');
      equal((await api.retryFetch(post.url)).status, 202, 'a plain GET:');
      equal((await api.createRetryFetch(fast)(post.url, { method: 'POST', body: 'x' })).status, 202, 'a client:');
      equal((await post.log()).length, 3);
      equal((await op.log()).length, 0, 'the Location was polled:');
    },
  },
  {
    name: 'contract: followAccepted: the deadline ends a poll loop (in a wait or in flight) with the 202; an abort in a poll wait rejects at once',
    async run({ api, seq }) {
      // always 202, no Retry-After: the backoff (20 ms steps) between polls
      const op = seq('202');
      const post = seq(`202+to=${redirectTo(op)}`);
      let started = Date.now();
      const res = await api.retryFetch(post.url, { method: 'POST', body: 'x' }, { baseDelayMs: 20, factor: 1, jitter: 'none', deadlineMs: 300, followAccepted: true });
      const ended = Date.now();
      let took = ended - started;
      equal(res.status, 202);
      // The upper bounds leave room for a late timer on a loaded machine: a call that did not
      // end at its deadline would poll on (or wait on the hanging poll) for good.
      ok(took <= 1_000, `the call took ${took} ms with deadlineMs 300`);
      equal((await res.json()).status, 202, 'the 202 is readable:');
      await sleep(500);
      const polls = await op.log();
      ok(polls.length >= 5, `${polls.length} polls in 300 ms of 20 ms waits`);
      // Polls are sent one after another: at most the one in flight when the deadline passed
      // reaches the server after the call ended, however late the server gets to it.
      const late = polls.filter((r) => r.at > ended).map((r) => r.hit);
      ok(late.length <= 1, `polls that reached the server after the call ended (500 ms on): ${JSON.stringify(late)}`);
      equal((await post.log()).length, 1);

      // a poll in flight when the deadline passes (the poll URL never answers)
      const hang = seq('hang');
      const get = seq(`202+to=${redirectTo(hang)}+ra=0`);
      started = Date.now();
      const cut = await api.retryFetch(get.url, undefined, { ...fast, deadlineMs: 300, followAccepted: true });
      took = Date.now() - started;
      equal(cut.status, 202, 'a poll cut by the deadline:');
      ok(took >= 250 && took <= 1_000, `the call took ${took} ms with deadlineMs 300`);
      equal((await hang.log()).length, 1);

      // an abort during a poll wait (Retry-After: 10)
      const never = seq('200');
      const waiting = seq(`202+to=${redirectTo(never)}+ra=10`);
      const controller = new AbortController();
      const reason = new Error('the user left');
      const call = api.retryFetch(waiting.url, { method: 'POST', body: 'x' }, { ...fast, followAccepted: true, signal: controller.signal });
      while ((await waiting.log()).length === 0) await sleep(5);
      await sleep(30);
      const abortedAt = Date.now();
      controller.abort(reason);
      equal(await call.catch((e) => e), reason, 'rejects with the reason:');
      ok(Date.now() - abortedAt < 200, `rejected ${Date.now() - abortedAt} ms after the abort`);
      equal((await never.log()).length, 0, 'the poll was sent:');
    },
  },
  {
    name: 'contract: followAccepted: a GET without a key answered 202 without Location returns the 202 after one request; with a Location it is followed',
    async run({ api, seq }) {
      const s = seq('202+ra=0,200');
      equal((await api.retryFetch(s.url, undefined, { followAccepted: true })).status, 202, 'retryFetch:');
      const client = api.createRetryFetch({ ...fast, followAccepted: true });
      equal((await client(s.url)).status, 200, 'the second hit answers 200');
      equal((await s.log()).length, 2, 'one request per call:');
      const op = seq('202,200');
      const get = seq(`202+to=${redirectTo(op)}+ra=0`);
      const res = await client(get.url);
      equal(res.status, 200, 'a GET answered 202 + Location:');
      deepEqual((await op.log()).map((r) => r.method), ['GET', 'GET']);
      equal((await get.log()).length, 1);
    },
  },
  {
    name: "contract: followAccepted: a poll's 503 is retried as any 503 is (and counts as an attempt)",
    async run({ api, seq }) {
      const op = seq('503,200');
      const post = seq(`202+to=${redirectTo(op)}+ra=0`);
      const res = await api.retryFetch(post.url, { method: 'POST', body: 'x' }, { ...fast, followAccepted: true });
      equal(res.status, 200);
      deepEqual((await op.log()).map((r) => r.method), ['GET', 'GET']);
      equal((await post.log()).length, 1);
      // with maxAttempts: 1 the poll's failure is the one attempt too many: the call ends, and
      // answers with the 202 (the request was accepted; its Location says where to look)
      const op1 = seq('503,200');
      const post1 = seq(`202+to=${redirectTo(op1)}+ra=0`);
      const seen = [];
      const one = await api.retryFetch(post1.url, { method: 'POST', body: 'x' }, { ...fast, maxAttempts: 1, followAccepted: true, onSettled: (i) => seen.push(i.attempts) });
      equal(one.status, 202);
      equal((await op1.log()).length, 1);
      deepEqual(seen, [2], 'onSettled attempts (the POST and the failed poll):');
    },
  },
  {
    name: 'contract: followAccepted: a custom fetch sends the polls too, given a GET Request and the attempt\'s signal',
    async run({ api, seq }) {
      const op = seq('202,200');
      const post = seq(`202+to=${redirectTo(op)}+ra=0`);
      const calls = [];
      const transport = (request, init) => {
        calls.push([request.method, new URL(request.url).pathname === new URL(op.url).pathname ? 'poll' : 'post', init?.signal instanceof AbortSignal]);
        return fetch(request, init);
      };
      const res = await api.retryFetch(post.url, { method: 'POST', body: 'x' }, { ...fast, timeoutMs: 5_000, followAccepted: true, fetch: transport });
      equal(res.status, 200);
      deepEqual(calls, [['POST', 'post', true], ['GET', 'poll', true], ['GET', 'poll', true]]);
    },
  },
  {
    name: 'contract: followAccepted must be true or false: a TypeError naming it (retryFetch, createRetryFetch, extend); defaults merge',
    async run({ api, seq }) {
      const s = seq('202+ra=0,200');
      for (const value of ['yes', 1, null, {}]) {
        const err = await rejects(api.retryFetch(s.url, undefined, { followAccepted: value }), `${JSON.stringify(value)} was accepted`);
        equal(err?.name, 'TypeError', `${JSON.stringify(value)}:`);
        ok(names(err.message, 'followAccepted'), `${err.message} names followAccepted`);
      }
      const made = throws(() => api.createRetryFetch({ followAccepted: 'yes' }), "createRetryFetch({ followAccepted: 'yes' }) was accepted");
      equal(made?.name, 'TypeError');
      ok(names(made.message, 'followAccepted'), made.message);
      const client = api.createRetryFetch({ ...fast, followAccepted: true });
      const extended = throws(() => client.extend({ followAccepted: 'yes' }), "extend({ followAccepted: 'yes' }) was accepted");
      equal(extended?.name, 'TypeError');
      ok(names(extended.message, 'followAccepted'), extended.message);
      const inInit = await rejects(api.retryFetch(s.url, { followAccepted: true }), 'followAccepted in init was accepted');
      ok(inInit.message.includes('third argument'), inInit.message);
      equal((await s.log()).length, 0, 'nothing was sent:');
      // a client's default, turned off by extend and by a call's own option
      const op = seq('200');
      const accepted = seq(`202+to=${redirectTo(op)}+ra=0`);
      equal((await client.extend({ followAccepted: false })(accepted.url)).status, 202, 'extend({ followAccepted: false }):');
      equal((await client(accepted.url)).status, 200, 'the client follows its default:');
      equal((await client(accepted.url, undefined, { followAccepted: false })).status, 202, 'a call can turn it off:');
      equal((await client.extend({ maxAttempts: 2 })(accepted.url)).status, 200, 'extend keeps the default:');
      equal((await accepted.log()).length, 4);
      equal((await op.log()).length, 2, 'polls:');
    },
  },
  {
    name: 'contract: timeoutMs on a URL call: an attempt slower than it is retried, the caller\'s init is left as it was, and the body of one in time is read whole after it',
    async run({ api, seq }) {
      // A GET (no init, and a plain one) and a keyed POST: each first attempt hangs.
      for (const [label, init] of [['no init', undefined], ['GET', { method: 'GET' }], ['POST', { method: 'POST', body: 'pay' }]]) {
        const s = seq('hang,200');
        const reasons = [];
        const res = await api.retryFetch(s.url, init, { ...fast, timeoutMs: 300, onRetry: (i) => reasons.push(i.reason) });
        equal(res.status, 200, `${label}:`);
        deepEqual(reasons, ['timeout'], `${label}: onRetry reasons`);
        const log = await s.log();
        equal(log.length, 2, `${label}: attempts`);
        if (init?.method === 'POST') {
          match(log[0].headers['idempotency-key'] ?? '', UUID_V4, `${label}: key`);
          equal(log[1].headers['idempotency-key'], log[0].headers['idempotency-key'], `${label}: the retry's key`);
          equal(log[1].body, 'pay', `${label}: the retry's body`);
        }
        if (init) deepEqual(Object.keys(init), init.body ? ['method', 'body'] : ['method'], `${label}: init was changed`);
      }
      // Never in time: a RetryError whose cause is the attempt's TimeoutError.
      const never = seq('hang');
      const err = await rejects(api.retryFetch(never.url, { method: 'GET' }, { ...fast, timeoutMs: 100, maxAttempts: 2 }));
      equal(err?.name, 'RetryError');
      equal(err.cause?.name, 'TimeoutError');
      equal(err.attempts.length, 2);
      // The limit is the attempt's (until its response): a body read past it is read whole.
      const slow = seq('200+slowbody=20');
      const res = await api.retryFetch(slow.url, { method: 'GET' }, { ...fast, timeoutMs: 150 });
      const lines = (await res.text()).trim().split('\n');
      equal(lines.length, 20, 'chunks read:');
      match(lines[19], /^chunk 19 of /);
      equal((await slow.log()).length, 1, 'sent once:');
    },
  },
  {
    name: 'contract: a key in the call\'s headers option is the caller\'s key on every path: sent on every attempt, never replaced by one of ours',
    async run({ api, seq }) {
      const headers = { 'Idempotency-Key': 'order-42-pay' };
      const request = (url) => new Request(url, { method: 'POST', body: 'pay' });
      for (const [label, input, init, options] of [
        ['POST, string body', null, { method: 'POST', body: 'pay' }, {}],
        ['POST, no body', null, { method: 'POST' }, {}],
        ['POST, bytes body', null, { method: 'POST', body: new TextEncoder().encode('pay') }, {}],
        ['POST, string body, timeoutMs', null, { method: 'POST', body: 'pay' }, { timeoutMs: 5_000 }],
        ['a Request', request, undefined, {}],
        ['POST, idempotencyKey: false', null, { method: 'POST', body: 'pay' }, { idempotencyKey: false }],
      ]) {
        const s = seq('503,200');
        const res = await api.retryFetch(input ? input(s.url) : s.url, init, { ...fast, ...options, headers });
        equal(res.status, 200, `${label}: retried as a keyed request`);
        deepEqual((await s.log()).map((r) => r.headers['idempotency-key']), ['order-42-pay', 'order-42-pay'], `${label}: keys sent`);
      }
      // Through a client: its per-call options likewise.
      const client = api.createRetryFetch(fast);
      const s = seq('503,200');
      equal((await client(s.url, { method: 'POST', body: 'pay' }, { headers })).status, 200);
      deepEqual((await s.log()).map((r) => r.headers['idempotency-key']), ['order-42-pay', 'order-42-pay'], 'client: keys sent');
    },
  },
  {
    name: 'contract: every attempt keeps the referrer policy the call fixed; a no-cors POST, whose key the platform may drop, is never sent twice without one',
    async run({ api, seq }) {
      // A retry's init (a signal, a body) must not reset the referrer policy to the default.
      for (const [label, init, options] of [
        ['GET under timeoutMs', { referrerPolicy: 'no-referrer' }, { timeoutMs: 5_000 }],
        ['POST, string body', { method: 'POST', body: 'pay', referrerPolicy: 'no-referrer' }, {}],
        ['POST, bytes body', { method: 'POST', body: new TextEncoder().encode('pay'), referrerPolicy: 'no-referrer' }, {}],
      ]) {
        const s = seq('503,200');
        equal((await api.retryFetch(s.url, init, { ...fast, ...options })).status, 200, `${label}:`);
        deepEqual((await s.log()).map((r) => r.headers.referer ?? null), [null, null], `${label}: Referer sent`);
      }
      const r = seq('503,200');
      const request = new Request(r.url, { method: 'POST', body: 'pay', referrerPolicy: 'no-referrer' });
      equal((await api.retryFetch(request, undefined, fast)).status, 200, 'a Request:');
      deepEqual((await r.log()).map((x) => x.headers.referer ?? null), [null, null], 'a Request: Referer sent');
      // no-cors keeps only CORS-safelisted headers (in a browser): then no key, no resend.
      const n = seq('reset,200');
      await api.retryFetch(n.url, { method: 'POST', body: 'pay', mode: 'no-cors' }, fast).catch(() => {});
      const log = await n.log();
      const keys = log.map((x) => x.headers['idempotency-key']);
      ok(log.length === 1 || (keys[0] !== undefined && keys.every((k) => k === keys[0])), `no-cors: sent ${log.length} times, keys ${JSON.stringify(keys)}`);
    },
  },
  {
    name: 'contract: beforeRetry cannot change what the call fixed: the key, the headers that say what the body is, the retry headers ours',
    async run({ api, seq }) {
      for (const [label, headers, options] of [
        ['Content-Type', { 'Content-Type': 'text/csv' }, {}],
        ['Content-Encoding', { 'Content-Encoding': 'gzip' }, {}],
        ['Content-Location', { 'Content-Location': '/elsewhere' }, {}],
        ['X-Retry-Count under retryHeaders', { 'X-Retry-Count': '99' }, { retryHeaders: true }],
      ]) {
        const s = seq('503,200');
        const err = await rejects(api.retryFetch(s.url, { method: 'POST', body: '{"a":1}', headers: { 'Content-Type': 'application/json' } }, { ...fast, ...options, beforeRetry: () => headers }));
        equal(err?.name, 'TypeError', `${label}:`);
        match(err.message, new RegExp(label.split(' ')[0], 'i'), `${label}: the message names it`);
        equal((await s.log()).length, 1, `${label}: nothing more was sent`);
      }
      // Without retryHeaders, X-Retry-Count is the caller's to set.
      const s = seq('503,200');
      equal((await api.retryFetch(s.url, undefined, { ...fast, beforeRetry: () => ({ 'X-Retry-Count': '7' }) })).status, 200);
      deepEqual((await s.log()).map((r) => r.headers['x-retry-count'] ?? null), [null, '7']);
    },
  },
  {
    name: 'contract: a retried answer\'s body is cancelled as the retry is sent, not after it answers (its connection is free for the retry)',
    async run({ api, seq }) {
      // The 503's body streams for 20 s; the retry is answered once that body is closed (or
      // after 3 s, saying it was still open). A browser opens six connections per origin: six
      // such calls kept open would leave none for their retries.
      for (const [label, init] of [['GET', undefined], ['POST', { method: 'POST', body: 'pay' }]]) {
        const s = seq('503+slowbody=1000,200+afterclose=3000');
        const res = await api.retryFetch(s.url, init, fast);
        equal(res.status, 200, `${label}:`);
        // (A browser may send the retry twice at the network level: every later hit counts.)
        const log = await s.log();
        ok(log.length >= 2, `${label}: ${log.length} attempts`);
        deepEqual(log.slice(1).map((hit) => hit.earlierOpen), log.slice(1).map(() => 0), `${label}: the 503's body was still open when its retry was answered`);
      }
    },
  },
  {
    name: 'contract: a hook or transport whose promise throws when read (a constructor getter) fails like one that rejects',
    async run({ api, seq }) {
      const throwing = (value) => {
        const p = Promise.resolve(value);
        Object.defineProperty(p, 'constructor', { get() { throw new Error('read'); } });
        return p;
      };
      for (const hook of ['shouldRetry', 'onRetry', 'beforeRetry']) {
        const s = seq('503,200');
        const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, [hook]: () => throwing(hook === 'shouldRetry' ? true : undefined) }));
        equal(err?.message, 'read', `${hook}:`);
        equal((await s.log()).length, 1, `${hook}: nothing more was sent`);
      }
      const s = seq('200');
      const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, maxAttempts: 1, fetch: (input, init) => throwing(fetch(input, init)) }));
      equal(err?.cause?.message, 'read', 'fetch: the attempt failed with it');
      equal((await api.retryFetch(seq('200').url)).status, 200, 'a later call');
    },
  },
  {
    name: 'contract: a custom fetch that ignores the attempt\'s signal: an answer it gives after the call gave up has its body cancelled',
    async run({ api, seq }) {
      // The answer comes 300 ms after the send, its body streaming for 20 s; the call gave up
      // at 100 ms (an abort, timeoutMs, deadlineMs). A later request is answered once that
      // body is closed (or after 3 s, saying it was still open).
      for (const label of ['abort', 'timeoutMs', 'deadlineMs']) {
        const s = seq('200+delay=300+slowbody=1000,200+afterclose=3000');
        const controller = new AbortController();
        const options = { ...fast, maxAttempts: 1, fetch: (request) => fetch(request) };
        if (label === 'abort') {
          options.signal = controller.signal;
          setTimeout(() => controller.abort(new Error('stop')), 100);
        } else {
          options[label] = 100;
        }
        await rejects(api.retryFetch(s.url, undefined, options));
        await sleep(400);
        equal((await fetch(s.url)).status, 200, `${label}:`);
        const log = await s.log();
        equal(log[1]?.earlierOpen, 0, `${label}: the late answer's body was still open`);
      }
    },
  },
  {
    name: 'contract: a breaker and a throttle together: a call that waited its turn while the circuit opened sends nothing',
    async run({ api, seq }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 60_000 });
      // Two requests a second: the second and third calls wait for their turn.
      const throttle = new api.AdaptiveThrottle({ initialRate: 2, minRate: 0.5, rampMs: 100_000 });
      const s = seq('503');
      const options = { breaker, throttle, maxAttempts: 1 };
      const results = await Promise.all([0, 1, 2].map(() => api.retryFetch(s.url, undefined, options).then((r) => r.status, (e) => e.name)));
      deepEqual(results, [503, 'CircuitOpenError', 'CircuitOpenError']);
      equal((await s.log()).length, 1, 'requests sent once the circuit was open');
    },
  },
  {
    name: 'contract: followAccepted: a status URL on another origin: its failing polls are not the request origin\'s (its breaker stays closed)',
    async run({ api, seq }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 2, openMs: 60_000 });
      const monitor = seq('503');
      const elsewhere = monitor.url.replace('127.0.0.1', 'localhost'); // the same server, another origin
      const s = seq(`202+ra=0+to=${encodeURIComponent(elsewhere)}`);
      const res = await api.retryFetch(s.url, { method: 'POST', body: 'pay' }, { ...fast, followAccepted: true, breaker, maxAttempts: 4 });
      equal(res.status, 202, 'the 202 that named the monitor (the monitor\'s polls failed)');
      ok((await monitor.log()).length >= 2, 'the monitor was polled and the failed polls retried');
      equal(breaker.state(s.url), 'closed', 'the request\'s origin');
    },
  },
  {
    name: 'contract: followAccepted: a blank Operation-Location names nothing, and Location is polled',
    async run({ api, seq }) {
      const done = seq('200');
      const s = seq(`202+ra=0+opl=%20+to=${redirectTo(done)},202`);
      const res = await api.retryFetch(s.url, undefined, { ...fast, followAccepted: true, deadlineMs: 2_000 });
      equal(res.status, 200);
      equal((await s.log()).length, 1, 'the 202 URL was not polled');
      equal((await done.log()).length, 1, 'Location was polled');
    },
  },
  {
    name: 'contract: deadlineMs on a URL call: a first attempt in flight at the deadline ends the call there, one in time is retried and its body read whole',
    async run({ api, seq }) {
      // The deadline cuts the first attempt (a GET, no init and a plain one; a keyed POST):
      // a RetryError with reason 'deadline', its cause the attempt's TimeoutError, nothing
      // sent again, the caller's init as it was.
      for (const [label, init] of [['no init', undefined], ['GET', { method: 'GET' }], ['POST', { method: 'POST', body: 'pay' }]]) {
        const s = seq('hang,200');
        const began = Date.now();
        const err = await rejects(api.retryFetch(s.url, init, { ...fast, deadlineMs: 300 }));
        const took = Date.now() - began;
        equal(err?.name, 'RetryError', `${label}:`);
        equal(err.reason, 'deadline', `${label}: reason`);
        equal(err.cause?.name, 'TimeoutError', `${label}: cause`);
        ok(took >= 250 && took < 2_000, `${label}: ended after ${took} ms with deadlineMs 300`);
        equal((await s.log()).length, 1, `${label}: attempts`);
        if (init) deepEqual(Object.keys(init), init.body ? ['method', 'body'] : ['method'], `${label}: init was changed`);
      }
      // The deadline ends the call even when the attempt it cut was the last one allowed (a
      // URL call and a Request input).
      for (const [label, input] of [['URL', (u) => u], ['Request', (u) => new Request(u)]]) {
        const s = seq('hang,200');
        const err = await rejects(api.retryFetch(input(s.url), undefined, { ...fast, maxAttempts: 1, deadlineMs: 300 }));
        equal(err?.reason, 'deadline', `${label}, maxAttempts 1: reason`);
      }
      // With timeoutMs under it, the first attempt's limit is timeoutMs: retried in time, the
      // POST with its key and body.
      for (const [label, init] of [['GET', undefined], ['POST', { method: 'POST', body: 'pay' }]]) {
        const s = seq('hang,200');
        const reasons = [];
        const res = await api.retryFetch(s.url, init, { ...fast, deadlineMs: 5_000, timeoutMs: 200, onRetry: (i) => reasons.push(i.reason) });
        equal(res.status, 200, `${label}:`);
        deepEqual(reasons, ['timeout'], `${label}: onRetry reasons`);
        const log = await s.log();
        equal(log.length, 2, `${label}: attempts`);
        if (init) {
          equal(log[1].headers['idempotency-key'], log[0].headers['idempotency-key'], `${label}: the retry's key`);
          equal(log[1].body, 'pay', `${label}: the retry's body`);
        }
      }
      // The deadline bounds the call until its response: a body read past it is read whole.
      const slow = seq('200+slowbody=20');
      const res = await api.retryFetch(slow.url, undefined, { ...fast, deadlineMs: 150 });
      equal((await res.text()).trim().split('\n').length, 20, 'chunks read:');
    },
  },  {
    name: 'contract: an attempt the deadline cut has the deadline\'s TimeoutError ("the deadline (deadlineMs N) passed"), one timeoutMs cut the attempt\'s',
    async run({ api, seq }) {
      const deadline = /^retryFetch: the deadline \(deadlineMs 300\) passed$/;
      // Only deadlineMs: the first attempt (sent straight to fetch, or through the loop) and a
      // retry in flight at the deadline; and under a timeoutMs longer than what is left.
      for (const [label, steps, input, init, options] of [
        ['GET of a URL', 'hang', (u) => u, undefined, {}],
        ['keyed POST', 'hang', (u) => u, { method: 'POST', body: 'pay' }, {}],
        ['Request input', 'hang', (u) => new Request(u), undefined, {}],
        ['a retry', '503,hang', (u) => u, undefined, {}],
        ['timeoutMs longer than the deadline', 'hang', (u) => u, undefined, { timeoutMs: 60_000 }],
      ]) {
        const s = seq(steps);
        const err = await rejects(api.retryFetch(input(s.url), init, { ...fast, deadlineMs: 300, ...options }), `${label}: resolved`);
        equal(err?.name, 'RetryError', `${label}:`);
        equal(err.reason, 'deadline', `${label}: reason`);
        equal(err.cause?.name, 'TimeoutError', `${label}: cause`);
        match(err.cause.message, deadline, `${label}: cause`);
        equal(err.attempts.at(-1)?.error, err.cause, `${label}: the last attempt's error`);
      }
      // A transport given the attempt's signal sees the same reason; one that ignores it is
      // given up on, with the deadline's error too.
      const reasons = [];
      const honours = (request, init) => new Promise((_, reject) => {
        init.signal.addEventListener('abort', () => (reasons.push(init.signal.reason), reject(init.signal.reason)));
      });
      for (const [label, transport] of [['a transport that honours its signal', honours], ['a transport that ignores it', () => new Promise(() => {})]]) {
        const err = await rejects(api.retryFetch(seq('200').url, undefined, { ...fast, deadlineMs: 300, fetch: transport }), `${label}: resolved`);
        equal(err?.reason, 'deadline', `${label}: reason`);
        match(err.cause?.message, deadline, `${label}: cause`);
      }
      equal(reasons.length, 1, 'aborted once:');
      match(reasons[0]?.message, deadline, 'the signal\'s reason:');
      // timeoutMs shorter than what is left of the deadline: the attempt's own limit.
      const s = seq('hang');
      const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, maxAttempts: 1, timeoutMs: 100, deadlineMs: 60_000 }));
      equal(err?.reason, 'attempts');
      equal(err.cause?.message, 'retryFetch: the attempt timed out after 100 ms');
    },
  },
  {
    name: 'contract: option TypeErrors name the function called: createRetryFetch, client.extend, retryFetch',
    async run({ api }) {
      const client = api.createRetryFetch({ maxAttempts: 2 });
      for (const [options, expected] of [
        [{ jiter: 'none' }, /^client\.extend: unknown option "jiter" \(did you mean "jitter"\?\)$/],
        [{ maxAttempts: 0 }, /^client\.extend: invalid option "maxAttempts": got 0; expected an integer from 1 to 100$/],
        [{ retryOnStatus: [503, '504'] }, /^client\.extend: invalid option "retryOnStatus": item \[1\] is "504"; expected /],
        [{ breaker: {} }, /^client\.extend: invalid option "breaker": got \[object Object\]; expected a CircuitBreaker$/],
        [[], /^client\.extend: invalid options: got an array; expected an object or undefined$/],
        [{ idempotencyKey: 'order-1' }, /^client\.extend: a fixed "idempotencyKey" in a client's defaults would be sent by every call of the client/],
      ]) {
        const e = throws(() => client.extend(options), `extend(${JSON.stringify(options)}) was accepted`);
        equal(e?.name, 'TypeError');
        match(e.message, expected);
      }
      // An extend of an extend says the same.
      const e = throws(() => client.extend({}).extend({ factor: 0 }));
      match(e?.message, /^client\.extend: invalid option "factor": got 0; /);
      const shared = throws(() => api.createRetryFetch({ idempotencyKey: 'order-1' }));
      match(shared?.message, /^createRetryFetch: a fixed "idempotencyKey" in a client's defaults/);
      // A client made by extend: its calls' options are a call's.
      const call = await rejects(client.extend({})('http://127.0.0.1:9/never', undefined, { maxAttempts: 0 }));
      match(call?.message, /^retryFetch: invalid option "maxAttempts": got 0; /);
    },
  },
  {
    name: "contract: a Request input's own headers win over a client's defaults, a Request of another realm (an iframe's) too",
    async run({ api, seq, env }) {
      const client = api.createRetryFetch({ headers: { Authorization: 'Bearer default', 'X-Client': 'c' } });
      const realms = [['this realm', globalThis]];
      let frame = null;
      if (env === 'browser') {
        frame = document.createElement('iframe');
        document.body.append(frame);
        realms.push(['an iframe', frame.contentWindow]);
      }
      try {
        for (const [label, realm] of realms) {
          const s = seq('503,200');
          const input = new realm.Request(s.url, { headers: { Authorization: 'Bearer user' } });
          equal((await client(input, undefined, fast)).status, 200, `${label}:`);
          const sent = await s.log();
          deepEqual(sent.map((r) => [r.headers.authorization, r.headers['x-client']]), [['Bearer user', 'c'], ['Bearer user', 'c']], `${label}:`);
        }
      } finally {
        frame?.remove();
      }
    },
  },
  {
    name: "contract: a guard's read methods take a URL of another realm (an iframe's)",
    async run({ api, seq, env }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 60_000 });
      const s = seq('503');
      await api.retryFetch(s.url, undefined, { ...fast, maxAttempts: 1, breaker });
      const url = new URL(s.url);
      equal(breaker.state(url), 'open');
      equal(breaker.state(s.url), 'open');
      if (env === 'browser') {
        const frame = document.createElement('iframe');
        document.body.append(frame);
        try {
          equal(breaker.state(new frame.contentWindow.URL(s.url)), 'open', 'a URL of an iframe:');
        } finally {
          frame.remove();
        }
      }
    },
  },
  {
    name: 'contract: time is kept on a monotonic clock: a wall clock stepped back an hour mid-call neither stops a deadline nor holds a breaker open, and a Retry-After date (a failure\'s, a 202\'s) sent without Date is still read on the wall clock',
    async run({ api, seq }) {
      const realNow = Date.now;
      const hour = 3_600_000;
      let reads = 0;
      // The first read is the real time, every later one an hour earlier: a step back.
      const stepped = () => realNow() - (reads++ > 0 ? hour : 0);
      try {
        const s = seq('503');
        Date.now = stepped;
        const started = performance.now();
        // 100 attempts 50 ms apart (5 s) unless the deadline ends them: with the last answer,
        // or a RetryError when it passes during a wait.
        const ended = await api
          .retryFetch(s.url, undefined, { baseDelayMs: 50, jitter: 'none', maxDelayMs: 50, maxAttempts: 100, deadlineMs: 300, budget: false, throttle: false })
          .then((res) => res.status, (error) => error?.reason);
        const took = performance.now() - started;
        Date.now = realNow;
        ok(ended === 503 || ended === 'deadline', `the call ended with ${ended}`);
        ok(took < 2_000, `the deadline held: the call took ${Math.round(took)} ms`);
        ok((await s.log()).length < 20, 'attempts past the deadline');
        // Opened, then the wall clock steps back an hour.
        const b = seq('503');
        const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 200 });
        await api.retryFetch(b.url, undefined, { ...fast, maxAttempts: 1, breaker });
        equal(breaker.state(b.url), 'open', 'after the failure:');
        Date.now = () => realNow() - hour;
        await sleep(400);
        equal(breaker.state(b.url), 'half-open', 'openMs after it, the wall clock an hour back:');
        // A server's Retry-After date, when the answer has no Date of the server's clock to
        // read it on, is read on the wall clock, stepped or not: 3 s from the (stepped) now
        // is a wait of 2 to 3 s, not an hour ago.
        const date = new Date(Date.now() + 3_000).toUTCString();
        const r = seq(`503+raw=${encodeURIComponent(date)}+nodate,200`);
        equal((await api.retryFetch(r.url, undefined, { ...fast })).status, 200, 'after the date:');
        const [first, second] = await r.log();
        ok(second.at - first.at >= 1_500, `the retry waited ${second.at - first.at} ms for a date 3 s ahead`);
        // So is a 202's (followAccepted: the keyed POST repeated after the date).
        const later = new Date(Date.now() + 3_000).toUTCString();
        const a = seq(`202+raw=${encodeURIComponent(later)}+nodate,200`);
        equal((await api.retryFetch(a.url, { method: 'POST', body: 'pay' }, { ...fast, followAccepted: true })).status, 200, 'after the 202:');
        const [accepted, repeat] = await a.log();
        ok(repeat.at - accepted.at >= 1_500, `the repeat waited ${repeat.at - accepted.at} ms for a 202's date 3 s ahead`);
      } finally {
        Date.now = realNow;
      }
    },
  },
  {
    name: "contract: init's method: 'GET' overrides a Request input's method on every attempt, as fetch's does; a URL's GET with it is sent as a GET",
    async run({ api, seq }) {
      const ways = [
        ['no options', {}],
        ['timeoutMs', { timeoutMs: 5_000 }],
        ['a fetch option', { fetch: (i, n) => fetch(i, n) }],
        ['a client default header', { headers: { 'x-team': 'payments' } }],
      ];
      for (const [label, options] of ways) {
        const r = seq('503,200');
        const res = await api.retryFetch(new Request(r.url, { method: 'DELETE' }), { method: 'GET' }, { ...fast, ...options });
        equal(res.status, 200, `Request input, ${label}:`);
        deepEqual((await r.log()).map((e) => e.method), ['GET', 'GET'], `Request input, ${label}: methods sent`);
        const u = seq('503,200');
        const init = { method: 'GET' };
        const call = api.retryFetch(u.url, init, { ...fast, ...options });
        init.method = 'DELETE'; // after the call started: the retry is the request it fixed
        equal((await call).status, 200, `URL, ${label}:`);
        deepEqual((await u.log()).map((e) => e.method), ['GET', 'GET'], `URL, ${label}: methods sent`);
      }
    },
  },
  {
    name: 'contract: an init with an own "__proto__" member (parsed from JSON) is read as fetch reads it: its members are not inherited',
    async run({ api, seq }) {
      const init = JSON.parse('{"__proto__": {"method": "POST", "body": "charge"}, "headers": {"x-a": "1"}}');
      equal(Object.getPrototypeOf(init), Object.prototype, 'JSON.parse makes an own member');
      const r = seq('503,200');
      equal((await api.retryFetch(r.url, init, fast)).status, 200);
      deepEqual((await r.log()).map((e) => [e.method, e.body, e.headers['x-a']]), [['GET', '', '1'], ['GET', '', '1']]);
    },
  },
];

/** 'fulfilled' or 'rejected' when `promise` settles within `ms`, else 'pending'. */
async function settlesWithin(promise, ms) {
  let timer;
  const pending = new Promise((resolve) => (timer = setTimeout(() => resolve('pending'), ms)));
  const state = promise.then(() => 'fulfilled', () => 'rejected');
  try {
    return await Promise.race([state, pending]);
  } finally {
    clearTimeout(timer);
  }
}
