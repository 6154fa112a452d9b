// Gives the .wasm's exports that only the glue calls short names, in the .wasm and in its glue
// at once: `__wbindgen_add_to_stack_pointer`, `adaptivethrottle_new`, `retryFetch`... become
// `_a`, `_b`, ... (every name is downloaded twice: the .wasm's export section and
// `wasm.<name>` in the glue). Kept: `memory`, `setErrorClasses` (load-wasm.js recognises the
// client's .wasm by it), and any export the glue does not name as `wasm.<name>`. Runs after
// guard-glue.mjs and inline-catch.mjs, which look for wasm-bindgen's export names. About 0.3 kB
// of gzip.
//
// Usage: node scripts/short-exports.mjs <module.wasm> <glue.js>
// Exits non-zero, changing nothing, if a renamed export is still named in the glue otherwise.
import { readFileSync, writeFileSync } from 'node:fs';
import { leb, encodeLeb, encodeName, readName, sections, shortName, escapeName as escape } from './wasm-bytes.mjs';

const [wasmFile, glueFile] = process.argv.slice(2);
if (!wasmFile || !glueFile) fail('usage: short-exports.mjs <module.wasm> <glue.js>');
const bytes = readFileSync(wasmFile);
let glue = readFileSync(glueFile, 'utf8');
const KEEP = new Set(['memory', 'setErrorClasses']);

const short = (n) => `_${shortName(n)}`; // 0 -> _a, 51 -> _Z, 52 -> _aa, ...

let section;
try {
  section = sections(bytes).get(7);
} catch {
  fail(`${wasmFile} is not a wasm module`);
}
if (!section) fail('the .wasm has no export section');
const list = [];
let e = section.body;
const [count, afterCount] = leb(bytes, e);
e = afterCount;
for (let i = 0; i < count; i++) {
  const [field, p] = readName(bytes, e);
  const [, end] = leb(bytes, p + 1); // kind byte, then the index
  list.push({ field, desc: bytes.subarray(p, end) });
  e = end;
}
if (e !== section.end) fail('the export section did not parse to its end');

// An export reached otherwise than as `wasm.<name>` (`wasm[name]`, a name in a string) would
// be missed by the renaming: none is, in wasm-bindgen's glue.
if (/\bwasm\s*\[/.test(glue)) fail('the glue indexes wasm[...]: its exports cannot be renamed safely');
for (const { field } of list) {
  if (!KEEP.has(field) && (glue.includes(`'${field}'`) || glue.includes(`"${field}"`))) fail(`the glue names export ${field} in a string`);
}
const taken = new Set(list.map((x) => x.field));
let next = 0;
const renamed = new Map();
for (const { field } of list) {
  if (KEEP.has(field)) continue;
  const use = new RegExp(`\\bwasm\\.${escape(field)}(?![\\w$])`, 'g');
  if (!use.test(glue)) continue;
  let to;
  do to = short(next++); while (taken.has(to));
  if (new RegExp(`\\bwasm\\.${escape(to)}(?![\\w$])`).test(glue)) fail(`the glue already names wasm.${to}`);
  glue = glue.replace(use, () => `wasm.${to}`);
  renamed.set(field, to);
}

const body = Buffer.concat([
  encodeLeb(count),
  ...list.map((x) => Buffer.concat([encodeName(renamed.get(x.field) ?? x.field), x.desc])),
]);
const out = Buffer.concat([
  bytes.subarray(0, section.start), Buffer.from([7]), encodeLeb(body.length), body, bytes.subarray(section.end),
]);
writeFileSync(wasmFile, out);
writeFileSync(glueFile, glue);
console.log(`short-exports: ${renamed.size} exports renamed in ${wasmFile} (${bytes.length - out.length} bytes less) and ${glueFile}`);

function fail(msg) {
  console.error(`short-exports: ${msg}`);
  process.exit(1);
}
