// End-to-end scenarios of retryFetch against the fault-injecting server
// (tests/support/fault-server.mjs). The same scenarios run in Node (tests/e2e/retry.test.mjs)
// and in headless Chromium (tests/browser/scenarios.test.mjs), so they use only web APIs.
//
// ctx = { api: { retryFetch, createRetryFetch, backoffDelays, isRetryError },
//         seq(steps) -> { url, log(): Promise<request[]> },  env: 'node' | 'browser' }
import { ok, equal, deepEqual, match, rejects, UUID_V4 } from './check.mjs';

const fast = { baseDelayMs: 5, jitter: 'none' };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (s) => new TextEncoder().encode(s);

export const scenarios = [
  {
    name: '503,503,200 gives 200 after 3 attempts',
    async run({ api, seq }) {
      const s = seq('503,503,200');
      const res = await api.retryFetch(s.url, undefined, fast);
      equal(res.status, 200);
      equal((await res.json()).hit, 3, 'the final body is the third answer:');
      equal((await s.log()).length, 3);
    },
  },
  {
    name: 'default options retry 503 three times in all, then return the last 503',
    async run({ api, seq }) {
      const s = seq('503');
      const res = await api.retryFetch(s.url, undefined, { baseDelayMs: 5 });
      equal(res.status, 503);
      equal((await s.log()).length, 3);
    },
  },
  {
    name: '400, 401 and 404 are sent exactly once',
    async run({ api, seq }) {
      for (const status of [400, 401, 404]) {
        const s = seq(String(status));
        const res = await api.retryFetch(s.url, undefined, fast);
        equal(res.status, status);
        equal((await s.log()).length, 1, `${status}:`);
      }
    },
  },
  {
    name: 'a socket reset then 200 gives 200',
    async run({ api, seq }) {
      const s = seq('reset,200');
      const res = await api.retryFetch(s.url, undefined, fast);
      equal(res.status, 200);
      equal((await s.log()).length, 2);
    },
  },
  {
    name: 'reset,reset,200 gives 200',
    async run({ api, seq }) {
      const s = seq('reset,reset,200');
      equal((await api.retryFetch(s.url, undefined, fast)).status, 200);
      equal((await s.log()).length, 3);
    },
  },
  {
    name: '429 with Retry-After in seconds: the second attempt is never earlier than asked',
    async run({ api, seq }) {
      const s = seq('429+ra=1,200');
      const res = await api.retryFetch(s.url, undefined, { baseDelayMs: 5, jitter: 'full' });
      equal(res.status, 200);
      const [a, b] = await s.log();
      ok(b.at - a.at >= 1000 - 2, `waited ${b.at - a.at} ms, asked for 1000`);
    },
  },
  {
    name: '429 with Retry-After as an HTTP-date: the second attempt is never earlier than the date',
    async run({ api, seq }) {
      const s = seq('429+date=2,200');
      const infos = [];
      const res = await api.retryFetch(s.url, undefined, { ...fast, onRetry: (i) => infos.push(i) });
      equal(res.status, 200);
      const [a, b] = await s.log();
      // the date has whole-second resolution: it lies 1-2 s after the first answer, so the
      // second attempt (never before the date) comes more than 1 s after the first
      ok(b.at - a.at >= 1000 - 2, `waited ${b.at - a.at} ms`);
      // the wait is what is left until the date when the answer is read: at most 2 s; a
      // loaded machine may read it late, so the only lower bound is a wait that is not negative
      ok(infos[0].delayMs >= 0 && infos[0].delayMs <= 2000, `delay ${infos[0].delayMs}`);
    },
  },
  {
    name: "a Retry-After date is read on the server's clock (its Date): an hour ahead or behind the client's, the wait is what the server meant",
    async run({ api, seq }) {
      const hour = 3_600_000;
      const at = (ms) => encodeURIComponent(new Date(ms).toUTCString());
      for (const [label, skew] of [['ahead', hour], ['behind', -hour]]) {
        // The server's clock is `skew` from the client's; it asks for 2 s on its own clock.
        const server = Date.now() + skew;
        const s = seq(`503+raw=${at(server + 2_000)}+hdate=${at(server)},200`);
        const infos = [];
        // Read on the client's clock, an hour ahead would be refused (more than
        // maxRetryAfterMs: the 503 returned), an hour behind retried at once.
        const res = await api.retryFetch(s.url, undefined, { ...fast, maxRetryAfterMs: 60_000, onRetry: (i) => infos.push(i) });
        equal(res.status, 200, `server ${label}:`);
        const [a, b] = await s.log();
        ok(b.at - a.at >= 1_500, `server ${label}: the retry waited ${b.at - a.at} ms of the 2 s asked`);
        ok(infos[0].delayMs >= 2_000 && infos[0].delayMs <= 60_000, `server ${label}: delay ${infos[0].delayMs}`);
      }
    },
  },
  {
    name: 'RateLimit-Reset is honoured when there is no Retry-After',
    async run({ api, seq }) {
      const s = seq('429+rlr=1,200');
      const infos = [];
      equal((await api.retryFetch(s.url, undefined, { ...fast, onRetry: (i) => infos.push(i) })).status, 200);
      equal(infos[0].delayMs, 1000);
    },
  },
  {
    name: "RateLimit: ...;t=N is honoured when there is no Retry-After",
    async run({ api, seq }) {
      const s = seq('503+rl=1,200');
      const infos = [];
      equal((await api.retryFetch(s.url, undefined, { ...fast, onRetry: (i) => infos.push(i) })).status, 200);
      equal(infos[0].delayMs, 1000);
    },
  },
  {
    name: 'default jitter: calls that failed together wait different times within the step (the call path draws its own random numbers)',
    async run({ api, seq }) {
      const delays = [];
      const calls = Array.from({ length: 20 }, () => seq('503,200'));
      const options = { baseDelayMs: 50, budget: false, throttle: false, onRetry: (i) => delays.push(i.delayMs) };
      const answers = await Promise.all(calls.map((s) => api.retryFetch(s.url, undefined, options)));
      equal(answers.map((r) => r.status).join(), Array(20).fill(200).join());
      equal(delays.length, 20);
      for (const d of delays) ok(Number.isInteger(d) && d >= 0 && d <= 50, `a full-jitter wait is within 0..50 ms: ${d}`);
      // 20 uniform draws of 0..50: about 17 distinct values; the same wait for every call (no
      // jitter, or one draw shared by all) gives 1.
      ok(new Set(delays).size >= 8, `spread: ${delays.join(' ')}`);
      ok(Math.max(...delays) - Math.min(...delays) >= 15, `spread over the step: ${delays.join(' ')}`);
    },
  },
  {
    name: 'a malformed Retry-After falls back to the computed delay',
    async run({ api, seq }) {
      const s = seq('503+raw=soon,200');
      const infos = [];
      equal((await api.retryFetch(s.url, undefined, { baseDelayMs: 7, jitter: 'none', onRetry: (i) => infos.push(i) })).status, 200);
      equal(infos[0].delayMs, 7);
    },
  },
  {
    name: 'Retry-After above maxRetryAfterMs returns that response at once',
    async run({ api, seq }) {
      const s = seq('503+ra=120,200');
      const started = Date.now();
      const res = await api.retryFetch(s.url, undefined, fast);
      equal(res.status, 503);
      equal(res.headers.get('retry-after'), '120');
      equal((await s.log()).length, 1);
      ok(Date.now() - started < 5000, 'it did not wait');
    },
  },
  {
    name: 'POST without a key is not retried after a 5xx or a network error, but is after 429',
    async run({ api, seq }) {
      const noKey = { ...fast, idempotencyKey: false };
      const a = seq('503,200');
      equal((await api.retryFetch(a.url, { method: 'POST', body: 'x' }, noKey)).status, 503);
      equal((await a.log()).length, 1);
      equal((await a.log())[0].headers['idempotency-key'], undefined, 'no key is sent:');

      const b = seq('reset,200');
      const err = await rejects(api.retryFetch(b.url, { method: 'POST', body: 'x' }, noKey));
      equal(err.name, 'RetryError');
      equal(err.reason, 'unsafe');
      equal((await b.log()).length, 1);

      const c = seq('429,200');
      equal((await api.retryFetch(c.url, { method: 'POST', body: 'x' }, noKey)).status, 200);
      equal((await c.log()).length, 2);

      const d = seq('408,200');
      equal((await api.retryFetch(d.url, { method: 'PATCH', body: 'x' }, noKey)).status, 200);
      equal((await d.log()).length, 2);
    },
  },
  {
    name: 'POST gets an auto key: the same UUID v4 on every attempt, a new one per call',
    async run({ api, seq }) {
      const s = seq('503,reset,200');
      equal((await api.retryFetch(s.url, { method: 'POST', body: 'pay' }, fast)).status, 200);
      const keys = (await s.log()).map((r) => r.headers['idempotency-key']);
      equal(keys.length, 3);
      match(keys[0], UUID_V4);
      deepEqual(keys, [keys[0], keys[0], keys[0]]);

      const t = seq('200');
      await api.retryFetch(t.url, { method: 'POST', body: 'pay' }, fast);
      await api.retryFetch(t.url, { method: 'POST', body: 'pay' }, fast);
      const [k1, k2] = (await t.log()).map((r) => r.headers['idempotency-key']);
      match(k1, UUID_V4);
      match(k2, UUID_V4);
      ok(k1 !== k2 && k1 !== keys[0], 'two calls never share an auto key');
    },
  },
  {
    name: 'GET gets no auto key; idempotencyKey: false sends none',
    async run({ api, seq }) {
      const s = seq('200');
      await api.retryFetch(s.url, undefined, fast);
      await api.retryFetch(s.url, { method: 'POST' }, { ...fast, idempotencyKey: false });
      deepEqual((await s.log()).map((r) => r.headers['idempotency-key']), [undefined, undefined]);
    },
  },
  {
    name: "the caller's own key is kept, and a string key is used on every attempt",
    async run({ api, seq }) {
      const s = seq('503,200');
      await api.retryFetch(s.url, { method: 'POST', headers: { 'Idempotency-Key': 'caller-key-1' }, body: 'x' }, fast);
      deepEqual((await s.log()).map((r) => r.headers['idempotency-key']), ['caller-key-1', 'caller-key-1']);

      const t = seq('503,200');
      await api.retryFetch(t.url, { method: 'POST', body: 'x' }, { ...fast, idempotencyKey: 'order-42' });
      deepEqual((await t.log()).map((r) => r.headers['idempotency-key']), ['order-42', 'order-42']);
    },
  },
  {
    name: 'a key makes a POST retryable after a network error; 409 is retried with a key',
    async run({ api, seq }) {
      const s = seq('409,200');
      equal((await api.retryFetch(s.url, { method: 'POST', body: 'x' }, fast)).status, 200);
      equal((await s.log()).length, 2);
      const g = seq('409,200');
      equal((await api.retryFetch(g.url, undefined, fast)).status, 409, 'a GET without a key does not retry 409:');
    },
  },
  {
    name: 'idempotencyHeader and the sf-string format',
    async run({ api, seq }) {
      const s = seq('200');
      await api.retryFetch(s.url, { method: 'POST' }, { ...fast, idempotencyHeader: 'X-Request-Key', idempotencyKeyFormat: 'sf-string' });
      const v = (await s.log())[0].headers['x-request-key'];
      match(v, /^"[0-9a-f-]{36}"$/);
      match(v.slice(1, -1), UUID_V4);
    },
  },
  {
    name: 'retryHeaders: X-Retry-Count and X-Original-Request-At on attempts after the first',
    async run({ api, seq }) {
      const s = seq('503,503,200');
      await api.retryFetch(s.url, undefined, { ...fast, retryHeaders: true });
      const log = await s.log();
      deepEqual(log.map((r) => r.headers['x-retry-count']), [undefined, '1', '2']);
      const at = log[1].headers['x-original-request-at'];
      match(at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      equal(log[2].headers['x-original-request-at'], at);
      ok(Math.abs(Date.parse(at) - log[0].at) < 1000, 'it is the time of the first attempt');
      const t = seq('503,200');
      await api.retryFetch(t.url, undefined, fast);
      equal((await t.log())[1].headers['x-retry-count'], undefined, 'off by default:');
    },
  },
  {
    name: 'bodies are replayed intact: string, bytes, ArrayBuffer, Blob, URLSearchParams',
    async run({ api, seq }) {
      const bodies = [
        ['string', 'hello, world'],
        ['Uint8Array', text('bytes 123')],
        ['ArrayBuffer', text('buffer 456').buffer],
        ['Blob', new Blob(['blob ', 'parts'])],
        ['URLSearchParams', new URLSearchParams({ a: '1', b: 'two' })],
      ];
      for (const [kind, body] of bodies) {
        const s = seq('503,503,200');
        await api.retryFetch(s.url, { method: 'PUT', body }, fast);
        const seen = (await s.log()).map((r) => r.body);
        equal(seen.length, 3, `${kind}:`);
        ok(seen[0].length > 0, `${kind}: a body was sent`);
        deepEqual(seen, [seen[0], seen[0], seen[0]], `${kind}:`);
      }
    },
  },
  {
    name: 'a FormData body is replayed with every field',
    async run({ api, seq }) {
      const form = new FormData();
      form.set('amount', '42');
      form.set('file', new Blob(['file-content']), 'a.txt');
      const s = seq('503,200');
      await api.retryFetch(s.url, { method: 'POST', body: form }, fast);
      const log = await s.log();
      equal(log.length, 2);
      for (const r of log) {
        ok(r.body.includes('name="amount"') && r.body.includes('42') && r.body.includes('file-content'), r.body);
      }
    },
  },
  {
    name: 'a ReadableStream body is buffered and replayed whole',
    async run({ api, seq }) {
      const stream = new ReadableStream({
        start(c) {
          c.enqueue(text('part-1;'));
          c.enqueue(text('part-2;'));
          c.enqueue(text('part-3'));
          c.close();
        },
      });
      const s = seq('503,reset,200');
      const res = await api.retryFetch(s.url, { method: 'PUT', body: stream, duplex: 'half' }, fast);
      equal(res.status, 200);
      deepEqual((await s.log()).map((r) => r.body), ['part-1;part-2;part-3', 'part-1;part-2;part-3', 'part-1;part-2;part-3']);
    },
  },
  {
    name: 'a stream above maxBufferedBodyBytes is sent once, whole, and not retried',
    node: true, // Chromium sends streaming uploads only over HTTP/2
    async run({ api, seq }) {
      const stream = new ReadableStream({
        start(c) {
          c.enqueue(text('0123456789'));
          c.enqueue(text('abcdefghij'));
          c.close();
        },
      });
      const s = seq('503,200');
      const res = await api.retryFetch(s.url, { method: 'PUT', body: stream, duplex: 'half' }, { ...fast, maxBufferedBodyBytes: 8 });
      equal(res.status, 503);
      deepEqual((await s.log()).map((r) => r.body), ['0123456789abcdefghij']);
    },
  },
  {
    // A Request input's body is a stream whatever made it: over the limit, the call sends a
    // copy of the request, so fetch sends the body as it would the request's own (Chromium
    // refuses a streaming upload over HTTP/1.1, and plain fetch sends this one).
    name: "a Request input's body above maxBufferedBodyBytes is sent once, whole, as fetch sends it, and not retried",
    async run({ api, seq }) {
      const s = seq('503,200');
      const body = '0123456789abcdefghij';
      const req = new Request(s.url, { method: 'PUT', body, headers: { 'X-Custom': 'yes' } });
      const res = await api.retryFetch(req, undefined, { ...fast, maxBufferedBodyBytes: 8 });
      equal(res.status, 503);
      deepEqual((await s.log()).map((r) => [r.method, r.body, r.headers['x-custom']]), [['PUT', body, 'yes']]);

      const blob = seq('reset,200');
      const err = await rejects(api.retryFetch(new Request(blob.url, { method: 'POST', body: new Blob([body]) }), undefined, { ...fast, maxBufferedBodyBytes: 8 }));
      equal(err?.name, 'RetryError');
      equal(err.reason, 'body-not-replayable');
      const log = await blob.log();
      deepEqual(log.map((r) => r.body), [body], 'sent once, whole:');
      match(log[0].headers['idempotency-key'], UUID_V4);
    },
  },
  {
    name: 'a Request input is cloned per attempt, body and headers intact',
    async run({ api, seq }) {
      const s = seq('503,200');
      const req = new Request(s.url, { method: 'POST', body: 'from-request', headers: { 'X-Custom': 'yes' } });
      equal((await api.retryFetch(req, undefined, fast)).status, 200);
      const log = await s.log();
      deepEqual(log.map((r) => [r.method, r.body, r.headers['x-custom']]), [
        ['POST', 'from-request', 'yes'],
        ['POST', 'from-request', 'yes'],
      ]);
      match(log[0].headers['idempotency-key'], UUID_V4);
      equal(log[1].headers['idempotency-key'], log[0].headers['idempotency-key']);
    },
  },
  {
    name: 'abort during a wait rejects at once with the reason and sends nothing more',
    async run({ api, seq }) {
      const s = seq('503');
      const controller = new AbortController();
      const infos = [];
      const call = api.retryFetch(s.url, undefined, {
        baseDelayMs: 10_000,
        jitter: 'none',
        signal: controller.signal,
        onRetry: (i) => infos.push(i),
      });
      while (infos.length === 0) await sleep(5);
      const abortedAt = Date.now();
      controller.abort();
      const err = await rejects(call);
      const took = Date.now() - abortedAt;
      equal(err.name, 'AbortError');
      ok(took < 500, `rejected ${took} ms after the abort (the wait was 10 s)`);
      await sleep(50);
      equal((await s.log()).length, 1, 'nothing more was sent:');
    },
  },
  {
    name: 'init.signal aborts an attempt in flight, with a custom reason',
    async run({ api, seq }) {
      const s = seq('hang');
      const controller = new AbortController();
      const call = api.retryFetch(s.url, { signal: controller.signal }, fast);
      while ((await s.log()).length === 0) await sleep(5);
      const reason = new Error('user left the page');
      controller.abort(reason);
      const err = await rejects(call);
      equal(err, reason, 'rejects with the exact reason:');
      await sleep(50);
      equal((await s.log()).length, 1);
    },
  },
  {
    name: 'an already-aborted signal sends nothing',
    async run({ api, seq }) {
      const s = seq('200');
      const err = await rejects(api.retryFetch(s.url, undefined, { signal: AbortSignal.abort() }));
      equal(err.name, 'AbortError');
      equal((await s.log()).length, 0);
    },
  },
  {
    name: 'a per-attempt timeout against a hanging server recovers',
    async run({ api, seq }) {
      const s = seq('hang,200');
      const infos = [];
      const res = await api.retryFetch(s.url, undefined, { ...fast, timeoutMs: 400, onRetry: (i) => infos.push(i) });
      equal(res.status, 200);
      equal(infos[0].reason, 'timeout');
      equal((await s.log()).length, 2);
    },
  },
  {
    name: 'timeouts that never recover end in a RetryError whose cause is a TimeoutError',
    async run({ api, seq }) {
      const s = seq('hang');
      const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, timeoutMs: 50, maxAttempts: 2 }));
      equal(err.name, 'RetryError');
      equal(err.reason, 'attempts');
      equal(err.cause.name, 'TimeoutError');
      equal(err.attempts.length, 2);
    },
  },
  {
    name: 'the deadline holds: no wait or attempt starts that cannot finish inside it',
    async run({ api, seq }) {
      const s = seq('503');
      const sent = []; // when each attempt was handed to fetch, in ms after the call
      const started = Date.now();
      const transport = (input, init) => {
        sent.push(Date.now() - started);
        return fetch(input, init);
      };
      // waits of 200 and 400 ms fit (the third attempt has 400 ms left), a third of 800 would
      // not; a loaded machine may leave too little time for the third attempt, never a fourth
      const res = await api.retryFetch(s.url, undefined, { baseDelayMs: 200, jitter: 'none', maxAttempts: 10, deadlineMs: 1000, fetch: transport });
      const took = Date.now() - started;
      equal(res.status, 503);
      // the last answer comes back at once (no wait fits); 300 ms of slack for a loaded
      // machine is less than the 400 ms a wait of 800 would overrun the deadline by
      ok(took < 1000 + 300, `took ${took} ms with a 1000 ms deadline`);
      const attempts = (await s.log()).length;
      ok(attempts >= 2 && attempts <= 3, `${attempts} attempts: the 200 ms wait fits, the 800 ms one would not`);
      ok(sent.length >= attempts && sent.length <= 3, `${sent.length} attempts sent, ${attempts} answered`);
      // nothing is sent once the deadline has passed (2 ms for the clocks' millisecond ticks)
      ok(sent.every((ms) => ms <= 1000 + 2), `attempts sent at ${sent.join(', ')} ms with a 1000 ms deadline`);

      const h = seq('hang');
      const t0 = Date.now();
      const err = await rejects(api.retryFetch(h.url, undefined, { ...fast, deadlineMs: 400, maxAttempts: 10 }));
      const t1 = Date.now() - t0;
      equal(err.name, 'RetryError');
      equal(err.reason, 'deadline');
      ok(t1 < 1000, `a hanging server is cut at the deadline (took ${t1} ms)`);
    },
  },
  {
    name: 'onRetry sees each retry; if it throws, the call rejects with that error',
    async run({ api, seq }) {
      const s = seq('503,reset,200');
      const infos = [];
      await api.retryFetch(s.url, { method: 'POST' }, { baseDelayMs: 10, jitter: 'none', onRetry: (i) => infos.push(i) });
      deepEqual(infos.map((i) => [i.attempt, i.delayMs, i.reason, i.status]), [
        [1, 10, 'status', 503],
        [2, 20, 'network', undefined],
      ]);
      match(infos[0].idempotencyKey, UUID_V4);
      ok(infos[1].error !== undefined, 'the network error is given');

      const t = seq('503,200');
      const boom = new Error('stop');
      const err = await rejects(api.retryFetch(t.url, undefined, { ...fast, onRetry: () => { throw boom; } }));
      equal(err, boom);
      equal((await t.log()).length, 1);
    },
  },
  {
    name: 'shouldRetry has the final say (sync and async)',
    async run({ api, seq }) {
      const s = seq('503,503,200');
      const seen = [];
      const res = await api.retryFetch(s.url, undefined, {
        ...fast,
        shouldRetry: (ctx) => {
          seen.push([ctx.attempt, ctx.status, ctx.reason, ctx.delayMs, ctx.response.status]);
          return ctx.attempt < 2;
        },
      });
      equal(res.status, 503);
      deepEqual(seen, [[1, 503, 'status', 5, 503], [2, 503, 'status', 10, 503]]);
      equal((await s.log()).length, 2);

      const t = seq('reset,200');
      equal((await api.retryFetch(t.url, undefined, { ...fast, shouldRetry: async () => true })).status, 200);
      const u = seq('reset,200');
      const err = await rejects(api.retryFetch(u.url, undefined, { ...fast, shouldRetry: async () => false }));
      equal(err.reason, 'shouldRetry');
    },
  },
  {
    name: 'RetryError carries the attempt history and the last error',
    async run({ api, seq }) {
      const s = seq('reset');
      const err = await rejects(api.retryFetch(s.url, undefined, { baseDelayMs: 5, jitter: 'none' }));
      ok(api.isRetryError(err));
      equal(err.name, 'RetryError');
      equal(err.reason, 'attempts');
      ok(err instanceof Error);
      ok(err.cause !== undefined);
      deepEqual(err.attempts.map((a) => [a.attempt, a.delayMs, a.status]), [[1, 5, undefined], [2, 10, undefined], [3, undefined, undefined]]);
      for (const a of err.attempts) {
        ok(a.startedAt > 1.6e12 && a.durationMs >= 0 && a.error !== undefined, JSON.stringify(a));
      }
    },
  },
  {
    name: 'invalid options are TypeErrors naming the option, before anything is sent',
    async run({ api, seq }) {
      const s = seq('200');
      const cases = [
        [{ maxAttempts: 0 }, 'maxAttempts'],
        [{ maxAttempts: 101 }, 'maxAttempts'],
        [{ maxAttempts: 2.5 }, 'maxAttempts'],
        [{ maxAttempts: '3' }, 'maxAttempts'],
        [{ baseDelayMs: -1 }, 'baseDelayMs'],
        [{ baseDelayMs: NaN }, 'baseDelayMs'],
        [{ maxDelayMs: Infinity }, 'maxDelayMs'],
        [{ factor: 0.5 }, 'factor'],
        [{ jitter: 'random' }, 'jitter'],
        [{ retryOnStatus: [503, 'x'] }, 'retryOnStatus'],
        [{ retryOnStatus: 503 }, 'retryOnStatus'],
        [{ timeoutMs: 0 }, 'timeoutMs'],
        [{ deadlineMs: -5 }, 'deadlineMs'],
        [{ idempotencyKey: true }, 'idempotencyKey'],
        [{ idempotencyKey: '' }, 'idempotencyKey'],
        [{ idempotencyHeader: 'bad header' }, 'idempotencyHeader'],
        [{ idempotencyKeyFormat: 'quoted' }, 'idempotencyKeyFormat'],
        [{ retryHeaders: 'yes' }, 'retryHeaders'],
        [{ signal: {} }, 'signal'],
        [{ onRetry: 'log' }, 'onRetry'],
        [{ fetch: 42 }, 'fetch'],
      ];
      for (const [options, name] of cases) {
        const err = await rejects(api.retryFetch(s.url, undefined, options), `${JSON.stringify(options)} was accepted`);
        equal(err.name, 'TypeError', `${name}:`);
        ok(err.message.includes(`"${name}"`), `${err.message} names ${name}`);
        ok(err.message.includes('expected'), `${err.message} says what is allowed`);
      }
      equal((await s.log()).length, 0, 'nothing was sent:');
      const err = await rejects(api.retryFetch(s.url, undefined, 'fast'));
      equal(err.name, 'TypeError');
    },
  },
  {
    name: 'createRetryFetch: defaults validated at once, per-call options merge over them',
    async run({ api, seq }) {
      let threw;
      try {
        api.createRetryFetch({ maxAttempts: -1 });
      } catch (e) {
        threw = e;
      }
      equal(threw?.name, 'TypeError');
      const client = api.createRetryFetch({ baseDelayMs: 1, jitter: 'none', maxAttempts: 5 });
      const s = seq('503,503,503,503,200');
      equal((await client(s.url)).status, 200);
      equal((await s.log()).length, 5);
      const t = seq('503');
      equal((await client(t.url, undefined, { maxAttempts: 2, baseDelayMs: undefined })).status, 503);
      equal((await t.log()).length, 2);
    },
  },
  {
    name: 'per-call options: a changed value is read again, the same values reused, concurrent calls keep theirs',
    async run({ api, seq }) {
      const options = { maxAttempts: 1, baseDelayMs: 1, jitter: 'none' };
      const a = seq('503');
      equal((await api.retryFetch(a.url, undefined, options)).status, 503);
      equal((await a.log()).length, 1, 'maxAttempts 1:');
      options.maxAttempts = 3; // the same object, mutated between calls
      const b = seq('503');
      equal((await api.retryFetch(b.url, undefined, options)).status, 503);
      equal((await b.log()).length, 3, 'maxAttempts 3 after the change:');
      const c = seq('503');
      equal((await api.retryFetch(c.url, undefined, { ...options })).status, 503, 'a copy with the same values:');
      equal((await c.log()).length, 3);
      // An array mutated in place between calls is read again.
      const statuses = { ...options, retryOnStatus: [500] };
      const e = seq('503');
      await api.retryFetch(e.url, undefined, statuses);
      equal((await e.log()).length, 1, '503 not in retryOnStatus [500]:');
      statuses.retryOnStatus.push(503);
      const f = seq('503');
      await api.retryFetch(f.url, undefined, statuses);
      equal((await f.log()).length, 3, 'after retryOnStatus.push(503):');
      // Calls in flight keep their own options while later calls read others.
      const slow = seq('503+delay=50,503+delay=50,200');
      const inFlight = api.retryFetch(slow.url, undefined, { maxAttempts: 3, baseDelayMs: 1 });
      const others = [];
      for (let i = 1; i <= 4; i++) {
        const s = seq('503');
        others.push(api.retryFetch(s.url, undefined, { maxAttempts: 1 + (i % 2), baseDelayMs: 1 }).then(async (r) => [r.status, (await s.log()).length, 1 + (i % 2)]));
      }
      equal((await inFlight).status, 200, 'the call in flight finished with its own maxAttempts:');
      for (const [status, hits, want] of await Promise.all(others)) {
        equal(status, 503);
        equal(hits, want, 'each concurrent call used its own maxAttempts:');
      }
      // A getter runs once per call, and a throwing one rejects the call.
      let reads = 0;
      const counted = { get maxAttempts() { reads++; return 1; } };
      const d = seq('200');
      equal((await api.retryFetch(d.url, undefined, counted)).status, 200);
      equal(reads, 1, 'the maxAttempts getter ran once:');
      const thrown = await rejects(api.retryFetch(d.url, undefined, { get timeoutMs() { throw new RangeError('boom'); } }));
      equal(thrown.name, 'RangeError');
      equal((await d.log()).length, 1, 'nothing sent when a getter throws:');
    },
  },
  {
    name: 'per-call options reused by value: a getter\'s new value, an item changed in place, a new guard and a signal are each seen by the next call',
    async run({ api, seq }) {
      // The same values twice: the second call may reuse what the first read. Each change
      // below must still be seen by the very next call.
      let attempts = 1;
      const getter = { baseDelayMs: 1, jitter: 'none', get maxAttempts() { return attempts; } };
      const a = seq('503');
      await api.retryFetch(a.url, undefined, getter);
      await api.retryFetch(a.url, undefined, getter);
      equal((await a.log()).length, 2, 'maxAttempts 1, twice:');
      attempts = 2;
      const b = seq('503');
      await api.retryFetch(b.url, undefined, getter);
      equal((await b.log()).length, 2, 'the getter\'s new value, maxAttempts 2:');
      const list = { maxAttempts: 2, baseDelayMs: 1, retryOnStatus: [500] };
      const c = seq('503');
      await api.retryFetch(c.url, undefined, list);
      equal((await c.log()).length, 1, '503 not in [500]:');
      list.retryOnStatus[0] = 503; // the same array, one item changed
      const d = seq('503');
      await api.retryFetch(d.url, undefined, list);
      equal((await d.log()).length, 2, 'after retryOnStatus[0] = 503:');
      // A guard: the same values with a breaker that the previous call opened.
      const plain = { maxAttempts: 1, baseDelayMs: 1 };
      const e = seq('reset');
      await rejects(api.retryFetch(e.url, undefined, plain));
      const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 60000 });
      await rejects(api.retryFetch(e.url, undefined, { ...plain, breaker }));
      equal((await e.log()).length, 2);
      const open = await rejects(api.retryFetch(e.url, undefined, { ...plain, breaker }));
      equal(open.name, 'CircuitOpenError', 'the breaker of the call before:');
      equal((await e.log()).length, 2, 'nothing sent while open:');
      // A signal: the same values with an aborted signal, then without it again.
      const f = seq('200');
      equal((await api.retryFetch(f.url, undefined, plain)).status, 200);
      const controller = new AbortController();
      controller.abort(new Error('stop'));
      const aborted = await rejects(api.retryFetch(f.url, undefined, { ...plain, signal: controller.signal }));
      equal(aborted.message, 'stop');
      equal((await api.retryFetch(f.url, undefined, plain)).status, 200, 'without the signal again:');
      equal((await f.log()).length, 2);
    },
  },
  {
    name: 'per-call options compared with the cached ones: names in another order, an inherited value, a comma in a name, a getter read once on a miss',
    async run({ api, seq }) {
      // Cache { baseDelayMs, maxAttempts: 1 }, then the same values with the names swapped,
      // but maxAttempts 2: the second call must see 2.
      const a = seq('503,503');
      await api.retryFetch(a.url, undefined, { baseDelayMs: 1, maxAttempts: 1 });
      equal((await a.log()).length, 1);
      const b = seq('503,503');
      await api.retryFetch(b.url, undefined, { maxAttempts: 2, baseDelayMs: 1 });
      equal((await b.log()).length, 2, 'names in another order, maxAttempts 2:');
      // Cached { maxAttempts: 1 }; an object whose only own name is baseDelayMs and which
      // inherits maxAttempts: 1 is not those options (own names only): maxAttempts is 3.
      const c = seq('503');
      await api.retryFetch(c.url, undefined, { maxAttempts: 1 });
      const inherited = Object.assign(Object.create({ maxAttempts: 1 }), { baseDelayMs: 1 });
      const d = seq('503,503,200');
      equal((await api.retryFetch(d.url, undefined, inherited)).status, 200);
      equal((await d.log()).length, 3, 'the inherited maxAttempts is not read:');
      // Cached { maxAttempts, baseDelayMs }; one name holding both, with a comma: unknown.
      await api.retryFetch(c.url, undefined, { maxAttempts: 1, baseDelayMs: 1 });
      const comma = await rejects(api.retryFetch(c.url, undefined, { 'maxAttempts,baseDelayMs': 1 }));
      equal(comma.name, 'TypeError');
      match(comma.message, /maxAttempts,baseDelayMs/);
      // A getter whose value changes: read once per call whether the cache matches or not.
      let reads = 0;
      let delay = 1;
      const counted = { maxAttempts: 1, get baseDelayMs() { reads += 1; return delay; } };
      await api.retryFetch(c.url, undefined, counted);
      await api.retryFetch(c.url, undefined, counted);
      delay = 2;
      await api.retryFetch(c.url, undefined, counted);
      equal(reads, 3, 'the getter ran once per call:');
    },
  },
  {
    name: 'a GET with a plain init is fixed at the call: its retries send what the call was given',
    async run({ api, seq }) {
      const init = { method: 'GET', cache: 'no-store' };
      const s = seq('503,503,200');
      const call = api.retryFetch(s.url, init, { ...fast, maxAttempts: 3 });
      init.method = 'DELETE'; // changed after the call: nothing of it is sent
      equal((await call).status, 200);
      deepEqual((await s.log()).map((r) => r.method), ['GET', 'GET', 'GET']);
      const h = seq('503,200');
      equal((await api.retryFetch(h.url, { method: 'head' }, fast)).status, 200);
      deepEqual((await h.log()).map((r) => r.method), ['HEAD', 'HEAD'], 'a lower-case head:');
      const bad = await rejects(api.retryFetch('ftp://example.invalid/', { method: 'GET' }, fast));
      equal(bad.name, 'TypeError', 'a URL fetch refuses, with a plain init:');
      const misplaced = await rejects(api.retryFetch(h.url, { method: 'GET', retries: 3 }));
      match(misplaced.message, /init has "retries", a retry option/);
    },
  },
  {
    name: 'a status below 400 in retryOnStatus is retried like any other',
    async run({ api, seq }) {
      const s = seq('202,202,200');
      const res = await api.retryFetch(s.url, undefined, { ...fast, retryOnStatus: [202] });
      equal(res.status, 200);
      equal((await s.log()).length, 3);
      const t = seq('202,200');
      equal((await api.retryFetch(t.url, undefined, fast)).status, 202, 'not in retryOnStatus: the answer:');
      equal((await t.log()).length, 1);
    },
  },
  {
    name: 'backoffDelays: the schedule, seeded jitter, bounds and validation',
    async run({ api }) {
      deepEqual(api.backoffDelays({ jitter: 'none' }, 5), [500, 1000, 2000, 4000, 8000]);
      deepEqual(api.backoffDelays({ jitter: 'none', maxDelayMs: 1500 }, 3), [500, 1000, 1500]);
      const a = api.backoffDelays({}, 20, 7);
      deepEqual(api.backoffDelays({}, 20, 7), a);
      ok(a.every((d) => Number.isInteger(d) && d >= 0 && d <= 30000));
      const d = api.backoffDelays({ jitter: 'decorrelated', baseDelayMs: 100, maxDelayMs: 5000 }, 50, 1);
      ok(d.every((x) => x >= 100 && x <= 5000), JSON.stringify(d));
      let threw;
      try {
        api.backoffDelays({}, -1);
      } catch (e) {
        threw = e;
      }
      equal(threw?.name, 'TypeError');
    },
  },
  {
    name: 'a custom fetch transport is used',
    async run({ api }) {
      let calls = 0;
      const fetch = async () => {
        calls += 1;
        return new Response('ok', { status: calls < 3 ? 503 : 200 });
      };
      const res = await api.retryFetch('https://example.invalid/', undefined, { ...fast, fetch });
      equal(res.status, 200);
      equal(await res.text(), 'ok');
      equal(calls, 3);
    },
  },
  {
    name: 'huge delays are clamped to what setTimeout accepts',
    async run({ api }) {
      const d = api.backoffDelays({ baseDelayMs: 1e15, maxDelayMs: 1e15, factor: 100, jitter: 'none' }, 100);
      ok(d.every((x) => x === 2147483647), JSON.stringify(d.slice(0, 3)));
    },
  },
  {
    name: 'circuit breaker: while open no request reaches the server; after openMs exactly one probe does',
    async run({ api, seq }) {
      const events = [];
      const breaker = new api.CircuitBreaker({ failureThreshold: 2, openMs: 300, onStateChange: (e) => events.push(`${e.from}>${e.to}`) });
      const a = seq('503');
      equal((await api.retryFetch(a.url, undefined, { ...fast, breaker, maxAttempts: 2 })).status, 503);
      equal(breaker.state(a.url), 'open');

      const b = seq('200');
      const err = await rejects(api.retryFetch(b.url, undefined, { breaker }));
      equal(err.name, 'CircuitOpenError');
      ok(err.retryAfterMs > 0 && err.retryAfterMs <= 300, `retryAfterMs ${err.retryAfterMs}`);
      equal((await b.log()).length, 0, 'nothing was sent while open:');

      await sleep(320);
      const c = seq('200+delay=100');
      const results = await Promise.allSettled([1, 2, 3].map(() => api.retryFetch(c.url, undefined, { breaker, maxAttempts: 1 })));
      equal((await c.log()).length, 1, 'exactly one probe:');
      equal(results.filter((r) => r.status === 'fulfilled' && r.value.status === 200).length, 1);
      equal(results.filter((r) => r.status === 'rejected' && r.reason.name === 'CircuitOpenError').length, 2);
      equal(breaker.state(c.url), 'closed');
      deepEqual(events, ['closed>open', 'open>half-open', 'half-open>closed']);
    },
  },
  {
    name: 'circuit breaker: a failed probe opens it again',
    async run({ api, seq }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 1, openMs: 100 });
      const a = seq('reset');
      await rejects(api.retryFetch(a.url, undefined, { ...fast, breaker }));
      equal((await a.log()).length, 1, 'the first failure opened it:');
      await sleep(120);
      await rejects(api.retryFetch(a.url, undefined, { ...fast, breaker }));
      equal((await a.log()).length, 2, 'one probe, which failed:');
      equal(breaker.state(a.url), 'open');
    },
  },
  {
    name: 'retry budget: under an outage the shared budget stops retries',
    async run({ api, seq }) {
      // 10 tokens; a retry only while tokens (+ what the call's own failures took) > 5; no
      // refill by time, so the count is exact.
      const budget = new api.RetryBudget({ refillPerSecond: 0 });
      const s = seq('503');
      for (let i = 0; i < 10; i++) {
        equal((await api.retryFetch(s.url, undefined, { ...fast, budget, maxAttempts: 9 })).status, 503);
      }
      // call 1, a lone request: all 9 attempts (its own failures do not count against it;
      // they take 9 of the 10 tokens); calls 2-10 find the count drained by call 1: one
      // attempt each. 90 without a budget.
      equal((await s.log()).length, 18);
      equal(budget.tokens(s.url), 0);
      const r = seq('reset');
      const err = await rejects(api.retryFetch(r.url, undefined, { ...fast, budget }));
      equal(err.name, 'RetryError');
      equal(err.reason, 'budget');
      equal(err.attempts.length, 1);
      const other = new api.RetryBudget({ maxTokens: 4, tokenRatio: 1 });
      equal(other.tokens(s.url), 4);
      equal(other.refillPerSecond, 0.5, 'the default refill');
    },
  },
  {
    name: 'retry budget: tokens come back with time (refillPerSecond); budget: false is no budget',
    async run({ api, seq }) {
      // A lone call of 10 attempts takes all 10 tokens (its own failures never refuse it);
      // `rate` tokens a second come back. The budget reads Date.now(): each look at the count is
      // bracketed by Date.now() calls, and checked against the time that passed, whatever the
      // machine's load made of it, not against a guess of it.
      const rate = 2;
      const budget = new api.RetryBudget({ refillPerSecond: rate });
      const s = seq('503');
      const began = Date.now();
      equal((await api.retryFetch(s.url, undefined, { baseDelayMs: 1, maxDelayMs: 5, jitter: 'none', budget, maxAttempts: 10 })).status, 503);
      equal((await s.log()).length, 10, 'a lone call: every attempt');
      const a0 = Date.now();
      const drained = budget.tokens(s.url);
      const a1 = Date.now();
      // 10 taken; what is left came back during the call, at `rate` a second at most
      ok(drained >= 0 && drained <= (rate * (a1 - began)) / 1000 + 1e-9, `drained: ${drained} tokens ${a1 - began} ms after the call began`);
      await sleep(1000);
      const b0 = Date.now();
      const refilled = budget.tokens(s.url);
      const b1 = Date.now();
      const least = Math.min(10, drained + (rate * (b0 - a1)) / 1000);
      const most = Math.min(10, drained + (rate * (b1 - a0)) / 1000);
      ok(refilled >= least - 1e-9 && refilled <= most + 1e-9, `refilled: ${refilled} tokens, expected ${least} to ${most} (${rate} a second for ${b0 - a1} to ${b1 - a0} ms)`);
      ok(refilled >= drained + rate - 1e-9 || refilled === 10, `a second brought ${refilled - drained} tokens back`);
      const n = (await s.log()).length;
      equal((await api.retryFetch(s.url, undefined, { ...fast, budget: false, maxAttempts: 4 })).status, 503);
      equal((await s.log()).length - n, 4, 'budget: false retries freely');
    },
  },
  {
    name: 'retry budget: concurrent calls keep the token count within [0, maxTokens]',
    async run({ api, seq }) {
      const budget = new api.RetryBudget({ maxTokens: 6, tokenRatio: 0.5 });
      const seen = [];
      const calls = Array.from({ length: 40 }, (_, i) => {
        const s = seq(i % 2 ? '503,503,200' : 'reset,200');
        return api
          .retryFetch(s.url, undefined, { baseDelayMs: 2, budget, onRetry: () => seen.push(budget.tokens(s.url)) })
          .then((res) => seen.push(budget.tokens(s.url)) && res.status, (e) => e.name);
      });
      const outcomes = await Promise.all(calls);
      ok(seen.length >= 20, `only ${seen.length} samples`);
      ok(seen.every((t) => t >= 0 && t <= 6), JSON.stringify(seen));
      ok(outcomes.every((o) => o === 200 || o === 503 || o === 'RetryError'), JSON.stringify(outcomes));
    },
  },
  {
    name: 'adaptive throttle: every call still completes, and a 503 lowers the send rate',
    async run({ api, seq }) {
      const throttle = new api.AdaptiveThrottle({ initialRate: 200 });
      const s = seq('200');
      const statuses = await Promise.all(Array.from({ length: 30 }, () => api.retryFetch(s.url, undefined, { throttle }).then((r) => r.status)));
      deepEqual([...new Set(statuses)], [200]);
      equal((await s.log()).length, 30);
      const before = throttle.rate(s.url);
      ok(before >= 200, `rate ${before}`);
      const t = seq('503,200');
      equal((await api.retryFetch(t.url, undefined, { ...fast, throttle })).status, 200);
      ok(throttle.rate(t.url) < before, `${throttle.rate(t.url)} < ${before}`);
      equal(throttle.rate('http://never-seen.invalid/'), undefined);
    },
  },
  {
    name: 'adaptive throttle: an attempt that would wait longer than maxWaitMs is not sent',
    async run({ api, seq }) {
      const throttle = new api.AdaptiveThrottle({ initialRate: 1, minRate: 0.5, rampMs: 60_000, maxWaitMs: 200 });
      const s = seq('200');
      const [first, second] = await Promise.allSettled([
        api.retryFetch(s.url, undefined, { throttle }),
        api.retryFetch(s.url, undefined, { throttle }),
      ]);
      equal(first.status, 'fulfilled');
      equal(second.status, 'rejected');
      equal(second.reason.name, 'RetryError');
      equal(second.reason.reason, 'throttled');
      equal(second.reason.attempts.length, 0);
      equal((await s.log()).length, 1);
    },
  },
  {
    name: 'adaptive throttle: a retry it refuses ends with the failure that retry was for as the cause',
    async run({ api, seq }) {
      const throttle = new api.AdaptiveThrottle({ initialRate: 1, minRate: 0.5, rampMs: 60_000, maxWaitMs: 200 });
      const s = seq('reset,200');
      const err = await rejects(api.retryFetch(s.url, undefined, { ...fast, throttle }));
      equal(err.name, 'RetryError');
      equal(err.reason, 'throttled');
      equal(err.attempts.length, 1);
      ok(err.cause instanceof Error, `cause: ${err.cause}`);
      equal(err.cause, err.attempts[0].error);
      equal((await s.log()).length, 1);
    },
  },
  {
    name: 'guards: invalid guard options are TypeErrors naming the option',
    async run({ api, seq }) {
      const s = seq('200');
      for (const [options, name] of [[{ budget: {} }, 'budget'], [{ throttle: 5 }, 'throttle'], [{ breaker: new api.RetryBudget() }, 'breaker']]) {
        const err = await rejects(api.retryFetch(s.url, undefined, options));
        equal(err.name, 'TypeError');
        ok(err.message.includes(`"${name}"`), err.message);
      }
      for (const [make, name] of [
        [() => new api.RetryBudget({ maxTokens: 0 }), 'maxTokens'],
        [() => new api.RetryBudget({ tokenRatio: -1 }), 'tokenRatio'],
        [() => new api.CircuitBreaker({ failureThreshold: 1.5 }), 'failureThreshold'],
        [() => new api.CircuitBreaker({ openMs: NaN }), 'openMs'],
        [() => new api.CircuitBreaker({ onStateChange: 'log' }), 'onStateChange'],
        [() => new api.AdaptiveThrottle({ beta: 1 }), 'beta'],
      ]) {
        let threw;
        try {
          make();
        } catch (e) {
          threw = e;
        }
        equal(threw?.name, 'TypeError', `${name}:`);
        ok(threw.message.includes(`"${name}"`), threw.message);
      }
      equal((await s.log()).length, 0);
    },
  },
  {
    name: 'guards work as createRetryFetch defaults, shared by every call',
    async run({ api, seq }) {
      const breaker = new api.CircuitBreaker({ failureThreshold: 3, openMs: 10_000 });
      const client = api.createRetryFetch({ ...fast, breaker, maxAttempts: 1 });
      const s = seq('503');
      for (let i = 0; i < 3; i++) await client(s.url);
      const err = await rejects(client(s.url));
      equal(err.name, 'CircuitOpenError');
      ok(api.isCircuitOpenError(err));
      equal((await s.log()).length, 3);
      equal((await client(s.url, undefined, { breaker: null })).status, 503, 'null clears a default:');
    },
  },
];
