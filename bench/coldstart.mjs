// Cold start and size.
//
//   node bench/coldstart.mjs      (COLDSTART_RUNS=15 fresh processes per row by default; about 20 s)
//
// Cold start: fresh `node` processes (one per sample, nothing else loaded), each timing with
// performance.now() one thing and printing it:
//   - import:  `await import('retry-fetch')`: resolves the package, loads index.node.js and the
//              glue it imports (retry_fetch.js, errors.js); the entry loads no wasm at import;
//   - first:   the same import, then a first call (`backoffDelays`, synchronous), which reads
//              retry_fetch_bg.wasm, compiles and instantiates it (initSync): import and first
//              call timed apart, and together;
//   - require: `require('retry-fetch')` (the CommonJS entry, which loads the wasm at require);
//   - wasm:    just the WebAssembly part, with the glue already imported and the bytes already
//              read: `new WebAssembly.Module(bytes)` (compile), then the glue's
//              `initSync({ module })` (instantiate + wasm-bindgen's start);
//   - peers:   `await import('ky')` and the others, for comparison (extra);
//   - floor:   `await import('./format.mjs')`, a small ES module with no imports: what a first
//              dynamic import of a small file costs in a fresh process, whatever it contains.
// The kinds are interleaved (import, wasm, ky, ..., import, wasm, ...), one process at a time;
// one unrecorded process of each kind runs first (file cache). Median and p90 per kind.
//
// Size: the files a browser loads for the client entry (index.browser.js, load-wasm.js, retry_fetch.js,
// retry_fetch_bg.wasm; the package's JS is minified by its build), raw and
// gzip -9 (zlib level 9, each file compressed on its own, as a server would send them), and
// the same for each peer: its main entry file alone and the whole module graph that entry
// loads (its relative imports and dependencies, followed statically: no tree-shaking, as
// published), and that graph minified with terser (the build's minifier) and concatenated:
// the like-for-like figure to compare with retry-fetch's.
//
// Prints markdown to stdout (progress to stderr) and writes bench/results/coldstart.json.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { gzipSync, constants as zc } from 'node:zlib';
import { goalsTable, median, percentile, table, fmtBytes, fmtKB, fmtMs } from './format.mjs';
import { log, machine, positiveInt, printMarkdown, writeResults } from './common.mjs';

const BENCH = fileURLToPath(new URL('.', import.meta.url));
const PKG = path.resolve(BENCH, 'node_modules/retry-fetch'); // a link to ../pkg
const RESULTS = path.join(BENCH, 'results/coldstart.json');
const RUNS = positiveInt(process.env.COLDSTART_RUNS, 15);
const GOALS = Object.freeze({ importMs: 8, gzipBytes: 40_000, gzipGoalBytes: 32_000 });
const PEERS = ['ky', 'p-retry', 'fetch-retry', 'cockatiel'];
const CLIENT_FILES = ['retry_fetch_bg.wasm', 'retry_fetch.js', 'index.browser.js', 'load-wasm.js'];

// ---------------------------------------------------------------------------------------------
// Cold start. Each child is `node --input-type=module -e CODE` run in bench/, so bare specifiers
// resolve through bench/node_modules, exactly as an application's import would.

const CHILD = {
  floor: `
    const t0 = performance.now();
    await import('./format.mjs');
    const t1 = performance.now();
    console.log(JSON.stringify({ ms: t1 - t0 }));`,
  import: `
    const t0 = performance.now();
    const m = await import('retry-fetch');
    const t1 = performance.now();
    if (typeof m.retryFetch !== 'function') throw new Error('no retryFetch export');
    console.log(JSON.stringify({ ms: t1 - t0 }));`,
  first: `
    const t0 = performance.now();
    const m = await import('retry-fetch');
    const t1 = performance.now();
    const delays = m.backoffDelays({ jitter: 'none' }, 1);
    const t2 = performance.now();
    if (delays.length !== 1) throw new Error('backoffDelays answered ' + JSON.stringify(delays));
    console.log(JSON.stringify({ ms: t2 - t0, importMs: t1 - t0, firstCallMs: t2 - t1 }));`,
  require: `
    import { createRequire } from 'node:module';
    const require = createRequire(import.meta.url);
    const t0 = performance.now();
    const m = require('retry-fetch');
    const t1 = performance.now();
    if (typeof m.retryFetch !== 'function') throw new Error('no retryFetch export');
    console.log(JSON.stringify({ ms: t1 - t0 }));`,
  wasm: `
    import { readFileSync } from 'node:fs';
    const g0 = performance.now();
    const wasmUrl = import.meta.resolve('retry-fetch/retry_fetch_bg.wasm');
    const glue = await import(new URL('./retry_fetch.js', wasmUrl).href);
    const g1 = performance.now();
    const bytes = readFileSync(new URL(wasmUrl));
    const t0 = performance.now();
    const module = new WebAssembly.Module(bytes);
    const t1 = performance.now();
    glue.initSync({ module });
    const t2 = performance.now();
    console.log(JSON.stringify({ ms: t2 - t0, compileMs: t1 - t0, instantiateMs: t2 - t1, glueImportMs: g1 - g0, readMs: t0 - g1, bytes: bytes.length }));`,
};
for (const peer of PEERS) {
  CHILD[`peer:${peer}`] = `
    const t0 = performance.now();
    await import(${JSON.stringify(peer)});
    const t1 = performance.now();
    console.log(JSON.stringify({ ms: t1 - t0 }));`;
}

function runChild(kind) {
  for (let attempt = 0; ; attempt += 1) {
    try {
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', CHILD[kind]], {
        cwd: BENCH, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000,
      });
      return JSON.parse(out.trim().split('\n').pop());
    } catch (err) {
      // pkg/ may be rebuilt by someone else while this runs: wait and try again.
      if (attempt >= 4) throw err;
      log(`${kind}: child failed (${String(err.stderr || err.message).trim().split('\n').pop()}), retrying`);
      execFileSync('sleep', ['2']);
    }
  }
}

function coldStart() {
  const kinds = Object.keys(CHILD);
  for (const kind of kinds) runChild(kind); // unrecorded: file cache
  const samples = Object.fromEntries(kinds.map((k) => [k, []]));
  for (let i = 0; i < RUNS; i += 1) {
    for (const kind of kinds) samples[kind].push(runChild(kind));
    if ((i + 1) % 5 === 0) log(`cold start: ${i + 1}/${RUNS} processes of each kind`);
  }
  const stat = (values) => ({ median: median(values), p90: percentile(values, 0.9), min: Math.min(...values), max: Math.max(...values) });
  const rows = {};
  for (const kind of kinds) {
    rows[kind] = { ...stat(samples[kind].map((s) => s.ms)), samples: samples[kind].map((s) => s.ms) };
  }
  rows.first.import = stat(samples.first.map((s) => s.importMs));
  rows.first.firstCall = stat(samples.first.map((s) => s.firstCallMs));
  rows.wasm.compile = stat(samples.wasm.map((s) => s.compileMs));
  rows.wasm.instantiate = stat(samples.wasm.map((s) => s.instantiateMs));
  rows.wasm.glueImport = stat(samples.wasm.map((s) => s.glueImportMs));
  rows.wasm.read = stat(samples.wasm.map((s) => s.readMs));
  rows.wasm.bytes = samples.wasm[samples.wasm.length - 1].bytes;
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Size.

const gz = (buf) => gzipSync(buf, { level: zc.Z_BEST_COMPRESSION }).length;

function fileSize(file) {
  const buf = readFileSync(file);
  return { file, raw: buf.length, gzip: gz(buf) };
}

function entryOf(dir) {
  const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const pick = (e) => {
    if (typeof e === 'string') return e;
    if (e && typeof e === 'object') {
      for (const k of ['.', 'browser', 'import', 'default', 'node']) if (k in e) { const r = pick(e[k]); if (r) return r; }
    }
    return null;
  };
  return path.join(dir, pick(pkg.exports) ?? pkg.module ?? pkg.main ?? 'index.js');
}

function resolveFrom(fromFile, spec) {
  if (spec.startsWith('node:')) return null;
  if (spec.startsWith('.') || spec.startsWith('/')) {
    const base = path.resolve(path.dirname(fromFile), spec);
    for (const f of [base, `${base}.js`, `${base}.mjs`, `${base}.cjs`, path.join(base, 'index.js')]) {
      if (existsSync(f) && statSync(f).isFile()) return f;
    }
    return null;
  }
  // A bare specifier: a dependency, looked up in node_modules from the importing file upwards.
  const name = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0];
  for (let dir = path.dirname(fromFile); ; dir = path.dirname(dir)) {
    const candidate = path.join(dir, 'node_modules', name);
    if (existsSync(path.join(candidate, 'package.json'))) {
      return spec === name ? entryOf(candidate) : resolveFrom(path.join(candidate, 'x'), `./${spec.slice(name.length + 1)}`);
    }
    if (dir === path.dirname(dir)) return null;
  }
}

/** The entry and every module it loads, followed statically (import/export from, import(), require()). */
function moduleGraph(entry) {
  const seen = new Set();
  const todo = [entry];
  const re = /(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)['"]([^'"\n]+)['"]/g;
  while (todo.length) {
    const file = todo.pop();
    if (seen.has(file)) continue;
    seen.add(file);
    const src = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
    for (const m of src.matchAll(re)) {
      const dep = resolveFrom(file, m[1]);
      if (dep && !seen.has(dep)) todo.push(dep);
    }
  }
  return [...seen];
}

/** The files minified one by one with terser (ES module first, script as a fallback), concatenated. */
async function minifiedConcat(files) {
  const { minify } = await import('terser');
  const parts = [];
  for (const f of files) {
    const code = readFileSync(f, 'utf8');
    let out;
    for (const module of [true, false]) {
      try {
        out = (await minify(code, { module, compress: { passes: 2 }, mangle: true, format: { comments: false } })).code;
        break;
      } catch {
        // try the other kind
      }
    }
    parts.push(out ?? code);
  }
  return Buffer.from(parts.join('\n'));
}

async function sizes() {
  const client = CLIENT_FILES.map((f) => ({ ...fileSize(path.join(PKG, f)), name: f }));
  const sum = (files, k) => files.reduce((a, f) => a + f[k], 0);
  const retryFetch = {
    files: client.map(({ name, raw, gzip }) => ({ name, raw, gzip })),
    raw: sum(client, 'raw'),
    gzip: sum(client, 'gzip'),
  };
  const peers = [];
  for (const name of PEERS) {
    const dir = path.join(BENCH, 'node_modules', name);
    const version = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
    const entry = entryOf(dir);
    const files = moduleGraph(entry);
    const graph = files.map(fileSize);
    const e = fileSize(entry);
    peers.push({
      name, version,
      entry: path.relative(dir, entry),
      entryRaw: e.raw, entryGzip: e.gzip,
      graphFiles: graph.map((f) => path.relative(path.join(BENCH, 'node_modules'), f.file)),
      graphRaw: sum(graph, 'raw'), graphGzip: sum(graph, 'gzip'),
      graphConcatGzip: gz(Buffer.concat(graph.map((f) => readFileSync(f.file)))),
      graphMinGzip: gz(await minifiedConcat(files)),
    });
  }
  return { retryFetch, peers };
}

// ---------------------------------------------------------------------------------------------

export function sizeTables(size) {
  const a = table(['retry-fetch client entry file', 'raw bytes', 'gzip -9 bytes'], [
    ...size.retryFetch.files.map((f) => [`pkg/${f.name}`, fmtBytes(f.raw), fmtBytes(f.gzip)]),
    ['**total** (wasm + JS glue)', `**${fmtBytes(size.retryFetch.raw)}**`, `**${fmtBytes(size.retryFetch.gzip)}**`],
  ]);
  const b = table(['library', 'main entry', 'entry raw', 'entry gzip -9', 'modules loaded', 'all loaded raw',
    'all loaded gzip -9 (per file)', 'all loaded gzip -9 (concatenated)', 'all loaded, minified (terser), gzip -9'],
  size.peers.map((p) => [`${p.name} ${p.version}`, p.entry, fmtBytes(p.entryRaw), fmtBytes(p.entryGzip),
    String(p.graphFiles.length), fmtBytes(p.graphRaw), fmtBytes(p.graphGzip), fmtBytes(p.graphConcatGzip),
    p.graphMinGzip === undefined ? 'n/a' : fmtBytes(p.graphMinGzip)]));
  return `${a}\n\n${b}`;
}

export function coldTable(cold) {
  const rows = [
    // Results from before the entry loaded the wasm on first use have no `first` row.
    [cold.first
      ? '`await import(\'retry-fetch\')` (resolve, load the JS entry and glue; no wasm yet)'
      : '`await import(\'retry-fetch\')` (resolve, load the JS, read + compile + instantiate the wasm)', cold.import],
    ...(cold.first ? [
      ['import, then the first call (`backoffDelays`: reads, compiles and instantiates the wasm)', cold.first],
      ['… of which the first call', cold.first.firstCall],
    ] : []),
    ...(cold.require ? [['`require(\'retry-fetch\')` (the CommonJS entry: loads the wasm at require)', cold.require]] : []),
    ['WebAssembly only: compile + instantiate (`new WebAssembly.Module` + `initSync`)', cold.wasm],
    ['… of which compile (`new WebAssembly.Module`)', cold.wasm.compile],
    ['… of which instantiate + start (`initSync({ module })`)', cold.wasm.instantiate],
    ['for reference: `import()` of the glue `retry_fetch.js` alone (no wasm)', cold.wasm.glueImport],
    ['for reference: `readFileSync` of the .wasm', cold.wasm.read],
    ['floor: `import()` of a small ES module without imports (`bench/format.mjs`)', cold.floor],
    ...PEERS.filter((p) => cold[`peer:${p}`]).map((p) => [`\`await import('${p}')\` (extra, for comparison)`, cold[`peer:${p}`]]),
  ];
  return table(['measured in a fresh process', 'median ms', 'p90 ms', 'min ms', 'max ms'],
    rows.map(([label, s]) => [label, fmtMs(s.median), fmtMs(s.p90), fmtMs(s.min), fmtMs(s.max)]));
}

export function coldGoals(cold, size) {
  return [
    {
      goal: "cold start: `await import('retry-fetch')` in Node, median",
      target: `≤ ${GOALS.importMs} ms`,
      measured: `${fmtMs(cold.import.median)} ms (p90 ${fmtMs(cold.import.p90)})`,
      met: cold.import.median <= GOALS.importMs ? 'met' : 'NOT met',
    },
    {
      goal: 'size: client entry (wasm + JS glue), gzip -9',
      target: `≤ ${GOALS.gzipBytes / 1000} kB gzip (goal ${GOALS.gzipGoalBytes / 1000})`,
      measured: `${fmtKB(size.retryFetch.gzip)} (${fmtBytes(size.retryFetch.gzip)} B)`,
      met: size.retryFetch.gzip <= GOALS.gzipBytes ? 'met' : 'NOT met',
    },
  ];
}

async function main() {
  const started = performance.now();
  const size = await sizes();
  log(`cold start: ${RUNS} fresh processes per kind (${Object.keys(CHILD).join(', ')})`);
  const cold = coldStart();
  const goals = coldGoals(cold, size);
  const totalSeconds = (performance.now() - started) / 1000;
  const meta = {
    ...machine(),
    runs: RUNS,
    goals: GOALS,
  };

  const out = [];
  out.push(`## Size (gzip -9 = zlib level 9, each file on its own)`);
  out.push('');
  out.push(sizeTables(size));
  out.push('');
  out.push(`## Cold start (${RUNS} fresh processes per row; Node ${process.version}, ${meta.cpus} cores)`);
  out.push('');
  out.push(coldTable(cold));
  out.push('');
  out.push(goalsTable(goals));
  out.push('');
  out.push(`Run took ${totalSeconds.toFixed(0)} s.`);
  await printMarkdown(out);

  writeResults(RESULTS, { ...meta, size, cold, goalResults: goals, totalSeconds });
}

if (process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) await main();
