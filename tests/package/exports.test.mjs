// The JavaScript entries export exactly the wasm's public exports (plus the error classes,
// which are JavaScript): an export added to the wasm but forgotten in an entry, or an entry
// that re-exports an internal helper, fails here. Internal exports are the ones the entries
// call to wire the wasm up (setErrorClasses, setDefaultStore, ...) and the glue's own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { join } from 'node:path';

const PKG = fileURLToPath(new URL('../../pkg/', import.meta.url));
const require = createRequire(import.meta.url);

/** Wiring between the entries and the wasm, and wasm-bindgen's loaders: never public. */
const INTERNAL = new Set([
  'default', 'initSync', '__wbg_init', 'setErrorClasses', 'freedGuardError',
  'setDefaultStore', 'setContextCapture', 'setInstance', 'unknownOptionError',
  'invalidOptionError', 'canonicalBody', 'describeValue', 'methodCanHaveBody', 'fingerprintsJson',
]);
const ERROR_CLASSES = ['RetryError', 'CircuitOpenError'];

const sorted = (names) => [...new Set(names)].sort();

/** The names an ES module's source exports (`export { a, b as c }`, `export function f`). */
function sourceExports(file) {
  const text = readFileSync(join(PKG, file), 'utf8');
  const names = [];
  for (const m of text.matchAll(/export\s*\{([^}]*)\}/g)) {
    for (const part of m[1].split(',')) {
      const name = part.trim().split(/\s+as\s+/).pop();
      if (name) names.push(name);
    }
  }
  for (const m of text.matchAll(/export\s+(?:async\s+)?(?:function|const|let|class)\s*\*?\s*([A-Za-z_$][\w$]*)/g)) names.push(m[1]);
  return names;
}

test('every client entry exports the wasm\'s public exports and the error classes, nothing else', async () => {
  const glue = await import(pathToFileURL(join(PKG, 'retry_fetch.js')).href);
  const expected = sorted([...Object.keys(glue).filter((n) => !INTERNAL.has(n)), ...ERROR_CLASSES]);
  assert.ok(expected.includes('retryFetch') && expected.includes('RetryBudget'), expected.join());
  const node = await import(pathToFileURL(join(PKG, 'index.node.js')).href);
  assert.deepEqual(sorted(Object.keys(node)), expected, 'index.node.js');
  assert.deepEqual(sorted(Object.keys(require(join(PKG, 'index.cjs')))), expected, 'index.cjs');
  // The browser entry awaits a fetch of the .wasm at load: read from its source.
  assert.deepEqual(sorted(sourceExports('index.browser.js')), expected, 'index.browser.js');
  // The Cloudflare Workers entry imports the .wasm as a module, which only a Workers bundler
  // resolves: read from its source too.
  assert.deepEqual(sorted(sourceExports('index.workerd.js')), expected, 'index.workerd.js');
  const manual = await import(pathToFileURL(join(PKG, 'manual.js')).href);
  assert.deepEqual(sorted(Object.keys(manual).filter((n) => n !== 'init')), expected, 'manual.js (besides init)');
});

test('the server entry exports the server wasm\'s public exports', async () => {
  const glue = await import(pathToFileURL(join(PKG, 'retry_fetch_server.js')).href);
  const wasmPublic = Object.keys(glue).filter((n) => !INTERNAL.has(n));
  assert.deepEqual(sorted(wasmPublic), ['idempotency', 'idempotent']);
  const server = await import(pathToFileURL(join(PKG, 'server.js')).href);
  for (const name of wasmPublic) assert.equal(typeof server[name], 'function', `server.js exports ${name}`);
  // What server.js adds is JavaScript: the stores and the Node adapter.
  assert.deepEqual(sorted(Object.keys(server).filter((n) => !wasmPublic.includes(n))), ['MemoryStore', 'PostgresStore', 'RedisStore', 'toNodeHandler']);
});
