// Renames the .wasm's imports to short names, in the .wasm and in its wasm-bindgen glue at
// once: wasm-bindgen names each import `__wbg_<name>_<16 hex digits>` under the module
// "./retry_fetch_bg.js", and a browser downloads every name twice (in the .wasm's import
// section and as a key of the glue's imports object): about 3 kB of gzip for ~120 imports.
// The names become `a`, `b`, ... `Z`, `aa`, ... and the module `a`.
// The same goes for the exports wasm-bindgen makes to call a Rust closure from JS,
// `wasm_bindgen_<hash>___convert__closures_____invoke___<its Rust types>` (100 to 330
// characters each, also twice: the .wasm's export section and `wasm.<name>(` in the glue):
// they become `$a`, `$b`, ...; every other export keeps its name.
//
// Usage: node scripts/short-imports.mjs <module.wasm> <glue.js>
// Exits non-zero, changing nothing, if the glue does not have the shape this expects: one
// imports object with each import's name exactly once as a key (`name: function`), the
// module named once (`"<module>": import0`), and each renamed export called as `wasm.<name>(`.
import { readFileSync, writeFileSync } from 'node:fs';
import { leb, encodeLeb, encodeName, readName as name, sections, shortName as short, escapeName as escape } from './wasm-bytes.mjs';

const [wasmFile, glueFile] = process.argv.slice(2);
if (!wasmFile || !glueFile) fail('usage: short-imports.mjs <module.wasm> <glue.js>');

const bytes = readFileSync(wasmFile);
let glue = readFileSync(glueFile, 'utf8');

// --- the .wasm: find the import section ------------------------------------------------------
let found;
try {
  found = sections(bytes);
} catch {
  fail(`${wasmFile} is not a wasm module`);
}
const section = found.get(2), exportSection = found.get(7);
if (!section) fail('the .wasm has no import section');
if (!exportSection) fail('the .wasm has no export section');

// Each import: module, field, then its description (kind byte + what the kind needs).
const imports = [];
let p = section.body;
const [count, afterCount] = leb(bytes, p);
p = afterCount;
for (let i = 0; i < count; i++) {
  const [module, p1] = name(bytes, p);
  const [field, p2] = name(bytes, p1);
  const kind = bytes[p2];
  let q = p2 + 1;
  if (kind === 0) [, q] = leb(bytes, q); // function: type index
  else if (kind === 1) { q += 1; const [flags, q1] = leb(bytes, q); [, q] = leb(bytes, q1); if (flags & 1) [, q] = leb(bytes, q); } // table
  else if (kind === 2) { const [flags, q1] = leb(bytes, q); [, q] = leb(bytes, q1); if (flags & 1) [, q] = leb(bytes, q); } // memory
  else if (kind === 3) q += 2; // global: value type, mutability
  else fail(`import ${module}.${field}: unknown kind ${kind}`);
  imports.push({ module, field, desc: bytes.subarray(p2, q) });
  p = q;
}
if (p !== section.end) fail('the import section did not parse to its end');

const modules = [...new Set(imports.map((i) => i.module))];
if (modules.length !== 1) fail(`expected one import module, found ${modules.join(', ')}`);

// --- short names ------------------------------------------------------------------------------
const fields = [...new Set(imports.map((i) => i.field))];
const renamed = new Map(fields.map((f, i) => [f, short(i)]));

// --- the glue: rename the keys of the imports object, then the module ---------------------------
for (const [from, to] of renamed) {
  const key = new RegExp(`^(\\s+)${escape(from)}(: function)`, 'gm');
  const found = glue.match(key)?.length ?? 0;
  if (found !== 1) fail(`import ${from}: found ${found} times as a key in the glue, expected once`);
  glue = glue.replace(key, `$1${to}$2`);
}
const moduleKey = `${JSON.stringify(modules[0])}: import0`;
if (glue.split(moduleKey).length !== 2) fail(`the glue does not name the module once as ${moduleKey}`);
glue = glue.replace(moduleKey, 'a: import0');

// --- the exports: closure invokers get short names ---------------------------------------------
const INVOKER = /^wasm_bindgen_[0-9a-f]+___convert__closures_/;
const exportsList = [];
let e = exportSection.body;
const [exportCount, afterExportCount] = leb(bytes, e);
e = afterExportCount;
for (let i = 0; i < exportCount; i++) {
  const [field, e1] = name(bytes, e);
  const [, e2] = leb(bytes, e1 + 1); // kind byte, then the index
  exportsList.push({ field, desc: bytes.subarray(e1, e2) });
  e = e2;
}
if (e !== exportSection.end) fail('the export section did not parse to its end');
const invokers = exportsList.filter((x) => INVOKER.test(x.field)).map((x) => x.field);
const exportRenamed = new Map(invokers.map((f, i) => [f, `$${short(i)}`]));
for (const [from, to] of exportRenamed) {
  // `wasm.<name>(`, the name whole (another invoker's name may start with this one).
  const call = new RegExp(`\\bwasm\\.${escape(from)}\\(`, 'g');
  const found = glue.match(call)?.length ?? 0;
  if (found < 1) fail(`export ${from}: the glue never calls it as wasm.${from}(`);
  glue = glue.replace(call, () => `wasm.${to}(`); // a function: `$` in `to` taken as it is
  if (new RegExp(`\\bwasm\\.${escape(from)}(?![\\w$])`).test(glue)) fail(`export ${from}: the glue still names it after the renaming`);
}

// --- the .wasm: a new import section ----------------------------------------------------------
const entries = imports.map((i) => Buffer.concat([encodeName('a'), encodeName(renamed.get(i.field)), i.desc]));
const body = Buffer.concat([encodeLeb(count), ...entries]);
const exportBody = Buffer.concat([
  encodeLeb(exportCount),
  ...exportsList.map((x) => Buffer.concat([encodeName(exportRenamed.get(x.field) ?? x.field), x.desc])),
]);
if (section.end > exportSection.start) fail('the export section comes before the import section');
const out = Buffer.concat([
  bytes.subarray(0, section.start),
  Buffer.from([2]), encodeLeb(body.length), body,
  bytes.subarray(section.end, exportSection.start),
  Buffer.from([7]), encodeLeb(exportBody.length), exportBody,
  bytes.subarray(exportSection.end),
]);
writeFileSync(wasmFile, out);
writeFileSync(glueFile, glue);
console.error(`short-imports: ${count} imports and ${exportRenamed.size} closure exports renamed in ${wasmFile} (${bytes.length - out.length} bytes less) and ${glueFile}`);

function fail(why) {
  console.error(`short-imports: ${why}`);
  process.exit(1);
}
