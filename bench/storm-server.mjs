// The storm server: a small HTTP service on 127.0.0.1 that sheds load the way a real one does.
//
// mode 'storm' (the herd):
//   - a request that arrives while MAX_IN_SERVICE (8) requests are in service gets 503 at once;
//   - otherwise it needs one token from a token bucket refilled at RATE (400) tokens/s with a
//     capacity of BURST (20) tokens (full at start): no token, 503 at once;
//   - otherwise it is served: 5 ms later it gets 200 "ok".
//   A 503 takes no token and no service slot, and carries no Retry-After: the clients' own
//   backoff is what is measured.
// mode 'outage': every request gets 503 at once.
//
// Every request is counted (`seen`), whatever it was answered. The server also counts the TCP
// connections it accepted and the largest number open at once, which shows whether the client
// side queued requests behind a connection limit (see README.md).
//
// Used in three ways:
//   - `startStormServer(opts)`: in this thread (returns { url, stats(), close() });
//   - `spawnStormServer()`: in a worker thread, so the server's event loop is not the one that
//     runs the 200 clients (the benchmark uses this; returns { start(opts), stop(), terminate() });
//   - `node bench/storm-server.mjs [storm|outage] [port]`: standalone, prints its URL.
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

export const DEFAULTS = Object.freeze({
  mode: 'storm',
  maxInService: 8,
  ratePerSec: 400,
  burst: 20,
  serviceMs: 5,
  port: 0,
});

/** Starts a storm server in this thread. Resolves when it listens. */
export function startStormServer(options = {}) {
  const o = { ...DEFAULTS, ...options };
  if (o.mode !== 'storm' && o.mode !== 'outage') throw new TypeError(`unknown mode ${o.mode}`);
  const c = {
    seen: 0, ok: 0, rejectedBusy: 0, rejectedBucket: 0, rejectedOutage: 0,
    connections: 0, openConnections: 0, peakOpenConnections: 0, peakInService: 0,
  };
  let inService = 0;
  let tokens = o.burst;
  let refilledAt = performance.now();

  const takeToken = () => {
    const now = performance.now();
    tokens = Math.min(o.burst, tokens + ((now - refilledAt) * o.ratePerSec) / 1000);
    refilledAt = now;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  };
  const reply = (res, status, body) => {
    res.writeHead(status, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };

  const server = http.createServer((req, res) => {
    c.seen += 1;
    req.resume(); // no request bodies here, but never leave one unread
    if (o.mode === 'outage') { c.rejectedOutage += 1; reply(res, 503, ''); return; }
    if (inService >= o.maxInService) { c.rejectedBusy += 1; reply(res, 503, ''); return; }
    if (!takeToken()) { c.rejectedBucket += 1; reply(res, 503, ''); return; }
    inService += 1;
    if (inService > c.peakInService) c.peakInService = inService;
    setTimeout(() => {
      inService -= 1;
      c.ok += 1;
      reply(res, 200, 'ok');
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
 * `{ id, url }`; `stop(id)` closes it (and every connection to it) and resolves with its
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
    terminate: () => worker.terminate(),
  };
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
        result = { id: serverId, url: srv.url };
      } else if (op === 'stop') {
        const srv = get(arg);
        servers.delete(arg);
        result = await srv.close();
      } else if (op === 'stats') {
        result = get(arg).stats();
      } else {
        throw new Error(`unknown op ${op}`);
      }
      parentPort.postMessage({ id, result });
    } catch (err) {
      parentPort.postMessage({ id, error: String(err?.stack ?? err) });
    }
  });
} else if (isMainThread && process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const mode = process.argv[2] ?? 'storm';
  const srv = await startStormServer({ mode, port: Number(process.argv[3] ?? 0) });
  console.log(srv.url);
  console.error(`storm server (${mode}): ${JSON.stringify(srv.options)}; Ctrl-C stops it`);
  process.on('SIGINT', async () => { console.error(JSON.stringify(await srv.close())); process.exit(0); });
}
