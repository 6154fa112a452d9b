// scripts/size-report.mjs on a tiny hand-made .wasm (no build): it parses the sections and the
// name section, and gives each function to the crate its demangled name says.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../../scripts/size-report.mjs', import.meta.url));

const leb = (n) => { const out = []; do { let b = n & 0x7f; n >>>= 7; if (n) b |= 0x80; out.push(b); } while (n); return out; };
const str = (s) => { const b = [...Buffer.from(s)]; return [...leb(b.length), ...b]; };
const vec = (items) => [...leb(items.length), ...items.flat()];
const section = (id, bytes) => [id, ...leb(bytes.length), ...bytes];

/** Function names (index 0 is the import), each defined function a body of `size` nops. */
const FUNCS = [
  ['retryFetch externref shim', 40],
  ['retry_fetch[0123456789abcdef]::core::backoff::next_delay', 30],
  ['<retry_fetch[0123456789abcdef]::wasm::client::call::Client>::call', 20],
  ['core[f6b26b22d1d1b02e]::ptr::drop_in_place::<alloc[676240861912815c]::rc::Rc<js_sys[f7b4653b2421bd9]::futures::queue::QueueState>>', 12],
  ['<f64 as core[f6b26b22d1d1b02e]::fmt::Display>::fmt', 10],
  ['<serde_wasm_bindgen[384873eb59ca5713]::ser::ObjectSerializer as serde_core[b4b41e2c1f182f26]::ser::SerializeStruct>::serialize_field::<retry_fetch[0123456789abcdef]::core::Stats>', 8],
  ['<str>::split_once::<char>', 6],
];

function tinyWasm() {
  const body = (nops) => { const code = [0, ...Array(nops).fill(0x01), 0x0b]; return [...leb(code.length), ...code]; };
  const names = vec([
    [...leb(0), ...str('__wbg_now_1234')],
    ...FUNCS.map(([name], i) => [...leb(i + 1), ...str(name)]),
  ]);
  return Buffer.from([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
    ...section(1, vec([[0x60, 0, 0]])),
    ...section(2, vec([[...str('wbg'), ...str('__wbg_now_1234'), 0, 0]])),
    ...section(3, vec(FUNCS.map(() => [0]))),
    ...section(5, vec([[0, 1]])),
    ...section(7, vec([[...str('retryFetch'), 0, 1]])),
    ...section(10, vec(FUNCS.map(([, size]) => body(size)))),
    ...section(11, vec([[0, 0x41, ...leb(1024), 0x0b, ...str('hello, data')]])),
    ...section(0, [...str('name'), 1, ...leb(names.length), ...names]),
  ]);
}

test('size-report attributes functions by crate (--wasm, --json, --detail)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'size-report-'));
  try {
    const wasm = tinyWasm();
    new WebAssembly.Module(wasm); // a valid module
    const file = join(dir, 'tiny.wasm');
    writeFileSync(file, wasm);
    const report = JSON.parse(execFileSync(process.execPath, [SCRIPT, '--wasm', file, '--json', '--detail'], { encoding: 'utf8' }));
    const byCrate = Object.fromEntries(report.crates.map((c) => [c.name, c]));
    assert.deepEqual(Object.keys(byCrate).sort(), [
      'Rust std (core, alloc, std)', 'float formatting (flt2dec, dec2flt, f64 Display)',
      'retry_fetch::core::backoff', 'retry_fetch::wasm::client::call', 'serde-wasm-bindgen',
      'wasm-bindgen (glue): exports', 'wasm-bindgen-futures',
    ]);
    assert.equal(byCrate['retry_fetch::core::backoff'].raw, 1 + 32); // size LEB + locals + nops + end
    assert.equal(report.crates.reduce((a, c) => a + c.functions, 0), FUNCS.length);
    assert.equal(report.largest[0].name, 'retryFetch externref shim');
    assert.equal(report.largest[1].name, 'retry_fetch::core::backoff::next_delay');
    const names = report.sections.map((s) => s.name);
    assert.ok(names.includes('imports (1)'), names.join());
    assert.ok(names.includes('exports (1)'), names.join());
    assert.ok(names.includes('data section (1 segments)'), names.join());
    // The name section is not shipped: the stripped module is what the rows add up to.
    const raw = report.sections.reduce((a, s) => a + s.raw, 0);
    assert.equal(raw, report.wasm.raw);
    assert.ok(report.wasm.raw < wasm.length);
    assert.deepEqual(report.notes, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
