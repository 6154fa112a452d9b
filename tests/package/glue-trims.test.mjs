// scripts/trim-init.mjs and scripts/short-exports.mjs, run by the package build on the client
// glue: the first removes wasm-bindgen's asynchronous init (every entry loads the .wasm
// through initSync), the second gives the exports the glue calls short names in the .wasm and
// the glue at once. A glue of another shape fails the build and changes nothing; the shipped
// files hold what each promises (and every entry loading them is the smoke test's).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPTS = fileURLToPath(new URL('../../scripts/', import.meta.url));
const PKG = fileURLToPath(new URL('../../pkg/', import.meta.url));

/** Run `script` on copies of `files` (name -> content); the exit status and the files after. */
function run(script, files) {
  const dir = mkdtempSync(join(tmpdir(), 'glue-trims-'));
  try {
    const paths = Object.keys(files).map((name) => join(dir, name));
    Object.entries(files).forEach(([name, content]) => writeFileSync(join(dir, name), content));
    const r = spawnSync(process.execPath, [join(SCRIPTS, script), ...paths], { encoding: 'utf8' });
    return { status: r.status, stderr: r.stderr, after: Object.fromEntries(Object.keys(files).map((name) => [name, readFileSync(join(dir, name))])) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The export names of a .wasm. */
const exportNames = (bytes) => WebAssembly.Module.exports(new WebAssembly.Module(bytes)).map((e) => e.name);

test('trim-init: the shipped web glue has no asynchronous init, only initSync', () => {
  const glue = readFileSync(join(PKG, 'retry_fetch.js'), 'utf8');
  assert.doesNotMatch(glue, /__wbg_init|__wbg_load|as default/);
  assert.match(glue, /export\s*\{[^}]*\binitSync\b/);
});

test('trim-init: a glue of another shape fails and is left as it was', () => {
  const glue = 'function initSync(module) {}\nexport { initSync };\n';
  const out = run('trim-init.mjs', { 'glue.js': glue });
  assert.notEqual(out.status, 0);
  assert.match(out.stderr, /trim-init: .*expected "async function __wbg_load\(" once/);
  assert.equal(out.after['glue.js'].toString(), glue);
});

test('short-exports: every wasm.<name> of the shipped glue (ESM and CommonJS) is an export of its .wasm, and the others are short', () => {
  for (const [wasmFile, glueFile] of [['retry_fetch_bg.wasm', 'retry_fetch.js'], ['cjs/retry_fetch_bg.wasm', 'cjs/retry_fetch.js']]) {
    const names = exportNames(readFileSync(join(PKG, wasmFile)));
    const glue = readFileSync(join(PKG, glueFile), 'utf8');
    const used = new Set([...glue.matchAll(/\bwasm\.([\w$]+)/g)].map((m) => m[1]));
    for (const name of used) assert.ok(names.includes(name), `${glueFile} calls wasm.${name}, which ${wasmFile} does not export`);
    const long = names.filter((n) => n.length > 4 && n !== 'memory' && n !== 'setErrorClasses' && used.has(n));
    assert.deepEqual(long, [], `${wasmFile}: exports the glue calls keep short names`);
  }
});

test('short-exports: a glue that reaches an export otherwise than as wasm.<name> fails and both files are left as they were', () => {
  const wasm = readFileSync(join(PKG, 'retry_fetch_bg.wasm'));
  const glue = 'const f = wasm["memory"]; wasm.memory;\n';
  const out = run('short-exports.mjs', { 'm.wasm': wasm, 'glue.js': glue });
  assert.notEqual(out.status, 0);
  assert.match(out.stderr, /short-exports: the glue indexes wasm\[\.\.\.\]/);
  assert.equal(out.after['glue.js'].toString(), glue);
  assert.ok(out.after['m.wasm'].equals(wasm));
});
