// Removes wasm-bindgen's asynchronous init from the `--target web` glue: its default export
// (`__wbg_init`, `__wbg_init_once`, `__wbg_load` with its streaming fallback and messages) and
// initSync's warning for deprecated arguments. The package never calls them: every entry loads
// the .wasm through `initSync` (load-wasm.js compiles the module itself, index.node.js and
// index.workerd.js hand it a module or the bytes), and retry_fetch.js is not one of the
// package's exports, so nothing outside can import its default. About 0.45 kB of gzip.
//
// Usage: node scripts/trim-init.mjs <glue.js>
// Exits non-zero, changing nothing, if the glue does not have the shape this expects.
import { readFileSync, writeFileSync } from 'node:fs';

const [file] = process.argv.slice(2);
if (!file) fail('usage: trim-init.mjs <glue.js>');
let glue = readFileSync(file, 'utf8');

/** Cut from `from` (included) to `to` (kept), each found exactly once. */
function cut(from, to) {
  const i = glue.indexOf(from);
  if (i < 0 || glue.indexOf(from, i + 1) >= 0) fail(`expected "${from}" once`);
  const j = glue.indexOf(to, i);
  if (j < 0) fail(`no "${to}" after "${from}"`);
  glue = glue.slice(0, i) + glue.slice(j);
}
cut('async function __wbg_load(', 'function initSync(');
cut('let __wbg_init_promise;', 'export { initSync, __wbg_init as default };');
glue = glue.replace('export { initSync, __wbg_init as default };', 'export { initSync };');
const warning = /\n\s*\} else \{\n\s*console\.warn\('using deprecated parameters for `initSync\(\)`; pass a single object instead'\)\n(\s*\})/;
if (!warning.test(glue)) fail("no initSync warning of the expected shape");
glue = glue.replace(warning, '\n$1');
if (/__wbg_init|__wbg_load/.test(glue)) fail('the glue still names __wbg_init or __wbg_load');
writeFileSync(file, glue);
console.log(`trim-init: the asynchronous init removed from ${file}`);

function fail(msg) {
  console.error(`trim-init: ${file}: ${msg}`);
  process.exit(1);
}
