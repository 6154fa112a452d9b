// The storm server: a small HTTP service on 127.0.0.1 that sheds load the way a real one does.
//
// Limits (each one an option, and a flag on the command line; 0 or absent = no limit of that kind):
//   - rate (ratePerSec, --rate): a token bucket refilled continuously at this many tokens/s, with
//     a capacity of `burst` tokens (burst, --burst; full at start). A request that finds no
//     token gets 503 at once.
//   - concurrency (maxInService, --concurrency): a request that arrives while this many requests
//     are in service gets 503 at once.
//   - service time (serviceMs, --service-ms): a request let through gets 200 "ok" this much later.
//   - Retry-After (retryAfterSec, --retry-after): every 503 carries `Retry-After: <seconds>`;
//     absent, the 503s carry none and what is measured is each client's own backoff.
//   - capacity change (halveAfterMs, --halve-after-ms): this many ms after the FIRST request the
//     server saw, the rate halves (and so does the concurrency limit, rounded down, at least 1).
//   - outage (--outage): every request gets 503 at once.
// The concurrency limit is checked first, then the bucket; a 503 takes no token and no slot.
//
// Presets (`mode`, or the first word on the command line), which the options above override:
//   rate-limited         rate 400/s, burst 20, service 5 ms, no concurrency limit
//   concurrency-limited  at most 8 in service, service 20 ms (so ~400 req/s), no rate limit
//   shedding             rate-limited, and every 503 carries Retry-After: 1
//   halving              rate-limited, the rate halves to 200/s 250 ms after the first request
//   outage               every request gets 503
//   storm                (the default; the former herd server) rate 400/s, burst 20, at most 8
//                        in service, service 5 ms
//   custom               no limit (burst 20, service 5 ms): the options set the limits; the
//                        command line uses it when it names no preset but sets a limit
//
// Every request is counted (`seen`), whatever it was answered, and so is every refusal among the
// first `firstWave` (200) requests the server saw: with 200 clients starting at once, that is the
// share of the first wave that no client could have avoided. The server also counts the TCP
// connections it accepted and the largest number open at once, which shows whether the client
// side queued requests behind a connection limit (see README.md).
//
// Used in three ways:
//   - `startStormServer(opts)`: in this thread (returns { url, port, options, stats(),
//     reset(changes), close() }; `reset()` zeroes the counters (it returns those before), fills
//     the bucket and restarts the capacity change's clock, after the warm rows' healthy
//     traffic; `changes` may set `halveAfterMs`);
//   - `spawnStormServer()`: in a worker thread, so the server's event loop is not the one that
//     runs the 200 clients (the benchmark uses this; returns { start(opts), stop(id), stats(id),
//     reset(id, changes), terminate() });
//   - `node bench/storm-server.mjs [preset] [--rate N] [--burst N] [--concurrency N]
//     [--service-ms N] [--retry-after S] [--halve-after-ms N] [--outage] [--port N]`: standalone,
//     prints its URL (`--help` for the details).
// `idealMs(opts, n)` is the least time the server needs to serve n requests (see below).
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

/** What a preset leaves unset. */
const BASE = Object.freeze({
  ratePerSec: 0,
  burst: 20,
  maxInService: 0,
  serviceMs: 5,
  retryAfterSec: null,
  halveAfterMs: null,
  outage: false,
  firstWave: 200,
  port: 0,
});

export const PRESETS = Object.freeze({
  storm: Object.freeze({ ratePerSec: 400, burst: 20, maxInService: 8, serviceMs: 5 }),
  'rate-limited': Object.freeze({ ratePerSec: 400, burst: 20, serviceMs: 5 }),
  'concurrency-limited': Object.freeze({ maxInService: 8, serviceMs: 20 }),
  shedding: Object.freeze({ ratePerSec: 400, burst: 20, serviceMs: 5, retryAfterSec: 1 }),
  halving: Object.freeze({ ratePerSec: 400, burst: 20, serviceMs: 5, halveAfterMs: 250 }),
  outage: Object.freeze({ outage: true }),
  custom: Object.freeze({}), // no limit until options set one
});

const KEYS = Object.keys(BASE);

/**
 * The options a server runs with: the preset named by `mode` ('storm' when absent), then every
 * option given that is not undefined. Throws a TypeError on an unknown mode or option, or a value
 * out of range.
 */
export function resolveOptions(options = {}) {
  const mode = options.mode ?? 'storm';
  if (!Object.hasOwn(PRESETS, mode)) {
    throw new TypeError(`unknown mode ${JSON.stringify(mode)}; expected one of ${Object.keys(PRESETS).join(', ')}`);
  }
  const o = { mode, ...BASE, ...PRESETS[mode] };
  for (const [k, v] of Object.entries(options)) {
    if (k === 'mode' || v === undefined) continue;
    if (!KEYS.includes(k)) throw new TypeError(`unknown option ${JSON.stringify(k)}; expected one of mode, ${KEYS.join(', ')}`);
    o[k] = v;
  }
  const num = (k, ok, what) => {
    if (typeof o[k] !== 'number' || !Number.isFinite(o[k]) || !ok(o[k])) {
      throw new TypeError(`option ${k}: expected ${what}, got ${JSON.stringify(o[k])}`);
    }
  };
  num('ratePerSec', (x) => x >= 0, 'a number ≥ 0 (0 = no rate limit)');
  num('maxInService', (x) => Number.isInteger(x) && x >= 0, 'an integer ≥ 0 (0 = no concurrency limit)');
  num('serviceMs', (x) => x >= 0, 'a number ≥ 0');
  num('firstWave', (x) => Number.isInteger(x) && x > 0, 'an integer > 0');
  num('port', (x) => Number.isInteger(x) && x >= 0 && x < 65536, 'a port number');
  if (o.ratePerSec > 0) num('burst', (x) => x >= 1, 'a number ≥ 1 with a rate limit');
  if (o.retryAfterSec != null) num('retryAfterSec', (x) => Number.isInteger(x) && x >= 0, 'an integer ≥ 0 or null');
  if (o.halveAfterMs != null) num('halveAfterMs', (x) => x >= 0, 'a number ≥ 0 or null');
  o.outage = Boolean(o.outage);
  return o;
}

/** The former herd server's settings (the 'storm' preset), kept for callers of the old API. */
export const DEFAULTS = Object.freeze({ ...resolveOptions({ mode: 'storm' }) });

/** The concurrency limit after the capacity change. */
const halvedConcurrency = (n) => (n > 0 ? Math.max(1, Math.floor(n / 2)) : 0);

/**
 * The least time, in ms from the first request, in which the server can serve `n` requests: an
 * ideal client sends each request at the first moment the server would accept it (a token in
 * the bucket and a free slot, the capacity change included) and the last one ends `serviceMs`
 * later. `Infinity` for an outage; with no limit at all, `serviceMs`.
 */
export function idealMs(options, n = 200) {
  const o = resolveOptions(options);
  if (o.outage) return Infinity;
  const H = o.halveAfterMs ?? Infinity;
  const rate = (t) => (t >= H ? o.ratePerSec / 2 : o.ratePerSec);
  const limit = (t) => (t >= H ? halvedConcurrency(o.maxInService) : o.maxInService);
  let t = 0;
  let tokens = o.burst;
  const refill = (from, to) => { // tokens at `to`, given `tokens` at `from`
    let x = tokens;
    if (from < H && to > H) {
      x = Math.min(o.burst, x + ((H - from) * rate(from)) / 1000);
      from = H;
    }
    return Math.min(o.burst, x + ((to - from) * rate(from)) / 1000);
  };
  const tokenAt = (from) => { // first time ≥ from with a whole token
    let x = tokens;
    let at = from;
    if (x >= 1) return at;
    if (at < H) {
      const need = ((1 - x) * 1000) / rate(at);
      if (at + need <= H) return at + need;
      x += ((H - at) * rate(at)) / 1000;
      at = H;
    }
    return at + ((1 - x) * 1000) / rate(at);
  };
  const ends = []; // end of service of each request, in order (constant service: FIFO)
  for (let i = 0; i < n; i += 1) {
    for (let guard = 0; guard < 16; guard += 1) { // a slot, a token or the change may move t
      let next = t;
      if (o.ratePerSec > 0) next = Math.max(next, tokenAt(t));
      const lim = limit(next);
      if (lim > 0) {
        const busy = ends.filter((e) => e > next).sort((a, b) => a - b);
        if (busy.length >= lim) next = Math.max(next, busy[busy.length - lim]);
      }
      if (o.ratePerSec > 0) tokens = refill(t, next);
      const moved = next !== t;
      t = next;
      if (!moved) break;
    }
    if (o.ratePerSec > 0) tokens -= 1;
    ends.push(t + o.serviceMs);
  }
  return n > 0 ? Math.max(...ends) : 0;
}

/** A one-line description of a server's limits. */
export function describe(options) {
  const o = resolveOptions(options);
  if (o.outage) return `503 to every request${o.retryAfterSec != null ? ` (Retry-After: ${o.retryAfterSec})` : ''}`;
  const parts = [];
  if (o.ratePerSec > 0) parts.push(`a token bucket of ${o.ratePerSec} req/s (capacity ${o.burst})`);
  if (o.maxInService > 0) parts.push(`at most ${o.maxInService} in service`);
  const limits = parts.length ? parts.join(' and ') : 'no limit';
  const change = o.halveAfterMs != null
    ? `; ${o.halveAfterMs} ms after the first request ${[o.ratePerSec > 0 && `the rate halves to ${o.ratePerSec / 2} req/s`, o.maxInService > 0 && `the concurrency limit falls to ${halvedConcurrency(o.maxInService)}`].filter(Boolean).join(' and ')}`
    : '';
  return `${limits}, service ${o.serviceMs} ms; over it, 503 at once ${o.retryAfterSec != null ? `with Retry-After: ${o.retryAfterSec}` : 'without Retry-After'}${change}`;
}

/** Starts a storm server in this thread. Resolves when it listens. */
export function startStormServer(options = {}) {
  let o;
  try { o = resolveOptions(options); } catch (err) { return Promise.reject(err); }
  const counters = () => ({
    seen: 0, ok: 0, rejectedBusy: 0, rejectedBucket: 0, rejectedOutage: 0,
    firstWave: o.firstWave, firstWaveRefused: 0, lastOkMs: null,
    connections: 0, openConnections: 0, peakOpenConnections: 0, peakInService: 0,
  });
  const c = counters();
  let inService = 0;
  let tokens = o.burst;
  let refilledAt = performance.now();
  let firstAt = null; // when the first request arrived (the capacity change counts from here)
  // After healthy traffic (the warm rows): the counters from zero, the bucket full, the
  // capacity change counted from the next request (`halveAfterMs` may be set here, so the
  // healthy traffic meets the server before its change); connections stay open.
  const reset = (changes = {}) => {
    if (changes.halveAfterMs !== undefined) {
      o = resolveOptions({ ...o, halveAfterMs: changes.halveAfterMs });
    }
    const before = { ...c };
    const open = c.openConnections;
    Object.assign(c, counters(), { openConnections: open, peakOpenConnections: open, peakInService: inService });
    tokens = o.burst;
    refilledAt = performance.now();
    firstAt = null;
    return before; // the counters of the traffic before
  };

  const halveAt = () => (o.halveAfterMs == null || firstAt == null ? Infinity : firstAt + o.halveAfterMs);
  const rateAt = (t) => (t >= halveAt() ? o.ratePerSec / 2 : o.ratePerSec);
  const takeToken = (now) => {
    const h = halveAt();
    if (refilledAt < h && now > h) { // refill at the old rate up to the change, at the new after
      tokens = Math.min(o.burst, tokens + ((h - refilledAt) * o.ratePerSec) / 1000);
      refilledAt = h;
    }
    tokens = Math.min(o.burst, tokens + ((now - refilledAt) * rateAt(refilledAt)) / 1000);
    refilledAt = now;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  };
  const refusal = { 'content-type': 'text/plain', 'content-length': 0 };
  if (o.retryAfterSec != null) refusal['retry-after'] = String(o.retryAfterSec);
  const refuse = (res, cause, firstWave) => {
    c[cause] += 1;
    if (firstWave) c.firstWaveRefused += 1;
    res.writeHead(503, refusal);
    res.end();
  };

  const server = http.createServer((req, res) => {
    const now = performance.now();
    if (firstAt == null) firstAt = now;
    c.seen += 1;
    const firstWave = c.seen <= o.firstWave;
    req.resume(); // no request bodies here, but never leave one unread
    if (o.outage) { refuse(res, 'rejectedOutage', firstWave); return; }
    const limit = now >= halveAt() ? halvedConcurrency(o.maxInService) : o.maxInService;
    if (limit > 0 && inService >= limit) { refuse(res, 'rejectedBusy', firstWave); return; }
    if (o.ratePerSec > 0 && !takeToken(now)) { refuse(res, 'rejectedBucket', firstWave); return; }
    inService += 1;
    if (inService > c.peakInService) c.peakInService = inService;
    setTimeout(() => {
      inService -= 1;
      c.ok += 1;
      c.lastOkMs = performance.now() - firstAt;
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 });
      res.end('ok');
    }, o.serviceMs);
  });
  // Keep idle keep-alive connections well past a round, so no connection is closed by the
  // server while a client is about to reuse it (a reset would be a network error, not a 503).
  server.keepAliveTimeout = 60_000;
  server.headersTimeout = 61_000;
  server.requestTimeout = 0;
  server.on('connection', (socket) => {
    c.connections += 1;
    c.openConnections += 1;
    if (c.openConnections > c.peakOpenConnections) c.peakOpenConnections = c.openConnections;
    socket.setNoDelay(true);
    socket.on('close', () => { c.openConnections -= 1; });
  });

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, '127.0.0.1', 511, () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}/`,
        port,
        options: o,
        stats: () => ({ ...c }),
        reset,
        close: () => new Promise((done) => {
          server.closeAllConnections();
          server.close(() => done({ ...c }));
        }),
      });
    });
  });
}

/**
 * Runs storm servers in a worker thread. `start(opts)` starts a fresh server and resolves with
 * `{ id, url, options }`; `stop(id)` closes it (and every connection to it) and resolves with its
 * counters. Several servers may run at once.
 */
export function spawnStormServer() {
  const worker = new Worker(fileURLToPath(import.meta.url), { workerData: { stormServerWorker: true } });
  worker.unref();
  let nextId = 1;
  const pending = new Map();
  worker.on('message', ({ id, result, error }) => {
    const p = pending.get(id);
    if (!p) return;
    pending.delete(id);
    if (error) p.reject(new Error(error)); else p.resolve(result);
  });
  worker.on('error', (err) => { for (const p of pending.values()) p.reject(err); pending.clear(); });
  const call = (op, arg) => new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    worker.postMessage({ id, op, arg });
  });
  return {
    start: (options) => call('start', options),
    stop: (serverId) => call('stop', serverId),
    stats: (serverId) => call('stats', serverId),
    reset: (serverId, changes) => call('reset', { id: serverId, changes }),
    terminate: () => worker.terminate(),
  };
}

// ---------------------------------------------------------------------------------------------
// Command line.

const HELP = `Usage: node bench/storm-server.mjs [preset] [port] [options]

A storm server on 127.0.0.1; prints its URL on stdout, its settings on stderr, and its counters
on Ctrl-C. The preset sets every limit; the options override it.

Presets: ${Object.keys(PRESETS).join(', ')} (default: storm; custom when an option below
sets a limit and no preset is named)
${Object.entries(PRESETS).map(([k, v]) => `  ${k.padEnd(20)} ${describe({ mode: k })}`).join('\n')}

Options (0 = no limit of that kind; "none" removes a Retry-After or a change a preset sets):
  --rate N            token bucket refill, requests/s
  --burst N           token bucket capacity (full at start)
  --concurrency N     most requests in service at once
  --service-ms N      time to serve a request let through
  --retry-after S     send Retry-After: S (whole seconds) with every 503
  --halve-after-ms N  halve the rate and the concurrency limit N ms after the first request
  --outage            503 to every request
  --first-wave N      count the refusals among the first N requests (default 200)
  --port N            port (default 0: chosen by the OS)
  --help              this text

Example: node bench/storm-server.mjs --rate 400 --burst 20 --concurrency 8 --service-ms 20 \\
           --retry-after 1 --halve-after-ms 250 --port 0
`;

/** Command-line arguments -> options for startStormServer. Throws a TypeError on a bad one. */
export function parseCommandLine(argv) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      rate: { type: 'string' },
      burst: { type: 'string' },
      concurrency: { type: 'string' },
      'service-ms': { type: 'string' },
      'retry-after': { type: 'string' },
      'halve-after-ms': { type: 'string' },
      'first-wave': { type: 'string' },
      outage: { type: 'boolean' },
      port: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return { help: true };
  if (positionals.length > 2) throw new TypeError(`unexpected argument ${positionals[2]}`);
  const number = (flag, nullable = false) => {
    const v = values[flag];
    if (v === undefined) return undefined;
    if (nullable && (v === 'none' || v === 'off')) return null;
    const x = Number(v);
    if (v.trim() === '' || !Number.isFinite(x)) throw new TypeError(`--${flag}: expected a number, got ${JSON.stringify(v)}`);
    return x;
  };
  let [mode, port] = positionals;
  if (mode !== undefined && /^\d+$/.test(mode) && port === undefined) [mode, port] = [undefined, mode];
  // Limits without a preset: start from no limit at all rather than from the 'storm' preset.
  const limitFlags = ['rate', 'burst', 'concurrency', 'service-ms', 'retry-after', 'halve-after-ms', 'outage'];
  if (mode === undefined && limitFlags.some((f) => values[f] !== undefined)) mode = 'custom';
  if (port !== undefined && values.port !== undefined) throw new TypeError('the port is given twice');
  const options = {
    mode,
    ratePerSec: number('rate'),
    burst: number('burst'),
    maxInService: number('concurrency'),
    serviceMs: number('service-ms'),
    retryAfterSec: number('retry-after', true),
    halveAfterMs: number('halve-after-ms', true),
    firstWave: number('first-wave'),
    outage: values.outage,
    port: port !== undefined ? Number(port) : number('port'),
  };
  resolveOptions(options); // fail here, with the flag's value, rather than in listen()
  return options;
}

if (!isMainThread && workerData?.stormServerWorker) {
  const servers = new Map();
  let nextServerId = 1;
  const get = (serverId) => {
    const srv = servers.get(serverId);
    if (!srv) throw new Error(`no storm server ${serverId}`);
    return srv;
  };
  parentPort.on('message', async ({ id, op, arg }) => {
    try {
      let result;
      if (op === 'start') {
        const srv = await startStormServer(arg);
        const serverId = nextServerId++;
        servers.set(serverId, srv);
        result = { id: serverId, url: srv.url, options: srv.options };
      } else if (op === 'stop') {
        const srv = get(arg);
        servers.delete(arg);
        result = await srv.close();
      } else if (op === 'stats') {
        result = get(arg).stats();
      } else if (op === 'reset') {
        result = get(arg.id).reset(arg.changes);
      } else {
        throw new Error(`unknown op ${op}`);
      }
      parentPort.postMessage({ id, result });
    } catch (err) {
      parentPort.postMessage({ id, error: String(err?.stack ?? err) });
    }
  });
} else if (isMainThread && process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  let options;
  try {
    options = parseCommandLine(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`storm-server: ${err.message} (--help for the usage)\n`);
    process.exit(2);
  }
  if (options.help) {
    process.stdout.write(HELP);
  } else {
    const srv = await startStormServer(options);
    console.log(srv.url);
    const ideal = idealMs(srv.options, srv.options.firstWave);
    console.error(`storm server (${srv.options.mode}): ${describe(srv.options)}`);
    console.error(`  ${JSON.stringify(srv.options)}`);
    if (Number.isFinite(ideal)) console.error(`  ideal for ${srv.options.firstWave} requests: ${ideal.toFixed(0)} ms`);
    console.error('  Ctrl-C stops it and prints its counters');
    process.on('SIGINT', async () => { console.error(JSON.stringify(await srv.close())); process.exit(0); });
  }
}
