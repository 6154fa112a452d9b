// The exactly-once payments demo (`make demo`, the Payments tab) in headless Chromium: the
// server in-process, real presses of Pay through each fault the page can switch on, the live
// attempt timeline, and the server's ledger read over HTTP by the test (one payment, one
// charge). Saves a screenshot of the demo to test-results/demo.png.
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { useDemo, openDemoPage, withPage, timelineEntries, saveScreenshot } from '../support/demo-page.mjs';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const demo = useDemo();

/** Every test starts from an empty ledger and a healthy network. */
beforeEach(async () => {
  await api('POST', '/api/ledger/reset');
  await api('POST', '/api/faults', { mode: 'none', count: 1 });
});

async function api(method, path, body, headers = {}) {
  const res = await fetch(demo.server.url + path, {
    method,
    headers: body === undefined ? headers : { 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, json, text };
}

const ledger = async () => (await api('GET', '/api/ledger')).json;

/**
 * A new page at the demo, with its errors collected; resolves once the page is ready. The
 * payments API fails on purpose when a fault is on: its failures are expected, any other error
 * is a bug.
 */
const openDemo = ({ width = 1280, height = 900 } = {}) =>
  openDemoPage(demo, { failingPath: '/api/payments', width, height });

/** Sets the network conditions and a fast retry policy on the page. */
async function configure(page, { fault = 'none', count = 1, baseDelayMs = 50, maxAttempts = 5, timeoutMs = 1000, jitter } = {}) {
  await page.click(`[data-testid="fault-${fault}"]`);
  if (fault !== 'none') await page.fill('[data-testid="fault-count"]', String(count));
  if (jitter) await page.selectOption('[data-testid="pay-jitter"]', jitter);
  await page.fill('[data-testid="pay-base-delay"]', String(baseDelayMs));
  await page.fill('[data-testid="pay-max-attempts"]', String(maxAttempts));
  await page.fill('[data-testid="pay-timeout"]', String(timeoutMs));
}

/**
 * Reloads the page and waits until it is usable: it reads the server's fault settings as it
 * starts, so a setting changed before then would be put back to the server's.
 */
async function reload(page) {
  await page.reload();
  await page.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 15_000 });
}

/** Presses Pay (or `button`: "Try again" is pay-again) and waits for the receipt to settle. */
async function pressPay(page, outcome = 'success', button = 'pay') {
  await page.click(`[data-testid="${button}"]`);
  await page.waitForSelector(`[data-testid="pay-result"][data-outcome="${outcome}"]`, { timeout: 20_000 });
}

/** The payment timeline's entries as plain data. */
const entries = (page) => timelineEntries(page, 'pay-timeline', { replayed: true });

/** Checks that exactly one charge exists, for `key`, on the server and on the page. */
async function assertChargedOnce(page, key, { amount = 4200, requests } = {}) {
  const view = await ledger();
  assert.equal(view.count, 1, `one charge in the ledger: ${JSON.stringify(view)}`);
  assert.deepEqual(view.duplicates, []);
  const [charge] = view.charges;
  assert.equal(charge.key, key);
  assert.equal(charge.amount, amount);
  if (requests !== undefined) assert.equal(charge.requests, requests, 'requests that reached the server');

  assert.equal(await page.getAttribute('[data-testid="pay-result"]', 'data-charge-id'), charge.id);
  assert.equal(await page.getAttribute('[data-testid="pay-result"]', 'data-key'), key);
  assert.equal(await page.textContent('[data-testid="pay-charges-for-key"]'), '1');
  await page.waitForFunction((id) => {
    const rows = document.querySelectorAll('[data-testid="ledger-row"]');
    return rows.length === 1 && rows[0].dataset.chargeId === id;
  }, charge.id, { timeout: 5_000 });
  assert.equal(await page.textContent('[data-testid="ledger-duplicates"]'), '0');
  assert.equal(await page.getAttribute('[data-testid="ledger-badge"]', 'data-state'), 'ok');
  assert.equal(await page.$$eval('[data-testid="ledger-row"].is-dup', (rows) => rows.length), 0);
  return charge;
}

test('the payments API: key required, replays marked, faults validated, ledger and reset', async () => {
  const missing = await api('POST', '/api/payments', { amount: 100 });
  assert.equal(missing.status, 400, 'the companion rejects a payment without an Idempotency-Key');
  assert.equal((await ledger()).count, 0);

  const first = await api('POST', '/api/payments', { amount: 1234, card: '4242' }, { 'Idempotency-Key': 'api-k1' });
  assert.equal(first.status, 201);
  assert.equal(first.json.amount, 1234);
  assert.match(first.json.chargeId, /^ch_/);
  assert.equal(first.headers.get('idempotent-replayed'), null);
  const again = await api('POST', '/api/payments', { amount: 1234, card: '4242' }, { 'Idempotency-Key': 'api-k1' });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(again.json.chargeId, first.json.chargeId);

  const bad = await api('POST', '/api/payments', { amount: -5 }, { 'Idempotency-Key': 'api-k2' });
  assert.equal(bad.status, 422);

  let view = await ledger();
  assert.equal(view.count, 1);
  assert.equal(view.total, 1234);
  assert.deepEqual(view.duplicates, []);
  assert.equal(view.charges[0].requests, 2);

  for (const wrong of [{ mode: 'boom' }, { count: -1 }, { count: 1.5 }, { delayMs: 'slow' }, [1]]) {
    assert.equal((await api('POST', '/api/faults', wrong)).status, 400, JSON.stringify(wrong));
  }
  const set = await api('POST', '/api/faults', { mode: '503', count: 2 });
  assert.deepEqual([set.json.mode, set.json.count], ['503', 2]);
  assert.equal((await api('GET', '/api/faults')).json.mode, '503');
  // The fault layer sits in front of the companion: the first two attempts of a key never
  // reach the handler, the third does.
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await api('POST', '/api/payments', { amount: 100 }, { 'Idempotency-Key': 'api-k3' })).status);
  assert.deepEqual(statuses, [503, 503, 201]);

  await api('POST', '/api/faults', { mode: '429', count: 1 });
  const limited = await api('POST', '/api/payments', { amount: 100 }, { 'Idempotency-Key': 'api-k4' });
  assert.equal(limited.status, 429);
  assert.equal(limited.headers.get('retry-after'), '1');

  assert.equal((await api('POST', '/api/ledger/reset')).status, 200);
  view = await ledger();
  assert.equal(view.count, 0);
  // The store is cleared too: the old key is processed afresh.
  await api('POST', '/api/faults', { mode: 'none' });
  const fresh = await api('POST', '/api/payments', { amount: 1234 }, { 'Idempotency-Key': 'api-k1' });
  assert.equal(fresh.headers.get('idempotent-replayed'), null);
  assert.notEqual(fresh.json.chargeId, first.json.chargeId);
  assert.equal((await api('GET', '/api/payments')).status, 405);
});

test('charge, then drop the connection: one press of Pay, exactly one charge', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: 'drop', count: 1 });
  await pressPay(page);

  const rows = await entries(page);
  assert.deepEqual(rows.map((r) => [r.attempt, r.kind, r.reason]), [[1, 'retry', 'network'], [2, 'final', undefined]], JSON.stringify(rows));
  const key = rows[0].key;
  assert.match(key, UUID_V4);
  assert.ok(rows.every((r) => r.key === key), 'the same Idempotency-Key on every attempt');
  assert.equal(rows[1].status, 201);
  assert.ok(rows[1].replayed, 'the retry is answered with the stored result');
  assert.match(rows[1].text, /replayed/);

  assert.match(await page.textContent('[data-testid="pay-result-title"]'), /Paid €42\.00/);
  assert.equal(await page.getAttribute('[data-testid="pay-result"]', 'data-replayed'), 'true');
  assert.equal(await page.textContent('[data-testid="pay-attempts"]'), '2');
  await assertChargedOnce(page, key, { requests: 2 });
}));

test('503 storm: the timeline shows the retries, then the payment succeeds once', () => withPage(openDemo(), async (page) => {
  assert.ok((await page.$$('[data-testid="pay-schedule-chart"] svg .bar')).length >= 1, 'the backoff chart has bars');
  await configure(page, { fault: '503', count: 2, baseDelayMs: 60, jitter: 'equal', maxAttempts: 4 });
  // maxAttempts 4 -> 3 waits in the schedule.
  assert.equal((await page.$$('[data-testid="pay-schedule-chart"] svg .bar')).length, 3);
  assert.match(await page.textContent('[data-testid="pay-code"]'), /baseDelayMs: 60/);
  assert.match(await page.textContent('[data-testid="fault-hint"]'), /503/);

  await pressPay(page);
  const rows = await entries(page);
  assert.equal(rows.length, 3, JSON.stringify(rows));
  for (const [i, row] of rows.slice(0, 2).entries()) {
    assert.equal(row.attempt, i + 1);
    assert.equal(row.kind, 'retry');
    assert.equal(row.status, 503);
    assert.equal(row.reason, 'status');
    assert.ok(row.delayMs >= 30 * 2 ** i && row.delayMs <= 60 * 2 ** i, `equal jitter delay ${row.delayMs}`);
    assert.match(row.text, new RegExp(`before attempt ${i + 2}`));
  }
  assert.deepEqual([rows[2].attempt, rows[2].kind, rows[2].status, rows[2].replayed], [3, 'final', 201, false]);
  assert.match(rows[2].text, /201 Created/);
  assert.equal(new Set(rows.map((r) => r.key)).size, 1, 'one key for the whole payment');
  assert.equal(await page.getAttribute('[data-testid="pay-status"]', 'data-outcome'), 'success');
  // This payment's two waits are plotted on the chart.
  assert.equal((await page.$$('[data-testid="pay-schedule-chart"] .actual-dot')).length, 2);
  await assertChargedOnce(page, rows[0].key, { requests: 3 });
}));

test('429 with Retry-After: 1: the client waits at least the second the server asked for, within half a second above it', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: '429', count: 1 });
  await pressPay(page);
  const rows = await entries(page);
  assert.deepEqual(rows.map((r) => [r.attempt, r.kind, r.status]), [[1, 'retry', 429], [2, 'final', 201]]);
  // a window of half the second asked (the demo's baseDelayMs, 300, is narrower): 1000 to 1500 ms
  assert.ok(rows[0].delayMs >= 1000 && rows[0].delayMs <= 1500, `Retry-After is the floor: waited ${rows[0].delayMs} ms`);
  assert.match(rows[0].text, /Retry-After: 1/);
  await assertChargedOnce(page, rows[0].key, { requests: 2 });
}));

test('slow answers: the attempt times out, the retry carries the same key and is replayed', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: 'slow', count: 1, timeoutMs: 400 });
  await pressPay(page);
  const rows = await entries(page);
  assert.deepEqual(rows.map((r) => [r.attempt, r.kind, r.reason]), [[1, 'retry', 'timeout'], [2, 'final', undefined]], JSON.stringify(rows));
  assert.equal(rows[0].key, rows[1].key);
  assert.ok(rows[1].replayed, 'the charge of the timed-out attempt is replayed, not repeated');
  await assertChargedOnce(page, rows[0].key, { requests: 2 });
}));

test('long work: the provider takes 3 s; the server answers 202 Accepted, the page asks again with the same key and gets the one charge', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: 'long', count: 1, timeoutMs: 2000 });
  assert.match(await page.textContent('[data-testid="fault-hint"]'), /202 Accepted/);
  assert.match(await page.textContent('[data-testid="pay-code"]'), /followAccepted: true/);
  const started = Date.now();
  await pressPay(page);
  const elapsed = Date.now() - started;
  const rows = await entries(page);
  // The first request answered 202 after half a second, each repeat 202 while the charge ran,
  // then the stored 201.
  assert.ok(rows.length >= 2, JSON.stringify(rows));
  assert.deepEqual(rows.slice(0, -1).map((r) => [r.status, r.kind]), rows.slice(0, -1).map(() => [202, 'accepted']), JSON.stringify(rows));
  const last = rows.at(-1);
  assert.deepEqual([last.status, last.kind, last.replayed], [201, 'final', true]);
  const key = rows[0].key;
  assert.match(key, UUID_V4);
  assert.ok(rows.every((r) => r.key === key), 'the same Idempotency-Key on every request');
  assert.ok(elapsed >= 3000, `the payment ended after the provider's 3 s (${elapsed} ms)`);
  assert.match(await page.textContent('[data-testid="pay-result"]'), /202 Accepted/);
  await assertChargedOnce(page, key, { requests: rows.length });
}));

test('not confirmed, then "Try again" with the same key: still one charge', () => withPage(openDemo(), async (page) => {
  // Every attempt of this press gets 503: retryFetch gives up and returns the last 503.
  await configure(page, { fault: '503', count: 5, maxAttempts: 2, baseDelayMs: 20 });
  await pressPay(page, 'failure');
  const first = await entries(page);
  assert.deepEqual(first.map((r) => r.status), [503, 503]);
  assert.match(await page.textContent('[data-testid="pay-result-title"]'), /not confirmed/);
  assert.equal((await ledger()).count, 0, 'nothing was charged');
  assert.ok(await page.isVisible('[data-testid="pay-again"]'));

  await page.click('[data-testid="fault-none"]');
  await pressPay(page, 'success', 'pay-again');
  const second = await entries(page);
  assert.equal(second.length, 1);
  assert.equal(second[0].key, first[0].key, 'the same key as the press that was not confirmed');
  await assertChargedOnce(page, first[0].key, { requests: 3 });
}));

test('not confirmed, then an error before anything is sent: "Try again" stays, and its key still pays once', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: '503', count: 5, maxAttempts: 2, baseDelayMs: 20 });
  await pressPay(page, 'failure');
  const [first] = await entries(page);
  // The next press fails before retryFetch sends anything (the demo's fault setting gets an
  // answer it cannot read).
  await page.route('**/api/faults', (route) => route.fulfill({ status: 200, contentType: 'application/json', body: 'not json' }));
  await pressPay(page, 'error', 'pay-again');
  assert.ok(await page.isVisible('[data-testid="pay-again"]'), 'the order not confirmed can still be tried again');
  await page.unroute('**/api/faults');
  await page.click('[data-testid="fault-none"]');
  await pressPay(page, 'success', 'pay-again');
  const [again] = await entries(page);
  assert.equal(again.key, first.key, 'the key of the press that was not confirmed');
  await assertChargedOnce(page, first.key, { requests: 3 });
}));

test('every answer lost: "not confirmed" although charged once; the same key later gets that charge', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: 'drop', count: 5, maxAttempts: 3, baseDelayMs: 20 });
  await pressPay(page, 'failure');
  const first = await entries(page);
  assert.deepEqual(first.map((r) => r.reason), ['network', 'network', undefined]);
  assert.match(await page.textContent('[data-testid="pay-result-title"]'), /not confirmed/, 'never "paid" without an answer');
  const key = first[0].key;
  const view = await ledger();
  assert.equal(view.count, 1, 'the first attempt was charged; the retries were answered from the store');
  assert.equal(view.charges[0].key, key);

  await page.click('[data-testid="fault-none"]');
  await pressPay(page, 'success', 'pay-again');
  const second = await entries(page);
  assert.deepEqual(second.map((r) => [r.key, r.status, r.replayed]), [[key, 201, true]]);
  const charge = await assertChargedOnce(page, key, { requests: 4 });
  assert.equal(charge.id, view.charges[0].id);
}));

test('not confirmed although charged, then the main Pay button: the same order is paid with the same key, charged once', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: 'drop', count: 5, maxAttempts: 2, baseDelayMs: 20 });
  await pressPay(page, 'failure');
  const first = await entries(page);
  const key = first[0].key;
  assert.equal((await ledger()).count, 1, 'the first attempt was charged');

  await page.click('[data-testid="fault-none"]');
  await pressPay(page, 'success');
  const second = await entries(page);
  assert.deepEqual(second.map((r) => [r.key, r.status, r.replayed]), [[key, 201, true]], 'not a new key, not a new charge');
  await assertChargedOnce(page, key, { requests: 3 });
  assert.equal((await ledger()).count, 1);
}));

test('not confirmed although charged, then a reload and Pay: the same order is paid with the same key, charged once', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: 'drop', count: 5, maxAttempts: 2, baseDelayMs: 20 });
  await pressPay(page, 'failure');
  const key = (await entries(page))[0].key;
  assert.equal((await ledger()).count, 1, 'the first attempt was charged');

  await reload(page);
  await page.waitForSelector('[data-testid="pay-again"]:not([hidden])');
  await configure(page, { fault: 'none' });
  await pressPay(page, 'success');
  const second = await entries(page);
  assert.deepEqual(second.map((r) => [r.key, r.status, r.replayed]), [[key, 201, true]], 'not a new key, not a new charge');
  assert.equal((await ledger()).count, 1);
  // Confirmed: the next order is a new payment, with a new key, after a reload too.
  await reload(page);
  assert.equal(await page.isHidden('[data-testid="pay-again"]'), true);
  await pressPay(page, 'success');
  const third = await entries(page);
  assert.notEqual(third[0].key, key);
  assert.equal((await ledger()).count, 2);
}));

test('an order not confirmed keeps its key while other orders are paid, across a reload: paid again, it is charged once', () => withPage(openDemo(), async (page) => {
  await configure(page, { fault: 'drop', count: 5, maxAttempts: 2, baseDelayMs: 20 });
  const amount = await page.inputValue('[data-testid="pay-amount"]');
  await pressPay(page, 'failure');
  const key = (await entries(page))[0].key;
  assert.equal((await ledger()).count, 1, 'the first attempt was charged');

  await reload(page);
  await configure(page, { fault: 'none' });
  await page.fill('[data-testid="pay-amount"]', '50.00');
  await pressPay(page, 'success');
  const other = (await entries(page))[0].key;
  assert.notEqual(other, key, 'another order, another key');

  await page.fill('[data-testid="pay-amount"]', amount);
  await pressPay(page, 'success');
  const again = await entries(page);
  assert.deepEqual(again.map((r) => [r.key, r.status, r.replayed]), [[key, 201, true]], 'the first order with its own key');
  const view = await ledger();
  assert.equal(view.count, 2, 'each order charged once');
  assert.deepEqual(view.duplicates, []);
}));

test('screenshot: a few payments through faults, every one charged once', () => withPage(openDemo({ width: 1360, height: 900 }), async (page) => {
  await page.fill('[data-testid="pay-card"]', '4242424242424242');
  assert.equal(await page.inputValue('[data-testid="pay-card"]'), '4242 4242 4242 4242');
  await configure(page, { fault: '503', count: 2, baseDelayMs: 150 });
  await page.fill('[data-testid="pay-amount"]', '18.50');
  await pressPay(page);
  await configure(page, { fault: '429', count: 1, baseDelayMs: 150 });
  await page.fill('[data-testid="pay-amount"]', '7.25');
  await pressPay(page);
  await configure(page, { fault: 'drop', count: 1, baseDelayMs: 300 });
  await page.fill('[data-testid="pay-amount"]', '42.00');
  await pressPay(page);

  const view = await ledger();
  assert.equal(view.count, 3);
  assert.deepEqual(view.duplicates, []);
  assert.deepEqual(view.charges.map((c) => c.amount), [1850, 725, 4200]);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="ledger-row"]').length === 3);
  assert.equal(await page.textContent('[data-testid="ledger-total"]'), '€67.75');

  await saveScreenshot(page, 'demo.png');
}));
