// When the Node entries load the wasm. The ES module entry (index.node.js) compiles and
// instantiates nothing at import: the first use of an export (a call, or `new` of a guard
// class) loads the .wasm, once, and that first use answers as it did when the import loaded
// it. The CommonJS entry (index.cjs) loads it at require, as before. Each case runs in a fresh
// process, with WebAssembly's compile and instantiate functions counted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { join } from 'node:path';

const PKG = fileURLToPath(new URL('../../pkg/', import.meta.url));
const NODE_ENTRY = pathToFileURL(join(PKG, 'index.node.js')).href;
const MANUAL_ENTRY = pathToFileURL(join(PKG, 'manual.js')).href;
const CJS_ENTRY = join(PKG, 'index.cjs');

/** Counts every way of compiling or instantiating a module: `counts()` -> { compiled, instantiated }. */
const COUNTING = `
  const wasmCounts = { compiled: 0, instantiated: 0 };
  globalThis.counts = () => ({ ...wasmCounts });
  const W = globalThis.WebAssembly;
  const { Module, Instance, compile, instantiate } = W;
  W.Module = new Proxy(Module, { construct(t, a, n) { wasmCounts.compiled += 1; return Reflect.construct(t, a, n); } });
  W.Instance = new Proxy(Instance, { construct(t, a, n) { wasmCounts.instantiated += 1; return Reflect.construct(t, a, n); } });
  W.compile = (...a) => { wasmCounts.compiled += 1; return compile(...a); };
  W.instantiate = (...a) => { wasmCounts.instantiated += 1; return instantiate(...a); };
  // A URL nothing listens on (a port just freed): a network error on every attempt. fetch
  // (undici) compiles a wasm of its own on its first connection: count before it.
  globalThis.refusedUrl = async () => {
    const { createServer } = await import('node:net');
    const server = createServer();
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address();
    await new Promise((resolve) => server.close(resolve));
    return 'http://127.0.0.1:' + port + '/';
  };
`;

const run = promisify(execFile);
/** Runs `code` (after COUNTING) in a fresh process; its last stdout line, parsed as JSON. */
async function child(code, { module = true } = {}) {
  const args = module ? ['--input-type=module', '-e', COUNTING + code] : ['-e', COUNTING + code];
  const { stdout } = await run(process.execPath, args, { encoding: 'utf8', timeout: 30_000 });
  return JSON.parse(stdout.trim().split('\n').pop());
}

test('import of the Node ES module entry compiles and instantiates no wasm', async () => {
  const out = await child(`
    const m = await import(${JSON.stringify(NODE_ENTRY)});
    console.log(JSON.stringify({ counts: counts(), types: Object.keys(m).sort().map((k) => k + ':' + typeof m[k]) }));`);
  assert.deepEqual(out.counts, { compiled: 0, instantiated: 0 });
  assert.deepEqual(out.types, [
    'AdaptiveThrottle:function', 'CircuitBreaker:function', 'CircuitOpenError:function', 'RetryBudget:function',
    'RetryError:function', 'backoffDelays:function', 'createRetryFetch:function', 'isCircuitOpenError:function',
    'isRetryError:function', 'retryFetch:function',
  ]);
});

test('the first call loads the wasm once and answers as usual; later calls reuse it', async () => {
  const out = await child(`
    const { backoffDelays, isRetryError, retryFetch, RetryError } = await import(${JSON.stringify(NODE_ENTRY)});
    const first = backoffDelays({ jitter: 'none' }, 3).join(',');
    const afterFirst = counts();
    const again = backoffDelays({ jitter: 'none', baseDelayMs: 10 }, 2).join(',');
    const end = counts();
    const err = await retryFetch(await refusedUrl(), undefined, { maxAttempts: 1 }).then(() => null, (e) => e);
    console.log(JSON.stringify({ first, again, afterFirst, end,
      error: [err instanceof RetryError, isRetryError(err), err?.name] }));`);
  assert.equal(out.first, '500,1000,2000');
  assert.equal(out.again, '10,20');
  assert.deepEqual(out.afterFirst, { compiled: 1, instantiated: 1 });
  assert.deepEqual(out.end, { compiled: 1, instantiated: 1 });
  assert.deepEqual(out.error, [true, true, 'RetryError']);
});

test('retryFetch as the first use: its promise, the error classes wired', async () => {
  const out = await child(`
    const { retryFetch, RetryError, CircuitOpenError } = await import(${JSON.stringify(NODE_ENTRY)});
    const url = await refusedUrl();
    const before = counts();
    const p = retryFetch(url, undefined, { maxAttempts: 1 });
    const err = await p.then(() => null, (e) => e);
    console.log(JSON.stringify({ before, promise: p instanceof Promise, retryError: err instanceof RetryError,
      circuit: err instanceof CircuitOpenError, reason: err?.reason, attempts: err?.attempts?.length }));`);
  assert.deepEqual(out, {
    before: { compiled: 0, instantiated: 0 }, promise: true, retryError: true, circuit: false, reason: 'attempts', attempts: 1,
  });
});

test('new of a guard class as the first use; the exported classes are the glue\'s (instanceof, subclasses, invalid options)', async () => {
  const out = await child(`
    const m = await import(${JSON.stringify(NODE_ENTRY)});
    const glue = await import(new URL('./retry_fetch.js', ${JSON.stringify(NODE_ENTRY)}).href);
    const before = counts();
    const budget = new m.RetryBudget();
    class MyBreaker extends m.CircuitBreaker {}
    const breaker = new MyBreaker();
    const throttle = new m.AdaptiveThrottle();
    let invalid;
    try { new m.RetryBudget({ ratio: 'lots' }); } catch (e) { invalid = e.constructor.name; }
    console.log(JSON.stringify({ before, after: counts(),
      instances: [budget instanceof m.RetryBudget, budget instanceof glue.RetryBudget, breaker instanceof m.CircuitBreaker,
        breaker instanceof MyBreaker, throttle instanceof m.AdaptiveThrottle],
      prototypes: m.RetryBudget.prototype === glue.RetryBudget.prototype, names: [m.RetryBudget.name, m.CircuitBreaker.name],
      invalid }));`);
  assert.deepEqual(out.before, { compiled: 0, instantiated: 0 });
  assert.deepEqual(out.after, { compiled: 1, instantiated: 1 });
  assert.deepEqual(out.instances, [true, true, true, true, true]);
  assert.equal(out.prototypes, true);
  assert.deepEqual(out.names, ['RetryBudget', 'CircuitBreaker']);
  assert.equal(out.invalid, 'TypeError');
});

test('the manual entry and the Node entry in one process share one instance, in either order', async () => {
  for (const manualFirst of [true, false]) {
    const out = await child(`
      const manual = await import(${JSON.stringify(MANUAL_ENTRY)});
      const node = await import(${JSON.stringify(NODE_ENTRY)});
      const { readFileSync } = await import('node:fs');
      const wasm = readFileSync(new URL('./retry_fetch_bg.wasm', ${JSON.stringify(NODE_ENTRY)}));
      const r = [];
      const useManual = async () => { await manual.init(wasm); r.push(manual.backoffDelays({ jitter: 'none' }, 1)[0]); };
      const useNode = () => r.push(node.backoffDelays({ jitter: 'none' }, 1)[0]);
      await (${manualFirst} ? useManual() : useNode());
      const afterFirst = counts();
      await (${manualFirst} ? useNode() : useManual());
      const afterSecond = counts();
      const err = await node.retryFetch(await refusedUrl(), undefined, { maxAttempts: 1 }).then(() => null, (e) => e);
      console.log(JSON.stringify({ r, same: JSON.stringify(afterFirst) === JSON.stringify(afterSecond),
        retryError: [err instanceof node.RetryError, err instanceof manual.RetryError] }));`);
    assert.deepEqual(out, { r: [500, 500], same: true, retryError: [true, true] }, `manual first: ${manualFirst}`);
  }
});

test('retry-fetch/manual: init() from a URL that cannot be fetched names it (the error was fetch\'s bare one)', async () => {
  const out = await child(`
    const manual = await import(${JSON.stringify(MANUAL_ENTRY)});
    const url = await refusedUrl();
    const err = await manual.init(url).then(() => null, (e) => e);
    console.log(JSON.stringify({ message: err?.message.replace(url, '<url>'), cause: err?.cause?.name }));`);
  assert.match(out.message, /^retry-fetch: the \.wasm could not be loaded: fetching <url> failed \(fetch failed\)$/);
  assert.equal(out.cause, 'TypeError');
});

test('without process.getBuiltinModule (Node before 20.16) the entry imports node:fs and works the same', async () => {
  const out = await child(`
    delete process.getBuiltinModule;
    const { backoffDelays } = await import(${JSON.stringify(NODE_ENTRY)});
    const before = counts();
    console.log(JSON.stringify({ before, delays: backoffDelays({ jitter: 'none' }, 2), after: counts() }));`);
  assert.deepEqual(out, { before: { compiled: 0, instantiated: 0 }, delays: [500, 1000], after: { compiled: 1, instantiated: 1 } });
});

test('the CommonJS entry loads the wasm at require and works as before', async () => {
  const out = await child(`
    const m = require(${JSON.stringify(CJS_ENTRY)});
    const atRequire = counts();
    const delays = m.backoffDelays({ jitter: 'none' }, 2);
    const budget = new m.RetryBudget() instanceof m.RetryBudget;
    const end = counts();
    refusedUrl().then((url) => m.retryFetch(url, undefined, { maxAttempts: 1 })).then(() => null, (e) => e).then((err) => {
      console.log(JSON.stringify({ atRequire, delays, budget, error: [err instanceof m.RetryError, m.isRetryError(err)], end }));
    });`, { module: false });
  assert.deepEqual(out, {
    atRequire: { compiled: 1, instantiated: 1 }, delays: [500, 1000], budget: true, error: [true, true],
    end: { compiled: 1, instantiated: 1 },
  });
});

test('retry-fetch/manual in a classic-script bundle (no import.meta.url): init() without a URL says to pass one', async (t) => {
  let esbuild;
  try {
    esbuild = await import('esbuild');
  } catch {
    t.skip('esbuild is not installed');
    return;
  }
  // An iife bundle, as esbuild makes for a <script> without type="module": import.meta is {}.
  const { outputFiles } = await esbuild.build({
    stdin: {
      contents: `import { init, retryFetch } from ${JSON.stringify(MANUAL_ENTRY.replace('file://', ''))};
        globalThis.result = init().then(() => 'loaded', (e) => e.name + ': ' + e.message);
        globalThis.retryFetch = retryFetch;`,
      resolveDir: PKG,
    },
    bundle: true,
    format: 'iife',
    write: false,
    logLevel: 'silent',
  });
  const vm = await import('node:vm');
  const context = vm.createContext({ URL, WebAssembly, fetch, Response, Request, TextDecoder, TextEncoder, console });
  vm.runInContext(outputFiles[0].text, context);
  assert.equal(
    await context.result,
    "TypeError: retry-fetch/manual: this bundle has no import.meta.url to find retry_fetch_bg.wasm by: pass the .wasm's URL (or its bytes) to init()",
  );
});

test('a .wasm URL a bundler rewrote (not file:) is a TypeError saying to keep the package external, not fs\'s type error', async () => {
  const { wasmFile } = await import(pathToFileURL(join(PKG, 'wasm-file.js')).href);
  const real = new URL('./retry_fetch_bg.wasm', pathToFileURL(PKG));
  assert.equal(wasmFile(real), real);
  // What webpack leaves in a Next.js server bundle: a URL-like object of its own asset path.
  const rewritten = { href: '/_next/static/media/retry_fetch_bg.0123abcd.wasm', protocol: '' };
  assert.throws(() => wasmFile(rewritten), { name: 'TypeError', message: /"\/_next\/static\/media\/retry_fetch_bg\.0123abcd\.wasm", not a file: a bundler rewrote it; keep retry-fetch external .*serverExternalPackages: \['retry-fetch'\]/ });
  assert.throws(() => wasmFile(new URL('https://cdn.example/retry_fetch_bg.wasm')), { name: 'TypeError', message: /not a file/ });
});
