#!/usr/bin/env node
// Where every kilobyte of the client entry goes, crate by crate.
//
//   node scripts/size-report.mjs [--wasm FILE [--stripped FILE]] [--detail] [--json] [--all] [--server]
//
// Without --wasm it builds the client .wasm as scripts/build-pkg.sh does (same toolchain, cargo
// flags, wasm-bindgen and wasm-opt -Oz flags) into target/size/, twice from one cargo build:
// named.wasm keeps function names (wasm-bindgen --keep-debug, wasm-opt -g), stripped.wasm is the
// shipped-equivalent bytes. pkg/ and target/pkg are not touched. --wasm FILE analyses a named
// .wasm instead (its stripped twin is FILE without debug/producers sections, or --stripped FILE).
//
// It parses the .wasm, gives each function body to a crate from its demangled name (rules in
// `family` below), and prints a markdown table: raw bytes, and a gzip share per row: each
// section deflated alone, scaled so the sections sum to the gzip -9 of the whole stripped .wasm;
// within the code section each crate's bodies deflated alone, scaled to the code section's share.
// --detail splits our crate by module; --json prints JSON; --all lists every function (not the 15
// largest); --server builds the server .wasm instead.
import { readFileSync, existsSync } from 'node:fs';
import { gzipSync, deflateRawSync } from 'node:zlib';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const argv = process.argv.slice(2);
const flag = (f) => argv.includes(f);
const option = (f) => (argv.includes(f) ? argv[argv.indexOf(f) + 1] : undefined);
if (flag('--help') || flag('-h')) {
  console.log('node scripts/size-report.mjs [--wasm NAMED.wasm [--stripped FILE]] [--detail] [--json] [--all] [--server]');
  process.exit(0);
}
const DETAIL = flag('--detail');
const SERVER = flag('--server');
let zlibTotals = false;
/** gzip -9 size from the gzip binary, as build-pkg.sh measures: Node's bundled zlib compresses the
 * .wasm ~2% worse. node:zlib only when gzip is missing; it also gives the (relative) shares. */
function gzip9(b) {
  try { return execFileSync('gzip', ['-9cn'], { input: b, maxBuffer: 1 << 28 }).length; }
  catch { zlibTotals = true; return gzipSync(b, { level: 9 }).length; }
}
const deflate9 = (b) => deflateRawSync(b, { level: 9 }).length;

// ---- 1. Build (unless --wasm): the release flags of build-pkg.sh, names kept. ----
const BUILD = [
  'set -euo pipefail',
  'source scripts/toolchain.sh',
  'cd "$RF_ROOT"',
  'out=$1; shift',
  'mkdir -p "$out"',
  'rf_say "size: cargo build --release $* ($RF_WASM_MODE) into target/size" >&2',
  'CARGO_TARGET_DIR=target/size CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${RF_SIZE_RUSTFLAGS:-}" \\',
  '  "${RF_WASM_CARGO[@]}" build --quiet --release --lib --target wasm32-unknown-unknown \\',
  '  "${RF_BUILD_STD[@]}" "${RF_SIZE_FLAGS[@]}" "$@"',
  'wasm-bindgen --target web --weak-refs --no-typescript --keep-debug --out-dir "$out" --out-name named \\',
  '  target/size/wasm32-unknown-unknown/release/retry_fetch.wasm',
  'rf_say "size: wasm-opt -Oz (named and stripped)" >&2',
  'node_modules/.bin/wasm-opt "${RF_WASM_OPT_FLAGS[@]}" -g "$out/named_bg.wasm" -o "$out/named.wasm"',
  'node_modules/.bin/wasm-opt "${RF_WASM_OPT_FLAGS[@]}" --strip-debug --strip-producers "$out/named_bg.wasm" -o "$out/stripped.wasm"',
  '# build-pkg.sh shortens the import names (when it has this step): so do both copies here',
  'if [ -f scripts/short-imports.mjs ] && grep -q short-imports scripts/build-pkg.sh; then',
  '  cp "$out/named.js" "$out/stripped.js"',
  '  node scripts/short-imports.mjs "$out/named.wasm" "$out/named.js"',
  '  node scripts/short-imports.mjs "$out/stripped.wasm" "$out/stripped.js"',
  'fi',
  '# and the export names (in the shipped-equivalent copy only: named.wasm keeps wasm-bindgen\'s, which',
  '# tell its export wrappers apart), as build-pkg.sh does after its other glue steps',
  'if [ -f scripts/short-exports.mjs ] && grep -q short-exports scripts/build-pkg.sh; then',
  '  cp "$out/stripped.js" "$out/stripped-exports.js"',
  '  node scripts/short-exports.mjs "$out/stripped.wasm" "$out/stripped-exports.js" >/dev/null',
  'fi',
].join('\n');

let namedPath = option('--wasm');
let strippedPath = option('--stripped');
if (!namedPath) {
  const out = join('target/size', SERVER ? 'server' : 'client');
  const cargoArgs = SERVER ? ['--no-default-features', '--features', 'server'] : [];
  execFileSync('bash', ['-c', BUILD, 'size-report', out, ...cargoArgs], {
    cwd: ROOT, stdio: ['ignore', process.stderr, 'inherit'],
  });
  namedPath = join(ROOT, out, 'named.wasm');
  strippedPath = join(ROOT, out, 'stripped.wasm');
}

// ---- 2. Parse the wasm binary. ----
const SECTION = ['custom', 'type', 'import', 'function', 'table', 'memory', 'global', 'export',
  'start', 'element', 'code', 'data', 'datacount', 'tag'];
function parse(buf) {
  let pos = 8;
  const leb = () => { let r = 0, s = 0, b; do { b = buf[pos++]; r += (b & 0x7f) * 2 ** s; s += 7; } while (b & 0x80); return r; };
  const str = () => { const n = leb(); pos += n; return buf.toString('utf8', pos - n, pos); };
  const limits = () => { const f = leb(); leb(); if (f & 1) leb(); };
  const expr = () => { for (let op; (op = buf[pos++]) !== 0x0b;) if ([0x41, 0x42, 0x23, 0xd2].includes(op)) leb(); };
  const w = { sections: [], imports: [], exports: [], funcs: [], data: [], names: new Map(), importedFuncs: 0 };
  while (pos < buf.length) {
    const start = pos, id = buf[pos++], size = leb(), end = pos + size;
    const name = id === 0 ? str() : SECTION[id] ?? `section ${id}`;
    if (id === 2) {
      for (let n = leb(); n--;) {
        const imp = { module: str(), field: str(), kind: buf[pos++] };
        if (imp.kind === 0) { leb(); w.importedFuncs++; }
        else if (imp.kind === 1) { pos++; limits(); }
        else if (imp.kind === 2) limits();
        else if (imp.kind === 3) pos += 2;
        else if (imp.kind === 4) { pos++; leb(); }
        w.imports.push(imp);
      }
    } else if (id === 7) {
      for (let n = leb(); n--;) w.exports.push({ name: str(), kind: buf[pos++], index: leb() });
    } else if (id === 10) {
      for (let n = leb(), i = 0; i < n; i++) {
        const at = pos, len = leb(); pos += len;
        w.funcs.push({ index: w.importedFuncs + i, body: buf.subarray(at, pos) }); // with its size LEB
      }
    } else if (id === 11) {
      for (let n = leb(); n--;) {
        const flags = leb();
        if (flags === 2) leb();
        if (flags !== 1) expr();
        const len = leb(); w.data.push(len); pos += len;
      }
    } else if (id === 0 && name === 'name') {
      while (pos < end) {
        const sub = buf[pos++], subEnd = leb() + pos;
        if (sub === 1) for (let n = leb(); n--;) { const idx = leb(); w.names.set(idx, str()); }
        pos = subEnd;
      }
    }
    w.sections.push({ id, name, bytes: buf.subarray(start, end) });
    pos = end;
  }
  for (const f of w.funcs) f.name = w.names.get(f.index) ?? `func[${f.index}]`;
  return w;
}

/** What `wasm-opt --strip-debug --strip-producers` leaves: the module without those sections. */
const strip = (buf, w) => Buffer.concat([buf.subarray(0, 8), ...w.sections
  .filter((s) => s.id !== 0 || !/^(name|producers|sourceMappingURL|external_debug_info|\.debug)/.test(s.name))
  .map((s) => s.bytes)]);

// ---- 3. Attribution: demangled name -> crate family. ----
const STD = new Set(['core', 'alloc', 'std', '__rustc', 'panic_abort', 'str', 'char', 'bool', 'u8',
  'u16', 'u32', 'u64', 'u128', 'usize', 'i8', 'i16', 'i32', 'i64', 'i128', 'isize', 'f32', 'f64']);
const CRATES = {
  wasm_bindgen: 'wasm-bindgen', js_sys: 'js-sys', web_sys: 'web-sys', wasm_bindgen_futures: 'wasm-bindgen-futures',
  serde: 'serde (serde_core)', serde_core: 'serde (serde_core)', serde_wasm_bindgen: 'serde-wasm-bindgen',
  lol_alloc: 'lol_alloc', getrandom: 'getrandom', strsim: 'strsim', hashbrown: 'hashbrown',
  compiler_builtins: 'compiler_builtins (libm, mem*)',
};
const FLOAT = /flt2dec|bignum|diy_float|dec2flt|fmt::float|<f(32|64) as core::fmt::(Display|Debug)>|float_to_(decimal|exponential)/;
const GLUE = 'wasm-bindgen (glue)';

/** Splits at top-level `sep` (outside <>, (), []; `->` is not a bracket). */
function splitTop(s, sep) {
  const parts = []; let depth = 0, from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if ('<(['.includes(c)) depth++;
    else if (')]'.includes(c) || (c === '>' && s[i - 1] !== '-')) depth--;
    else if (depth === 0 && s.startsWith(sep, i)) { parts.push(s.slice(from, i)); from = i + sep.length; i += sep.length - 1; }
  }
  return [...parts, s.slice(from)];
}

/** The path a name belongs to, as segments without generic arguments: `<A as B>::f` -> A's path
 * + f (B's when A is a std type and B is not, or B is core::fmt); drop_in_place::<T> -> T's. */
function owner(name) {
  const s = name.replace(/^(&(mut )?|\*(const|mut) |dyn |impl )+/, '');
  if (/^[[(]/.test(s)) return ['core'];
  const segs = splitTop(s, '::');
  let head = [];
  if (segs[0].startsWith('<')) {
    const [a, b] = splitTop(segs[0].slice(1, -1), ' as ');
    head = owner(a);
    if (b && STD.has(head[0])) {
      const trait = owner(b);
      if (!STD.has(trait[0]) || trait[1] === 'fmt') head = trait;
    }
    segs.shift();
  }
  const path = [...head, ...segs.filter((x) => !x.startsWith('<')).map((x) => x.replace(/<.*$/s, ''))];
  if (head.length) path.item = head.length; // `<A>::f`: A's path ends with the item (type, closure)
  if (path.join('::') === 'core::ptr::drop_in_place') {
    const t = segs.at(-1).slice(1, -1);
    for (const m of t.matchAll(/(?<![\w:])([A-Za-z_]\w*)::/g)) {
      if (STD.has(m[1]) || t.startsWith('wasm_bindgen::__rt::', m.index)) continue; // containers
      const sub = t.slice(m.index); let depth = 0, end = sub.length;
      for (let i = 0; i < sub.length; i++) {
        if ('<(['.includes(sub[i])) depth++;
        else if (')]>'.includes(sub[i]) && sub[i - 1] !== '-' && --depth < 0) { end = i; break; }
        else if (depth === 0 && ', ;'.includes(sub[i])) { end = i; break; }
      }
      return owner(sub.slice(0, end));
    }
    return ['core', 'ptr'];
  }
  return path;
}

/** Our crate's module: retry_fetch::core::<m>, retry_fetch::wasm::<m> or ::wasm::client::<m>. */
function ourModule(path) {
  const mods = path.slice(1, path.item).filter((x) => !x.startsWith('{'));
  mods.pop(); // the item itself (function, type, static)
  const depth = mods[0] === 'wasm' && mods[1] === 'client' ? 3 : 2;
  const kept = [];
  for (const m of mods.slice(0, depth)) { if (!/^[a-z_][a-z0-9_]*$/.test(m)) break; kept.push(m); }
  return ['retry_fetch', ...(DETAIL ? kept : kept.slice(0, 1))].join('::');
}

/** Without crate hashes (`core[f6b26b22d1d1b02e]`) and wasm-opt's duplicate suffixes (`[1]`). */
const clean = (name) => (/^func\[\d+\]$/.test(name) ? name : name.replace(/(?<=[\w>])\[[0-9a-f]{1,16}\]/g, ''));

function family(rawName, exportNames) {
  if (/^func\[\d+\]$/.test(rawName)) return 'unnamed (func[N], made by wasm-opt)';
  const name = clean(rawName);
  if (/^(__wbg_|__wbindgen_|__externref_)| shim$/.test(name) || (!name.includes('::') && exportNames.has(name))) {
    if (!DETAIL) return GLUE;
    return `${GLUE}: ${exportNames.has(name.replace(/( externref shim| multivalue shim)+$/, '')) ? 'exports' : 'imports, closures, runtime'}`;
  }
  const path = owner(name), crate = path[0];
  if (crate === 'retry_fetch') return ourModule(path);
  if (crate === 'js_sys' && path[1] === 'futures') return 'wasm-bindgen-futures';
  if (CRATES[crate]) return CRATES[crate];
  if (STD.has(crate)) {
    if (FLOAT.test(name)) return 'float formatting (flt2dec, dec2flt, f64 Display)';
    if (path[1] === 'fmt' && crate !== 'std') return 'core::fmt';
    return 'Rust std (core, alloc, std)';
  }
  return /^[a-z_]\w*$/.test(crate) ? crate : 'other';
}

// ---- 4. Measure. ----
const namedBuf = readFileSync(namedPath);
const named = parse(namedBuf);
const strippedBuf = strippedPath ? readFileSync(strippedPath) : strip(namedBuf, named);
const shipped = parse(strippedBuf);
const notes = [];
if (!named.names.size) notes.push(`${namedPath} has no function names: build it with wasm-opt -g`);
const sameFuncs = shipped.funcs.length === named.funcs.length;
if (!sameFuncs) notes.push('named and stripped builds differ in functions: sizes are the named build\'s');
const exportNames = new Set(named.exports.map((e) => e.name)); // wasm-bindgen's names (the shipped copy's are short)
const funcs = named.funcs.map((f, i) => ({
  name: f.name, family: family(f.name, exportNames), body: sameFuncs ? shipped.funcs[i].body : f.body,
}));

const totalGzip = gzip9(strippedBuf);
const rowsBySection = new Map([['other', { raw: 8, alone: 0, names: ['header'] }]]); // raw, deflated alone
for (const s of shipped.sections) {
  const key = s.id === 10 ? 'code' : s.id === 11 ? 'data' : s.id === 2 ? 'import' : s.id === 7 ? 'export' : 'other';
  const row = rowsBySection.get(key) ?? { raw: 0, alone: 0, names: [] };
  row.raw += s.bytes.length; row.alone += deflate9(s.bytes); row.names.push(s.name);
  rowsBySection.set(key, row);
}
const sectionAlone = [...rowsBySection.values()].reduce((a, r) => a + r.alone, 0);
for (const r of rowsBySection.values()) r.gzip = (r.alone * totalGzip) / sectionAlone;

const families = new Map();
for (const f of funcs) {
  const fam = families.get(f.family) ?? { name: f.family, functions: 0, raw: 0, bodies: [] };
  fam.functions++; fam.raw += f.body.length; fam.bodies.push(f.body);
  families.set(f.family, fam);
}
const code = rowsBySection.get('code') ?? { raw: 0, gzip: 0 };
for (const fam of families.values()) fam.alone = deflate9(Buffer.concat(fam.bodies));
const famAlone = [...families.values()].reduce((a, f) => a + f.alone, 0) || 1;
const pct = (g) => Math.round((1000 * g) / totalGzip) / 10;
const rows = [...families.values()].sort((a, b) => b.raw - a.raw).map((f) => {
  const gzip = (f.alone * code.gzip) / famAlone;
  return { name: f.name, functions: f.functions, raw: f.raw, gzip: Math.round(gzip), percent: pct(gzip) };
});
const sectionRow = (key, name, functions) => {
  const r = rowsBySection.get(key);
  return r && { name, functions, raw: r.raw, gzip: Math.round(r.gzip), percent: pct(r.gzip), sections: r.names };
};
const importedFuncs = shipped.imports.filter((i) => i.kind === 0).length;
const sections = [
  sectionRow('code', `code section (${shipped.funcs.length} functions, above)`, shipped.funcs.length),
  sectionRow('data', `data section (${shipped.data.length} segments)`, null),
  sectionRow('import', `imports (${shipped.imports.length})`, importedFuncs),
  sectionRow('export', `exports (${shipped.exports.length})`, shipped.exports.length),
  sectionRow('other', `other sections (${rowsBySection.get('other').names.join(', ')})`, null),
].filter(Boolean);
const wasm = { file: strippedPath ?? `${namedPath} (stripped in memory)`, raw: strippedBuf.length, gzip: totalGzip };

const glueFiles = SERVER ? [] : ['pkg/retry_fetch.js', 'pkg/index.browser.js', 'pkg/load-wasm.js'].filter((f) => existsSync(join(ROOT, f)));
const glue = glueFiles.map((f) => { const b = readFileSync(join(ROOT, f)); return { file: f, raw: b.length, gzip: gzip9(b) }; });
const glueGzip = glue.reduce((a, g) => a + g.gzip, 0);
const largest = [...funcs].sort((a, b) => b.body.length - a.body.length).slice(0, flag('--all') ? Infinity : 15)
  .map((f) => ({ bytes: f.body.length, crate: f.family, name: clean(f.name) }));
const report = {
  wasm, code: { raw: code.raw, gzipShare: Math.round(code.gzip), gzipAlone: gzip9(Buffer.concat(shipped.funcs.map((f) => f.body))) },
  crates: rows, sections, glue, entry: glue.length ? { gzip: totalGzip + glueGzip } : null, largest, notes,
};

if (zlibTotals) notes.push('no gzip binary: gzip sizes from node:zlib, ~2% above gzip -9');

// ---- 5. Print. ----
if (flag('--json')) {
  console.log(JSON.stringify(report, null, 2));
} else {
  const n = (x) => (x == null ? '' : x.toLocaleString('en-US'));
  const line = (cells) => console.log(`| ${cells.join(' | ')} |`);
  console.log(`## ${SERVER ? 'Server' : 'Client'} .wasm: ${n(wasm.raw)} bytes raw, ${n(wasm.gzip)} bytes gzip -9\n`);
  line(['crate', 'functions', 'code bytes (raw)', 'gzip share', '%']);
  line(['---', '--:', '--:', '--:', '--:']);
  for (const r of rows) line([r.name, n(r.functions), n(r.raw), n(r.gzip), r.percent.toFixed(1)]);
  for (const r of sections) line([`**${r.name}**`, n(r.functions), n(r.raw), n(r.gzip), r.percent.toFixed(1)]);
  line(['**total .wasm** (gzip -9 of the whole file)', '', n(wasm.raw), n(wasm.gzip), '100.0']);
  for (const g of glue) line([`JS glue: ${g.file} (as last built)`, '', n(g.raw), n(g.gzip), '']);
  if (report.entry) line(['**client entry** (.wasm + JS glue, gzip)', '', '', n(report.entry.gzip), '']);
  console.log(`\nGzip shares: each section deflated alone, scaled to the file's gzip -9; crates within the code`
    + ` section likewise (code bodies alone: ${n(report.code.gzipAlone)} bytes gzip).`);
  console.log(`\n### ${flag('--all') ? 'All functions' : '15 largest functions'}\n`);
  line(['bytes', 'crate', 'function']);
  line(['--:', '---', '---']);
  const short = (name) => (!flag('--all') && name.length > 110 ? `${name.slice(0, 109)}…` : name);
  for (const f of largest) line([n(f.bytes), f.crate, `\`${short(f.name).replaceAll('|', '\\|')}\``]);
  for (const note of notes) console.log(`\nNOTE: ${note}`);
}
