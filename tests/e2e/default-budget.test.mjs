// The default retry budget: every retryFetch and createRetryFetch client shares one
// per origin unless it says `budget: false` or brings a RetryBudget. A lone request's retries
// are never refused; a sustained outage does not multiply the load; an overloaded server's
// herd still gets through. Each test has its own server (its own origin), so the module-wide
// budget of one test never touches another's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { retryFetch, createRetryFetch, RetryBudget } from 'retry-fetch';

/** A server on a port of its own; `answer(n)` is the status of the n-th request (1-based). */
async function server(answer) {
  let seen = 0;
  const s = http.createServer((req, res) => {
    seen += 1;
    req.resume();
    const status = answer(seen);
    if (status === 'reset') return req.socket.destroy();
    res.writeHead(status, { 'content-type': 'text/plain' });
    res.end(String(status));
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${s.address().port}/`,
    seen: () => seen,
    close: () => new Promise((resolve) => { s.closeAllConnections(); s.close(resolve); }),
  };
}

// throttle: false: these tests hold the budget's own rule to its exact bound, which counts on
// a retry's verdict and its send being one step; the default throttle (on by default) may make
// a herd's retry wait for its turn between the two (tests/e2e/default-throttle.test.mjs).
const fast = { baseDelayMs: 1, maxDelayMs: 5, throttle: false };

/**
 * The most retries the default budget lets calls to one origin send while none is accepted,
 * over `elapsedMs`: a retry goes only while the retries of the *other* calls, decayed, stay
 * below the floor of 20, and the call's own (at most maxAttempts - 2 before its last retry) do
 * not count against it; the verdict and the send are one step (nothing else runs between
 * them). A retry sent within `elapsedMs` has decayed by no more than e^(-elapsedMs / 10 s), so
 * the count is below (20 + maxAttempts - 2) * e^(elapsedMs / 10 s) before the last retry goes.
 * A bound of the rule, not of the machine: a slower run is allowed what its decay allows.
 */
const maxUnaccepted = (maxAttempts, elapsedMs) => Math.ceil((20 + maxAttempts - 2) * Math.exp(elapsedMs / 10_000));

test('a lone request gets every retry its maxAttempts allows, one after another, until other calls\' unaccepted retries pass the floor', async () => {
  const s = await server(() => 503);
  try {
    const sent = [];
    const began = Date.now();
    for (let call = 1; call <= 4; call++) {
      const before = s.seen();
      const res = await retryFetch(s.url, undefined, { ...fast, maxAttempts: 10 });
      assert.equal(res.status, 503, `call ${call}`);
      sent.push(s.seen() - before);
    }
    // Each call is alone in time, but the earlier calls' unaccepted retries count against it:
    // calls 1, 2 and 3 find 0, 9 and 18 of them (below the floor of 20; decay only lowers
    // them) and send all 10 attempts. Call 4 finds 27 (decay brings them to 20 only after
    // 3 s): every retry it asks for is refused (skipped), so only its first attempt goes.
    assert.deepEqual(sent, [10, 10, 10, 1], `attempts per call, the four calls in ${Date.now() - began} ms`);
  } finally {
    await s.close();
  }
});

test('a total outage: 200 calls with default options cost the floor of unaccepted retries, about 1.1 requests per call (9 without the budget)', async () => {
  const s = await server(() => 503);
  try {
    const began = Date.now();
    const results = await Promise.all(Array.from({ length: 200 }, () => retryFetch(s.url, undefined, { ...fast, maxAttempts: 9 })));
    const elapsed = Date.now() - began;
    assert.ok(results.every((r) => r.status === 503));
    const bound = maxUnaccepted(9, elapsed);
    assert.ok(s.seen() - 200 <= bound, `${s.seen() - 200} retries for 200 calls in ${elapsed} ms; the budget allows ${bound}`);
    assert.ok(s.seen() >= 200);
  } finally {
    await s.close();
  }
  const t = await server(() => 503);
  try {
    await Promise.all(Array.from({ length: 200 }, () => retryFetch(t.url, undefined, { ...fast, maxAttempts: 9, budget: false })));
    assert.equal(t.seen(), 1800, 'budget: false retries freely');
  } finally {
    await t.close();
  }
});

test('a refused retry without a response ends with RetryError reason budget', async () => {
  const s = await server(() => 'reset');
  try {
    // Drain: one lone call's 59 retries, never accepted (a lone call is never refused). They
    // keep the others' count above the floor of 20 for 10 * ln(59 / 20) = 10.8 s: the call
    // below is refused whatever the machine's load makes of the next seconds.
    const drain = await retryFetch(s.url, undefined, { ...fast, maxAttempts: 60 }).then(() => assert.fail('resolved'), (err) => err);
    assert.equal(drain.reason, 'attempts');
    assert.equal(s.seen(), 60, 'the lone call sent every attempt');
    const before = s.seen();
    const e = await retryFetch(s.url, undefined, { ...fast, maxAttempts: 3 }).then(() => assert.fail('resolved'), (err) => err);
    assert.equal(e.name, 'RetryError');
    assert.equal(e.reason, 'budget');
    assert.equal(s.seen() - before, 1, 'only the first attempt was sent');
  } finally {
    await s.close();
  }
});

test('a server that serves every other request: the herd still gets through, as without a budget (each accepted retry lets two more go)', async () => {
  // 100 calls at once, each run on a server (an origin) of its own. Backoff from 10 ms up to
  // 1 s: a refused retry is skipped and asked again after the next backoff, at most
  // maxAttempts times, so the accepted retries must come back within those waits to let more
  // go. With the millisecond backoff of the other tests (1 to 5 ms: nine skips in under 50 ms)
  // a loaded machine answers too late, and some calls give up with the budget where none does
  // without it (measured: 80 to 99 of 100 succeed).
  const herdPolicy = { baseDelayMs: 10, maxDelayMs: 1_000, maxAttempts: 9, throttle: false };
  const run = async (answer, options) => {
    const s = await server(answer);
    try {
      const began = Date.now();
      const results = await Promise.all(Array.from({ length: 100 }, () => retryFetch(s.url, undefined, { ...herdPolicy, ...options })));
      return { ok: results.filter((r) => r.status === 200).length, seen: s.seen(), ms: Date.now() - began };
    } finally {
      await s.close();
    }
  };
  const everyOther = (n) => (n % 2 === 0 ? 200 : 503);
  const withBudget = await run(everyOther, {});
  const control = await run(everyOther, { budget: false }); // the same herd without a budget
  const outage = await run(() => 503, {}); // the same herd, the default budget, nothing accepted
  const report = JSON.stringify({ withBudget, control, outage });
  assert.ok(withBudget.ok >= 95, `${withBudget.ok} of 100 calls succeeded: ${report}`);
  assert.ok(withBudget.seen <= 300, `amplification ${withBudget.seen / 100}: ${report}`);
  // The herd loses (almost) nothing to the budget: about as many calls get through as with
  // budget: false, for no more requests per success. Two separate runs of a herd differ by a
  // call or two either way (the interleaving decides which answers each call gets), so the
  // comparison allows that much, no more.
  assert.ok(withBudget.ok >= control.ok - 2, `as many calls succeed as without a budget: ${report}`);
  assert.ok(withBudget.seen / withBudget.ok <= (control.seen / control.ok) * 1.05,
    `no more requests per success than without a budget: ${report}`);
  // ... although it is on: with nothing accepted, the same herd's retries stop at the floor.
  const floor = maxUnaccepted(9, outage.ms);
  assert.ok(outage.seen - 100 <= floor, `an outage's herd: ${outage.seen - 100} retries, the floor allows ${floor}: ${report}`);
  // The herd's retries went far past that floor: the accepted ones let more go.
  const herdFloor = maxUnaccepted(9, withBudget.ms);
  assert.ok(withBudget.seen - 100 > herdFloor, `the herd's ${withBudget.seen - 100} retries, past the ${herdFloor} the floor alone would allow: ${report}`);
});

test('createRetryFetch clients share the default budget; budget: false and a RetryBudget replace it', async () => {
  const s = await server(() => 503);
  try {
    const client = createRetryFetch(fast);
    const began = Date.now();
    await Promise.all(Array.from({ length: 50 }, () => client(s.url, undefined, { maxAttempts: 9 })));
    const elapsed = Date.now() - began;
    const bound = maxUnaccepted(9, elapsed);
    assert.ok(s.seen() - 50 <= bound, `a client's 50 calls: ${s.seen() - 50} retries in ${elapsed} ms; the budget allows ${bound} (450 without it)`);
    const before = s.seen();
    // the module-wide budget of this origin is drained: another client is refused too
    await createRetryFetch(fast)(s.url, undefined, { maxAttempts: 9 });
    assert.ok(s.seen() - before < 9);
    const off = s.seen();
    await createRetryFetch({ ...fast, budget: false })(s.url, undefined, { maxAttempts: 4 });
    assert.equal(s.seen() - off, 4, 'budget: false');
    const own = s.seen();
    await createRetryFetch({ ...fast, budget: new RetryBudget() })(s.url, undefined, { maxAttempts: 4 });
    assert.equal(s.seen() - own, 4, 'a RetryBudget of its own (a lone call in it)');
    const again = s.seen();
    await createRetryFetch({ ...fast, budget: new RetryBudget() })(s.url, undefined, { maxAttempts: 4, budget: null });
    assert.ok(s.seen() - again < 4, 'budget: null is the default budget again');
  } finally {
    await s.close();
  }
});

test("budget: 'own' gives a client a default budget of its own: another client's failures do not refuse its retries", async () => {
  // 503 while in outage; then, per path, the first request gets a 503 and the next a 200.
  let outage = true;
  const hits = new Map();
  const s = http.createServer((req, res) => {
    req.resume();
    const n = (hits.get(req.url) ?? 0) + 1;
    hits.set(req.url, n);
    const status = outage || n === 1 ? 503 : 200;
    res.writeHead(status, { 'content-type': 'text/plain' });
    res.end(String(status));
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${s.address().port}`;
  try {
    const noisy = createRetryFetch(fast);
    await Promise.all(Array.from({ length: 50 }, () => noisy(`${base}/poll`, undefined, { maxAttempts: 9 })));
    outage = false;
    // The package-wide budget of this origin is drained by the noisy client: a client on it
    // is refused its retry and ends with the 503.
    const shared = await createRetryFetch(fast)(`${base}/shared`, undefined, { maxAttempts: 6 });
    assert.equal(shared.status, 503, 'a client on the shared budget was not refused');
    assert.equal(hits.get('/shared'), 1);
    // A client with its own default budget gets the retry it needs.
    const critical = createRetryFetch({ ...fast, budget: 'own' });
    const res = await critical(`${base}/pay`, undefined, { maxAttempts: 6 });
    assert.equal(res.status, 200, "the client with its own budget was refused by another's failures");
    assert.equal(hits.get('/pay'), 2);
    // Its extend()s share that budget.
    assert.equal((await critical.extend({ maxAttempts: 3 })(`${base}/pay2`)).status, 200);
  } finally {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

test("budget: 'own' given per call is a TypeError (it is a client's default), nothing sent", async () => {
  let sent = 0;
  const fetch = async () => (sent++, new Response('ok'));
  const client = createRetryFetch({ fetch });
  for (const call of [() => retryFetch('http://x.test/', undefined, { budget: 'own', fetch }), () => client('http://x.test/', undefined, { budget: 'own' })]) {
    await assert.rejects(call(), (e) => e instanceof TypeError && /"budget"/.test(e.message) && /createRetryFetch/.test(e.message));
  }
  assert.equal(sent, 0);
});

test('onSettled\'s attempts are the attempts sent: none the default budget refused (counted as made) is among them', async () => {
  const s = await server(() => 503);
  try {
    for (let call = 1; call <= 3; call++) await retryFetch(s.url, undefined, { ...fast, maxAttempts: 10 });
    const before = s.seen();
    let settled;
    const res = await retryFetch(s.url, undefined, { ...fast, maxAttempts: 4, onSettled: (info) => (settled = info) });
    assert.equal(res.status, 503);
    const sent = s.seen() - before;
    assert.ok(sent < 4, `the budget refused none of its retries (sent ${sent})`);
    await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(settled?.attempts, sent, 'onSettled attempts');
  } finally {
    await s.close();
  }
});

test('the retry sent after the budget skipped some is told as itself: beforeRetry, its record and X-Retry-Count agree, delayMs the whole wait', async () => {
  // Other calls' unaccepted retries fill the budget's floor, then every request is cut (a
  // network error). The call's first retries are skipped (counted as made, nothing sent)
  // until the budget decays enough; the retry that then goes is told with its own number and
  // the wait since the failure, everywhere.
  let fill = true;
  const sent = [];
  const s = http.createServer((req, res) => {
    req.resume();
    if (fill) {
      res.writeHead(503);
      res.end();
      return;
    }
    sent.push({ at: performance.now(), retryCount: req.headers['x-retry-count'] });
    req.socket.destroy();
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${s.address().port}/`;
  try {
    await Promise.all(Array.from({ length: 25 }, () =>
      retryFetch(url, undefined, { throttle: false, maxAttempts: 2, baseDelayMs: 0 }).then((r) => r.arrayBuffer())));
    fill = false;
    const told = [];
    const error = await retryFetch(url, undefined, {
      throttle: false, maxAttempts: 4, baseDelayMs: 100, jitter: 'none', retryHeaders: true,
      beforeRetry: (info) => { told.push(info); },
    }).then(() => assert.fail('resolved'), (e) => e);
    assert.equal(error.name, 'RetryError');
    const records = error.attempts;
    assert.ok(records.length >= 2, `sent ${records.length} attempt(s): ${JSON.stringify(records)}`);
    assert.ok(records[1].attempt > 2, `no retry was skipped (records ${records.map((r) => r.attempt)})`);
    assert.equal(told.length, records.length - 1);
    told.forEach((info, i) => {
      const record = records[i + 1];
      assert.equal(info.attempt, record.attempt, 'beforeRetry and the record');
      assert.equal(Number(sent[i + 1].retryCount), record.attempt - 1, 'X-Retry-Count');
      assert.equal(info.delayMs, records[i].delayMs, 'beforeRetry.delayMs, the wait that followed the attempt before');
      // jitter: 'none': 100, then 200 and 400 for the skipped ones, as many as were skipped.
      const waits = Array.from({ length: record.attempt - records[i].attempt }, (_, k) => 100 * 2 ** (records[i].attempt - 1 + k));
      assert.equal(info.delayMs, waits.reduce((a, b) => a + b, 0), `the waits ${waits}`);
      const gap = sent[i + 1].at - sent[i].at;
      assert.ok(gap >= info.delayMs - 5, `sent ${gap.toFixed(0)} ms after the attempt before, told ${info.delayMs}`);
    });
  } finally {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

test('retries queued behind a browser\'s six connections are not failures: a herd whose every retry succeeds gets through', async () => {
  // A transport that sends six requests at a time per origin and reads each answer whole
  // before the next goes, as a browser does over HTTP/1.1; every path answers 503 once, then
  // 200, each after 20 ms. 200 calls at once: their retries wait in the queue, sent to the
  // transport but not yet answered. Those hold the budget back (it defers the next retries
  // until they are answered) but are no failures: none may use up a call's attempts.
  let active = 0;
  const queue = [];
  const next = () => {
    if (active < 6 && queue.length > 0) {
      active += 1;
      queue.shift()();
    }
  };
  const sixAtATime = async (input, init) => {
    await new Promise((resolve) => { queue.push(resolve); next(); });
    try {
      const res = await fetch(input, init);
      return new Response(await res.arrayBuffer(), { status: res.status, headers: res.headers });
    } finally {
      active -= 1;
      next();
    }
  };
  const hits = new Map();
  let seen = 0;
  const s = http.createServer((req, res) => {
    seen += 1;
    req.resume();
    const n = (hits.get(req.url) ?? 0) + 1;
    hits.set(req.url, n);
    setTimeout(() => res.writeHead(n === 1 ? 503 : 200).end(), 20);
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  try {
    const base = `http://127.0.0.1:${s.address().port}`;
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => retryFetch(`${base}/call/${i}`, undefined, { fetch: sixAtATime })));
    const statuses = {};
    for (const r of results) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    assert.deepEqual(statuses, { 200: 200 }, `every call's one retry succeeds (requests: ${seen})`);
    assert.equal(seen, 400, 'one retry each, none skipped');
  } finally {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});

test('a retry whose call was aborted before its answer is taken back: it holds no other call back', async () => {
  // 40 calls: a 503, then a retry the server never answers, until each call's signal aborts
  // it. Were those retries still counted as sent and unanswered, a later call's retry would
  // be deferred (behind 40 retries "in flight") until they decayed, seconds later.
  const hits = new Map();
  const s = http.createServer((req, res) => {
    req.resume();
    const n = (hits.get(req.url) ?? 0) + 1;
    hits.set(req.url, n);
    if (n === 1) return res.writeHead(503).end();
    if (req.url.startsWith('/hang')) return; // never answered
    res.writeHead(200).end('ok');
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  try {
    const base = `http://127.0.0.1:${s.address().port}`;
    const policy = { baseDelayMs: 1, jitter: 'none', throttle: false };
    const aborted = await Promise.allSettled(Array.from({ length: 40 }, (_, i) =>
      retryFetch(`${base}/hang/${i}`, undefined, { ...policy, signal: AbortSignal.timeout(300) })));
    assert.ok(aborted.every((r) => r.status === 'rejected' && r.reason?.name === 'TimeoutError'), 'every call was aborted');
    let waited;
    const res = await retryFetch(`${base}/ok`, undefined, { ...policy, beforeRetry: ({ delayMs }) => { waited = delayMs; } });
    assert.equal(res.status, 200);
    assert.equal(waited, 1, 'the retry went after its 1 ms backoff, not deferred');
  } finally {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
});
