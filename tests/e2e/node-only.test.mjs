// Contract tests that need Node: bodies only Node's fetch takes (async iterables,
// Buffers), and URLs that only Node refuses (a relative URL has no base outside a page).
// Against the built package (imported as 'retry-fetch', linked to pkg/ by scripts/test.sh)
// and the fault-injecting server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as api from 'retry-fetch';
import { useFaultServer } from './runner.mjs';

const seq = useFaultServer('node-only');
const fast = { baseDelayMs: 5, jitter: 'none' };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** A stream body that sends one byte and never ends; `cancelled` gets its cancel reason. */
const stalled = (cancelled = []) => new ReadableStream({ start(c) { c.enqueue(new Uint8Array([1])); }, cancel(reason) { cancelled.push(reason); } });
const enc = (s) => new TextEncoder().encode(s);

/** How many timers are active in this process. */
const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

/** Run `fn(base)` against a node:http server on 127.0.0.1 answering with `handler`; closed after. */
async function withHttpServer(handler, fn) {
  const { createServer } = await import('node:http');
  const server = createServer(handler);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    return await fn(`http://127.0.0.1:${server.address().port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

/** Run `body(original)`, which may replace the global fetch: it is restored afterwards. */
async function withGlobalFetch(body) {
  const original = globalThis.fetch;
  try {
    await body(original);
  } finally {
    globalThis.fetch = original;
  }
}

test('an async-iterable body is sent once, whole, and not retried: the 503 is returned', async () => {
  // PUT is idempotent and the POST gets a key: only the one-shot body stops the retry
  for (const method of ['PUT', 'POST']) {
    let pulls = 0;
    async function* body() {
      pulls += 1;
      yield enc('a');
      yield enc('b');
    }
    const s = seq('503,200');
    const res = await api.retryFetch(s.url, { method, body: body(), duplex: 'half' }, fast);
    assert.equal(res.status, 503, `${method}: the call resolves with the 503`);
    assert.deepEqual(
      s.log().map((r) => [r.method, r.body]),
      [[method, 'ab']],
      `${method}: sent once, whole (never resent empty)`,
    );
    assert.equal(pulls, 1, `${method}: the iterable was started once`);
  }
});

test('a relative URL is a TypeError before anything is sent (Node has no base URL)', async () => {
  for (const input of ['/relative/path', 'relative/path?q=1']) {
    const plain = await api.retryFetch(input, undefined, fast).then(
      () => assert.fail(`${input}: was accepted`),
      (e) => e,
    );
    assert.equal(plain?.name, 'TypeError', `${input}: ${plain?.name}: ${plain?.message}`);
    assert.ok(!api.isRetryError(plain), `${input}: a RetryError, as if a network error was retried`);
    let calls = 0;
    const counting = (i, n) => {
      calls += 1;
      return fetch(i, n);
    };
    const viaOption = await api.retryFetch(input, { method: 'POST', body: 'x' }, { ...fast, fetch: counting }).then(
      () => assert.fail(`${input}: was accepted (fetch option)`),
      (e) => e,
    );
    assert.equal(viaOption?.name, 'TypeError', `${input} (fetch option): ${viaOption?.message}`);
    assert.ok(!api.isRetryError(viaOption), `${input} (fetch option): a RetryError`);
    assert.equal(calls, 0, `${input}: the transport was called`);
  }
});

test('a Buffer body (a view into a shared pool) is replayed byte-identical with the input', async () => {
  const pool = Buffer.from('0123456789 pool bytes \u00fc\u20ac around the body');
  const body = pool.subarray(11, 27); // 'pool bytes ü€ ' in UTF-8, a view with an offset
  const want = Buffer.from(body).toString('hex');
  const s = seq('503,reset,200');
  const res = await api.retryFetch(s.url, { method: 'PUT', body }, fast);
  assert.equal(res.status, 200);
  const seen = s.log().map((r) => Buffer.from(r.bodyBase64, 'base64').toString('hex'));
  assert.deepEqual(seen, [want, want, want]);
});

test('a callback that returns a rejecting promise never becomes an unhandled rejection (onStateChange)', async () => {
  const unhandled = [];
  const onUnhandled = (reason) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const changes = [];
    const breaker = new api.CircuitBreaker({
      failureThreshold: 1,
      openMs: 60_000,
      onStateChange: async (change) => {
        changes.push(change.to);
        throw new Error('listener failed');
      },
    });
    const s = seq('reset');
    const err = await api.retryFetch(s.url, undefined, { baseDelayMs: 5, breaker }).then(() => assert.fail('expected a rejection'), (e) => e);
    assert.equal(err.reason, 'circuit-open');
    assert.deepEqual(changes, ['open'], 'the listener ran');
    await new Promise((r) => setTimeout(r, 50)); // unhandled rejections are reported after a tick
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

// A POST the server redirected was taken: it is never sent again, whatever the redirect's
// target does (Node shows redirects to the loop, which follows them itself).
for (const [target, label] of [['reset', 'drops the connection'], ['hang', 'is slower than timeoutMs'], ['503', 'answers 503']]) {
  test(`a POST answered 303 is never sent again when the redirect's target ${label}`, async () => {
    const receipt = seq(target);
    const pay = seq(`303+to=${encodeURIComponent(new URL(receipt.url).pathname + new URL(receipt.url).search)}`);
    const outcome = await api
      .retryFetch(pay.url, { method: 'POST', body: 'pay' }, { ...fast, timeoutMs: 300 })
      .then((res) => res.status, (e) => e);
    const posts = (await pay.log()).filter((r) => r.method === 'POST');
    assert.equal(posts.length, 1, `the POST was sent ${posts.length} times (${outcome?.message ?? outcome})`);
    const gets = (await receipt.log()).filter((r) => r.method === 'GET');
    assert.equal(gets.length, 1, 'the receipt was asked for once');
    if (target === '503') {
      assert.equal(outcome, 503, 'the target\'s answer is the result');
    } else {
      assert.equal(outcome.name, 'RetryError');
      assert.equal(outcome.attempts.length, 1);
    }
  });
}

test('a POST answered 307 whose target drops the connection reaches each URL once', async () => {
  const target = seq('reset');
  const old = seq(`307+to=${encodeURIComponent(new URL(target.url).pathname + new URL(target.url).search)}`);
  const err = await api.retryFetch(old.url, { method: 'POST', body: 'pay' }, fast).then(() => assert.fail('expected a rejection'), (e) => e);
  assert.equal(err.name, 'RetryError');
  assert.equal((await old.log()).length, 1);
  const sent = await target.log();
  assert.equal(sent.length, 1);
  assert.equal(sent[0].method, 'POST');
  assert.equal(sent[0].body, 'pay');
});

test('a followed redirect keeps the key and drops Authorization across origins; a GET still follows as fetch does', async () => {
  const receipt = seq('200');
  const pay = seq(`303+to=${encodeURIComponent(new URL(receipt.url).pathname + new URL(receipt.url).search)}`);
  const res = await api.retryFetch(pay.url, { method: 'POST', body: '{"a":1}', headers: { Authorization: 'Bearer t', 'Content-Type': 'application/json' } }, fast);
  assert.equal(res.status, 200);
  const [get] = await receipt.log();
  assert.equal(get.method, 'GET');
  assert.equal(get.body, '');
  assert.equal(get.headers['content-type'], undefined, 'a 303 drops the body headers');
  assert.equal(get.headers.authorization, 'Bearer t', 'same origin: Authorization kept');
  assert.match(get.headers['idempotency-key'], /^[0-9a-f-]{36}$/);
});

test("README's list of RetryError reasons is the StopReason union of index.d.ts", async () => {
  const { readFile } = await import('node:fs/promises');
  const dts = await readFile(new URL('../../js/index.d.ts', import.meta.url), 'utf8');
  const union = dts.match(/export type StopReason =([^;]*);/)[1].match(/'[^']+'/g).sort();
  const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
  const sentence = readme.match(/`RetryError\.reason` is ([\s\S]*?)`RetryError\.attempts`/)[1];
  const listed = [...new Set(sentence.match(/`'[^']+'`/g).map((s) => s.slice(1, -1)))].sort();
  assert.deepEqual(listed, union);
});

/** A node:http server on 127.0.0.1 (its own origin) that records each request and answers with `handle`. */
async function originServer(handle) {
  const { createServer } = await import('node:http');
  const seen = [];
  const server = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    seen.push({ method: req.method, url: req.url, headers: req.headers, body });
    handle(req, res);
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close: () => { server.closeAllConnections(); return new Promise((ok) => server.close(ok)); },
  };
}

test('a redirect to another origin drops Authorization, Cookie and Proxy-Authorization, as Node\'s fetch does', async () => {
  const target = await originServer((req, res) => res.end('done'));
  const start = await originServer((req, res) => res.writeHead(307, { location: `${target.url}/next` }).end());
  try {
    const headers = { authorization: 'Bearer t', cookie: 'session=secret', 'proxy-authorization': 'Basic p', 'x-kept': '1' };
    const res = await api.retryFetch(`${start.url}/pay`, { method: 'POST', body: 'payload', headers }, fast);
    assert.equal(await res.text(), 'done');
    assert.equal(start.seen[0].headers.cookie, 'session=secret', 'the first origin gets them');
    const [hop] = target.seen;
    assert.equal(hop.method, 'POST');
    assert.equal(hop.body, 'payload', 'a 307 sends the body again');
    assert.equal(hop.headers['x-kept'], '1');
    for (const name of ['authorization', 'cookie', 'proxy-authorization']) {
      assert.equal(hop.headers[name], undefined, `${name} sent to the other origin`);
    }
    assert.equal(hop.headers['idempotency-key'], start.seen[0].headers['idempotency-key'], 'the same key');
  } finally {
    await Promise.all([start.close(), target.close()]);
  }
});

// The hops the loop follows itself (a non-idempotent request in Node) are sent as fetch's own
// following sends them; each case is run with plain fetch too, whose result is the expected one.
test('a followed redirect keeps what fetch keeps of the request: integrity, mode: \'same-origin\', cache, referrer; its url has no fragment', async () => {
  const { createHash } = await import('node:crypto');
  const final = 'the final answer';
  const integrity = `sha256-${createHash('sha256').update(final).digest('base64')}`;
  const target = await originServer((req, res) => res.end(final));
  const start = await originServer((req, res) => {
    const [, status, where] = req.url.split('/');
    const location = where === 'other' ? `${target.url}/next` : `${start.url}/done#fragment`;
    if (status === 'done') return res.end(final);
    res.writeHead(Number(status), { location }).end('the redirect body');
  });
  const cases = [
    ['integrity across a 302', '/302/same', { integrity }],
    ['integrity across a 307', '/307/same', { integrity }],
    ["mode: 'same-origin' to another origin", '/307/other', { mode: 'same-origin' }],
    ["cache: 'no-store'", '/307/same', { cache: 'no-store' }],
    ["cache: 'no-cache'", '/307/same', { cache: 'no-cache' }],
    ['a referrer sent as unsafe-url', '/302/same', { referrer: 'http://127.0.0.1/page', referrerPolicy: 'unsafe-url' }],
  ];
  try {
    for (const [label, path, init] of cases) {
      const outcomes = [];
      for (const send of [fetch, api.retryFetch]) {
        start.seen.length = 0;
        target.seen.length = 0;
        const outcome = await send(`${start.url}${path}`, { method: 'POST', body: 'pay', ...init }, fast).then(
          async (res) => ({ status: res.status, url: res.url, redirected: res.redirected, text: await res.text() }),
          // After a redirect was followed the call ends with a RetryError whose cause is
          // fetch's error (README, "Errors").
          (error) => ({ error: error.name === 'RetryError' ? error.cause?.name : error.name }),
        );
        const hops = [...start.seen, ...target.seen].map((r) => ({
          method: r.method, url: r.url, pragma: r.headers.pragma, cacheControl: r.headers['cache-control'], referer: r.headers.referer,
        }));
        outcomes.push({ outcome, hops });
      }
      const [byFetch, ours] = outcomes;
      assert.deepEqual(ours, byFetch, `${label}: retryFetch as fetch`);
    }
  } finally {
    await Promise.all([start.close(), target.close()]);
  }
});

test("a POST with the caller's redirect: 'manual' gets the redirect itself; nothing is sent to its target", async () => {
  const target = seq('201');
  const old = seq(`307+to=${encodeURIComponent(new URL(target.url).pathname + new URL(target.url).search)}`);
  const res = await api.retryFetch(old.url, { method: 'POST', body: 'pay', redirect: 'manual' }, fast);
  assert.equal(res.status, 307);
  assert.equal(res.redirected, false);
  assert.equal((await old.log()).length, 1);
  assert.equal((await target.log()).length, 0);
});

test('a redirect value fetch does not take (null, 1, true) on a POST is a TypeError before anything is sent', async () => {
  for (const redirect of [null, 1, true]) {
    const s = seq('200');
    const err = await api.retryFetch(s.url, { method: 'POST', body: 'pay', redirect }, fast).then(
      (r) => assert.fail(`${redirect}: resolved with ${r.status}`),
      (e) => e,
    );
    assert.equal(err.name, 'TypeError', `${redirect}: ${err}`);
    assert.equal((await s.log()).length, 0, `${redirect}: sent`);
  }
});

test('a wrapper of the global fetch that reads init later, or changes it, changes no attempt of a POST', () => withGlobalFetch(async (original) => {
  // read one tick later (as instrumentation that awaits first does): the POST still follows
  // its 307 itself, and the target dropping the connection is not a reason to send it again
  const seen = [];
  globalThis.fetch = async (input, init) => {
    await null;
    seen.push(init?.redirect);
    return original(input, init);
  };
  const target = seq('reset');
  const old = seq(`307+to=${encodeURIComponent(new URL(target.url).pathname + new URL(target.url).search)}`);
  const err = await api.retryFetch(old.url, { method: 'POST', body: 'pay' }, fast).then(() => assert.fail('expected a rejection'), (e) => e);
  assert.equal(err.name, 'RetryError');
  assert.deepEqual(seen, ['manual', 'manual']);
  assert.equal((await old.log()).length, 1, 'the POST was sent again');
  assert.equal((await target.log()).length, 1);

  // a header set on the first attempt's init.headers is not carried into the retry
  let n = 0;
  globalThis.fetch = (input, init) => {
    n += 1;
    if (init?.headers instanceof Headers) init.headers.set('x-trace', `send-${n}`);
    return original(input, init);
  };
  const s = seq('503,200');
  assert.equal((await api.retryFetch(s.url, { method: 'POST', body: 'pay' }, fast)).status, 200);
  const sent = await s.log();
  assert.deepEqual(sent.map((r) => r.headers['x-trace']), ['send-1', undefined]);
  assert.equal(sent[1].headers['idempotency-key'], sent[0].headers['idempotency-key']);
}));

test('timeoutMs on a URL GET: the first attempt is fetch(url, init) with a signal of its own, the timer ends with it', () => withGlobalFetch(async (original) => {
  const seen = [];
  const reasons = [];
  globalThis.fetch = (input, init) => {
    seen.push([typeof input, init?.signal instanceof AbortSignal, init?.signal?.aborted]);
    init?.signal?.addEventListener('abort', () => reasons.push(init.signal.reason?.name));
    return original(input, init);
  };
  const before = timers();
  const init = { method: 'GET' };
  const ok = seq('200');
  assert.equal((await api.retryFetch(ok.url, init, { ...fast, timeoutMs: 60_000 })).status, 200);
  assert.deepEqual(seen, [['string', true, false]], 'what the global fetch was given');
  assert.equal(timers(), before, 'a timeoutMs timer outlived the attempt');
  assert.deepEqual(init, { method: 'GET' }, 'the caller\'s init');
  // Timed out: the retry is made from the call's copy, with a signal of its own (not the
  // one that aborted), and each attempt's signal aborts with a TimeoutError.
  seen.length = 0;
  const hang = seq('hang,hang,200');
  assert.equal((await api.retryFetch(hang.url, undefined, { ...fast, timeoutMs: 200 })).status, 200);
  assert.deepEqual(seen, [['string', true, false], ['object', true, false], ['object', true, false]]);
  assert.deepEqual(reasons, ['TimeoutError', 'TimeoutError']);
  assert.equal(timers(), before, 'a timer outlived the call');
}));

test('deadlineMs on a URL GET: the first attempt is fetch(url, init) with a signal of its own, aborted at the deadline; no timer is left', () => withGlobalFetch(async (original) => {
  const seen = [];
  const reasons = [];
  globalThis.fetch = (input, init) => {
    seen.push([typeof input, init?.signal instanceof AbortSignal]);
    init?.signal?.addEventListener('abort', () => reasons.push(init.signal.reason?.name));
    return original(input, init);
  };
  const before = timers();
  const ok = seq('200');
  assert.equal((await api.retryFetch(ok.url, undefined, { ...fast, deadlineMs: 60_000 })).status, 200);
  assert.deepEqual(seen, [['string', true]], 'what the global fetch was given');
  assert.equal(timers(), before, 'a deadline timer outlived the attempt');
  seen.length = 0;
  const hang = seq('hang,200');
  const err = await api.retryFetch(hang.url, { method: 'GET' }, { ...fast, deadlineMs: 200 }).then(
    (r) => assert.fail(`resolved with ${r.status}`),
    (e) => e,
  );
  assert.equal(err.reason, 'deadline');
  assert.deepEqual(seen, [['string', true]], 'sent once');
  assert.deepEqual(reasons, ['TimeoutError']);
  assert.equal(timers(), before, 'a timer outlived the call');
}));

test('timeoutMs bounds the buffering of a stream body too: a stream that stalls ends the call (a RetryError, its cause a TimeoutError), nothing sent, the stream cancelled', async () => {
  for (const [label, input] of [['init.body', (url) => url], ['a Request', (url, cancelled) => new Request(url, { method: 'PUT', body: stalled(cancelled), duplex: 'half' })]]) {
    const s = seq('200');
    const cancelled = [];
    const url = input(s.url, cancelled);
    const began = Date.now();
    const call = typeof url === 'string'
      ? api.retryFetch(url, { method: 'PUT', body: stalled(cancelled), duplex: 'half' }, { ...fast, timeoutMs: 200 })
      : api.retryFetch(url, undefined, { ...fast, timeoutMs: 200 });
    const err = await Promise.race([call.then((r) => assert.fail(`${label}: resolved with ${r.status}`), (e) => e), sleep(5_000).then(() => assert.fail(`${label}: still pending after 5 s`))]);
    assert.equal(err.name, 'RetryError', `${label}: ${err}`);
    assert.equal(err.reason, 'body-not-replayable', `${label}: reason`);
    assert.equal(err.cause?.name, 'TimeoutError', `${label}: cause`);
    assert.ok(Date.now() - began < 2_000, `${label}: ended after ${Date.now() - began} ms`);
    assert.equal((await s.log()).length, 0, `${label}: nothing was sent`);
    await sleep(50);
    assert.equal(cancelled.length, 1, `${label}: the caller's stream was cancelled`);
  }
});

test('a guard read from inside a call\'s step (a response whose headers.get reads it) is a TypeError there, never a panic: later calls and the guard work', async () => {
  for (const which of ['breaker', 'budget', 'throttle']) {
    const guard = which === 'breaker' ? new api.CircuitBreaker() : which === 'budget' ? new api.RetryBudget() : new api.AdaptiveThrottle();
    const s = seq('503+ra=0,200');
    const peek = () => (which === 'breaker' ? guard.state(s.url) : which === 'budget' ? guard.tokens(s.url) : guard.rate(s.url));
    const seen = [];
    const peeking = async (input, init) => {
      const response = await fetch(input, init);
      const get = response.headers.get.bind(response.headers);
      Object.defineProperty(response.headers, 'get', {
        value: (name) => {
          try {
            peek();
            seen.push('read');
          } catch (error) {
            seen.push(error.name);
          }
          return get(name);
        },
      });
      return response;
    };
    const res = await api.retryFetch(s.url, undefined, { ...fast, fetch: peeking, [which]: guard });
    assert.equal(res.status, 200, which);
    assert.ok(seen.length > 0 && seen.every((x) => x === 'read' || x === 'TypeError'), `${which}: ${seen}`);
    assert.doesNotThrow(peek, `${which}: the guard after the call`);
    const after = seq('200');
    assert.equal((await api.retryFetch(after.url, undefined, { [which]: guard })).status, 200, `${which}: a later call`);
  }
});

test('a wrapper of the global fetch that throws synchronously failed like one that rejects: retried, no throw out of the call, no timer left', () => withGlobalFetch(async (original) => {
  for (const [label, init, options] of [
    ['GET', undefined, fast],
    ['GET under timeoutMs', { method: 'GET' }, { ...fast, timeoutMs: 60_000 }],
    ['keyed POST', { method: 'POST', body: 'x' }, fast],
    ['a Request', undefined, fast],
  ]) {
    let calls = 0;
    globalThis.fetch = (input, i) => {
      calls += 1;
      if (calls === 1) throw new TypeError('wrapper threw');
      return original(input, i);
    };
    const before = timers();
    const s = seq('200');
    const input = label === 'a Request' ? new Request(s.url) : s.url;
    let call;
    assert.doesNotThrow(() => { call = api.retryFetch(input, init, options); }, `${label}: threw out of the call`);
    assert.equal((await call).status, 200, `${label}:`);
    assert.equal(calls, 2, `${label}: attempts`);
    assert.equal(timers(), before, `${label}: a timer outlived the call`);
  }
}));

test('a redirect to a URL fetch would not follow (data:, ftp:, a bad port) is an error, never its content', async () => {
  for (const location of ['data:text/plain,{"paid":true}', 'ftp://127.0.0.1/x', 'http://127.0.0.1:6000/x']) {
    const start = await originServer((req, res) => res.writeHead(302, { location }).end());
    try {
      const err = await api.retryFetch(`${start.url}/pay`, { method: 'POST', body: '{}' }, fast).then(
        (r) => assert.fail(`${location}: resolved with ${r.status}`),
        (e) => e,
      );
      const cause = api.isRetryError(err) ? err.cause : err;
      assert.equal(cause?.name, 'TypeError', `${location}: ${err}`);
      assert.equal(start.seen.length, 1, `${location}: the POST was sent once`);
    } finally {
      await start.close();
    }
  }
});

test('an abort while a redirect is followed ends the call at once, whichever signal: init\'s, the Request\'s, options\'', { timeout: 20_000 }, async () => {
  const target = await originServer(() => {}); // never answers
  const start = await originServer((req, res) => res.writeHead(307, { location: `${target.url}/slow` }).end());
  try {
    for (const via of ['init', 'request', 'options']) {
      const controller = new AbortController();
      const url = `${start.url}/pay`;
      const init = { method: 'POST', body: 'x' };
      const call = via === 'init' ? api.retryFetch(url, { ...init, signal: controller.signal }, fast)
        : via === 'request' ? api.retryFetch(new Request(url, { ...init, signal: controller.signal }), undefined, fast)
          : api.retryFetch(url, init, { ...fast, signal: controller.signal });
      const began = Date.now();
      setTimeout(() => controller.abort(new Error(`stop ${via}`)), 100);
      await assert.rejects(call, { message: `stop ${via}` }, via);
      assert.ok(Date.now() - began < 2000, `${via}: rejected after ${Date.now() - began} ms`);
    }
  } finally {
    await Promise.all([start.close(), target.close()]);
  }
});

test('an init whose members are inherited or not enumerable is sent as fetch sends it (never as a bare GET)', async () => {
  const s = await originServer((req, res) => res.end('ok'));
  try {
    class Init {
      constructor() { this.method = 'GET'; }
      get headers() { return { authorization: 'Bearer from-getter' }; }
    }
    const hidden = Object.defineProperty({}, 'method', { value: 'DELETE', enumerable: false });
    await api.retryFetch(`${s.url}/a`, Object.create({ method: 'POST', body: 'payload', headers: { 'x-token': 't1' } }), fast);
    await api.retryFetch(`${s.url}/b`, new Init(), fast);
    await api.retryFetch(`${s.url}/c`, hidden, fast);
    const [a, b, c] = s.seen;
    assert.deepEqual([a.method, a.body, a.headers['x-token']], ['POST', 'payload', 't1']);
    assert.equal(b.headers.authorization, 'Bearer from-getter');
    assert.equal(c.method, 'DELETE');
  } finally {
    await s.close();
  }
});

test("a Request input's stream body is buffered as a stream: within abort and deadline, up to maxBufferedBodyBytes", { timeout: 20_000 }, async () => {
  // A stream that yields one byte and then never ends.
  const stalled = () => new ReadableStream({ start: (c) => c.enqueue(enc('a')), pull: () => new Promise(() => {}) });
  const post = (url, signal) => new Request(url, { method: 'POST', body: stalled(), duplex: 'half', signal });
  const s = seq('200');
  const started = Date.now();
  const late = await api.retryFetch(post(s.url), undefined, { deadlineMs: 200 }).then(() => assert.fail('resolved'), (e) => e);
  assert.ok(api.isRetryError(late) && late.reason === 'deadline', `${late?.name}: ${late?.reason}`);
  assert.ok(Date.now() - started < 5_000, 'ended by the deadline, not by the stream');
  const controller = new AbortController();
  const why = new Error('the user left');
  setTimeout(() => controller.abort(why), 100);
  const stopped = await api.retryFetch(post(s.url, controller.signal)).then(() => assert.fail('resolved'), (e) => e);
  assert.equal(stopped, why, 'rejects with the abort reason');
  assert.equal(s.log().length, 0, 'nothing was sent');
  // Longer than maxBufferedBodyBytes: sent once, whole, and not retried.
  const long = seq('503,200');
  const body = new ReadableStream({ start: (c) => (c.enqueue(new Uint8Array(5_000).fill(98)), c.close()) });
  const res = await api.retryFetch(new Request(long.url, { method: 'PUT', body, duplex: 'half' }), undefined, { ...fast, maxBufferedBodyBytes: 100 });
  assert.equal(res.status, 503, 'the 503 is returned, not retried');
  assert.deepEqual(long.log().map((r) => r.body.length), [5_000], 'sent once, whole');
  // Within it: replayed byte for byte.
  const short = seq('503,200');
  const ok = await api.retryFetch(new Request(short.url, { method: 'PUT', body: 'replayed' }), undefined, fast);
  assert.equal(ok.status, 200);
  assert.deepEqual(short.log().map((r) => r.body), ['replayed', 'replayed']);
});

test('a hook that throws (or gives what it must not) ends the call and closes the failed response', { timeout: 30_000 }, async () => {
  const http = await import('node:http');
  const closed = new Map(); // path -> resolve, when the client closed the connection
  const server = http.createServer((req, res) => {
    res.writeHead(503, { 'content-type': 'text/plain' }); // a body that never ends
    const timer = setInterval(() => res.write('chunk\n'), 50);
    res.on('close', () => (clearInterval(timer), closed.get(req.url)?.()));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${server.address().port}`;
  const hooks = {
    '/should-throws': { shouldRetry: () => { throw new Error('no'); } },
    '/should-not-boolean': { shouldRetry: () => 'yes' },
    '/on-retry-throws': { onRetry: () => { throw new Error('no'); } },
    '/before-retry-key': { beforeRetry: () => ({ 'Idempotency-Key': 'x' }) },
  };
  try {
    for (const [path, options] of Object.entries(hooks)) {
      const seen = new Promise((resolve) => closed.set(path, () => resolve(true)));
      await assert.rejects(api.retryFetch(base + path, undefined, { baseDelayMs: 1, ...options }), path);
      const wasClosed = await Promise.race([seen, new Promise((resolve) => setTimeout(resolve, 3_000, false))]);
      assert.ok(wasClosed, `${path}: the 503's connection is still open after the call ended`);
    }
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

test("an abort after shouldRetry saw a response is no unhandled rejection: the clone it was given is cancelled with the response, never alone", { timeout: 30_000 }, async () => {
  // Node's fetch, whose signal aborts after one branch of a cloned body was cancelled, cancels
  // the other and rethrows what that gives: an unhandled rejection, which ends the process.
  const unhandled = [];
  const collect = (reason) => unhandled.push(reason?.message ?? String(reason));
  process.on('unhandledRejection', collect);
  try {
    // Aborted during onRetry, the backoff wait and beforeRetry (the signal in the options or
    // in init): the call rejects with the reason.
    for (const where of ['onRetry', 'wait', 'beforeRetry']) {
      for (const via of ['options', 'init']) {
        const controller = new AbortController();
        const abort = () => controller.abort(new Error(`stop in ${where}`));
        const options = { baseDelayMs: where === 'wait' ? 2_000 : 5, jitter: 'none', shouldRetry: () => true };
        if (via === 'options') options.signal = controller.signal;
        if (where === 'onRetry') options.onRetry = abort;
        if (where === 'beforeRetry') options.beforeRetry = abort;
        if (where === 'wait') setTimeout(abort, 200);
        const s = seq('503,200');
        const err = await api.retryFetch(s.url, via === 'init' ? { signal: controller.signal } : undefined, options).then(() => null, (e) => e);
        assert.equal(err?.message, `stop in ${where}`, `${where}, ${via}`);
      }
    }
    // The response shouldRetry vetoed is the answer; the caller aborts before reading it.
    const controller = new AbortController();
    const res = await api.retryFetch(seq('503').url, undefined, { signal: controller.signal, shouldRetry: () => false });
    assert.equal(res.status, 503);
    controller.abort(new Error('cleanup'));
    await sleep(200);
    assert.deepEqual(unhandled, [], 'unhandled rejections');
  } finally {
    process.off('unhandledRejection', collect);
  }
});

test("a Request input's signal still ends the call after a garbage collection (the input is held for the call)", { timeout: 30_000 }, async () => {
  // Node's fetch links a Request's copy to the input's signal only while the input lives: a
  // caller who lets the input go would lose the abort during a wait.
  assert.equal(typeof globalThis.gc, 'function', 'run with --expose-gc');
  for (const method of ['GET', 'POST']) {
    const s = seq('503');
    const controller = new AbortController();
    const init = { method, signal: controller.signal, ...(method === 'POST' ? { body: 'pay' } : {}) };
    const call = api.retryFetch(new Request(s.url, init), undefined, { baseDelayMs: 400, jitter: 'none' }).then(() => null, (e) => e);
    await sleep(150); // the first attempt was answered; the call waits
    globalThis.gc();
    controller.abort(new Error('stop'));
    const err = await Promise.race([call, sleep(3_000).then(() => 'still pending')]);
    assert.equal(err?.message, 'stop', `${method}: ${err}`);
    assert.equal(s.log().length, 1, `${method}: sent after the abort`);
  }
});

test('init.signal still cancels reading the body after the call settled and a garbage collection ran (every attempt is sent with the signal itself)', { timeout: 60_000 }, async () => {
  // Node's fetch links a Request to its init.signal only while the Request lives: sent as the
  // call's Request alone, an abort after a collection no longer reached the body.
  assert.equal(typeof globalThis.gc, 'function', 'run with --expose-gc');
  const ways = [
    ['GET (the lean path)', '200+slowbody=100', {}, undefined],
    ['GET after a retry', '503,200+slowbody=100', {}, fast],
    ['POST (the loop)', '200+slowbody=100', { method: 'POST', body: 'pay' }, undefined],
    ['GET with timeoutMs', '200+slowbody=100', {}, { timeoutMs: 10_000 }],
  ];
  for (const [label, steps, init, options] of ways) {
    const controller = new AbortController();
    const res = await api.retryFetch(seq(steps).url, { ...init, signal: controller.signal }, options);
    for (let i = 0; i < 3; i++) {
      globalThis.gc();
      await sleep(10);
    }
    setTimeout(() => controller.abort(new Error('stop')), 200);
    const started = performance.now();
    const read = await res.text().then((text) => `read all ${text.length} bytes`, (e) => e.message);
    assert.equal(read, 'stop', `${label}: the body was read on after the abort`);
    assert.ok(performance.now() - started < 1_500, `${label}: the abort took effect late`);
  }
});

test('init.signal sent with the attempt keeps the init\'s referrer and referrerPolicy, as fetch(url, init) does', async () => {
  const s = seq('200');
  const page = new URL('/page', s.url).href;
  const controller = new AbortController();
  await (await api.retryFetch(s.url, { referrer: page, referrerPolicy: 'unsafe-url', signal: controller.signal })).text();
  await (await fetch(s.url, { referrer: page, referrerPolicy: 'unsafe-url', signal: controller.signal })).text();
  assert.deepEqual(s.log().map((r) => r.headers.referer), [page, page]);
});

test('run in a vm context (as Jest runs tests), a Request or a stream body of the outer realm is buffered and replayed', async () => {
  // jest-environment-node runs code in a vm context: its Uint8Array and ReadableStream are its
  // own, while fetch, Request and the streams fetch makes come from Node's realm. The CommonJS
  // glue is run in such a context; a body's chunks (and a stream given as the body) are of the
  // outer realm, where `instanceof` says no.
  const { createContext, runInContext } = await import('node:vm');
  const { readFileSync } = await import('node:fs');
  const { createRequire } = await import('node:module');
  const glue = new URL('./node_modules/retry-fetch/cjs/retry_fetch.js', import.meta.url);
  const context = createContext({
    fetch, Request, Response, Headers, AbortController, AbortSignal, URL, FormData, Blob, TextEncoder, TextDecoder,
    setTimeout, clearTimeout, queueMicrotask, crypto, console, WebAssembly, FinalizationRegistry, WeakRef,
    require: createRequire(glue), __dirname: new URL('.', glue).pathname,
  });
  context.module = { exports: {} };
  context.exports = context.module.exports;
  runInContext(`${readFileSync(glue, 'utf8')}\n;globalThis.RF = module.exports;`, context);
  const RF = context.RF;
  RF.setErrorClasses(class RetryError extends Error {}, class CircuitOpenError extends Error {});
  assert.notEqual(runInContext('Uint8Array', context), Uint8Array, 'the context has a realm of its own');

  const a = seq('503,200');
  const res = await RF.retryFetch(new Request(a.url, { method: 'POST', body: 'from the outer realm' }), undefined, fast);
  assert.equal(res.status, 200);
  assert.deepEqual(a.log().map((r) => Buffer.from(r.bodyBase64, 'base64').toString()), ['from the outer realm', 'from the outer realm']);

  const b = seq('503,200');
  const stream = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('a stream, ')); c.enqueue(new TextEncoder().encode('twice')); c.close(); } });
  const res2 = await RF.retryFetch(b.url, { method: 'POST', body: stream, duplex: 'half' }, fast);
  assert.equal(res2.status, 200);
  assert.deepEqual(b.log().map((r) => Buffer.from(r.bodyBase64, 'base64').toString()), ['a stream, twice', 'a stream, twice']);
});

test('a stream body chunk detached before it is read rejects the call (nothing sent); a wider typed array under a Uint8Array tag is refused', async () => {
  // The chunk's buffer is transferred after it was queued: copying it throws, and the call must
  // reject with that error, not throw through the wasm (an uncaught exception, a call that never
  // settles).
  const s = seq('200');
  const detached = () => {
    const chunk = new Uint8Array([1, 2, 3]);
    return new ReadableStream({ start(c) { c.enqueue(chunk); structuredClone(chunk.buffer, { transfer: [chunk.buffer] }); c.close(); } });
  };
  const uncaught = [];
  const onUncaught = (e) => uncaught.push(e);
  process.on('uncaughtException', onUncaught);
  try {
    const settled = await Promise.race([
      api.retryFetch(s.url, { method: 'PUT', body: detached(), duplex: 'half' }, fast).then(() => 'resolved', (e) => e),
      new Promise((resolve) => setTimeout(() => resolve('never settled'), 3000)),
    ]);
    assert.equal(settled?.name, 'TypeError', String(settled));
    assert.deepEqual(uncaught, []);
    // A Uint16Array that says it is a Uint8Array: its bytes are not what a copy by items gives.
    const wide = new Uint16Array([0x0102, 0x0304]);
    Object.defineProperty(wide, Symbol.toStringTag, { value: 'Uint8Array' });
    const faked = new ReadableStream({ start(c) { c.enqueue(wide); c.close(); } });
    const refused = await api.retryFetch(s.url, { method: 'PUT', body: faked, duplex: 'half' }, fast).then(() => 'resolved', (e) => e);
    assert.match(String(refused?.message), /Uint8Array chunks/);
    assert.equal(s.log().length, 0, 'nothing was sent');
  } finally {
    process.off('uncaughtException', onUncaught);
  }
});

test('shouldRetry that aborts the call: a throw after it rejects with the throw and leaves no unhandled rejection; a veto after it rejects with the abort', async () => {
  const unhandled = [];
  const onUnhandled = (reason) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const a = seq('503,200');
    const stop = new AbortController();
    const thrown = await api.retryFetch(a.url, undefined, {
      ...fast, signal: stop.signal,
      shouldRetry: () => { stop.abort(new Error('user cancelled')); throw new Error('hook failed'); },
    }).then(() => 'resolved', (e) => e);
    assert.equal(thrown?.message, 'hook failed');
    for (const verdict of [false, true]) {
      const b = seq('503,200');
      const cancel = new AbortController();
      const ended = await api.retryFetch(b.url, undefined, {
        ...fast, signal: cancel.signal,
        shouldRetry: () => { cancel.abort(new Error('user cancelled')); return verdict; },
      }).then((res) => `resolved ${res.status}`, (e) => e);
      assert.equal(ended?.message, 'user cancelled', `shouldRetry -> ${verdict}: ${ended}`);
      assert.equal(b.log().length, 1, 'nothing sent after the abort');
    }
    await new Promise((r) => setTimeout(r, 100)); // unhandled rejections are reported after a tick
    assert.deepEqual(unhandled.map(String), []);
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});

test("onSettled counts the attempt a redirect: 'error' request was answered with a redirect", async () => {
  const target = seq('200');
  for (const [steps, sent] of [[`302+to=${encodeURIComponent(target.url)}`, 1], [`503,302+to=${encodeURIComponent(target.url)}`, 2]]) {
    const s = seq(steps);
    let settled;
    const error = await api.retryFetch(s.url, { redirect: 'error' }, { ...fast, onSettled: (info) => (settled = info) }).then(() => 'resolved', (e) => e);
    assert.equal(error?.name, 'TypeError', String(error));
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(s.log().length, sent);
    assert.equal(settled?.attempts, sent, `${steps}: onSettled ${JSON.stringify(settled)}`);
  }
  assert.equal(target.log().length, 0, 'the redirect was not followed');
  // A POST that met it was sent (and may have been processed): the error carries its key.
  const post = seq(`302+to=${encodeURIComponent(target.url)}`);
  const error = await api.retryFetch(post.url, { method: 'POST', body: 'x', redirect: 'error' }, fast).then(() => 'resolved', (e) => e);
  assert.equal(error?.name, 'TypeError', String(error));
  assert.match(error.idempotencyKey ?? '', /^[0-9a-f-]{36}$/);
  assert.equal(post.log()[0]?.headers['idempotency-key'], error.idempotencyKey);
});

test('headers (per call, a client\'s, what beforeRetry returns) must be strings: a number, undefined or null is a TypeError, nothing sent', async () => {
  const s = seq('503,200');
  for (const headers of [{ 'x-a': 5 }, { Authorization: undefined }, [['x-a', null]], [['x-a', 6]]]) {
    const perCall = await api.retryFetch(s.url, undefined, { ...fast, headers }).then(() => 'resolved', (e) => e);
    assert.equal(perCall?.name, 'TypeError', `${JSON.stringify(headers)}: ${perCall}`);
    assert.match(perCall.message, /headers/);
    assert.throws(() => api.createRetryFetch({ headers }), TypeError, JSON.stringify(headers));
  }
  assert.equal(s.log().length, 0, 'nothing was sent');
  const returned = await api.retryFetch(s.url, undefined, { ...fast, beforeRetry: () => ({ 'x-token': undefined }) }).then(() => 'resolved', (e) => e);
  assert.equal(returned?.name, 'TypeError', String(returned));
  assert.equal(s.log().length, 1, 'the retry was not sent');
  // Strings, a Headers and pairs still work.
  const ok = seq('503,200');
  const res = await api.retryFetch(ok.url, undefined, { ...fast, headers: [['x-a', '1']], beforeRetry: () => new Headers({ 'x-b': '2' }) });
  assert.equal(res.status, 200);
  assert.deepEqual(ok.log().map((r) => [r.headers['x-a'], r.headers['x-b']]), [['1', undefined], ['1', '2']]);
});

test('a mock of the global fetch that resolves with no Response (or a fake one), or returns one without a promise (or a promise whose then throws): every call settles, the instance lives on', () => withGlobalFetch(async (original) => {
  const s = seq('200');
  const shapes = [
    ['resolves undefined', async () => undefined, 'reject'],
    ['resolves null', async () => null, 'reject'],
    ['resolves { status: 200 }', async () => ({ status: 200 }), 'reject'],
    ['returns undefined', () => undefined, 'reject'],
    ['returns a Response', () => new Response('sync'), 'sync'],
    ['returns a thenable', () => ({ then: (ok) => ok(new Response('thenable')) }), 'thenable'],
    // Passes `instanceof Response`, but its status getter throws (a proxy of a Response does so
    // in browsers).
    ['resolves Object.create(Response.prototype)', async () => Object.create(Response.prototype), 'reject'],
    // A Promise subclass whose own `then` throws: the fetch failed with that throw.
    ['returns a promise whose then throws', () => {
      const p = new (class extends Promise {})((ok) => ok(new Response('x')));
      p.then = () => { throw new TypeError('then threw'); };
      return p;
    }, 'failed'],
  ];
  for (const [label, mock, expected] of shapes) {
    globalThis.fetch = mock;
    for (const [path, options] of [['lean', { maxAttempts: 1 }], ['loop', { maxAttempts: 1, onSettled() {} }]]) {
      // Enough calls that an exception unwinding through the wasm (which leaks its stack) would
      // have used the stack up.
      for (let i = 0; i < (path === 'lean' ? 1200 : 50); i++) {
        let call;
        assert.doesNotThrow(() => { call = api.retryFetch(s.url, undefined, options); }, `${label}, ${path}: threw out of the call`);
        const outcome = await call.then((r) => r, (e) => e);
        if (expected === 'reject') {
          assert.equal(outcome?.name, 'TypeError', `${label}, ${path}: ${outcome}`);
          assert.match(outcome.message, /not a Response/, `${label}, ${path}`);
        } else if (expected === 'failed') {
          assert.equal(outcome?.name, 'RetryError', `${label}, ${path}: ${outcome}`);
          assert.equal(outcome.cause?.message, 'then threw', `${label}, ${path}`);
        } else {
          assert.equal(await outcome.text(), expected, `${label}, ${path}`);
        }
      }
    }
  }
  globalThis.fetch = original;
  assert.equal((await api.retryFetch(s.url)).status, 200, 'a call with the real fetch back');
}));

test('a lean GET with an init: what a wrapper of fetch changes in the init it was given is not sent on the retry', () => withGlobalFetch(async (original) => {
  let calls = 0;
  globalThis.fetch = (input, init) => {
    calls += 1;
    if (calls === 1 && init && typeof init === 'object') {
      init.method = 'DELETE';
      init.headers = { 'x-first-only': 'yes' };
    }
    return original(input, init);
  };
  const s = seq('503,200');
  assert.equal((await api.retryFetch(s.url, { method: 'GET', cache: 'no-store' }, fast)).status, 200);
  const sent = await s.log();
  assert.deepEqual(sent.map((r) => [r.method, r.headers['x-first-only']]), [['DELETE', 'yes'], ['GET', undefined]]);
}));

test('a bodiless POST Request with no key of ours follows its redirects as a keyed POST does: a failure after one is not retried, a redirect to ftp: is our TypeError', async () => {
  const start = await originServer((req, res) => {
    if (req.url === '/pay') return res.writeHead(302, { location: '/result' }).end();
    if (req.url === '/pay-ftp') return res.writeHead(302, { location: 'ftp://127.0.0.1/x' }).end();
    req.socket.destroy();
  });
  try {
    class Init { constructor(o) { Object.assign(this, o); } }
    for (const [label, args] of [
      ['a Request', (path) => [new Request(start.url + path, { method: 'POST' }), undefined]],
      ['a URL with a class-instance init', (path) => [start.url + path, new Init({ method: 'POST' })]],
    ]) {
      start.seen.length = 0;
      const err = await api.retryFetch(...args('/pay'), { ...fast, idempotencyKey: false }).then(() => assert.fail('resolved'), (e) => e);
      assert.equal(err.name, 'RetryError', `${label}: ${err}`);
      assert.equal(err.reason, 'not-retryable', `${label}: the failure came after a redirect`);
      assert.deepEqual(start.seen.map((r) => r.url), ['/pay', '/result'], `${label}: sent once`);
      const ftp = await api.retryFetch(...args('/pay-ftp'), { ...fast, idempotencyKey: false }).then(() => assert.fail('resolved'), (e) => e);
      const cause = api.isRetryError(ftp) ? ftp.cause : ftp;
      assert.equal(cause?.name, 'TypeError', `${label}: ${ftp}`);
      assert.match(cause.message, /retryFetch/, `${label}: our TypeError, not fetch's`);
    }
  } finally {
    await start.close();
  }
});

test("an options.signal that is not the platform's (a polyfill's) ends an attempt in flight at once when it aborts", async () => {
  class PolyfillSignal {
    aborted = false;
    reason = undefined;
    onabort = null;
    #listeners = [];
    addEventListener(type, fn) { if (type === 'abort') this.#listeners.push(fn); }
    removeEventListener(type, fn) { this.#listeners = this.#listeners.filter((f) => f !== fn); }
    dispatchEvent() { return true; }
    abort(reason) {
      this.aborted = true;
      this.reason = reason;
      for (const f of [...this.#listeners]) f({ type: 'abort' });
      this.onabort?.({ type: 'abort' });
    }
  }
  const s = seq('hang');
  const signal = new PolyfillSignal();
  setTimeout(() => signal.abort('user cancelled'), 50);
  const outcome = await Promise.race([
    api.retryFetch(s.url, undefined, { signal }).then((r) => `resolved ${r.status}`, (e) => e),
    sleep(5_000).then(() => 'still pending after 5 s'),
  ]);
  assert.equal(outcome, 'user cancelled');
});

test('per-call options reused by name and place: a name given undefined and then a value (a known one, an unknown one), a name moved, are each read again', async () => {
  // Cached with maxAttempts given undefined (the default, 3); then the same names, the same
  // places, maxAttempts 1: one attempt.
  const opts = (maxAttempts) => ({ baseDelayMs: 1, jitter: 'none', maxAttempts });
  const a = seq('503,503,503');
  assert.equal((await api.retryFetch(a.url, undefined, opts(undefined))).status, 503);
  assert.equal((await a.log()).length, 3, 'maxAttempts undefined: the default, 3');
  const b = seq('503,503,503');
  assert.equal((await api.retryFetch(b.url, undefined, opts(1))).status, 503);
  assert.equal((await b.log()).length, 1, 'maxAttempts 1 where it was undefined');
  const c = seq('503,503,503');
  assert.equal((await api.retryFetch(c.url, undefined, opts(undefined))).status, 503);
  assert.equal((await c.log()).length, 3, 'undefined again: the default');
  // An unknown name given undefined is no option; given a value, it is the TypeError.
  const d = seq('503,503,503');
  await api.retryFetch(d.url, undefined, { maxAttempts: 2, baseDelayMs: 1, retries: undefined });
  assert.equal((await d.log()).length, 2);
  const unknown = await api.retryFetch(d.url, undefined, { maxAttempts: 2, baseDelayMs: 1, retries: 5 }).then(
    () => assert.fail('an unknown option was accepted'),
    (e) => e,
  );
  assert.equal(unknown.name, 'TypeError');
  assert.match(unknown.message, /unknown option "retries"/);
  assert.equal((await d.log()).length, 2, 'nothing sent for the unknown option');
  // A signal given where undefined was: the aborted signal is seen.
  const e = seq('200');
  await api.retryFetch(e.url, undefined, { maxAttempts: 1, signal: undefined });
  const controller = new AbortController();
  controller.abort(new Error('stop'));
  const aborted = await api.retryFetch(e.url, undefined, { maxAttempts: 1, signal: controller.signal }).then(
    () => assert.fail('the aborted signal was not seen'),
    (err) => err,
  );
  assert.equal(aborted.message, 'stop');
  // The same names with two swapped and one value changed: read again (maxAttempts 2).
  const f = seq('503,503,503');
  await api.retryFetch(f.url, undefined, { jitter: 'none', maxAttempts: 1, baseDelayMs: 1 });
  await api.retryFetch(f.url, undefined, { maxAttempts: 2, jitter: 'none', baseDelayMs: 1 });
  assert.equal((await f.log()).length, 3, 'one attempt, then two');
  // An array item changed in place behind a name given undefined before it.
  const list = { timeoutMs: undefined, maxAttempts: 2, baseDelayMs: 1, retryOnStatus: [500] };
  const g = seq('503,503');
  await api.retryFetch(g.url, undefined, list);
  assert.equal((await g.log()).length, 1, '503 not in [500]');
  list.retryOnStatus[0] = 503;
  const h = seq('503,503');
  await api.retryFetch(h.url, undefined, list);
  assert.equal((await h.log()).length, 2, 'after retryOnStatus[0] = 503');
});

test('a signal of AbortSignal.any or AbortSignal.timeout given to several calls is collected once they ended (the join\'s listener goes with the last attempt)', async () => {
  assert.equal(typeof globalThis.gc, 'function', 'run with --expose-gc');
  const http = await import('node:http');
  const s = http.createServer((req, res) => res.writeHead(200).end('ok'));
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  try {
    const url = `http://127.0.0.1:${s.address().port}/`;
    const app = new AbortController();
    const refs = [];
    for (let i = 0; i < 40; i++) {
      // Node keeps such a signal alive while it has an abort listener, until it aborts.
      const signal = i % 2 ? AbortSignal.timeout(600_000) : AbortSignal.any([app.signal, new AbortController().signal]);
      refs.push(new WeakRef(signal));
      for (let j = 0; j < 2; j++) await (await api.retryFetch(url, undefined, { signal })).text();
    }
    for (let i = 0; i < 40 && refs.some((r) => r.deref()); i++) {
      globalThis.gc();
      await sleep(20);
    }
    // The first and the last may stay referenced a while (the last call's state); none of the
    // others (all 40 stayed alive while the listener stayed).
    const alive = refs.flatMap((r, i) => (r.deref() ? [i] : []));
    assert.ok(alive.length <= 2, `signals still alive after the calls ended and collections: ${alive}`);
  } finally {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

test('a client used as another\'s fetch, both on long-lived signals: an abort reaches the inner request, with no error thrown in the abort\'s listeners (it ended the process)', async () => {
  const http = await import('node:http');
  let closedAt;
  const s = http.createServer((req, res) => {
    if (req.url === '/slow') {
      req.on('close', () => (closedAt = Date.now()));
      return;
    }
    res.writeHead(200).end('ok');
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  const thrown = [];
  const listener = (error) => thrown.push(error);
  process.on('uncaughtException', listener);
  try {
    const base = `http://127.0.0.1:${s.address().port}`;
    const inner = api.createRetryFetch({ signal: new AbortController().signal, timeoutMs: 60_000 });
    const outer = api.createRetryFetch({ fetch: inner });
    const app = new AbortController();
    await (await inner(`${base}/ok`)).text(); // the inner client's signal is seen: joined
    await (await outer(`${base}/ok`, undefined, { signal: app.signal })).text(); // and the outer's
    const call = outer(`${base}/slow`, undefined, { signal: app.signal }).then(() => 'resolved', (e) => e);
    await sleep(100);
    const abortedAt = Date.now();
    app.abort(new Error('stop'));
    assert.equal((await call)?.message, 'stop');
    for (let i = 0; i < 50 && closedAt === undefined; i++) await sleep(20);
    assert.ok(closedAt !== undefined && closedAt - abortedAt < 1_000, 'the inner request was cancelled');
    await sleep(20);
    assert.deepEqual(thrown.map(String), []);
  } finally {
    process.off('uncaughtException', listener);
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

test('a long-lived signal keeps nothing of the calls that ended, and still cancels a body read after a collection', async () => {
  const http = await import('node:http');
  const s = http.createServer((req, res) => {
    if (req.url === '/slow') {
      res.writeHead(200);
      res.write('start');
      const tick = setInterval(() => res.write('x'), 20);
      res.on('close', () => clearInterval(tick));
      return;
    }
    res.writeHead(200).end('ok');
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  try {
    const base = `http://127.0.0.1:${s.address().port}`;
    const app = new AbortController();
    // Node 20's AbortSignal.any keeps every joined signal in its sources' dependants until they
    // abort: an application's signal, given to every call, would keep one per attempt.
    const kept = () => {
      const key = Object.getOwnPropertySymbols(app.signal).find((k) => String(k).includes('kDependantSignals'));
      return key === undefined ? 0 : (app.signal[key]?.size ?? 0);
    };
    const client = api.createRetryFetch({ signal: app.signal });
    const warnings = [];
    const warned = (w) => warnings.push(w.name);
    process.on('warning', warned);
    const { getEventListeners } = await import('node:events');
    for (let i = 0; i < 300; i++) {
      await (await api.retryFetch(`${base}/ok`, undefined, { signal: app.signal })).text();
      await (await api.retryFetch(`${base}/ok`, { signal: app.signal }, { timeoutMs: 60_000 })).text();
      await (await client(`${base}/ok`, undefined, { deadlineMs: 60_000 })).text();
    }
    // At most the first call's: a signal is known to outlive calls from its second call on.
    assert.ok(kept() <= 1, `the signal keeps ${kept()} entries of 900 ended calls`);
    // One listener joins a signal to every attempt, however many calls it was given to
    // (before, one per attempt until a collection: Node warned of a leak after 11 calls). A
    // signal in `init` is the Request's too, and undici's fetch adds its own listener for
    // each (so does plain fetch): counted apart here, with a signal given as an option and
    // as a client's default only.
    const option = new AbortController();
    const withDefault = api.createRetryFetch({ signal: option.signal });
    for (let i = 0; i < 50; i++) {
      await (await api.retryFetch(`${base}/ok`, undefined, { signal: option.signal })).text();
      await (await withDefault(`${base}/ok`, undefined, { timeoutMs: 60_000 })).text();
    }
    assert.equal(getEventListeners(option.signal, 'abort').length, 1, 'listeners after 100 ended calls, before a collection');
    await sleep(10); // warnings are emitted on a later tick
    process.off('warning', warned);
    assert.deepEqual(warnings.filter((name) => name === 'MaxListenersExceededWarning'), []);
    // The listeners that join it to the attempts go once those are collected.
    for (let i = 0; i < 3; i++) {
      globalThis.gc?.();
      await sleep(50);
    }
    if (globalThis.gc) assert.ok(getEventListeners(app.signal, 'abort').length < 50, 'listeners left after a collection');
    // An abort after the Response, a collection in between, still cancels reading its body.
    const res = await api.retryFetch(`${base}/slow`, undefined, { signal: app.signal, timeoutMs: 60_000 });
    const reader = res.body.getReader();
    await reader.read();
    for (let i = 0; i < 3; i++) {
      globalThis.gc?.();
      await sleep(30);
    }
    const reason = new Error('shutting down');
    app.abort(reason);
    const ended = await (async () => {
      try {
        for (;;) if ((await reader.read()).done) return 'done';
      } catch (e) {
        return e;
      }
    })();
    assert.equal(ended, reason, 'the body read ended with the abort');
  } finally {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

test('X-Should-Retry: false sent twice (fetch joins it, "false, false") still says not to retry; a keyed request\'s replayed failure is not retried either', async () => {
  const hits = [];
  const handler = (req, res) => {
    hits.push(req.url);
    req.resume();
    if (req.url === '/twice') res.setHeader('X-Should-Retry', ['false', 'false']);
    if (req.url === '/replayed') res.setHeader('Idempotent-Replayed', 'true');
    res.writeHead(503).end('no');
  };
  await withHttpServer(handler, async (base) => {
    for (const path of ['/twice', '/replayed']) {
      const res = await api.retryFetch(`${base}${path}`, { method: 'POST', body: 'pay' }, fast);
      assert.equal(res.status, 503);
      await res.text();
      assert.equal(hits.filter((h) => h === path).length, 1, `${path}: sent once`);
    }
    // Without a key, `Idempotent-Replayed` means nothing: a GET's 503 is retried.
    const res = await api.retryFetch(`${base}/replayed`, undefined, { ...fast, maxAttempts: 2 });
    await res.text();
    assert.equal(hits.filter((h) => h === '/replayed').length, 3);
  });
});

test('a call waiting for an AdaptiveThrottle turn behind callers that gave theirs up (aborted) moves up, not at the end of the wait it was told', async () => {
  const hits = [];
  const handler = (req, res) => {
    hits.push(req.url);
    req.resume();
    res.writeHead(200).end('ok');
  };
  await withHttpServer(handler, async (base) => {
    // 2 turns a second; the first call takes the bucket's one token, ten queue behind it.
    const throttle = new api.AdaptiveThrottle({ initialRate: 2, minRate: 1, rampMs: 1e6 });
    const options = { throttle, budget: false };
    await (await api.retryFetch(`${base}/first`, undefined, options)).text();
    const started = performance.now();
    const aborts = Array.from({ length: 9 }, () => new AbortController());
    const waiting = aborts.map((a, i) => api.retryFetch(`${base}/w${i}`, undefined, { ...options, signal: a.signal }).catch((e) => e));
    let sentAfter;
    const last = api.retryFetch(`${base}/last`, undefined, options).then(async (res) => {
      sentAfter = performance.now() - started;
      await res.text();
    });
    setTimeout(() => aborts.forEach((a) => a.abort()), 50);
    const ended = await Promise.all(waiting);
    await last;
    assert.ok(ended.every((e) => e?.name === 'AbortError'));
    assert.deepEqual(hits, ['/first', '/last']);
    // Its turn was 4.5 s away when it queued; the nine ahead gave theirs up at 50 ms, so it
    // goes when it looks again (at 1 s; the next token was there at 500 ms).
    assert.ok(sentAfter < 2_500, `sent after ${Math.round(sentAfter)} ms`);
  });
});

test("a POST Request input whose body is above maxBufferedBodyBytes follows a 307 as fetch does: the body sent again to its target, once, and not retried", async () => {
  const seen = [];
  const handler = async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    seen.push([req.method, req.url, body, req.headers['idempotency-key']]);
    if (req.url === '/pay') res.writeHead(307, { Location: '/there' }).end();
    else res.writeHead(503).end('busy');
  };
  await withHttpServer(handler, async (base) => {
    const body = '0123456789abcdefghij';
    const res = await api.retryFetch(new Request(`${base}/pay`, { method: 'POST', body }), undefined, { ...fast, maxBufferedBodyBytes: 8 });
    assert.equal(res.status, 503);
    assert.equal(res.redirected, true);
    await res.text();
    assert.deepEqual(seen.map(([m, u, b]) => [m, u, b]), [['POST', '/pay', body], ['POST', '/there', body]]);
    assert.match(seen[0][3], /^[0-9a-f-]{36}$/);
    assert.equal(seen[1][3], seen[0][3], 'the key went with it');
  });
});
