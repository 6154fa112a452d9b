// The end-to-end scenarios of tests/e2e/scenarios.mjs and tests/e2e/contract.mjs, run in
// headless Chromium (Debian's, through playwright-core) with the browser entry of the built
// package. Every scenario gets an origin of its own (another port onto the fault server,
// tests/e2e/runner.mjs says why): the page keeps the client's per-origin state (the default
// retry budget) across scenarios.
import { test, before, after, beforeEach, afterEach } from 'node:test';
import { startFaultServer } from '../support/fault-server.mjs';
import { startStaticServer } from '../support/static-server.mjs';
import { launchChromium } from '../support/chromium.mjs';
import { scenarios as base } from '../e2e/scenarios.mjs';
import { scenarios as contract } from '../e2e/contract.mjs';

const scenarios = [...base, ...contract];

let fault, files, browser, page, origin;
const pageErrors = [];

before(async () => {
  fault = await startFaultServer();
  files = await startStaticServer();
  browser = await launchChromium();
  page = await browser.newPage();
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  await page.goto(`${files.url}/tests/browser/harness.html`);
  await page.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 15000 });
});

beforeEach(async () => {
  origin = await fault.origin();
});

afterEach(async () => {
  await origin?.close();
  origin = null;
});

after(async () => {
  await browser?.close();
  await files?.close();
  await fault?.close();
});

for (const scenario of scenarios) {
  test(`chromium: ${scenario.name}`, { skip: scenario.node ? 'Node only' : false }, async () => {
    const result = await page.evaluate(([name, url]) => window.runScenario(name, url), [scenario.name, origin.url]);
    if (!result.ok) throw new Error(result.message);
    if (pageErrors.length) throw new Error(`page errors: ${pageErrors.join('; ')}`);
  });
}

test('chromium: a page whose globals look like Node or Deno (an element id="Deno", a process shim) still lets the browser follow a POST\'s redirects', async () => {
  const shimmed = await browser.newPage();
  const errors = [];
  shimmed.on('pageerror', (e) => errors.push(String(e)));
  try {
    await shimmed.addInitScript(() => {
      window.process = { versions: { node: '20.11.1', electron: '30.0.0' }, env: {} };
      document.addEventListener('DOMContentLoaded', () => {
        const dino = document.createElement('div');
        dino.id = 'Deno';
        document.body.append(dino);
      });
    });
    await shimmed.goto(`${files.url}/tests/browser/harness.html`);
    await shimmed.waitForSelector('body[data-ready="true"]', { state: 'attached', timeout: 15000 });
    const result = await shimmed.evaluate(([name, url]) => window.runScenario(name, url), ['contract: a POST answered 307 or 308 reaches the target once, with its body, and succeeds', origin.url]);
    if (!result.ok) throw new Error(result.message);
    if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
  } finally {
    await shimmed.close();
  }
});
