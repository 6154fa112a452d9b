// The package as users get it: `npm pack` of pkg/, installed into a fresh folder, then used as
// a Node ES module, a Node CommonJS require, the server entry, a plain browser
// <script type="module"> (import map, no bundler), the manual entry in a page and in a
// module service worker, a Web Worker, a Vite production build and a Cloudflare Worker
// (bundled by wrangler, run in workerd).
// Each run does a real retry (503 then 200) against the fault-injecting server.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startFaultServer } from '../support/fault-server.mjs';
import { startStaticServer } from '../support/static-server.mjs';
import { launchChromium } from '../support/chromium.mjs';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
let dir, fault, browser, files;
let n = 0;
const target = () => fault.seq(`smoke-${++n}`, '503,200');

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'retry-fetch-smoke-'));
  execFileSync('npm', ['pack', '--silent', '--pack-destination', dir, join(ROOT, 'pkg')], { stdio: 'pipe' });
  const tarball = readdirSync(dir).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack made a tarball');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', join(dir, tarball)], { cwd: dir, stdio: 'pipe' });
  cpSync(join(ROOT, 'tests/package/app'), dir, { recursive: true });
  fault = await startFaultServer();
});

after(async () => {
  await browser?.close();
  await files?.close();
  await fault?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Async: the fault server runs in this process and must keep answering while the child runs.
const run = promisify(execFile);
const node = async (args) => (await run(process.execPath, args, { cwd: dir, encoding: 'utf8', timeout: 30_000 })).stdout.trim();

test('Node ES module import', async () => {
  const out = await node(['--input-type=module', '-e', `
    import { retryFetch, createRetryFetch, RetryBudget } from 'retry-fetch';
    const res = await retryFetch(${JSON.stringify(target())}, undefined, { baseDelayMs: 5 });
    console.log(res.status, typeof createRetryFetch, typeof RetryBudget);`]);
  assert.equal(out, '200 function function');
});

test('Node CommonJS require', async () => {
  const out = await node(['-e', `
    const { retryFetch, backoffDelays, CircuitBreaker } = require('retry-fetch');
    retryFetch(${JSON.stringify(target())}, undefined, { baseDelayMs: 5 })
      .then((res) => console.log(res.status, backoffDelays({ jitter: 'none' }, 2).join(','), typeof CircuitBreaker));`]);
  assert.equal(out, '200 500,1000 function');
});

test('the server entry imports in Node', async () => {
  const out = await node(['--input-type=module', '-e', `
    import * as server from 'retry-fetch/server';
    console.log(typeof server.idempotency, typeof server.MemoryStore);`]);
  assert.equal(out, 'function function');
});

test('the framework adapters import from the installed package (no framework needed to load them)', async () => {
  const out = await node(['--input-type=module', '-e', `
    const names = [];
    for (const entry of ['express', 'fastify', 'hono']) {
      const m = await import('retry-fetch/' + entry);
      names.push(entry + ':' + typeof m.idempotency);
    }
    console.log(names.join(' '));`]);
  assert.equal(out, 'express:function fastify:function hono:function');
});

async function page(path) {
  browser ??= await launchChromium();
  files ??= await startStaticServer({ root: dir });
  const p = await browser.newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(String(e)));
  await p.goto(`${files.url}/${path}?target=${encodeURIComponent(target())}`);
  await p.waitForFunction(() => document.body.dataset.status !== 'pending', null, { timeout: 15_000 });
  const status = await p.evaluate(() => document.body.dataset.status);
  await p.close();
  assert.deepEqual(errors, []);
  return status;
}

test('a plain browser <script type="module"> with no bundler', async () => {
  assert.equal(await page('plain.html'), '200');
});

test('the manual entry (no top-level await): init() then the API', async () => {
  assert.equal(await page('manual.html'), '200');
});

test('a module service worker, through the manual entry', async () => {
  assert.equal(await page('sw.html'), '200');
});

test('a Web Worker', async () => {
  assert.equal(await page('worker.html'), '200');
});

test('a Vite production build', async () => {
  await run(process.execPath, [join(ROOT, 'node_modules/vite/bin/vite.js'), 'build', '--base', './', '--logLevel', 'error'], { cwd: dir, timeout: 120_000 });
  assert.equal(await page('dist/index.html'), '200');
});

/** A port free now on 127.0.0.1 (workerd takes its listening address from its config). */
async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test('a Cloudflare Worker: bundled by wrangler, run in workerd', async () => {
  // wrangler bundles as for a deploy (its default rule makes the `.wasm` import a compiled
  // module), without an account.
  writeFileSync(join(dir, 'wrangler.json'), JSON.stringify({ name: 'retry-fetch-smoke', main: 'cf-worker.js', compatibility_date: '2024-09-23' }));
  const wrangler = join(ROOT, 'node_modules/wrangler/bin/wrangler.js');
  const env = { ...process.env, WRANGLER_SEND_METRICS: 'false', CI: '1', HOME: dir };
  await run(process.execPath, [wrangler, 'deploy', '--dry-run', '--outdir', 'cf-dist'], { cwd: dir, env, timeout: 120_000 });
  const out = readdirSync(join(dir, 'cf-dist'));
  const wasm = out.find((f) => f.endsWith('.wasm'));
  const script = out.find((f) => f.endsWith('.js'));
  assert.ok(wasm && script, `wrangler's bundle carries the .wasm as a module: ${out.join(', ')}`);
  assert.match(readFileSync(join(dir, 'cf-dist', script), 'utf8'), /index\.workerd\.js/, 'the bundle took the workerd entry');

  // workerd (the runtime wrangler itself runs), serving the bundle as Cloudflare would.
  const port = await freePort();
  writeFileSync(join(dir, 'cf.capnp'), `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .worker), (name = "internet", network = (allow = ["public", "private", "local"])) ],
  sockets = [ (name = "http", address = "127.0.0.1:${port}", http = (), service = "main") ],
);
const worker :Workerd.Worker = (
  modules = [ (name = "${script}", esModule = embed "cf-dist/${script}"), (name = "${wasm}", wasm = embed "cf-dist/${wasm}") ],
  compatibilityDate = "2024-09-23",
  globalOutbound = "internet",
);
`);
  const workerd = spawn(join(ROOT, 'node_modules/.bin/workerd'), ['serve', 'cf.capnp'], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  workerd.stderr.on('data', (d) => (stderr += d));
  try {
    const ask = async (query) => {
      for (let tries = 0; ; tries += 1) {
        try {
          return await (await fetch(`http://127.0.0.1:${port}/?${new URLSearchParams(query)}`)).json();
        } catch (error) {
          if (tries > 100 || workerd.exitCode !== null) throw new Error(`workerd did not answer: ${error}\n${stderr}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    };
    // A 503 then a 200: retried, the same key on both sends, the body sent again.
    assert.deepEqual(await ask({ target: fault.seq('cf-paid', '503,200') }), { status: 200 });
    const log = fault.log('cf-paid');
    assert.equal(log.length, 2);
    assert.match(log[0].headers['idempotency-key'], /^[0-9a-f-]{36}$/);
    assert.equal(log[1].headers['idempotency-key'], log[0].headers['idempotency-key']);
    assert.deepEqual(log.map((hit) => hit.body), ['pay 10', 'pay 10']);
    // Network errors until out of attempts: the package's RetryError, with each attempt's record.
    assert.deepEqual(await ask({ target: fault.seq('cf-down', 'reset'), attempts: 2 }), { error: 'RetryError', isRetryError: true, attempts: 2 });
  } finally {
    workerd.kill('SIGKILL');
  }
});
