// The driver (js/client.js) and the wasm shell (src/wasm/) share a few numbers: the outcome
// codes a Call takes and the Policy.flags bits. They are written on both sides; this test
// fails when one side changes without the other.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const root = new URL('../../', import.meta.url);
const read = (path) => readFileSync(new URL(path, root), 'utf8');

function constants(source, pattern) {
  const out = {};
  for (const m of source.matchAll(pattern)) out[m[1]] = Number(m[2]);
  return out;
}

test('the driver and the wasm agree on outcome codes and policy flags', () => {
  const js = constants(read('js/client.js'), /^const ((?:FLAG_[A-Z_]+)|NETWORK_ERROR|TIMEOUT) = (\d+);$/gm);
  const rust = constants(
    read('src/wasm/options.rs') + read('src/wasm/call.rs'),
    /^pub const ((?:FLAG_[A-Z_]+)|NETWORK_ERROR|TIMEOUT): u32 = (\d+);$/gm,
  );
  assert.ok(Object.keys(rust).length >= 11, `found ${Object.keys(rust).length} constants in src/wasm`);
  assert.deepEqual(js, rust);
  const flags = Object.entries(rust).filter(([k]) => k.startsWith('FLAG_')).map(([, v]) => v);
  assert.ok(flags.every((v) => v > 0 && (v & (v - 1)) === 0), 'every flag is one bit');
  assert.equal(new Set(flags).size, flags.length, 'no two flags share a bit');
});
