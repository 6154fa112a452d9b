// The retry-fetch demo server (plain Node 20; the payments API uses the package's server
// companion, see payments-api.mjs).
//
//   node www/server.mjs [--port N]        (or PORT=N; 0 picks a free port; default 8080)
//   DATABASE_URL=postgres://... node www/server.mjs   keeps the idempotency keys in PostgreSQL
//                                         (PostgresStore; the embedded MemoryStore otherwise)
//
// Serves, on http://127.0.0.1:PORT:
//   /                  the demo page (files of www/)
//   /pkg/...           the built npm package (files of ../pkg: run `make pkg` first)
//   /api/flaky         a flaky endpoint, any method:
//                        ?run=<id>      the scenario id: hits are counted per run
//                        &fail=<n>      the first n hits of that run fail (default 2, 0..50)
//                        &mode=<m>      how they fail:
//                                         503    503 Service Unavailable
//                                         429    429 Too Many Requests + Retry-After: <ra>
//                                         reset  the socket is destroyed (a network error)
//                                         slow   the answer comes after <delay> ms (a timeout
//                                                for a client with timeoutMs < delay)
//                        &ra=<s>        Retry-After seconds for 429 (default 1)
//                        &delay=<ms>    the delay of `slow` (default 2000)
//                      then answers 200 JSON {run, hit, method, idempotencyKey, ...}.
//   /api/payments, /api/ledger, /api/ledger/reset, /api/faults
//                      the exactly-once payments API (payments-api.mjs): a charge handler
//                      behind the idempotency companion, its ledger, and the faults the page
//                      switches on in front of it.
//
// Every response carries `Connection: close`, so Chromium never transparently re-sends a
// request on a reused keep-alive socket (which would hide a `reset` from the page).
//
// In-process use (tests): `const s = await startDemoServer({ port: 0 }); ... await s.close();`
import http from 'node:http';
import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readBody } from './read-body.mjs';

const WWW_DIR = fileURLToPath(new URL('.', import.meta.url));
const PKG_DIR = fileURLToPath(new URL('../pkg/', import.meta.url));
const NOT_BUILT = 'pkg/ is not built: run `make pkg` (or `bash scripts/build-pkg.sh`) first.';

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.ts': 'text/plain; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.md': 'text/plain; charset=utf-8',
};

const MAX_RUNS = 1000; // hit counters kept (oldest forgotten first)
const MAX_FAIL = 50;
const MAX_SLOW_MS = 30_000;

/** Is the package built? */
export function pkgBuilt(pkgDir = PKG_DIR) {
  return existsSync(join(pkgDir, 'index.browser.js')) && existsSync(join(pkgDir, 'retry_fetch_bg.wasm'));
}

function send(res, status, body, headers = {}) {
  if (res.headersSent || res.destroyed) return;
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const type = typeof body === 'string' ? 'text/plain; charset=utf-8' : 'application/json; charset=utf-8';
  res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store', ...headers });
  res.end(text);
}

function intParam(params, name, fallback, min, max) {
  const raw = params.get(name);
  if (raw === null || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) return null;
  return n;
}

/** Serves a file below `root`, or 404. */
async function serveFile(res, root, relPath, { notFound = 'not found' } = {}) {
  const base = resolve(root);
  const file = resolve(base, '.' + sep + normalize(relPath));
  if (file !== base && !file.startsWith(base + sep)) return send(res, 403, 'forbidden');
  try {
    let path = file;
    if ((await stat(path)).isDirectory()) path = join(path, 'index.html');
    const body = await readFile(path);
    res.writeHead(200, { 'Content-Type': TYPES[extname(path)] ?? 'application/octet-stream', 'Cache-Control': 'no-store' });
    res.end(body);
  } catch {
    send(res, 404, notFound);
  }
}

/** The flaky endpoint: the first `fail` hits of `run` fail as `mode`, then 200. */
function createFlaky({ timers }) {
  const hits = new Map(); // run -> count (insertion order = age)

  return async function flaky(req, res, url) {
    const p = url.searchParams;
    const mode = p.get('mode') ?? '503';
    const fail = intParam(p, 'fail', 2, 0, MAX_FAIL);
    const ra = intParam(p, 'ra', 1, 0, 3600);
    const delay = intParam(p, 'delay', 2000, 0, MAX_SLOW_MS);
    if (!['503', '429', 'reset', 'slow'].includes(mode)) return send(res, 400, { error: 'mode must be 503, 429, reset or slow' });
    if (fail === null) return send(res, 400, { error: `fail must be an integer from 0 to ${MAX_FAIL}` });
    if (ra === null) return send(res, 400, { error: 'ra must be an integer number of seconds (0 to 3600)' });
    if (delay === null) return send(res, 400, { error: `delay must be an integer from 0 to ${MAX_SLOW_MS} (ms)` });

    const run = (p.get('run') ?? 'default').slice(0, 100);
    const body = await readBody(req);
    const hit = (hits.get(run) ?? 0) + 1;
    hits.delete(run);
    hits.set(run, hit);
    if (hits.size > MAX_RUNS) hits.delete(hits.keys().next().value);

    const idempotencyKey = req.headers['idempotency-key'] ?? null;
    const info = { run, hit, method: req.method, idempotencyKey };
    const failing = hit <= fail;

    if (failing && mode === 'reset') {
      req.socket.destroy();
      return;
    }
    if (failing && mode === '503') {
      return send(res, 503, { ...info, error: 'service unavailable (injected)' });
    }
    if (failing && mode === '429') {
      return send(res, 429, { ...info, error: 'too many requests (injected)' }, { 'Retry-After': String(ra) });
    }
    if (failing && mode === 'slow') {
      await new Promise((done) => {
        const t = setTimeout(() => { timers.delete(t); done(); }, delay);
        timers.add(t);
        res.on('close', () => { clearTimeout(t); timers.delete(t); done(); });
      });
      return send(res, 200, { ...info, ok: true, slow: true, delayedMs: delay, body: body || undefined });
    }
    send(res, 200, { ...info, ok: true, body: body || undefined, servedAt: new Date().toISOString() });
  };
}

/**
 * The payments API (payments-api.mjs), which imports the package's server companion from
 * ../pkg/server.js. Without a built package the rest of the demo still starts, and the
 * payments routes answer 503 with the reason.
 */
async function loadPaymentsApi({ timers }) {
  try {
    const { createPaymentsApi, createDemoStorage } = await import('./payments-api.mjs');
    const storage = await createDemoStorage();
    const api = createPaymentsApi({ timers, storage });
    api.close = storage.close;
    return api;
  } catch (e) {
    const reason = `the payments API is unavailable: ${NOT_BUILT} (${e.message})`;
    const paths = new Set(['/api/payments', '/api/ledger', '/api/ledger/reset', '/api/faults']);
    return {
      error: reason,
      async handle(req, res, path) {
        if (!paths.has(path)) return false;
        send(res, 503, { error: reason });
        return true;
      },
    };
  }
}

/**
 * Starts the demo server. Resolves with `{ url, port, server, pkgBuilt, payments, close() }`.
 * `close()` stops listening, destroys open sockets and clears pending timers.
 */
export async function startDemoServer({ port = 0, host = '127.0.0.1', wwwDir = WWW_DIR, pkgDir = PKG_DIR } = {}) {
  const sockets = new Set();
  const timers = new Set();
  const flaky = createFlaky({ timers });
  const payments = await loadPaymentsApi({ timers });

  const server = http.createServer(async (req, res) => {
    res.setHeader('Connection', 'close');
    let url;
    try {
      url = new URL(req.url, 'http://localhost');
    } catch {
      return send(res, 400, 'bad request');
    }
    let path;
    try {
      path = decodeURIComponent(url.pathname);
    } catch {
      return send(res, 400, 'bad path');
    }
    try {
      if (path === '/api/flaky') return await flaky(req, res, url);
      if (await payments.handle(req, res, path)) return;
      if (path === '/api/health') return send(res, 200, { ok: true, pkgBuilt: pkgBuilt(pkgDir) });
      if (path.startsWith('/api/')) return send(res, 404, { error: 'no such endpoint' });
      if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed', { Allow: 'GET, HEAD' });
      if (path === '/pkg' || path.startsWith('/pkg/')) {
        return await serveFile(res, pkgDir, path.slice(4) || '/', { notFound: pkgBuilt(pkgDir) ? 'not found' : NOT_BUILT });
      }
      if (extname(path) === '.mjs') return send(res, 404, 'not found'); // server-side modules
      return await serveFile(res, wwwDir, path);
    } catch (e) {
      send(res, e.status ?? 500, { error: String(e.message ?? e) });
    }
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((ok, fail) => {
    server.once('error', fail);
    server.listen(port, host, () => { server.off('error', fail); ok(); });
  });
  const realPort = server.address().port;
  let closing = null;
  return {
    url: `http://${host}:${realPort}`,
    port: realPort,
    server,
    pkgBuilt: pkgBuilt(pkgDir),
    payments,
    close() {
      closing ??= new Promise((done) => {
        for (const t of timers) clearTimeout(t);
        timers.clear();
        server.close(() => Promise.resolve(payments.close?.()).catch(() => {}).then(done));
        for (const s of sockets) s.destroy();
        server.closeAllConnections?.();
      });
      return closing;
    },
  };
}

function parsePort(argv, env) {
  let raw = env.PORT ?? '8080';
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--port' || argv[i] === '-p') raw = argv[++i];
    else if (argv[i].startsWith('--port=')) raw = argv[i].slice(7);
    else if (argv[i] === '--help' || argv[i] === '-h') {
      console.log('usage: node www/server.mjs [--port N]   (or PORT=N; 0 picks a free port; default 8080)');
      process.exit(0);
    } else {
      console.error(`retry-fetch demo: unknown argument ${argv[i]} (usage: node www/server.mjs [--port N])`);
      process.exit(2);
    }
  }
  const port = Number(raw);
  if (raw === undefined || raw === '' || !Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`retry-fetch demo: invalid port ${JSON.stringify(raw)} (an integer from 0 to 65535)`);
    process.exit(2);
  }
  return port;
}

async function main() {
  const port = parsePort(process.argv.slice(2), process.env);
  if (!pkgBuilt()) console.error(`retry-fetch demo: warning: ${NOT_BUILT}`);
  let demo;
  try {
    demo = await startDemoServer({ port });
  } catch (e) {
    const why = e.code === 'EADDRINUSE' ? `port ${port} is in use (try --port 0 or PORT=...)` : e.message;
    console.error(`retry-fetch demo: cannot listen: ${why}`);
    process.exit(1);
  }
  if (demo.payments.error) console.error(`retry-fetch demo: warning: ${demo.payments.error}`);
  console.log(`retry-fetch demo: ${demo.url}`);
  if (demo.payments.storage) console.log(`retry-fetch demo: idempotency keys in ${demo.payments.storage === 'postgres' ? 'PostgreSQL (DATABASE_URL)' : 'memory (set DATABASE_URL to use PostgreSQL)'}`);
  console.log('Press Ctrl-C to stop.');
  const stop = (signal) => {
    console.log(`\nretry-fetch demo: ${signal}, stopping.`);
    const force = setTimeout(() => process.exit(0), 2000);
    force.unref();
    demo.close().then(() => process.exit(0));
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await main();
}
