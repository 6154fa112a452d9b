// The exactly-once payments demo (`make demo`, the Payments tab) in headless Chromium: the
// server in-process, real presses of Pay through each fault the page can switch on, the live
// attempt timeline, and the server's ledger read over HTTP by the test (one payment, one
// charge). Saves a screenshot of the demo to test-results/demo.png.
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startDemoServer } from '../../www/server.mjs';
import { launchChromium } from '../support/chromium.mjs';

const RESULTS = fileURLToPath(new URL('../../test-results/', import.meta.url));
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let server;
let browser;

before(async () => {
  server = await startDemoServer({ port: 0 });
  assert.ok(server.pkgBuilt, 'pkg/ is not built: run `make pkg`');
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Every test starts from an empty ledger and a healthy network. */
beforeEach(async () => {
  await api('POST', '/api/ledger/reset');
  await api('POST', '/api/faults', { mode: 'none', count: 1 });
});

async function api(method, path, body, headers = {}) {
  const res = await fetch(server.url + path, {
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

/** A new page at the demo, with its errors collected; resolves once the page is ready. */
async function openDemo({ width = 1280, height = 900 } = {}) {
  const page = await browser.newPage();
  await page.setViewportSize({ width, height });
  const errors = [];
  // The payments API fails on purpose when a fault is on: Chromium logs "Failed to load
  // resource" for those answers (503, 429, dropped connections), and retryFetch aborts the
  // attempts that time out (ERR_ABORTED). Those are expected; any other error is a bug.
  const injected = (url) => new URL(url, server.url).pathname === '/api/payments';
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (m.text().startsWith('Failed to load resource') && injected(m.location().url)) return;
    errors.push(`console.error: ${m.text()} (${m.location().url})`);
  });
  page.on('requestfailed', (r) => {
    if (!injected(r.url())) errors.push(`requestfailed: ${r.url()} ${r.failure()?.errorText}`);
  });
  await page.goto(server.url, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 15_000 });
  return { page, errors };
}

/** Sets the network conditions and a fast retry policy on the page. */
async function configure(page, { fault = 'none', count = 1, baseDelayMs = 50, maxAttempts = 5, timeoutMs = 1000, jitter } = {}) {
  await page.click(`[data-testid="fault-${fault}"]`);
  if (fault !== 'none') await page.fill('[data-testid="fault-count"]', String(count));
  if (jitter) await page.selectOption('[data-testid="pay-jitter"]', jitter);
  await page.fill('[data-testid="pay-base-delay"]', String(baseDelayMs));
  await page.fill('[data-testid="pay-max-attempts"]', String(maxAttempts));
  await page.fill('[data-testid="pay-timeout"]', String(timeoutMs));
}

/** Presses Pay and waits for the receipt to settle. */
async function pressPay(page, outcome = 'success') {
  await page.click('[data-testid="pay"]');
  await page.waitForSelector(`[data-testid="pay-result"][data-outcome="${outcome}"]`, { timeout: 20_000 });
}

/** The payment timeline's entries as plain data. */
function entries(page) {
  return page.$$eval('[data-testid="pay-timeline"] [data-testid="timeline-entry"]', (lis) =>
    lis.map((li) => ({
      attempt: Number(li.dataset.attempt),
      kind: li.dataset.kind,
      status: li.dataset.status === undefined ? undefined : Number(li.dataset.status),
      reason: li.dataset.reason,
      delayMs: li.dataset.delayMs === undefined ? undefined : Number(li.dataset.delayMs),
      key: li.dataset.key,
      replayed: li.dataset.replayed === 'true',
      text: li.textContent,
    })));
}

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

test('charge, then drop the connection: one press of Pay, exactly one charge', async () => {
  const { page, errors } = await openDemo();
  try {
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
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test('503 storm: the timeline shows the retries, then the payment succeeds once', async () => {
  const { page, errors } = await openDemo();
  try {
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
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test('429 with Retry-After: 1: the client waits the second the server asked for', async () => {
  const { page, errors } = await openDemo();
  try {
    await configure(page, { fault: '429', count: 1 });
    await pressPay(page);
    const rows = await entries(page);
    assert.deepEqual(rows.map((r) => [r.attempt, r.kind, r.status]), [[1, 'retry', 429], [2, 'final', 201]]);
    assert.equal(rows[0].delayMs, 1000, 'Retry-After replaces the computed backoff');
    assert.match(rows[0].text, /Retry-After: 1/);
    await assertChargedOnce(page, rows[0].key, { requests: 2 });
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test('slow answers: the attempt times out, the retry carries the same key and is replayed', async () => {
  const { page, errors } = await openDemo();
  try {
    await configure(page, { fault: 'slow', count: 1, timeoutMs: 400 });
    await pressPay(page);
    const rows = await entries(page);
    assert.deepEqual(rows.map((r) => [r.attempt, r.kind, r.reason]), [[1, 'retry', 'timeout'], [2, 'final', undefined]], JSON.stringify(rows));
    assert.equal(rows[0].key, rows[1].key);
    assert.ok(rows[1].replayed, 'the charge of the timed-out attempt is replayed, not repeated');
    await assertChargedOnce(page, rows[0].key, { requests: 2 });
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test('not confirmed, then "Try again" with the same key: still one charge', async () => {
  const { page, errors } = await openDemo();
  try {
    // Every attempt of this press gets 503: retryFetch gives up and returns the last 503.
    await configure(page, { fault: '503', count: 5, maxAttempts: 2, baseDelayMs: 20 });
    await pressPay(page, 'failure');
    const first = await entries(page);
    assert.deepEqual(first.map((r) => r.status), [503, 503]);
    assert.match(await page.textContent('[data-testid="pay-result-title"]'), /not confirmed/);
    assert.equal((await ledger()).count, 0, 'nothing was charged');
    assert.ok(await page.isVisible('[data-testid="pay-again"]'));

    await page.click('[data-testid="fault-none"]');
    await page.click('[data-testid="pay-again"]');
    await page.waitForSelector('[data-testid="pay-result"][data-outcome="success"]', { timeout: 20_000 });
    const second = await entries(page);
    assert.equal(second.length, 1);
    assert.equal(second[0].key, first[0].key, 'the same key as the press that was not confirmed');
    await assertChargedOnce(page, first[0].key, { requests: 3 });
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test('every answer lost: "not confirmed" although charged once; the same key later gets that charge', async () => {
  const { page, errors } = await openDemo();
  try {
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
    await page.click('[data-testid="pay-again"]');
    await page.waitForSelector('[data-testid="pay-result"][data-outcome="success"]', { timeout: 20_000 });
    const second = await entries(page);
    assert.deepEqual(second.map((r) => [r.key, r.status, r.replayed]), [[key, 201, true]]);
    const charge = await assertChargedOnce(page, key, { requests: 4 });
    assert.equal(charge.id, view.charges[0].id);
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test('screenshot: a few payments through faults, every one charged once', async () => {
  const { page, errors } = await openDemo({ width: 1360, height: 900 });
  try {
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

    mkdirSync(RESULTS, { recursive: true });
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: `${RESULTS}demo.png`, fullPage: true, animations: 'disabled' });
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});
