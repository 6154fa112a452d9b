// The default retry budget (issue 12): every retryFetch and createRetryFetch client shares one
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

const fast = { baseDelayMs: 1, maxDelayMs: 5 };

test('a lone request gets every retry its maxAttempts allows, one after another', async () => {
  const s = await server(() => 503);
  try {
    for (let call = 1; call <= 3; call++) {
      const before = s.seen();
      const res = await retryFetch(s.url, undefined, { ...fast, maxAttempts: 9 });
      assert.equal(res.status, 503);
      // The first call is alone; the next ones are alone in time too, but the first one's
      // unaccepted retries count against them (8 of the floor of 20): the second still gets
      // its 8, the third is cut short.
      if (call < 3) assert.equal(s.seen() - before, 9, `call ${call}`);
    }
  } finally {
    await s.close();
  }
});

test('a total outage: 200 calls with default options cost at most 1.5 requests per call (9 without the budget)', async () => {
  const s = await server(() => 503);
  try {
    const results = await Promise.all(Array.from({ length: 200 }, () => retryFetch(s.url, undefined, { ...fast, maxAttempts: 9 })));
    assert.ok(results.every((r) => r.status === 503));
    assert.ok(s.seen() <= 300, `the server saw ${s.seen()} requests for 200 calls`);
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
    // Drain: 30 lone calls' retries, never accepted.
    await Promise.all(Array.from({ length: 30 }, () => retryFetch(s.url, undefined, { ...fast, maxAttempts: 3 }).catch(() => {})));
    const before = s.seen();
    const e = await retryFetch(s.url, undefined, { ...fast, maxAttempts: 3 }).then(() => assert.fail('resolved'), (err) => err);
    assert.equal(e.name, 'RetryError');
    assert.equal(e.reason, 'budget');
    assert.equal(s.seen() - before, 1, 'only the first attempt was sent');
  } finally {
    await s.close();
  }
});

test('a server that serves every other request: the herd still gets through (each accepted retry lets two more go)', async () => {
  const run = async (options) => {
    const s = await server((n) => (n % 2 === 0 ? 200 : 503));
    try {
      const results = await Promise.all(Array.from({ length: 100 }, () => retryFetch(s.url, undefined, { ...fast, maxAttempts: 9, ...options })));
      return { ok: results.filter((r) => r.status === 200).length, seen: s.seen() };
    } finally {
      await s.close();
    }
  };
  const withBudget = await run({});
  assert.ok(withBudget.ok >= 95, `${withBudget.ok} of 100 calls succeeded`);
  assert.ok(withBudget.seen <= 300, `amplification ${withBudget.seen / 100}`);
});

test('createRetryFetch clients share the default budget; budget: false and a RetryBudget replace it', async () => {
  const s = await server(() => 503);
  try {
    const client = createRetryFetch(fast);
    await Promise.all(Array.from({ length: 50 }, () => client(s.url, undefined, { maxAttempts: 9 })));
    assert.ok(s.seen() <= 80, `a client's 50 calls: ${s.seen()} (the floor of 20 unaccepted retries, and those in flight)`);
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
