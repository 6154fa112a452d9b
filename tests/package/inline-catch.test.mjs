// scripts/inline-catch.mjs (run by the package build on the client glue, ESM and CommonJS, and
// on the server build's glue):
// wasm-bindgen's `handleError(function (...) {...}, arguments)` wrappers become inline
// try/catch blocks that store the exception as handleError did; a glue of another shape fails
// the build and changes nothing. The shipped glue has no handleError left, and a call into JS
// that throws still reaches the caller as its own error (both entries).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../../scripts/inline-catch.mjs', import.meta.url));
const PKG = fileURLToPath(new URL('../../pkg/', import.meta.url));
const { HANDLE_ERROR } = await import(SCRIPT);

const GLUE = `const imports = {
        __wbg_get_1: function() { return handleError(function (arg0, arg1) {
            const ret = Reflect.get(getObject(arg0), getObject(arg1));
            return addHeapObject(ret);
        }, arguments); },
        __wbg_now_2: function() {
            return Date.now();
        },
};
${HANDLE_ERROR}
`;

function run(glue) {
  const dir = mkdtempSync(join(tmpdir(), 'inline-catch-'));
  try {
    const file = join(dir, 'glue.js');
    writeFileSync(file, glue);
    const r = spawnSync(process.execPath, [SCRIPT, file], { encoding: 'utf8' });
    return { status: r.status, stderr: r.stderr, out: readFileSync(file, 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('a handleError wrapper becomes an inline try/catch that stores the exception', () => {
  const { status, out } = run(GLUE);
  assert.equal(status, 0);
  assert.ok(!out.includes('handleError'), out);
  assert.match(out, /__wbg_get_1: function \(arg0, arg1\) \{ try \{\n {12}const ret = Reflect\.get/);
  assert.match(out, /\} catch \(e\) \{ wasm\.__wbindgen_exn_store\(addHeapObject\(e\)\); \} \},/);
  // the rewritten import behaves as handleError did: the value, or the exception stored
  const stored = [];
  const make = new Function('wasm', 'addHeapObject', 'getObject', `${out}; return imports;`);
  const imports = make({ __wbindgen_exn_store: (e) => stored.push(e) }, (v) => v, (v) => v);
  assert.equal(imports.__wbg_get_1({ a: 1 }, 'a'), 1);
  const boom = new Error('getter');
  assert.equal(imports.__wbg_get_1({ get a() { throw boom; } }, 'a'), undefined);
  assert.deepEqual(stored, [boom]);
});

test('a glue of another shape fails and is left as it was', () => {
  for (const glue of [GLUE.replace(HANDLE_ERROR, ''), GLUE.replace('}, arguments); }', '}, arguments) }'), GLUE.replace('Reflect.get', 'this.get')]) {
    const { status, stderr, out } = run(glue);
    assert.notEqual(status, 0, stderr);
    assert.equal(out, glue);
  }
});

test('the shipped glue has no handleError left, and a throwing getter still rejects the call (ESM, CommonJS and the server)', async () => {
  for (const file of ['retry_fetch.js', 'cjs/retry_fetch.js', 'retry_fetch_server.js']) {
    assert.ok(!readFileSync(join(PKG, file), 'utf8').includes('arguments)'), `${file}: a handleError wrapper is left`);
  }
  const boom = new Error('from a getter');
  const init = { get method() { throw boom; } };
  const esm = await import(join(PKG, 'index.node.js'));
  await assert.rejects(esm.retryFetch('http://127.0.0.1:9/', init), (e) => e === boom);
  const cjs = createRequire(import.meta.url)(join(PKG, 'index.cjs'));
  await assert.rejects(cjs.retryFetch('http://127.0.0.1:9/', init), (e) => e === boom);
  const server = await import(join(PKG, 'server.js'));
  assert.throws(() => server.idempotency(async () => new Response('ok'), { get store() { throw boom; } }), (e) => e === boom);
});
