// The demo (`make demo`, www/server.mjs) in headless Chromium, for the browser tests of its tabs
// (tests/browser/demo.test.mjs, tests/browser/payments.test.mjs): the server in-process and one
// Chromium per test file, pages opened with their errors collected and checked, the attempt
// timelines read as plain data, and screenshots saved to test-results/.
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { startDemoServer } from '../../www/server.mjs';
import { launchChromium } from './chromium.mjs';

const RESULTS = fileURLToPath(new URL('../../test-results/', import.meta.url));

/**
 * Starts the demo server (on a free port) and Chromium before the file's tests and closes both
 * after them. Returns `{ server, browser }`, filled in once `before` has run.
 */
export function useDemo() {
  const demo = { server: undefined, browser: undefined };
  before(async () => {
    demo.server = await startDemoServer({ port: 0 });
    assert.ok(demo.server.pkgBuilt, 'pkg/ is not built: run `make pkg`');
    demo.browser = await launchChromium();
  });
  after(async () => {
    await demo.browser?.close();
    await demo.server?.close();
  });
  return demo;
}

/**
 * A new page at `server.url + hash`, with its errors collected; resolves with `{ page, errors }`
 * once the page is ready (the wasm is loaded). `failingPath` is the endpoint the page's faults
 * make fail on purpose: what Chromium reports for the answers there (a console "Failed to load
 * resource" for a 503, a 429 or a dropped connection; a failed request when retryFetch cancels
 * or aborts an attempt, ERR_ABORTED) is expected. Any other error is a bug.
 */
export async function openDemoPage({ server, browser }, { failingPath, hash = '', width = 1280, height = 900 }) {
  const page = await browser.newPage();
  await page.setViewportSize({ width, height });
  const errors = [];
  const injected = (url) => new URL(url, server.url).pathname === failingPath;
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (m.text().startsWith('Failed to load resource') && injected(m.location().url)) return;
    errors.push(`console.error: ${m.text()} (${m.location().url})`);
  });
  page.on('requestfailed', (r) => {
    if (!injected(r.url())) errors.push(`requestfailed: ${r.url()} ${r.failure()?.errorText}`);
  });
  await page.goto(server.url + hash, { waitUntil: 'load' });
  await page.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 15_000 });
  return { page, errors };
}

/**
 * Runs `fn(page)` on the page `opening` resolves to (openDemoPage's `{ page, errors }`), then
 * checks that the page had no errors; closes the page either way.
 */
export async function withPage(opening, fn) {
  const { page, errors } = await opening;
  try {
    await fn(page);
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
}

/**
 * The entries of the timeline `[data-testid="<timeline>"]` as plain data. `replayed: true` adds
 * each entry's data-replayed flag (the payments timeline marks the answers replayed by the server).
 */
export function timelineEntries(page, timeline, { replayed = false } = {}) {
  return page.$$eval(`[data-testid="${timeline}"] [data-testid="timeline-entry"]`, (lis, withReplayed) =>
    lis.map((li) => ({
      attempt: Number(li.dataset.attempt),
      kind: li.dataset.kind,
      status: li.dataset.status === undefined ? undefined : Number(li.dataset.status),
      reason: li.dataset.reason,
      delayMs: li.dataset.delayMs === undefined ? undefined : Number(li.dataset.delayMs),
      key: li.dataset.key,
      ...(withReplayed ? { replayed: li.dataset.replayed === 'true' } : {}),
      text: li.textContent,
    })), replayed);
}

/** Saves a full-page screenshot of `page`, scrolled to the top, as test-results/<name>. */
export async function saveScreenshot(page, name) {
  mkdirSync(RESULTS, { recursive: true });
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: `${RESULTS}${name}`, fullPage: true, animations: 'disabled' });
}
