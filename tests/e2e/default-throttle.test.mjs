// The default throttle: every retryFetch and createRetryFetch client shares one per origin
// unless it says `throttle: false` or brings an AdaptiveThrottle. It paces retries only (a
// first attempt never waits for it), and only a herd's: from the moment an origin answers 429
// or 503 while at least 10 calls to it are retrying, until none is. Each test has its own
// server (its own origin), so what the module-wide throttle learns in one test never touches
// another.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { retryFetch, createRetryFetch, AdaptiveThrottle, CircuitBreaker } from 'retry-fetch';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A server on a port of its own. `answer(n, now)` is the status of the n-th request
 * (1-based), or `[status, headers]`; every answer waits `holdMs`. It counts the most requests
 * in flight.
 */
async function server(answer, holdMs = 0) {
  let seen = 0;
  let inFlight = 0;
  let mostInFlight = 0;
  const arrivals = [];
  const s = http.createServer((req, res) => {
    seen += 1;
    const now = performance.now();
    arrivals.push(now);
    inFlight += 1;
    mostInFlight = Math.max(mostInFlight, inFlight);
    req.resume();
    const a = answer(seen, now);
    const [status, headers] = Array.isArray(a) ? a : [a, {}];
    setTimeout(() => {
      inFlight -= 1;
      res.writeHead(status, { 'content-type': 'text/plain', ...headers });
      res.end(String(status));
    }, holdMs);
  });
  s.keepAliveTimeout = 60_000;
  await new Promise((resolve) => s.listen(0, '127.0.0.1', 2048, resolve));
  return {
    url: `http://127.0.0.1:${s.address().port}/`,
    seen: () => seen,
    arrivals,
    mostInFlight: () => mostInFlight,
    close: () => new Promise((resolve) => { s.closeAllConnections(); s.close(resolve); }),
  };
}

/** A token bucket: `rate` per second, holding `burst`, full at start; 503 when empty. */
function bucket(rate, burst) {
  let tokens = burst;
  let at = null;
  return (_n, now) => {
    if (at !== null) tokens = Math.min(burst, tokens + ((now - at) / 1000) * rate);
    at = now;
    if (tokens >= 1) {
      tokens -= 1;
      return 200;
    }
    return 503;
  };
}

const drain = async (r) => { await r.arrayBuffer(); return r.status; };

test('a healthy origin is never paced: 1,000 calls at once are all in flight together', async () => {
  // Each answer is held 1 s; nothing is refused, so nothing is retried, so nothing is paced.
  const s = await server(() => 200, 1000);
  try {
    const statuses = await Promise.all(Array.from({ length: 1000 }, () => retryFetch(s.url).then(drain)));
    assert.ok(statuses.every((st) => st === 200));
    assert.ok(s.mostInFlight() > 900, `at most ${s.mostInFlight()} of 1000 in flight at once`);
  } finally {
    await s.close();
  }
});

test('a lone request answered 429 waits its Retry-After and the window above it, not a throttle\'s turn', async () => {
  const s = await server((n) => (n === 1 ? [429, { 'retry-after': '1' }] : 200));
  try {
    const delays = [];
    const res = await retryFetch(s.url, undefined, { baseDelayMs: 100, onRetry: (i) => delays.push(i.delayMs) });
    assert.equal(res.status, 200);
    assert.equal(s.seen(), 2);
    // the second asked, and up to half of it above (the window: half the wait, the backoff of
    // 100 ms being narrower)
    assert.ok(delays[0] >= 1000 && delays[0] <= 1500, `waited ${delays[0]} ms`);
    const gap = s.arrivals[1] - s.arrivals[0];
    assert.ok(gap >= 1000 - 2 && gap < delays[0] + 500, `the retry came ${gap.toFixed(0)} ms after the first attempt`);
  } finally {
    await s.close();
  }
});

test('calls in flight that never failed are no herd: a lone call\'s retries beside them are not paced', async () => {
  // 12 slow calls carry a signal in their options (they take the retry loop from their first
  // attempt) and are answered 200 after 4 s. Meanwhile 30 lone calls, one after another, are
  // each refused once (503) and retried after 1 ms. A call counts as retrying from its first
  // failed attempt: the slow ones never failed, so no 503 here meets 10 calls retrying and
  // nothing is paced (counted from the start, they made every 503 start or cut the pacing,
  // and the lone retries waited up to seconds for a turn).
  let flaky = 0;
  let refusedAt = 0;
  const gaps = [];
  const s = http.createServer((req, res) => {
    req.resume();
    if (req.url === '/slow') {
      setTimeout(() => { res.writeHead(200); res.end('slow'); }, 4000);
      return;
    }
    flaky += 1;
    if (flaky % 2 === 1) {
      refusedAt = performance.now();
      res.writeHead(503);
      res.end('busy');
      return;
    }
    gaps.push(performance.now() - refusedAt);
    res.writeHead(200);
    res.end('ok');
  });
  s.keepAliveTimeout = 60_000;
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${s.address().port}`;
  const stop = new AbortController();
  const slow = Array.from({ length: 12 }, () => retryFetch(`${base}/slow`, undefined, { signal: stop.signal }).then(drain, () => 'aborted'));
  try {
    await sleep(100);
    for (let i = 0; i < 30; i += 1) {
      await sleep(40);
      const status = await retryFetch(`${base}/flaky`, undefined, { baseDelayMs: 1, jitter: 'none' }).then(drain);
      assert.equal(status, 200);
    }
    assert.equal(gaps.length, 30);
    const longest = Math.max(...gaps);
    assert.ok(longest < 300, `a retry came ${longest.toFixed(0)} ms after its 503 (gaps: ${gaps.map((g) => g.toFixed(0)).join(' ')})`);
  } finally {
    stop.abort();
    await Promise.all(slow);
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

test('a herd refused by an overloaded server is paced: fewer requests than with throttle: false, all served', async () => {
  // 150 calls at once against a token bucket of 200 req/s holding 10: most of the first wave
  // is refused. Both herds run together, each against its own server.
  const paced = await server(bucket(200, 10));
  const free = await server(bucket(200, 10));
  try {
    const options = { maxAttempts: 9, baseDelayMs: 10, maxDelayMs: 1000, budget: false };
    const client = createRetryFetch({ ...options, throttle: false });
    const [a, b] = await Promise.all([
      Promise.all(Array.from({ length: 150 }, () => retryFetch(paced.url, undefined, options).then(drain))),
      Promise.all(Array.from({ length: 150 }, () => client(free.url).then(drain))),
    ]);
    assert.ok(a.every((st) => st === 200), `paced: ${a.filter((st) => st === 200).length} of 150 served`);
    assert.ok(b.filter((st) => st === 200).length > 0);
    assert.ok(paced.seen() < free.seen(), `requests: ${paced.seen()} with the default throttle, ${free.seen()} with throttle: false`);
  } finally {
    await Promise.all([paced.close(), free.close()]);
  }
});

test('a total outage with default options (the budget and the throttle): at most 1.5 requests per call', async () => {
  const s = await server(() => 503);
  try {
    const results = await Promise.all(Array.from({ length: 200 }, () => retryFetch(s.url, undefined, { baseDelayMs: 1, maxDelayMs: 5, maxAttempts: 9 })));
    assert.ok(results.every((r) => r.status === 503));
    assert.ok(s.seen() <= 300, `${s.seen()} requests for 200 calls`);
  } finally {
    await s.close();
  }
});

test('a total outage: retries queued for throttle turns ask the budget again, so about 20 go in all and no call is held past its backoffs', async () => {
  // Backoffs long enough for the herd to queue behind the default throttle: each retry passed
  // the budget before any of those queued with it was sent and counted.
  const s = await server(() => 503);
  try {
    const durations = [];
    const results = await Promise.all(Array.from({ length: 200 }, () => retryFetch(s.url, undefined, {
      baseDelayMs: 20, maxDelayMs: 200, jitter: 'none', maxAttempts: 9, onSettled: (info) => durations.push(info.durationMs),
    })));
    assert.ok(results.every((r) => r.status === 503));
    const retries = s.seen() - 200;
    // The floor is 20 unaccepted retries; a call's own earlier retries do not count against it.
    assert.ok(retries <= 30, `${retries} retries sent`);
    // Each call's own schedule: 20 + 40 + 80 + 160 + 200 · 4 = 1,100 ms of backoff.
    assert.ok(Math.max(...durations) < 4_000, `the longest call took ${Math.max(...durations)} ms`);
  } finally {
    await s.close();
  }
});

/** `calls` calls through `call`, started evenly `gapMs` apart; resolves with their statuses. */
async function paced(calls, gapMs, call) {
  const t0 = performance.now();
  const all = [];
  for (let i = 0; i < calls; i += 1) {
    const wait = t0 + i * gapMs - performance.now();
    if (wait >= 1) await sleep(wait);
    all.push(call().then(drain));
  }
  return Promise.all(all);
}

test('a warm AdaptiveThrottle paces the herd that follows healthy traffic', async () => {
  // 200 healthy calls at 200 req/s through one throttle, then 200 calls at once, against a
  // token bucket of 400 req/s holding 20. Slow start used to grow with time, so the herd met
  // a throttle of thousands of req/s and most of its first wave was refused (1.5 to 1.85
  // requests per call); the rate now stays at what healthy traffic sent.
  const s = await server(bucket(400, 20));
  try {
    const throttle = new AdaptiveThrottle();
    const options = { maxAttempts: 9, baseDelayMs: 50, maxDelayMs: 2000, throttle };
    const warm = await paced(200, 5, () => retryFetch(s.url, undefined, options));
    assert.ok(warm.every((st) => st === 200));
    const before = s.seen();
    assert.ok(throttle.rate(s.url) < 400, `rate ${throttle.rate(s.url)} after healthy traffic at 200 req/s`);
    const herd = await Promise.all(Array.from({ length: 200 }, () => retryFetch(s.url, undefined, options).then(drain)));
    assert.ok(herd.every((st) => st === 200), `${herd.filter((st) => st === 200).length} of 200 served`);
    const requests = s.seen() - before;
    assert.ok(requests <= 1.3 * 200, `${requests} requests for the herd of 200`);
  } finally {
    await s.close();
  }
});

test('default options after healthy traffic meet a herd as a fresh module does', async () => {
  // The lean success path tells the default throttle nothing, and it engages only when 10
  // calls retry: healthy calls before the herd change nothing.
  const s = await server(bucket(200, 10));
  const fresh = await server(bucket(200, 10));
  try {
    const options = { maxAttempts: 9, baseDelayMs: 10, maxDelayMs: 1000, budget: false };
    const warm = await paced(100, 10, () => retryFetch(s.url, undefined, options));
    assert.ok(warm.every((st) => st === 200));
    const before = s.seen();
    const [a, b] = await Promise.all([
      Promise.all(Array.from({ length: 150 }, () => retryFetch(s.url, undefined, options).then(drain))),
      Promise.all(Array.from({ length: 150 }, () => retryFetch(fresh.url, undefined, options).then(drain))),
    ]);
    assert.ok(a.every((st) => st === 200) && b.every((st) => st === 200));
    const warmHerd = s.seen() - before;
    assert.ok(warmHerd <= 1.25 * fresh.seen() + 20, `requests: ${warmHerd} after healthy traffic, ${fresh.seen()} fresh`);
  } finally {
    await Promise.all([s.close(), fresh.close()]);
  }
});

test('a call that waited for its throttle turn is sent only as the breaker allows: into a half-open circuit as its probe, or not at all', async () => {
  // 8 calls of one attempt each to an origin that always answers 503, through a throttle of
  // about 4 sends a second: the first failure opens the circuit (openMs 300, one probe per
  // half-open round) while the others still wait for their turns. Each that goes later must
  // be a half-open round's probe, whose failure opens the circuit again; the rest end with a
  // CircuitOpenError, nothing sent.
  const s = await server(() => 503);
  const events = [];
  const breaker = new CircuitBreaker({ failureThreshold: 1, openMs: 300, halfOpenMaxCalls: 1, onStateChange: (e) => events.push(`${e.from}->${e.to}`) });
  const throttle = new AdaptiveThrottle({ initialRate: 4, rampMs: 100_000 });
  try {
    const results = await Promise.all(Array.from({ length: 8 }, () =>
      retryFetch(s.url, undefined, { breaker, throttle, maxAttempts: 1 }).then((r) => drain(r), (e) => e.name)));
    const probes = events.filter((e) => e === 'open->half-open').length;
    assert.ok(events[0] === 'closed->open', events.join(' '));
    assert.equal(s.seen(), 1 + probes, `sent ${s.seen()} with ${probes} half-open round(s): ${events.join(' ')}; ${results.join(' ')}`);
    assert.equal(events.filter((e) => e === 'half-open->open').length, probes, events.join(' '));
    assert.equal(results.filter((r) => r === 503).length, s.seen());
    assert.equal(results.filter((r) => r === 'CircuitOpenError').length, 8 - s.seen());
  } finally {
    await s.close();
  }
});
