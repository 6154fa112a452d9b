// The demo page (`make demo`) in headless Chromium: the server in-process, the page and the
// package served with the right types, the tabs, and the Playground tab (a real run against the
// flaky endpoint, the live timeline, the backoff chart, no page errors). The payments demo, the
// headline tab, is tested in payments.test.mjs (which saves test-results/demo.png); this file
// saves test-results/playground.png.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { useDemo, openDemoPage, withPage, timelineEntries, saveScreenshot } from '../support/demo-page.mjs';

const demo = useDemo();

/**
 * A new page at the demo (the Playground tab unless `hash` says otherwise), with its errors
 * collected; resolves once the wasm is loaded. The flaky endpoint fails on purpose: its
 * failures are expected, any other error is a bug.
 */
const openDemo = ({ width = 1280, height = 900, hash = '#playground' } = {}) =>
  openDemoPage(demo, { failingPath: '/api/flaky', hash, width, height });

/** Presses Send and waits for the run to succeed. */
async function pressSend(page) {
  await page.click('[data-testid="send"]');
  await page.waitForSelector('[data-testid="result"][data-outcome="success"]', { timeout: 15_000 });
}

/** The timeline entries as plain data. */
const entries = (page) => timelineEntries(page, 'timeline');

test('serves the page, the package with the right MIME types, and the flaky endpoint', async () => {
  const { server } = demo;
  const page = await fetch(server.url);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  const wasm = await fetch(`${server.url}/pkg/retry_fetch_bg.wasm`);
  assert.equal(wasm.status, 200);
  assert.equal(wasm.headers.get('content-type'), 'application/wasm');
  await wasm.arrayBuffer();
  const js = await fetch(`${server.url}/pkg/index.browser.js`);
  assert.match(js.headers.get('content-type'), /^text\/javascript/);
  await js.text();
  assert.equal((await fetch(`${server.url}/pkg/../www/server.mjs`)).status, 404);
  assert.equal((await fetch(`${server.url}/%2e%2e/Cargo.toml`)).status, 404);

  const url = `${server.url}/api/flaky?fail=2&mode=503&run=unit-${Date.now()}`;
  const statuses = [];
  for (let i = 0; i < 3; i++) {
    const r = await fetch(url);
    statuses.push(r.status);
    await r.text();
  }
  assert.deepEqual(statuses, [503, 503, 200]);

  const r429 = await fetch(`${server.url}/api/flaky?fail=1&mode=429&run=unit429-${Date.now()}`);
  assert.equal(r429.status, 429);
  assert.equal(r429.headers.get('retry-after'), '1');
  await r429.text();

  // Server-side modules are not served.
  for (const mod of ['server.mjs', 'payments-api.mjs']) assert.equal((await fetch(`${server.url}/${mod}`)).status, 404, mod);
});

test('the Payments tab is the default; the tabs switch by link and by hash', () => withPage(openDemo({ hash: '' }), async (page) => {
  assert.equal(await page.getAttribute('body', 'data-tab'), 'payments');
  assert.ok(await page.isVisible('[data-testid="pay"]'));
  assert.ok(!(await page.isVisible('[data-testid="send"]')));
  assert.equal(await page.getAttribute('[data-testid="tab-payments"]', 'aria-selected'), 'true');
  await page.click('[data-testid="tab-playground"]');
  await page.waitForSelector('[data-testid="send"]', { state: 'visible' });
  assert.ok(!(await page.isVisible('[data-testid="pay"]')));
  assert.equal(await page.getAttribute('[data-testid="tab-playground"]', 'aria-selected'), 'true');
  await page.goBack();
  await page.waitForSelector('[data-testid="pay"]', { state: 'visible' });
}));

test('503 twice, then 200: the timeline shows both retries and the final 200', () => withPage(openDemo(), async (page) => {
  // The backoff chart is drawn from backoffDelays before anything is sent.
  assert.ok((await page.$$('[data-testid="schedule-chart"] svg .bar')).length >= 1, 'the chart has bars');

  await page.click('[data-testid="mode-503"]');
  await page.fill('[data-testid="failures"]', '2');
  await page.selectOption('[data-testid="jitter"]', 'equal');
  await page.fill('[data-testid="max-attempts"]', '4');
  await page.fill('[data-testid="base-delay"]', '60');
  // maxAttempts 4 -> 3 waits in the schedule.
  assert.equal((await page.$$('[data-testid="schedule-chart"] svg .bar')).length, 3);
  assert.match(await page.textContent('[data-testid="code-preview"]'), /baseDelayMs: 60/);

  await pressSend(page);

  assert.equal(await page.getAttribute('[data-testid="result"]', 'data-status'), '200');
  const rows = await entries(page);
  assert.equal(rows.length, 3, JSON.stringify(rows));
  for (const [i, row] of rows.slice(0, 2).entries()) {
    assert.equal(row.attempt, i + 1);
    assert.equal(row.kind, 'retry');
    assert.equal(row.status, 503);
    assert.equal(row.reason, 'status');
    assert.ok(row.delayMs >= 0 && row.delayMs <= 60 * 2 ** i, `delay ${row.delayMs}`);
    assert.match(row.text, /503/);
    assert.match(row.text, new RegExp(`before attempt ${i + 2}`));
  }
  assert.deepEqual([rows[2].attempt, rows[2].kind, rows[2].status], [3, 'final', 200]);
  assert.match(rows[2].text, /200 OK/);
  assert.match(await page.textContent('[data-testid="response-body"]'), /"hit": 3/);
  // This run's two waits are plotted on the chart.
  assert.equal((await page.$$('[data-testid="schedule-chart"] .actual-dot')).length, 2);

  await saveScreenshot(page, 'playground.png');
}));

test('POST with connection resets: one idempotency key on every attempt, echoed by the server', () => withPage(openDemo(), async (page) => {
  await page.click('[data-testid="mode-reset"]');
  await page.click('[data-testid="target-post"]');
  await page.fill('[data-testid="failures"]', '2');
  await page.fill('[data-testid="base-delay"]', '20');
  await page.fill('[data-testid="max-attempts"]', '5');
  await pressSend(page);

  const rows = await entries(page);
  assert.deepEqual(rows.map((r) => [r.attempt, r.kind, r.reason]), [[1, 'retry', 'network'], [2, 'retry', 'network'], [3, 'final', undefined]]);
  const key = rows[0].key;
  assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.ok(rows.every((r) => r.key === key), 'the same key on every attempt');
  const body = JSON.parse(await page.textContent('[data-testid="response-body"]'));
  assert.equal(body.idempotencyKey, key);
  assert.equal(body.method, 'POST');
  assert.equal(body.hit, 3);
}));

test('slow mode with a per-attempt timeout: timeouts are retried', () => withPage(openDemo(), async (page) => {
  await page.click('[data-testid="mode-slow"]');
  await page.fill('[data-testid="failures"]', '1');
  await page.fill('[data-testid="timeout"]', '300');
  await page.fill('[data-testid="base-delay"]', '20');
  await pressSend(page);
  const rows = await entries(page);
  assert.deepEqual(rows.map((r) => [r.attempt, r.kind, r.reason]), [[1, 'retry', 'timeout'], [2, 'final', undefined]]);
}));
