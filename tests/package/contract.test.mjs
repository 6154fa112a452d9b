// Package-level contract tests, each in a child `node` whose working folder has
// node_modules/retry-fetch -> pkg/, so the package resolves through its `exports` map as an
// installed one does, and every child starts with fresh module state:
// - the ES module and the CommonJS builds loaded together refuse each other's guards;
// - `retry-fetch/manual`: a call before init() says to call init(); a failed init() is not
//   cached, so a later init(the .wasm bytes) works.
// The fault-injecting server runs in this process.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startFaultServer } from '../support/fault-server.mjs';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PKG = join(ROOT, 'pkg');
let dir, fault;
let n = 0;
const seq = (steps) => {
  const id = `package-contract-${++n}`;
  return { url: fault.seq(id, steps), log: () => fault.log(id) };
};

before(async () => {
  assert.ok(existsSync(join(PKG, 'package.json')), "pkg/ is not built: run 'make pkg'");
  dir = mkdtempSync(join(tmpdir(), 'retry-fetch-contract-'));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(PKG, join(dir, 'node_modules', 'retry-fetch'), 'dir');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
  fault = await startFaultServer();
});

after(async () => {
  await fault?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Async: the fault server runs in this process and must keep answering while the child runs.
const run = promisify(execFile);
/** Run `source` as an ES module in a child node; it prints one JSON line, returned parsed. */
async function child(source) {
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', source], { cwd: dir, encoding: 'utf8', timeout: 30_000 });
  const lines = stdout.trim().split('\n');
  return JSON.parse(lines[lines.length - 1]);
}

// Shared by the children: load both builds, and settle a call into something printable.
const prelude = `
  import { createRequire } from 'node:module';
  import * as esm from 'retry-fetch';
  const cjs = createRequire(process.cwd() + '/consumer.cjs')('retry-fetch');
  const settle = (p) => Promise.resolve().then(() => p).then(
    (res) => ({ status: res.status }),
    (e) => ({ name: e?.name, message: String(e?.message), retryError: e?.name === 'RetryError' }),
  );
`;

test('ESM and CommonJS loaded together: two instances, each works with its own guards', async () => {
  const a = seq('503,200');
  const b = seq('503,200');
  const out = await child(`${prelude}
    // Guards made in both instances first, so their internal ids collide.
    const guards = { esm: [new esm.RetryBudget({ refillPerSecond: 0 }), new esm.CircuitBreaker()], cjs: [new cjs.RetryBudget({ refillPerSecond: 0 }), new cjs.CircuitBreaker()] };
    const opts = { baseDelayMs: 5, jitter: 'none' };
    const viaEsm = await settle(esm.retryFetch(${JSON.stringify(a.url)}, undefined, { ...opts, budget: guards.esm[0], breaker: guards.esm[1] }));
    const viaCjs = await settle(cjs.retryFetch(${JSON.stringify(b.url)}, undefined, { ...opts, budget: guards.cjs[0], breaker: guards.cjs[1] }));
    console.log(JSON.stringify({ two: esm.retryFetch !== cjs.retryFetch && esm.CircuitBreaker !== cjs.CircuitBreaker, viaEsm, viaCjs,
      esmTokens: guards.esm[0].tokens(${JSON.stringify(a.url)}), cjsTokens: guards.cjs[0].tokens(${JSON.stringify(b.url)}) }));`);
  assert.equal(out.two, true, 'the ESM and CommonJS entries are separate instances');
  assert.deepEqual(out.viaEsm, { status: 200 });
  assert.deepEqual(out.viaCjs, { status: 200 });
  // one failure (-1) and one success (+0.1) on each instance's own budget
  assert.equal(out.esmTokens, 9.1);
  assert.equal(out.cjsTokens, 9.1);
  assert.equal(a.log().length, 2);
  assert.equal(b.log().length, 2);
});

test('an ESM CircuitBreaker given to the CommonJS retryFetch is a TypeError, and nothing is sent', async () => {
  const s = seq('503');
  const out = await child(`${prelude}
    const own = [new cjs.CircuitBreaker({ failureThreshold: 1 }), new cjs.CircuitBreaker({ failureThreshold: 1 })];
    const foreign = new esm.CircuitBreaker({ failureThreshold: 1, openMs: 60000 });
    const result = await settle(cjs.retryFetch(${JSON.stringify(s.url)}, undefined, { baseDelayMs: 5, maxAttempts: 1, breaker: foreign }));
    console.log(JSON.stringify({ result, foreign: foreign.state(${JSON.stringify(s.url)}), own: own.map((b) => b.state(${JSON.stringify(s.url)})) }));`);
  assert.equal(out.result.name, 'TypeError', `got ${JSON.stringify(out.result)}`);
  assert.equal(s.log().length, 0, 'nothing was sent');
  assert.equal(out.foreign, 'closed');
  assert.deepEqual(out.own, ['closed', 'closed'], "no breaker of the CommonJS instance was driven");
});

test('a CommonJS RetryBudget given to the ESM retryFetch is a TypeError, and nothing is sent', async () => {
  const s = seq('503');
  const out = await child(`${prelude}
    const own = [new esm.RetryBudget(), new esm.RetryBudget()];
    const foreign = new cjs.RetryBudget();
    const result = await settle(esm.retryFetch(${JSON.stringify(s.url)}, undefined, { baseDelayMs: 5, maxAttempts: 2, budget: foreign }));
    console.log(JSON.stringify({ result, foreign: foreign.tokens(${JSON.stringify(s.url)}), own: own.map((b) => b.tokens(${JSON.stringify(s.url)})) }));`);
  assert.equal(out.result.name, 'TypeError', `got ${JSON.stringify(out.result)}`);
  assert.equal(s.log().length, 0, 'nothing was sent');
  assert.equal(out.foreign, 10);
  assert.deepEqual(out.own, [10, 10], 'no budget of the ESM instance was drawn on');
});

test('retry-fetch/manual: a call before init() is an Error that says to call init(), and sends nothing', async () => {
  const s = seq('200');
  const out = await child(`
    import * as manual from 'retry-fetch/manual';
    let result;
    try {
      const res = await manual.retryFetch(${JSON.stringify(s.url)});
      result = { status: res.status };
    } catch (e) {
      result = { isError: e instanceof Error, name: e?.name, message: String(e?.message) };
    }
    console.log(JSON.stringify(result));`);
  assert.equal(out.isError, true, `got ${JSON.stringify(out)}`);
  assert.match(out.message, /init\(\)/, 'the message says to call init()');
  assert.equal(s.log().length, 0);
});

test('retry-fetch/manual: a failed init() is not cached; init(the .wasm bytes) then works', async () => {
  const s = seq('503,200');
  const out = await child(`
    import { readFileSync } from 'node:fs';
    import { createRequire } from 'node:module';
    import * as manual from 'retry-fetch/manual';
    const wasm = createRequire(process.cwd() + '/consumer.cjs').resolve('retry-fetch/retry_fetch_bg.wasm');
    const out = {};
    try {
      await manual.init(new Uint8Array([0, 1, 2]));
      out.bad = 'resolved';
    } catch (e) {
      out.bad = 'rejected';
    }
    try {
      // A valid module, but not this package's: refused, and not kept as the instance either.
      await manual.init(new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]));
      out.other = 'resolved';
    } catch (e) {
      out.other = 'rejected: ' + e?.name;
    }
    try {
      await manual.init(readFileSync(wasm));
      out.good = 'resolved';
      const res = await manual.retryFetch(${JSON.stringify(s.url)}, undefined, { baseDelayMs: 5, jitter: 'none' });
      out.status = res.status;
    } catch (e) {
      out.good = 'rejected: ' + String(e?.message);
    }
    console.log(JSON.stringify(out));`);
  assert.equal(out.bad, 'rejected', 'init() with bytes that are not a module rejects');
  assert.equal(out.other, 'rejected: TypeError', 'init() with another module rejects');
  assert.equal(out.good, 'resolved', 'a later init() with the real bytes succeeds');
  assert.equal(out.status, 200);
  assert.equal(s.log().length, 2, 'retryFetch then works (503, then 200)');
});

test('retry-fetch/manual and the main entry used together in Node: one instance, and what either made keeps working', async () => {
  // init() is started, then the main entry instantiates the wasm synchronously on first use
  // (a guard, a client) before init() settles: init() must keep that instance, not replace it
  // (every guard and client made on a replaced instance would read freed memory).
  const a = seq('503,200');
  const b = seq('503,200');
  const out = await child(`
    import { readFileSync } from 'node:fs';
    import { createRequire } from 'node:module';
    import * as main from 'retry-fetch';
    import * as manual from 'retry-fetch/manual';
    const wasm = createRequire(process.cwd() + '/consumer.cjs').resolve('retry-fetch/retry_fetch_bg.wasm');
    const settle = (p) => Promise.resolve().then(() => p).then((res) => res.status, (e) => e?.name + ': ' + e?.message);
    const loading = manual.init(readFileSync(wasm));
    const budget = new main.RetryBudget({ maxTokens: 7 });
    const client = main.createRetryFetch({ maxAttempts: 2, baseDelayMs: 1 });
    await loading;
    const out = {};
    try { out.tokens = budget.tokens(${JSON.stringify(a.url)}); } catch (e) { out.tokens = e?.name + ': ' + e?.message; }
    out.client = await settle(client(${JSON.stringify(a.url)}));
    // One instance: a guard of the main entry is one of manual's too.
    out.shared = await settle(manual.retryFetch(${JSON.stringify(b.url)}, undefined, { baseDelayMs: 1, budget }));
    console.log(JSON.stringify(out));`);
  assert.equal(out.tokens, 7, JSON.stringify(out));
  assert.equal(out.client, 200, JSON.stringify(out));
  assert.equal(out.shared, 200, JSON.stringify(out));
  assert.equal(a.log().length, 2);
  assert.equal(b.log().length, 2);
});
