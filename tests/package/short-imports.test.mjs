// scripts/short-imports.mjs (run by the package build on the client .wasm and its glue, ESM and
// CommonJS): every import gets a short name in the .wasm and the same name as a key of the
// glue's imports object, and every closure invoker export a short name the glue calls; a glue
// of another shape fails the build and changes nothing. The shipped package is checked too:
// short names only, each one a key of its glue (the package and e2e tests then load and call
// both entries).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../../scripts/short-imports.mjs', import.meta.url));
const PKG = fileURLToPath(new URL('../../pkg/', import.meta.url));

const leb = (n) => { const out = []; do { let b = n & 0x7f; n >>>= 7; if (n) b |= 0x80; out.push(b); } while (n); return out; };
const str = (s) => { const b = [...Buffer.from(s)]; return [...leb(b.length), ...b]; };
const vec = (items) => [...leb(items.length), ...items.flat()];
const section = (id, bytes) => [id, ...leb(bytes.length), ...bytes];

/** The (module, name) of every import of a .wasm. */
function imports(bytes) {
  const read = (pos) => { let v = 0, s = 0, b; do { b = bytes[pos++]; v += (b & 0x7f) * 2 ** s; s += 7; } while (b & 0x80); return [v, pos]; };
  const name = (pos) => { const [n, p] = read(pos); return [bytes.toString('utf8', p, p + n), p + n]; };
  let pos = 8;
  while (pos < bytes.length) {
    const id = bytes[pos];
    const [size, body] = read(pos + 1);
    if (id === 2) {
      const out = [];
      let [count, p] = read(body);
      for (let i = 0; i < count; i++) {
        let module, field;
        [module, p] = name(p);
        [field, p] = name(p);
        assert.equal(bytes[p], 0, 'only function imports in these modules');
        [, p] = read(p + 1);
        out.push([module, field]);
      }
      return out;
    }
    pos = body + size;
  }
  return [];
}

/** A module importing `names` (functions of type () -> ()) from "./x_bg.js", and its glue. */
function fixture(names, invokers = []) {
  const wasm = Buffer.from([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec([[0x60, 0, 0]])),
    ...section(2, vec(names.map((n) => [...str('./x_bg.js'), ...str(n), 0, 0]))),
    ...section(3, vec([[0]])),
    ...section(7, vec([[...str('run'), 0, ...leb(names.length)], ...invokers.map((n) => [...str(n), 0, ...leb(names.length)])])),
    ...section(10, vec([[...leb(2 + 2 * names.length), 0, ...names.flatMap((_, i) => [0x10, ...leb(i)]), 0x0b]])),
  ]);
  const glue = `function __wbg_get_imports() {
    const import0 = {
        __proto__: null,
${names.map((n, i) => `        ${n}: function() { calls.push(${i}); },`).join('\n')}
    };
    return {
        __proto__: null,
        "./x_bg.js": import0,
    };
}
function callInvokers(wasm) {
${invokers.map((n) => `    wasm.${n}();`).join('\n')}
}
`;
  return { wasm, glue };
}

function run(wasm, glue) {
  const dir = mkdtempSync(join(tmpdir(), 'short-imports-'));
  try {
    writeFileSync(join(dir, 'x_bg.wasm'), wasm);
    writeFileSync(join(dir, 'x.js'), glue);
    const r = spawnSync(process.execPath, [SCRIPT, join(dir, 'x_bg.wasm'), join(dir, 'x.js')], { encoding: 'utf8' });
    return { status: r.status, stderr: r.stderr, wasm: readFileSync(join(dir, 'x_bg.wasm')), glue: readFileSync(join(dir, 'x.js'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('every import is renamed in the .wasm and the glue alike, and the module still runs', async () => {
  const names = Array.from({ length: 60 }, (_, i) => `__wbg_f${i}_${(0xabcdef00 + i).toString(16)}`);
  const { wasm, glue } = fixture(names);
  const out = run(wasm, glue);
  assert.equal(out.status, 0, out.stderr);
  const renamed = imports(out.wasm);
  assert.equal(renamed.length, 60);
  assert.ok(renamed.every(([module, field]) => module === 'a' && /^[a-zA-Z]{1,2}$/.test(field)), JSON.stringify(renamed));
  assert.equal(new Set(renamed.map(([, f]) => f)).size, 60, 'names stay distinct');
  assert.ok(out.wasm.length < wasm.length);
  // The rewritten glue's imports instantiate the rewritten module, each import in its place.
  const calls = [];
  const getImports = new Function('calls', `${out.glue}; return __wbg_get_imports();`)(calls);
  const { instance } = await WebAssembly.instantiate(out.wasm, getImports);
  instance.exports.run();
  assert.deepEqual(calls, names.map((_, i) => i));
});

/** The export names of a .wasm. */
function exportNames(bytes) {
  return WebAssembly.Module.exports(new WebAssembly.Module(bytes)).map((e) => e.name);
}

test('the closure invokers wasm-bindgen exports get short names in the .wasm and the glue; other exports keep theirs', async () => {
  const invoker = 'wasm_bindgen_549890e07d423cc0___convert__closures_____invoke___wasm_bindgen_549890e07d423cc0___JsValue__true_';
  // A second invoker whose name starts with the first one's: each is renamed whole.
  const longer = invoker.replace(/true_$/, 'wasm_bindgen_549890e07d423cc0___JsValue__true_');
  const { wasm, glue } = fixture(['__wbg_a_1', '__wbg_b_2'], [invoker, longer]);
  const out = run(wasm, glue);
  assert.equal(out.status, 0, out.stderr);
  assert.deepEqual(exportNames(out.wasm), ['run', '$a', '$b']);
  assert.doesNotMatch(out.glue, /wasm_bindgen_549890e07d423cc0/);
  assert.match(out.glue, /wasm\.\$a\(\);\n    wasm\.\$b\(\);/);
  const calls = [];
  const [getImports, callInvokers] = new Function('calls', `${out.glue}; return [__wbg_get_imports(), callInvokers];`)(calls);
  const { instance } = await WebAssembly.instantiate(out.wasm, getImports);
  callInvokers(instance.exports);
  assert.deepEqual(calls, [0, 1, 0, 1], 'each renamed export is the function it was');
});

test('an invoker the glue does not call as wasm.<name>( fails and changes nothing', () => {
  const invoker = 'wasm_bindgen_0123___convert__closures_____invoke___true_';
  const { wasm, glue } = fixture(['__wbg_a_1'], [invoker]);
  const broken = glue.replace(`wasm.${invoker}();`, `wasm[${JSON.stringify(invoker)}]();`);
  const out = run(wasm, broken);
  assert.notEqual(out.status, 0);
  assert.match(out.stderr, /short-imports: export .* never calls it/);
  assert.deepEqual(out.wasm, wasm);
  assert.equal(out.glue, broken);
});

test('a glue of another shape fails and changes nothing', () => {
  const { wasm, glue } = fixture(['__wbg_a_1', '__wbg_b_2']);
  for (const broken of [
    glue.replace('__wbg_b_2: function', '__wbg_b_2: async function'), // a key it cannot find
    glue.replace('"./x_bg.js": import0', '"./y.js": import0'), // the module under another name
    glue.replace('        __wbg_a_1: function() { calls.push(0); },', '        __wbg_a_1: function() { calls.push(0); },\n        __wbg_a_1: function() {},'), // twice
  ]) {
    const out = run(wasm, broken);
    assert.notEqual(out.status, 0);
    assert.match(out.stderr, /short-imports:/);
    assert.deepEqual(out.wasm, wasm, 'the .wasm is left as it was');
    assert.equal(out.glue, broken, 'the glue is left as it was');
  }
});

test('the shipped client .wasm files import short names only, each a key of their glue', { skip: !existsSync(join(PKG, 'retry_fetch_bg.wasm')) && 'pkg/ is not built' }, () => {
  for (const [wasmFile, glueFile] of [['retry_fetch_bg.wasm', 'retry_fetch.js'], ['cjs/retry_fetch_bg.wasm', 'cjs/retry_fetch.js']]) {
    const list = imports(readFileSync(join(PKG, wasmFile)));
    assert.ok(list.length > 50, `${wasmFile}: ${list.length} imports`);
    const glue = readFileSync(join(PKG, glueFile), 'utf8');
    for (const [module, field] of list) {
      assert.equal(module, 'a', wasmFile);
      assert.match(field, /^[a-zA-Z]{1,2}$/, `${wasmFile}: ${field}`);
      assert.match(glue, new RegExp(`[{,]${field}:`), `${glueFile} has no key ${field}`);
    }
    const names = exportNames(readFileSync(join(PKG, wasmFile)));
    // scripts/short-exports.mjs renames every export the glue calls but these two.
    assert.ok(names.includes('setErrorClasses') && names.includes('memory'), `${wasmFile} exports setErrorClasses and memory`);
    assert.deepEqual(names.filter((n) => n.includes('convert__closures') || /^(__wbindgen_malloc|retrybudget_new|retryFetch)$/.test(n)), [],
      `${wasmFile}: closure invokers and the glue's exports renamed`);
  }
});
