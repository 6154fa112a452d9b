// Success-path overhead: what a retry library costs when nothing fails.
//
//   node bench/overhead.mjs       (OVERHEAD_ROUNDS=30, OVERHEAD_REQUESTS=300 by default; about 1 minute)
//
// A local HTTP server on 127.0.0.1, in a worker thread (its own event loop, its own core on a
// 2-core machine), answers every request `200 ok` at once. Every contender is configured to
// retry (9 attempts, base 50 ms, cap 2 s, as in storms.mjs), but no attempt ever fails, so what
// is measured is the per-call cost of the library on top of Node's fetch.
//
// Two modes: sequential (one call at a time) and 32 concurrent (32 loops sharing a counter).
// Every round runs each contender for REQUESTS calls in each mode; the order of the contenders
// is rotated by one every round. Each round's throughput is divided by that round's plain
// fetch throughput; the median ratio over the rounds is printed, with the interquartile range
// of the rounds, and the median wall time added per call. "plain fetch (again)" is a
// second, separate plain-fetch contender: its ratio to the first shows the noise of the run.
// Every response body is read (arrayBuffer()).
//
// Prints markdown to stdout (progress to stderr) and writes bench/results/overhead.json.
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { goalsTable, overheadTable, ratioCell } from './format.mjs';
import { importRetrying, log, machine, positiveInt, printMarkdown, timedBatch, versionOf, writeResults } from './common.mjs';

const RESULTS = fileURLToPath(new URL('./results/overhead.json', import.meta.url));

// ---------------------------------------------------------------------------------------------
// The server (worker thread): 200 "ok" at once, keep-alive connections kept for a minute.

if (!isMainThread && workerData?.overheadServer) {
  const c = { seen: 0, connections: 0 };
  const server = http.createServer((req, res) => {
    c.seen += 1;
    req.resume();
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 });
    res.end('ok');
  });
  server.keepAliveTimeout = 60_000;
  server.headersTimeout = 61_000;
  server.requestTimeout = 0;
  server.on('connection', (socket) => { c.connections += 1; socket.setNoDelay(true); });
  server.listen(0, '127.0.0.1', 511, () => parentPort.postMessage({ port: server.address().port }));
  parentPort.on('message', (msg) => {
    if (msg === 'stats') parentPort.postMessage({ stats: { ...c } });
    if (msg === 'close') {
      server.closeAllConnections();
      server.close(() => parentPort.postMessage({ closed: { ...c } }));
    }
  });
} else {
  await main();
}

// ---------------------------------------------------------------------------------------------

function startServer() {
  const worker = new Worker(fileURLToPath(import.meta.url), { workerData: { overheadServer: true } });
  const next = (key) => new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if (key in msg) { worker.off('message', onMessage); worker.off('error', reject); resolve(msg[key]); }
    };
    worker.on('message', onMessage);
    worker.once('error', reject);
  });
  return next('port').then((port) => ({
    url: `http://127.0.0.1:${port}/`,
    stats: () => { const p = next('stats'); worker.postMessage('stats'); return p; },
    close: async () => {
      const p = next('closed');
      worker.postMessage('close');
      const s = await p;
      await worker.terminate();
      return s;
    },
  }));
}

async function main() {
  const ROUNDS = positiveInt(process.env.OVERHEAD_ROUNDS, 30);
  const REQUESTS = positiveInt(process.env.OVERHEAD_REQUESTS, 300);
  const CONCURRENCY = 32;
  const RETRIES = 8;
  const BASE_MS = 50;
  const CAP_MS = 2_000;
  const POLICY = Object.freeze({ maxAttempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS });
  const GOAL_RATIO = 0.95;
  const started = performance.now();

  const rf = await importRetrying('retry-fetch');
  const { default: ky } = await importRetrying('ky');
  const { default: pRetry } = await importRetrying('p-retry');
  const { default: fetchBuilder } = await importRetrying('fetch-retry');
  const { retry, handleAll, ExponentialBackoff } = await importRetrying('cockatiel');

  /** Reads the body; a status other than 200 is an error (nothing here should ever fail). */
  const drain = async (res) => {
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`unexpected status ${res.status}`);
  };

  // Each contender: `make()` returns the per-call function (state such as a policy or a client
  // is created once, as an application would).
  const contenders = [
    {
      id: 'fetch', name: 'plain fetch', reference: true,
      config: 'fetch(url)',
      make: () => async (url) => drain(await fetch(url)),
    },
    {
      id: 'fetch:again', name: 'plain fetch (again, noise)', noise: true,
      config: 'fetch(url), a second separate contender',
      make: () => async (url) => drain(await fetch(url)),
    },
    {
      id: 'retry-fetch', name: 'retry-fetch retryFetch', library: 'retry-fetch', isRetryFetch: true,
      config: `retryFetch(url, undefined, ${JSON.stringify(POLICY)})`,
      make: () => async (url) => drain(await rf.retryFetch(url, undefined, POLICY)),
    },
    {
      id: 'retry-fetch:client', name: 'retry-fetch createRetryFetch (extra)', library: 'retry-fetch',
      config: `createRetryFetch(${JSON.stringify(POLICY)})(url)`,
      make: () => {
        const f = rf.createRetryFetch(POLICY);
        return async (url) => drain(await f(url));
      },
    },
    {
      id: 'ky', name: `ky ${versionOf('ky')}`, library: 'ky', isKy: true,
      config: `ky.create({ retry: { limit: ${RETRIES}, delay: n => ${BASE_MS} * 2 ** (n - 1), backoffLimit: ${CAP_MS} } }).get(url)`,
      make: () => {
        const client = ky.create({ retry: { limit: RETRIES, delay: (n) => BASE_MS * 2 ** (n - 1), backoffLimit: CAP_MS } });
        return async (url) => drain(await client.get(url));
      },
    },
    {
      id: 'p-retry', name: `p-retry ${versionOf('p-retry')}`, library: 'p-retry',
      config: `pRetry(() => fetch(url) /* throws on 503 */, { retries: ${RETRIES}, minTimeout: ${BASE_MS}, maxTimeout: ${CAP_MS}, factor: 2, randomize: true })`,
      make: () => {
        const options = { retries: RETRIES, minTimeout: BASE_MS, maxTimeout: CAP_MS, factor: 2, randomize: true };
        return async (url) => drain(await pRetry(async () => {
          const res = await fetch(url);
          if (res.status === 503) { await res.arrayBuffer(); throw new Error('503'); }
          return res;
        }, options));
      },
    },
    {
      id: 'fetch-retry', name: `fetch-retry ${versionOf('fetch-retry')}`, library: 'fetch-retry',
      config: `fetchBuilder(fetch, { retries: ${RETRIES}, retryDelay: n => min(${CAP_MS}, ${BASE_MS} * 2 ** n), retryOn: [503] })`,
      make: () => {
        const f = fetchBuilder(fetch, { retries: RETRIES, retryDelay: (n) => Math.min(CAP_MS, BASE_MS * 2 ** n), retryOn: [503] });
        return async (url) => drain(await f(url));
      },
    },
    {
      id: 'cockatiel', name: `cockatiel ${versionOf('cockatiel')}`, library: 'cockatiel',
      config: `retry(handleAll.orWhenResult(r => r.status === 503), { maxAttempts: ${RETRIES}, backoff: new ExponentialBackoff({ initialDelay: ${BASE_MS}, maxDelay: ${CAP_MS} }) }).execute(() => fetch(url))`,
      make: () => {
        const policy = retry(handleAll.orWhenResult((res) => res.status === 503), {
          maxAttempts: RETRIES,
          backoff: new ExponentialBackoff({ initialDelay: BASE_MS, maxDelay: CAP_MS }),
        });
        return async (url) => drain(await policy.execute(() => fetch(url)));
      },
    },
  ];
  const MODES = [
    { id: 'sequential', name: 'sequential', concurrency: 1 },
    { id: 'concurrent', name: `${CONCURRENCY} concurrent`, concurrency: CONCURRENCY },
  ];

  const server = await startServer();
  const calls = new Map(contenders.map((c) => [c.id, c.make()]));
  try {
    // Warm-up, not recorded: JIT, wasm, every library's first calls, undici's connections.
    for (const mode of MODES) {
      for (const c of contenders) await timedBatch(calls.get(c.id), server.url, Math.ceil(REQUESTS / 3), mode.concurrency);
    }
    log(`overhead: ${contenders.length} contenders × ${MODES.length} modes × ${ROUNDS} rounds × ${REQUESTS} requests`);

    const rounds = []; // rounds[r][mode][id] = { ms, perSec }
    for (let r = 0; r < ROUNDS; r += 1) {
      const round = {};
      const order = contenders.map((_, i) => contenders[(i + r) % contenders.length]);
      for (const mode of MODES) {
        round[mode.id] = {};
        for (const c of order) {
          const ms = await timedBatch(calls.get(c.id), server.url, REQUESTS, mode.concurrency);
          round[mode.id][c.id] = { ms, perSec: (REQUESTS * 1000) / ms };
        }
        const ref = round[mode.id].fetch.perSec;
        for (const c of contenders) round[mode.id][c.id].ratio = round[mode.id][c.id].perSec / ref;
      }
      rounds.push({ order: order.map((c) => c.id), ...round });
      log(`round ${r + 1}/${ROUNDS}: ${MODES.map((m) => `${m.id} fetch ${round[m.id].fetch.perSec.toFixed(0)}/s, `
        + `retry-fetch ×${round[m.id]['retry-fetch'].ratio.toFixed(3)}, ky ×${round[m.id].ky.ratio.toFixed(3)}`).join('; ')}`);
    }
    const serverStats = await server.stats();

    const rows = contenders.map((c) => {
      const row = { id: c.id, name: c.name, config: c.config, reference: !!c.reference, noise: !!c.noise };
      for (const mode of MODES) row[mode.id] = ratioCell(rounds, mode.id, c.id, 'fetch', REQUESTS, 'addedUsPerCall');
      return row;
    });
    const byId = Object.fromEntries(rows.map((r) => [r.id, r]));

    const goals = [];
    for (const mode of MODES) {
      const rfr = byId['retry-fetch'][mode.id].ratio;
      const kyr = byId.ky[mode.id].ratio;
      goals.push({
        goal: `${mode.name}: retryFetch throughput / plain fetch`,
        target: `≥ ${GOAL_RATIO.toFixed(2)}`,
        measured: rfr.toFixed(3),
        met: rfr >= GOAL_RATIO ? 'met' : 'NOT met',
      });
      goals.push({
        goal: `${mode.name}: retryFetch ahead of ky`,
        target: `> ${kyr.toFixed(3)} (ky)`,
        measured: rfr.toFixed(3),
        met: rfr > kyr ? 'met' : 'NOT met',
      });
    }
    const totalSeconds = (performance.now() - started) / 1000;
    const meta = {
      ...machine(),
      rounds: ROUNDS,
      requestsPerBatch: REQUESTS,
      concurrency: CONCURRENCY,
      policy: { retries: RETRIES, attempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS },
      server: 'node:http in a worker thread on 127.0.0.1, 200 "ok" (2 bytes) at once, keep-alive',
      goalRatio: GOAL_RATIO,
    };

    const out = [];
    out.push(`## Success-path overhead (${ROUNDS} rounds × ${REQUESTS} requests per contender and mode, medians; Node ${process.version}, ${meta.cpus} cores)`);
    out.push('');
    out.push(overheadTable(rows, MODES));
    out.push('');
    out.push(goalsTable(goals));
    out.push('');
    out.push(`Server: ${serverStats.seen} requests on ${serverStats.connections} connections. Run took ${totalSeconds.toFixed(0)} s.`);
    await printMarkdown(out);

    writeResults(RESULTS, { ...meta, modes: MODES, goals, rows, roundResults: rounds, serverStats, totalSeconds });
  } finally {
    await server.close().catch(() => {});
  }
}
