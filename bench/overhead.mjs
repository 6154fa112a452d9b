// Success-path overhead: what a retry library costs when nothing fails.
//
//   node bench/overhead.mjs   (OVERHEAD_ROUNDS=27, OVERHEAD_REQUESTS=300, OVERHEAD_PROCESSES=3;
//                              OVERHEAD_OWN_ROUNDS=15 × OVERHEAD_OWN_CALLS=5000; about 1.5 minutes)
//
// A local HTTP server on 127.0.0.1, in a worker thread (its own event loop, its own core on a
// 2-core machine), answers every request `200 ok` at once. The contenders, side by side in one
// run: plain `fetch(url, init)` (the reference) and the same again (the noise); retry-fetch
// three ways: `retryFetch(url)` with no options, `retryFetch(url, init, options)` with the
// options written in the call (a new object per call, parsed per call: the headline row) and
// `createRetryFetch(options)` made once, then `client(url, init)`; the per-call options with
// `timeoutMs` beside plain fetch with a hand-written time limit (an AbortController and a
// setTimeout cleared when the response arrives); and ky, p-retry, fetch-retry
// and cockatiel. Every contender but `retryFetch(url)` is configured to retry (9 attempts,
// base 50 ms, cap 2 s, as in storms.mjs), but no attempt ever fails, so what is measured is the
// per-call cost of the library on top of Node's fetch. `init` is `{ method: 'GET' }`, given
// to every contender that calls fetch with one.
//
// Two modes: sequential (one call at a time) and 32 concurrent (32 loops sharing a counter).
// Every round runs each contender for REQUESTS calls in each mode; the order of the contenders
// is rotated by one every round. The rounds are spread over OVERHEAD_PROCESSES fresh processes
// (this file again, one after the other; each with its own server and warm-up) and pooled: a
// process keeps biases of its own, 10-20 µs a call either way for a contender. Each round's
// throughput is divided by that round's plain fetch throughput; the median ratio over the
// rounds is printed, with the interquartile range of the rounds, and the median wall time
// added per call. "plain fetch (again)" is a second, separate plain-fetch contender: its ratio
// to the first shows the noise of the run. Every response body is read (arrayBuffer()).
//
// Then, in each process with its server closed, the libraries' own cost: `fetch` stubbed
// in-process (see ownCostSamples at the end), each contender's µs per call beside the stubbed
// fetch's.
//
// Prints markdown to stdout (progress to stderr) and writes bench/results/overhead.json.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { goalsTable, median, overheadTable, ownCostTable, ratioCell } from './format.mjs';
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
  const ROUNDS = positiveInt(process.env.OVERHEAD_ROUNDS, 27); // 3 × 9 contenders: each at every position 3 times
  const REQUESTS = positiveInt(process.env.OVERHEAD_REQUESTS, 300);
  const CONCURRENCY = 32;
  const RETRIES = 8;
  const BASE_MS = 50;
  const CAP_MS = 2_000;
  // The time limit of the two "with a time limit" rows: it never fires (the server answers at once).
  const TIMEOUT_MS = 5_000;
  const POLICY = Object.freeze({ maxAttempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS });
  // retry-fetch's options in full for the storms' policy: the per-call and client rows. The
  // per-call row writes them as a literal in the call (see below), so each call gets new objects.
  const OPTIONS = Object.freeze({ ...POLICY, jitter: 'full', retryOnStatus: [503] });
  const INIT = "{ method: 'GET' }";
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
  // The object literals are written out in the calls: each call makes its own, as an
  // application that writes them inline does.
  const contenders = [
    {
      id: 'fetch', name: 'plain fetch', reference: true,
      config: `fetch(url, ${INIT})`,
      make: () => async (url) => drain(await fetch(url, { method: 'GET' })),
    },
    {
      id: 'fetch:again', name: 'plain fetch (again, noise)', noise: true,
      config: `fetch(url, ${INIT}), a second separate contender`,
      make: () => async (url) => drain(await fetch(url, { method: 'GET' })),
    },
    {
      id: 'retry-fetch:bare', name: 'retry-fetch retryFetch(url), no options', library: 'retry-fetch',
      config: 'retryFetch(url): every option at its default',
      make: () => async (url) => drain(await rf.retryFetch(url)),
    },
    {
      id: 'retry-fetch:per-call', name: 'retry-fetch retryFetch(url, init, options), per-call options', library: 'retry-fetch',
      headline: true,
      config: `retryFetch(url, ${INIT}, ${JSON.stringify(OPTIONS)}), the objects written in the call`,
      make: () => async (url) => drain(await rf.retryFetch(url, { method: 'GET' }, {
        maxAttempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS, jitter: 'full', retryOnStatus: [503],
      })),
    },
    {
      id: 'retry-fetch:client', name: 'retry-fetch createRetryFetch(options), made once', library: 'retry-fetch',
      config: `const client = createRetryFetch(${JSON.stringify(OPTIONS)}); client(url, ${INIT})`,
      make: () => {
        const client = rf.createRetryFetch(OPTIONS);
        return async (url) => drain(await client(url, { method: 'GET' }));
      },
    },
    {
      id: 'fetch:timeout', name: 'plain fetch with a time limit (AbortController + setTimeout)',
      config: `const c = new AbortController(); const t = setTimeout(() => c.abort(), ${TIMEOUT_MS}); fetch(url, { method: 'GET', signal: c.signal }), clearTimeout(t) when it settles`,
      make: () => async (url) => {
        const c = new AbortController();
        const t = setTimeout(() => c.abort(), TIMEOUT_MS);
        let res;
        try { res = await fetch(url, { method: 'GET', signal: c.signal }); } finally { clearTimeout(t); }
        return drain(res);
      },
    },
    {
      id: 'retry-fetch:timeout', name: 'retry-fetch retryFetch(url, init, options), per-call options with timeoutMs', library: 'retry-fetch',
      config: `retryFetch(url, ${INIT}, ${JSON.stringify({ ...OPTIONS, timeoutMs: TIMEOUT_MS })}), the objects written in the call`,
      make: () => async (url) => drain(await rf.retryFetch(url, { method: 'GET' }, {
        maxAttempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS, jitter: 'full', retryOnStatus: [503], timeoutMs: TIMEOUT_MS,
      })),
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
      config: `pRetry(() => fetch(url, ${INIT}) /* throws on 503 */, { retries: ${RETRIES}, minTimeout: ${BASE_MS}, maxTimeout: ${CAP_MS}, factor: 2, randomize: true })`,
      make: () => {
        const options = { retries: RETRIES, minTimeout: BASE_MS, maxTimeout: CAP_MS, factor: 2, randomize: true };
        return async (url) => drain(await pRetry(async () => {
          const res = await fetch(url, { method: 'GET' });
          if (res.status === 503) { await res.arrayBuffer(); throw new Error('503'); }
          return res;
        }, options));
      },
    },
    {
      id: 'fetch-retry', name: `fetch-retry ${versionOf('fetch-retry')}`, library: 'fetch-retry',
      config: `fetchBuilder(fetch, { retries: ${RETRIES}, retryDelay: n => min(${CAP_MS}, ${BASE_MS} * 2 ** n), retryOn: [503] })(url, ${INIT})`,
      make: () => {
        const f = fetchBuilder(fetch, { retries: RETRIES, retryDelay: (n) => Math.min(CAP_MS, BASE_MS * 2 ** n), retryOn: [503] });
        return async (url) => drain(await f(url, { method: 'GET' }));
      },
    },
    {
      id: 'cockatiel', name: `cockatiel ${versionOf('cockatiel')}`, library: 'cockatiel',
      config: `retry(handleAll.orWhenResult(r => r.status === 503), { maxAttempts: ${RETRIES}, backoff: new ExponentialBackoff({ initialDelay: ${BASE_MS}, maxDelay: ${CAP_MS} }) }).execute(() => fetch(url, ${INIT}))`,
      make: () => {
        const policy = retry(handleAll.orWhenResult((res) => res.status === 503), {
          maxAttempts: RETRIES,
          backoff: new ExponentialBackoff({ initialDelay: BASE_MS, maxDelay: CAP_MS }),
        });
        return async (url) => drain(await policy.execute(() => fetch(url, { method: 'GET' })));
      },
    },
  ];
  const MODES = [
    { id: 'sequential', name: 'sequential', concurrency: 1 },
    { id: 'concurrent', name: `${CONCURRENCY} concurrent`, concurrency: CONCURRENCY },
  ];

  const PROCESSES = positiveInt(process.env.OVERHEAD_PROCESSES, 3);
  const OWN_ROUNDS = positiveInt(process.env.OVERHEAD_OWN_ROUNDS, 15);
  const OWN_CALLS = positiveInt(process.env.OVERHEAD_OWN_CALLS, 5_000);

  // A child: its share of the rounds (the rotation continues from `first`), then its share of
  // the own-cost rounds; the samples go to the parent as JSON in a file.
  if (process.env.OVERHEAD_CHILD) {
    const [first, count, ownFirst, ownCount] = process.env.OVERHEAD_CHILD.split(',').map(Number);
    const server = await startServer();
    let rounds;
    let serverStats;
    try {
      const calls = new Map(contenders.map((c) => [c.id, c.make()]));
      // Warm-up, not recorded: JIT, wasm, every library's first calls, undici's connections.
      for (const mode of MODES) {
        for (const c of contenders) await timedBatch(calls.get(c.id), server.url, Math.ceil(REQUESTS / 3), mode.concurrency);
      }
      rounds = [];
      for (let r = first; r < first + count; r += 1) {
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
        rounds.push({ process: process.pid, order: order.map((c) => c.id), ...round });
        log(`round ${r + 1}/${ROUNDS} (process ${process.pid}): ${MODES.map((m) => `${m.id} fetch ${round[m.id].fetch.perSec.toFixed(0)}/s, `
          + `per-call options ×${round[m.id]['retry-fetch:per-call'].ratio.toFixed(3)}, p-retry ×${round[m.id]['p-retry'].ratio.toFixed(3)}`).join('; ')}`);
      }
      serverStats = await server.stats();
    } finally {
      await server.close().catch(() => {});
    }
    const own = await ownCostSamples(contenders, ownFirst, ownCount, OWN_CALLS); // server closed
    writeFileSync(process.env.OVERHEAD_CHILD_OUT, JSON.stringify({ rounds, serverStats, own }));
    return;
  }

  // The parent: the rounds spread over PROCESSES fresh processes, one after the other, then
  // pooled. A process keeps its own bias (how V8 optimised each library's code, which
  // connections it reuses): within one process a contender's median can sit 10-20 µs a call
  // off its value in the next process, more than the differences measured here.
  log(`overhead: ${contenders.length} contenders × ${MODES.length} modes × ${ROUNDS} rounds × ${REQUESTS} requests, in ${PROCESSES} processes`);
  const share = (total, k) => { // [first, count] of process k's share of `total`
    const from = Math.round((total * k) / PROCESSES);
    return [from, Math.round((total * (k + 1)) / PROCESSES) - from];
  };
  const rounds = [];
  const ownSamples = new Map(contenders.map((c) => [c.id, []]));
  const serverStats = { seen: 0, connections: 0 };
  const dir = mkdtempSync(path.join(os.tmpdir(), 'overhead-'));
  try {
    for (let k = 0; k < PROCESSES; k += 1) {
      const out = path.join(dir, `${k}.json`);
      const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url)], {
        stdio: ['ignore', 'inherit', 'inherit'],
        env: { ...process.env, OVERHEAD_CHILD: [...share(ROUNDS, k), ...share(OWN_ROUNDS, k)].join(','), OVERHEAD_CHILD_OUT: out },
      });
      if (child.status !== 0) throw new Error(`overhead: process ${k + 1} of ${PROCESSES} failed (status ${child.status}, signal ${child.signal})`);
      const part = JSON.parse(readFileSync(out, 'utf8'));
      rounds.push(...part.rounds);
      serverStats.seen += part.serverStats.seen;
      serverStats.connections += part.serverStats.connections;
      for (const [id, samples] of Object.entries(part.own)) ownSamples.get(id).push(...samples);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const reference = median(ownSamples.get('fetch'));
  const ownCost = {
    rounds: OWN_ROUNDS,
    callsPerBatch: OWN_CALLS,
    stubUsPerCall: reference,
    rows: contenders.map((c) => ({
      id: c.id, name: c.name, reference: !!c.reference, noise: !!c.noise,
      usPerCall: median(ownSamples.get(c.id)),
      addedUsPerCall: median(ownSamples.get(c.id)) - reference,
    })),
  };

  const rows = contenders.map((c) => {
    const row = { id: c.id, name: c.name, config: c.config, reference: !!c.reference, noise: !!c.noise, headline: !!c.headline };
    for (const mode of MODES) row[mode.id] = ratioCell(rounds, mode.id, c.id, 'fetch', REQUESTS, 'addedUsPerCall');
    return row;
  });
  const byId = Object.fromEntries(rows.map((r) => [r.id, r]));

  // Goals: the per-call options row (the headline) against plain fetch, and against p-retry
  // in the same run (median ratios; the rounds it was behind are given beside).
  const goals = [];
  for (const mode of MODES) {
    const head = byId['retry-fetch:per-call'][mode.id].ratio;
    const pr = byId['p-retry'][mode.id].ratio;
    const behind = rounds.filter((r) => r[mode.id]['retry-fetch:per-call'].ratio < r[mode.id]['p-retry'].ratio).length;
    goals.push({
      goal: `${mode.name}: per-call options / plain fetch`,
      target: `≥ ${GOAL_RATIO.toFixed(2)}`,
      measured: head.toFixed(3),
      met: head >= GOAL_RATIO ? 'met' : 'NOT met',
    });
    goals.push({
      goal: `${mode.name}: per-call options never behind p-retry in the same run`,
      target: `≥ ${pr.toFixed(3)} (p-retry)`,
      measured: `${head.toFixed(3)} (behind in ${behind} of ${rounds.length} rounds)`,
      met: head >= pr ? 'met' : 'NOT met',
    });
  }
  const totalSeconds = (performance.now() - started) / 1000;
  const meta = {
    ...machine(),
    rounds: ROUNDS,
    processes: PROCESSES,
    requestsPerBatch: REQUESTS,
    concurrency: CONCURRENCY,
    policy: { retries: RETRIES, attempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS },
    retryFetchOptions: OPTIONS,
    init: INIT,
    server: 'node:http in a worker thread on 127.0.0.1, 200 "ok" (2 bytes) at once, keep-alive',
    goalRatio: GOAL_RATIO,
  };

  const out = [];
  out.push(`## Success-path overhead (${ROUNDS} rounds × ${REQUESTS} requests per contender and mode in ${PROCESSES} processes, medians; Node ${process.version}, ${meta.cpus} cores)`);
  out.push('');
  out.push(overheadTable(rows, MODES));
  out.push('');
  out.push(goalsTable(goals));
  out.push('');
  out.push(`Server: ${serverStats.seen} requests on ${serverStats.connections} connections. Run took ${totalSeconds.toFixed(0)} s.`);
  out.push('');
  out.push(ownCostTable(ownCost));
  await printMarkdown(out);

  writeResults(RESULTS, { ...meta, modes: MODES, goals, rows, roundResults: rounds, serverStats, ownCost, totalSeconds });
}

// ---------------------------------------------------------------------------------------------
// The libraries' own cost, without the network: `globalThis.fetch` replaced by a stub that
// resolves with a new `Response('ok')` at once, each contender made again (a library may keep
// the fetch it found), and every contender timed calling it `calls` times in a row, the order
// rotated per round (from `first`). What a contender adds to the stubbed plain fetch is its
// own CPU time per call: the figure the real-server ratios above carry inside their noise
// (their rounds spread about ±0.1, tens of µs per call). Returns { [id]: [µs per call, ...] }.
async function ownCostSamples(contenders, first, count, calls) {
  const realFetch = globalThis.fetch;
  globalThis.fetch = () => Promise.resolve(new Response('ok'));
  try {
    const url = 'http://127.0.0.1:9/'; // never reached
    const made = contenders.map((c) => ({ c, call: c.make() }));
    const timeBatch = async (call, n) => {
      const t0 = performance.now();
      for (let i = 0; i < n; i += 1) await call(url);
      return ((performance.now() - t0) * 1000) / n;
    };
    for (const { call } of made) await timeBatch(call, Math.ceil(calls / 2)); // warm-up
    const samples = Object.fromEntries(made.map(({ c }) => [c.id, []]));
    for (let r = first; r < first + count; r += 1) {
      for (let i = 0; i < made.length; i += 1) {
        const { c, call } = made[(i + r) % made.length];
        samples[c.id].push(await timeBatch(call, calls));
      }
    }
    log(`own cost (process ${process.pid}): ${made.length} contenders × ${count} rounds × ${calls} calls`);
    return samples;
  } finally {
    globalThis.fetch = realFetch;
  }
}
