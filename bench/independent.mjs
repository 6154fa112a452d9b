// Retry storms with independent clients: the herd of storms.mjs, but no two clients share anything.
//
//   node bench/independent.mjs      (INDEPENDENT_ROUNDS=2 by default; INDEPENDENT_WORKERS=8)
//
// storms.mjs starts its 200 clients in ONE process: with retry-fetch's default options they share
// one copy of the package, so its default budget and its default throttle (both per origin, per
// copy of the package) see the whole herd. Real herds are separate browsers sharing nothing.
// Here every client has its own copy of the library state:
//   - the 200 clients of a run are spread over INDEPENDENT_WORKERS worker threads (8 × 25 by
//     default), fresh for every run (each worker has its own event loop, module map and fetch
//     connection pool);
//   - inside a worker, each retry-fetch client imports its own module instance:
//     `pkg/index.node.js?rfclient=<run>-<i>`. A query string alone is not enough: index.node.js
//     imports `./retry_fetch.js` (the wasm glue, which holds the wasm instance and so the default
//     budget and throttle), and a relative import drops the query, so every `?c=i` copy would
//     share one glue. A resolve hook (module.register, below) passes the `rfclient` query down
//     to every module of pkg/ that such a copy imports: each client gets its own index.node.js,
//     retry_fetch.js, errors.js and wasm instance. checkIsolation() verifies it at start (see
//     there) and the result goes into the JSON;
//   - the peers (ky, p-retry, fetch-retry, cockatiel, configured as in storms.mjs) keep no state
//     between calls anyway; each client gets its own client/policy object, in the same workers,
//     so the timing is comparable.
// With independent clients, retry-fetch's default throttle (it paces a herd only when at least
// 10 calls of ONE copy retry together against an origin) never engages, and its default budget
// sees only its own client's retries: this bench measures exactly that.
//
// The servers, the counts and the policy are those of storms.mjs (bench/storm-server.mjs in a
// worker thread, a fresh server per run): amplification = requests seen / 200; floor = 1 +
// refusals among the first 200 requests / 200; successes; p50 / p99 of the completion times (ms
// from the common start until the call settled; a call still pending after 30 s counts as a
// failure at 30 s); p99 / ideal (storm-server.mjs's idealMs). Before the start every client makes
// one call to another local server that always answers 200 (module JIT, wasm compilation and
// fetch's first use are off the clock; budgets and throttles are per origin, so the storm
// origin starts untouched); then all the workers are released at once (Atomics.notify).
// Rounds interleave the contenders (the order rotated by one per round); the outage rows of a
// round run side by side (INDEPENDENT_OUTAGE_SIDE_BY_SIDE=0: one after the other). Medians of
// the rounds, as markdown on stdout; everything in bench/results/independent.json.
import { register } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { describe, idealMs, resolveOptions, spawnStormServer, startStormServer } from './storm-server.mjs';
import { log, machine, positiveInt, printMarkdown, writeResults } from './common.mjs';
import {
  BASE_MS, CAP_MS, COCKATIEL, FETCH_RETRY, KY, P_RETRY, POLICY, RETRIES, okAndDrain, summarizeRounds,
} from './storm-peers.mjs';
import { percentile, stormFmt as fmt, table } from './format.mjs';

const CLIENTS = 200;
const ROUNDS = positiveInt(process.env.INDEPENDENT_ROUNDS, 2);
const WORKERS = positiveInt(process.env.INDEPENDENT_WORKERS, 8);
const OUTAGE_SIDE_BY_SIDE = process.env.INDEPENDENT_OUTAGE_SIDE_BY_SIDE !== '0';
const ROUND_TIMEOUT_MS = 30_000;
const PREPARE_TIMEOUT_MS = 60_000;
const RESULTS = fileURLToPath(new URL('./results/independent.json', import.meta.url));
const PKG = pathToFileURL(fileURLToPath(new URL('../pkg/', import.meta.url))).href;
const ENTRY = `${PKG}index.node.js`;

// The resolve hook: a module of pkg/ imported with `?rfclient=X` passes that query on to every
// module of pkg/ it imports (index.node.js -> retry_fetch.js, errors.js), so each X is a whole
// copy of the package. Idempotent (a URL that already has a query is left alone).
const HOOKS = `const PKG = ${JSON.stringify(PKG)};
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  const parent = context.parentURL;
  if (parent && parent.startsWith(PKG) && r.url.startsWith(PKG) && !r.url.includes('?')) {
    const tag = new URL(parent).searchParams.get('rfclient');
    if (tag != null) return { ...r, url: r.url + '?rfclient=' + encodeURIComponent(tag) };
  }
  return r;
}
`;
register(`data:text/javascript,${encodeURIComponent(HOOKS)}`);

/** A fresh copy of retry-fetch (its own wasm instance, default budget and throttle). */
const ownCopy = (tag) => import(`${ENTRY}?rfclient=${encodeURIComponent(tag)}`);

// ---------------------------------------------------------------------------------------------
// Contenders. `client(tag)` is called once per client (in its worker) and returns that client's
// call: resolves true on a 200. Every body is read.

const CONTENDERS = [
  {
    id: 'retry-fetch:default',
    name: 'retry-fetch, default options (own copy per client)',
    library: 'retry-fetch',
    config: { ...POLICY, instance: 'own module instance per client' },
    async client(tag) {
      const rf = await ownCopy(tag);
      return async (url) => okAndDrain(await rf.retryFetch(url, undefined, POLICY));
    },
  },
  // Not a peer: the same client with `jitter: 'decorrelated'` (the default is 'full'), to
  // show what the jitter alone does to a herd of clients that share nothing.
  {
    id: 'retry-fetch:decorrelated',
    name: "retry-fetch, jitter: 'decorrelated' (extra; own copy per client)",
    library: 'retry-fetch',
    config: { ...POLICY, jitter: 'decorrelated', instance: 'own module instance per client' },
    async client(tag) {
      const rf = await ownCopy(tag);
      const options = { ...POLICY, jitter: 'decorrelated' };
      return async (url) => okAndDrain(await rf.retryFetch(url, undefined, options));
    },
  },
  // The peers keep no shared state: one client each, as in storms.mjs.
  ...[KY, P_RETRY, FETCH_RETRY, COCKATIEL].map((p) => ({
    id: p.id, name: p.name, library: p.library, config: p.config,
    async client() { return p.make(); },
  })),
];

const errorKind = (err) => (err?.name && err.name !== 'Error'
  ? `${err.name}${typeof err.reason === 'string' ? ` (${err.reason})` : ''}`
  : String(err?.message ?? err).slice(0, 60));

// ---------------------------------------------------------------------------------------------
// Worker: prepares its clients, warms them up, waits for the start, runs one call per client.

async function workerMain() {
  const { contenderId, run, first, count, url, warmUrl, flag } = workerData;
  const c = CONTENDERS.find((x) => x.id === contenderId);
  const calls = [];
  for (let i = 0; i < count; i += 1) calls.push(await c.client(`${run}-${first + i}`));
  await Promise.all(calls.map((call) => call(warmUrl).catch(() => {})));
  parentPort.postMessage({ type: 'ready' });
  Atomics.wait(flag, 0, 0); // released by the main thread, all workers at once
  const now = () => performance.timeOrigin + performance.now();
  const wokeAt = now();
  const settled = [];
  for (const call of calls) {
    settled.push(Promise.resolve().then(() => call(url)).then(
      (ok) => parentPort.postMessage({ type: 'settled', ok, at: now() }),
      (err) => parentPort.postMessage({ type: 'settled', ok: false, at: now(), error: errorKind(err) }),
    ));
  }
  await Promise.all(settled);
  parentPort.postMessage({ type: 'done', wokeAt });
}

// ---------------------------------------------------------------------------------------------
// Main thread.

const KINDS = [
  { id: 'rate-limited', title: 'rate-limited', server: { mode: 'rate-limited' } },
  { id: 'concurrency-limited', title: 'concurrency-limited', server: { mode: 'concurrency-limited' } },
  { id: 'shedding', title: 'shedding (Retry-After)', server: { mode: 'shedding' } },
  { id: 'halving', title: 'capacity halving', server: { mode: 'halving' } },
].map((k) => {
  const server = resolveOptions({ ...k.server, firstWave: CLIENTS });
  return { ...k, server, description: describe(server), idealMs: idealMs(server, CLIENTS) };
});
const OUTAGE_SERVER = resolveOptions({ mode: 'outage', firstWave: CLIENTS });

const DESCRIPTION = `${CLIENTS} independent clients: ${WORKERS} worker threads (fresh for every run) of `
  + `${Math.ceil(CLIENTS / WORKERS)} clients each, and every retry-fetch client imports its own copy of the package `
  + '(its own module instance and wasm instance: pkg/index.node.js?rfclient=<run>-<i>, the query passed on to the '
  + 'modules it imports by a resolve hook), so no two clients share anything, as separate browsers. Each peer client '
  + 'gets its own client/policy object (they keep no shared state anyway). With independent clients, retry-fetch\'s '
  + 'default throttle (it paces a herd only when at least 10 calls of ONE copy of the package retry together) never '
  + 'engages, and its default budget is per copy too: each client\'s budget sees only its own retries. This bench '
  + `measures exactly that, against the storm servers of storms.mjs. Every client: ${RETRIES} retries `
  + `(${RETRIES + 1} attempts), base ${BASE_MS} ms, cap ${CAP_MS} ms; before the start, one call each to another `
  + 'local server that always answers 200 (warm-up, another origin); then all workers are released at once.';

let runCounter = 0;

/**
 * Starts a fresh server with `serverOptions` and the workers of one run of `contender`; resolves,
 * once every client is warm, with `go()`: releases the clients and resolves with the run's result.
 */
async function prepareRun(server, warmUrl, serverOptions, contender) {
  const { id: serverId, url } = await server.start(serverOptions);
  const run = (runCounter += 1);
  const flag = new Int32Array(new SharedArrayBuffer(4));
  const workers = [];
  const results = { times: [], successes: 0, errors: {}, wokeAt: [] };
  let settledCount = 0;
  let onSettled = () => {};
  let failure = null;
  let ready = 0;
  let onReady = () => {};
  const per = Math.ceil(CLIENTS / WORKERS);
  const t = { t0: null };
  for (let first = 0; first < CLIENTS; first += per) {
    const count = Math.min(per, CLIENTS - first);
    const w = new Worker(fileURLToPath(import.meta.url), {
      workerData: { independentClients: true, contenderId: contender.id, run, first, count, url, warmUrl, flag },
    });
    w.on('message', (m) => {
      if (m.type === 'ready') { ready += 1; onReady(); } else if (m.type === 'settled') {
        if (m.ok) results.successes += 1;
        else if (m.error) results.errors[m.error] = (results.errors[m.error] ?? 0) + 1;
        results.times.push(m.at - t.t0);
        settledCount += 1;
        onSettled();
      } else if (m.type === 'done') results.wokeAt.push(m.wokeAt - t.t0);
    });
    w.on('error', (err) => { failure = err; onReady(); onSettled(); });
    workers.push(w);
  }
  const cleanup = async () => {
    await Promise.all(workers.map((w) => w.terminate()));
    return server.stop(serverId).catch(() => null);
  };
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('workers not ready in time')), PREPARE_TIMEOUT_MS);
      onReady = () => {
        if (failure) { clearTimeout(timer); reject(failure); } else if (ready === workers.length) { clearTimeout(timer); resolve(); }
      };
      onReady();
    });
  } catch (err) {
    await cleanup();
    throw err;
  }
  await new Promise((r) => setTimeout(r, 20)); // let every worker reach Atomics.wait
  return {
    async go() {
      t.t0 = performance.timeOrigin + performance.now();
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
      const timedOut = await new Promise((resolve) => {
        const timer = setTimeout(() => resolve(true), ROUND_TIMEOUT_MS);
        onSettled = () => { if (failure || settledCount >= CLIENTS) { clearTimeout(timer); resolve(false); } };
        onSettled();
      });
      const wallMs = performance.timeOrigin + performance.now() - t.t0;
      const s = await cleanup();
      if (failure) throw failure;
      const pending = CLIENTS - results.times.length;
      const settled = [...results.times, ...Array(pending).fill(ROUND_TIMEOUT_MS)];
      return {
        amplification: s.seen / CLIENTS,
        floor: 1 + s.firstWaveRefused / CLIENTS,
        successes: results.successes,
        p50Ms: percentile(settled, 0.5),
        p99Ms: percentile(settled, 0.99),
        maxMs: Math.max(...settled),
        wallMs,
        seen: s.seen,
        timedOut,
        pendingAtTimeout: pending,
        startSpreadMs: results.wokeAt.length ? Math.max(...results.wokeAt) : null, // last worker's wake-up after t0
        errors: results.errors,
        server: s,
      };
    },
  };
}

function summarize(rounds, ideal) {
  return { ...summarizeRounds(rounds, ideal), startSpreadMs: Math.max(...rounds.map((r) => r.startSpreadMs ?? 0)) };
}

const newRow = (c) => ({ id: c.id, name: c.name, library: c.library, config: c.config, available: true, note: null, rounds: [], median: null });

function record(label, r, c, row, result) {
  row.rounds.push(result);
  log(`${label} round ${r + 1}/${ROUNDS} ${c.name}: amplification ${result.amplification.toFixed(2)} `
    + `(floor ${result.floor.toFixed(2)}), ${result.successes}/${CLIENTS} ok, p99 ${result.p99Ms.toFixed(0)} ms `
    + `(${(result.wallMs / 1000).toFixed(1)} s)`);
}
function fail(label, c, row, err) {
  row.available = false;
  row.note = `error: ${String(err?.message ?? err).split('\n')[0]}`;
  log(`${label} ${c.name}: ${row.note}`);
}

/**
 * That the copies share nothing. Identity: two copies' retryFetch, RetryBudget (the proxies and
 * the wasm-bindgen classes behind them: their prototypes) and RetryError differ. Behaviour, against
 * an always-503 server: copy A spends its default budget (sequential calls, 9 attempts each, 1 to
 * 4 ms apart), then one more call of A, and one call of a fresh copy B, are counted. For contrast,
 * the same with two copies imported by a bare query string (no hook: `?naive=1`, `?naive=2`),
 * which share the wasm glue and so the budget.
 */
async function checkIsolation() {
  const quick = { maxAttempts: 9, baseDelayMs: 1, maxDelayMs: 4 };
  const srv = await startStormServer({ mode: 'outage' });
  const attemptsOf = async (rf) => {
    const before = srv.stats().seen;
    const res = await rf.retryFetch(srv.url, undefined, quick).catch((e) => e);
    if (res?.arrayBuffer) await res.arrayBuffer();
    return srv.stats().seen - before;
  };
  const drain = async (rf) => { for (let i = 0; i < 5; i += 1) await attemptsOf(rf); };
  try {
    const a = await ownCopy('check-a');
    const b = await ownCopy('check-b');
    const n1 = await import(`${ENTRY}?naive=1`);
    const n2 = await import(`${ENTRY}?naive=2`);
    const identity = {
      retryFetchDiffers: a.retryFetch !== b.retryFetch,
      retryBudgetDiffers: a.RetryBudget !== b.RetryBudget,
      retryBudgetPrototypeDiffers: a.RetryBudget.prototype !== b.RetryBudget.prototype,
      retryErrorDiffers: a.RetryError !== b.RetryError,
      naiveQueryShareGlue: n1.RetryBudget.prototype === n2.RetryBudget.prototype,
    };
    const fresh = await attemptsOf(b);
    await drain(a);
    const spentA = await attemptsOf(a);
    const afterA = await attemptsOf(b);
    await drain(n1);
    const naiveOther = await attemptsOf(n2);
    const behaviour = {
      attemptsAllowed: quick.maxAttempts,
      freshCopy: fresh,
      copyAAfterSpendingItsBudget: spentA,
      copyBAfterASpentItsBudget: afterA,
      naiveCopy2AfterNaiveCopy1SpentItsBudget: naiveOther,
    };
    const ok = Object.entries(identity).every(([, v]) => v)
      && spentA < quick.maxAttempts && afterA === quick.maxAttempts && fresh === quick.maxAttempts;
    return { ok, identity, behaviour };
  } finally {
    await srv.close();
  }
}

function kindTable(rows, ideal) {
  return table(['contender', 'amplification', `floor (1 + first ${CLIENTS} refused / ${CLIENTS})`, `successes (of ${CLIENTS})`,
    'p50 ms', 'p99 ms', 'p99 / ideal'], rows.map((r) => {
    const m = r.median;
    return m
      ? [r.name, fmt.amp(m.amplification), fmt.amp(m.floor), fmt.int(m.successes), fmt.int(m.p50Ms), fmt.int(m.p99Ms),
        Number.isFinite(ideal) ? fmt.ratio(m.p99OverIdeal) : 'n/a']
      : [`${r.name} (${r.note ?? 'no result'})`, 'n/a', 'n/a', 'n/a', 'n/a', 'n/a', 'n/a'];
  }));
}

async function main() {
  const started = performance.now();
  const isolation = await checkIsolation();
  log(`isolation check: ${isolation.ok ? 'ok' : 'FAILED'} ${JSON.stringify(isolation.behaviour)}`);
  if (!isolation.ok) {
    log(`identity: ${JSON.stringify(isolation.identity)}`);
    process.exitCode = 1;
    return;
  }
  const server = spawnStormServer();
  try {
    const warm = await server.start({ mode: 'custom' }); // always 200 (no limit)
    const kinds = KINDS.map((k) => ({
      id: k.id, title: k.title, description: k.description, server: k.server, idealMs: k.idealMs, rows: CONTENDERS.map(newRow),
    }));
    const outage = { title: 'outage', description: describe(OUTAGE_SERVER), server: OUTAGE_SERVER, rows: CONTENDERS.map(newRow) };
    log(`${CLIENTS} independent clients (${WORKERS} workers), ${ROUNDS} round(s); kinds: `
      + `${KINDS.map((k) => `${k.id} (ideal ${Math.round(k.idealMs)} ms)`).join(', ')}; then the outage`
      + `${OUTAGE_SIDE_BY_SIDE ? ', its contenders side by side' : ''}`);
    const n = CONTENDERS.length;
    for (let r = 0; r < ROUNDS; r += 1) {
      const order = CONTENDERS.map((_, i) => (i + r) % n); // rotated by one per round
      for (const [ki, k] of KINDS.entries()) {
        for (const i of order) {
          const c = CONTENDERS[i];
          const row = kinds[ki].rows[i];
          if (!row.available) continue;
          try {
            const p = await prepareRun(server, warm.url, k.server, c);
            record(k.id, r, c, row, await p.go());
          } catch (err) { fail(k.id, c, row, err); }
        }
      }
      const one = async (i) => {
        const c = CONTENDERS[i];
        const row = outage.rows[i];
        if (!row.available) return null;
        try {
          return { c, row, p: await prepareRun(server, warm.url, OUTAGE_SERVER, c) };
        } catch (err) { fail('outage', c, row, err); return null; }
      };
      if (OUTAGE_SIDE_BY_SIDE) {
        const prepared = (await Promise.all(order.map(one))).filter(Boolean);
        await Promise.all(prepared.map(async ({ c, row, p }) => {
          try { record('outage', r, c, row, await p.go()); } catch (err) { fail('outage', c, row, err); }
        }));
      } else {
        for (const i of order) {
          const x = await one(i);
          if (x) try { record('outage', r, x.c, x.row, await x.p.go()); } catch (err) { fail('outage', x.c, x.row, err); }
        }
      }
    }
    await server.stop(warm.id).catch(() => {});
    for (const k of kinds) for (const row of k.rows) if (row.available && row.rounds.length) row.median = summarize(row.rounds, k.idealMs);
    for (const row of outage.rows) if (row.available && row.rounds.length) row.median = summarize(row.rounds, Infinity);
    const totalSeconds = (performance.now() - started) / 1000;

    const all = [...kinds.flatMap((k) => k.rows), ...outage.rows].filter((r) => r.median);
    const peakConn = Math.max(0, ...all.map((r) => r.median.peakOpenConnections));
    const spreadOf = (rows) => Math.max(0, ...rows.filter((r) => r.median).map((r) => r.median.startSpreadMs));
    const spread = spreadOf(kinds.flatMap((k) => k.rows));
    const outageSpread = spreadOf(outage.rows);
    const cut = all.filter((r) => r.rounds.some((x) => x.pendingAtTimeout > 0)).map((r) => r.name);
    const rejected = [...kinds.flatMap((k) => k.rows.map((r) => [k.title, r])), ...outage.rows.map((r) => ['outage', r])]
      .filter(([, r]) => r.median && Object.keys(r.median.errors).length)
      .map(([kind, r]) => `${kind} ${r.name}: ${Object.entries(r.median.errors).map(([e, v]) => `${v} ${e}`).join(', ')}`);
    const notes = {
      checks: `Checks: at most ${peakConn} connections were open at once on a server; the last worker started its clients `
        + `at most ${spread.toFixed(0)} ms after the release in the herd runs (${outageSpread.toFixed(0)} ms in the outage, `
        + `${OUTAGE_SIDE_BY_SIDE ? `its ${CONTENDERS.length * WORKERS} workers released together` : 'one contender at a time'}); isolation: ${isolation.ok ? 'each copy of retry-fetch has its own state' : 'FAILED'} `
        + `(a fresh copy made ${isolation.behaviour.freshCopy} attempts against an always-503 server; after copy A spent its default budget, `
        + `A made ${isolation.behaviour.copyAAfterSpendingItsBudget} and a copy B ${isolation.behaviour.copyBAfterASpentItsBudget}; `
        + `two copies imported by a bare query string, which share the wasm glue: ${isolation.behaviour.naiveCopy2AfterNaiveCopy1SpentItsBudget}).`,
      rejected: `Calls that rejected (summed over the rounds): ${rejected.length ? rejected.join('; ') : 'none'}.`,
      cut: cut.length ? `Rounds cut at ${ROUND_TIMEOUT_MS / 1000} s (pending calls counted as failures at that time): ${cut.join(', ')}.` : null,
    };

    const m = machine();
    const out = [];
    out.push(`## Retry storms, independent clients (${ROUNDS} round(s), medians; Node ${m.node}, ${m.cpus} cores; ${totalSeconds.toFixed(0)} s)`);
    out.push('', DESCRIPTION, '');
    for (const k of kinds) {
      out.push(`### ${k.title}: ${k.description}; ideal ${Math.round(k.idealMs)} ms`, '', kindTable(k.rows, k.idealMs), '');
    }
    out.push(`### Outage (${outage.description}${OUTAGE_SIDE_BY_SIDE ? '; rows ran side by side' : ''})`, '', kindTable(outage.rows, Infinity), '');
    out.push(notes.checks, '', notes.rejected);
    if (notes.cut) out.push('', notes.cut);
    await printMarkdown(out);

    writeResults(RESULTS, {
      format: 1,
      ...m,
      description: DESCRIPTION,
      rounds: ROUNDS,
      clients: CLIENTS,
      workers: WORKERS,
      clientsPerWorker: Math.ceil(CLIENTS / WORKERS),
      outageSideBySide: OUTAGE_SIDE_BY_SIDE,
      roundTimeoutMs: ROUND_TIMEOUT_MS,
      policy: { retries: RETRIES, attempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS },
      isolation,
      kinds,
      outage,
      notes,
      totalSeconds,
    });
  } finally {
    await server.terminate();
  }
}

if (isMainThread) await main();
else if (workerData?.independentClients) await workerMain();
