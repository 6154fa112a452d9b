// Storm benchmarks: what retries do to an overloaded server, and to a dead one.
//
//   node bench/storms.mjs            (ROUNDS=3 by default; ROUNDS=1 for a quick look)
//
// Herd: 200 clients in this process start the same call at the same moment against the storm
// server (503 above 8 requests in service or when its 400 req/s bucket of 20 tokens is empty,
// else 200 after 5 ms). Each may make 9 attempts (8 retries), base delay 50 ms, cap 2 s.
// Outage: the same 200 clients against a server that answers 503 to everything.
//
// Per contender and round: amplification (requests the server saw / 200), successes (200s out
// of 200), p50 and p99 completion time (ms from the common start until the call settled,
// successes and failures alike). Every contender gets a fresh server per round; the median
// of the rounds is printed, as markdown, and everything goes to bench/results/storms.json.
//
// RetryBudget, AdaptiveThrottle and CircuitBreaker are used when the built package exports
// them (typeof ... === 'function'); otherwise their rows say n/a.
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import * as rf from 'retry-fetch';
import ky from 'ky';
import pRetry from 'p-retry';
import fetchBuilder from 'fetch-retry';
import { retry, handleAll, ExponentialBackoff } from 'cockatiel';
import { spawnStormServer, DEFAULTS as SERVER } from './storm-server.mjs';
import { log, positiveInt, printMarkdown, versionOf, writeResults } from './common.mjs';

const CLIENTS = 200;
const ROUNDS = positiveInt(process.env.ROUNDS, 3);
// Outage rows of one round run side by side, each against its own always-503 server: under a
// total outage the number of attempts does not depend on timing, and this keeps a run short.
// OUTAGE_SIDE_BY_SIDE=0 runs them one after the other like the herd.
const OUTAGE_SIDE_BY_SIDE = process.env.OUTAGE_SIDE_BY_SIDE !== '0';
const ROUND_TIMEOUT_MS = 30_000; // a call still pending then counts as a failure at this time
const RETRIES = 8;
const BASE_MS = 50;
const CAP_MS = 2_000;
const POLICY = Object.freeze({ maxAttempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS });
const RESULTS = fileURLToPath(new URL('./results/storms.json', import.meta.url));

const GOALS = Object.freeze({
  throttle: { maxAmplification: 1.8, successes: CLIENTS, maxP99Ms: 800 },
  outageBudget: { maxAmplification: 1.15 },
});

// ---------------------------------------------------------------------------------------------
// Contenders. `make()` is called once per round: state shared by the 200 clients of a round (a
// budget, a throttle, a breaker, a policy) is created there. The returned function makes one
// client's call and resolves true on a 200. Every body is read, so every connection is freed.

/** Reads the body and tells whether the call ended in success. */
async function okAndDrain(res) {
  await res.arrayBuffer();
  return res.status === 200;
}

const hasExport = (name) => typeof rf[name] === 'function';
let lingering = false;

function retryFetchContender({ id, name, jitter, extra, isDefault = false }) {
  return {
    id,
    name,
    library: 'retry-fetch',
    isDefault,
    needs: extra ? [extra.cls] : [],
    config: { ...POLICY, jitter, ...(extra ? { [extra.option]: `new ${extra.cls}()` } : {}) },
    make() {
      const options = { ...POLICY, jitter };
      if (extra) options[extra.option] = new rf[extra.cls](); // ONE instance shared by all 200
      return async (url) => okAndDrain(await rf.retryFetch(url, undefined, options));
    },
  };
}

const JITTERS = ['none', 'full', 'equal', 'decorrelated', 'additive'];

const RF_JITTER = JITTERS.map((jitter) => retryFetchContender({
  id: `retry-fetch:${jitter}`,
  name: jitter === 'full' ? 'retry-fetch, jitter full (default)' : `retry-fetch, jitter ${jitter}`,
  jitter,
  isDefault: jitter === 'full',
}));
const RF_NO_BUDGET = RF_JITTER.find((c) => c.isDefault);
const RF_THROTTLE = retryFetchContender({
  id: 'retry-fetch:throttle', name: 'retry-fetch + AdaptiveThrottle', jitter: 'full',
  extra: { option: 'throttle', cls: 'AdaptiveThrottle' },
});
const RF_BUDGET = retryFetchContender({
  id: 'retry-fetch:budget', name: 'retry-fetch + RetryBudget', jitter: 'full',
  extra: { option: 'budget', cls: 'RetryBudget' },
});
const RF_BREAKER = retryFetchContender({
  id: 'retry-fetch:breaker', name: 'retry-fetch + CircuitBreaker (extra)', jitter: 'full',
  extra: { option: 'breaker', cls: 'CircuitBreaker' },
});

const KY = {
  id: 'ky', name: `ky ${versionOf('ky')}`, library: 'ky', needs: [],
  config: { retry: { limit: RETRIES, delay: `n => ${BASE_MS} * 2 ** (n - 1)`, backoffLimit: CAP_MS } },
  make() {
    const client = ky.create({
      retry: { limit: RETRIES, delay: (n) => BASE_MS * 2 ** (n - 1), backoffLimit: CAP_MS },
    });
    return async (url) => okAndDrain(await client.get(url)); // throws HTTPError on the last 503
  },
};
const KY_JITTER = {
  ...KY, id: 'ky:jitter', name: `ky ${versionOf('ky')}, jitter: true (extra)`,
  config: { retry: { ...KY.config.retry, jitter: true } },
  make() {
    const client = ky.create({
      retry: { limit: RETRIES, delay: (n) => BASE_MS * 2 ** (n - 1), backoffLimit: CAP_MS, jitter: true },
    });
    return async (url) => okAndDrain(await client.get(url));
  },
};
const P_RETRY = {
  id: 'p-retry', name: `p-retry ${versionOf('p-retry')}`, library: 'p-retry', needs: [],
  config: { retries: RETRIES, minTimeout: BASE_MS, maxTimeout: CAP_MS, factor: 2, randomize: true },
  make() {
    const options = { retries: RETRIES, minTimeout: BASE_MS, maxTimeout: CAP_MS, factor: 2, randomize: true };
    const attempt = (url) => async () => {
      const res = await fetch(url);
      if (res.status === 503) {
        await res.arrayBuffer();
        throw new Error('503 Service Unavailable');
      }
      return res;
    };
    return async (url) => okAndDrain(await pRetry(attempt(url), options));
  },
};
const FETCH_RETRY = {
  id: 'fetch-retry', name: `fetch-retry ${versionOf('fetch-retry')}`, library: 'fetch-retry', needs: [],
  config: { retries: RETRIES, retryDelay: `n => min(${CAP_MS}, ${BASE_MS} * 2 ** n)`, retryOn: [503] },
  make() {
    const f = fetchBuilder(fetch, {
      retries: RETRIES,
      retryDelay: (n) => Math.min(CAP_MS, BASE_MS * 2 ** n),
      retryOn: [503],
    });
    return async (url) => okAndDrain(await f(url));
  },
};
const COCKATIEL = {
  id: 'cockatiel', name: `cockatiel ${versionOf('cockatiel')}`, library: 'cockatiel', needs: [],
  config: {
    policy: 'retry(handleAll.orWhenResult(res => res.status === 503), ...)',
    maxAttempts: RETRIES,
    backoff: `new ExponentialBackoff({ initialDelay: ${BASE_MS}, maxDelay: ${CAP_MS} })`,
  },
  make() {
    const policy = retry(handleAll.orWhenResult((res) => res.status === 503), {
      maxAttempts: RETRIES,
      backoff: new ExponentialBackoff({ initialDelay: BASE_MS, maxDelay: CAP_MS }),
    });
    return async (url) => okAndDrain(await policy.execute(() => fetch(url)));
  },
};
const PEERS = [KY, KY_JITTER, P_RETRY, FETCH_RETRY, COCKATIEL];

const HERD = [...RF_JITTER, RF_THROTTLE, RF_BUDGET, ...PEERS];
// No throttle row here: AdaptiveThrottle paces every attempt (its rate falls to minRate, 0.5
// req/s, under 503s), so in an outage its 200 calls wait in line far past any round; it is a
// tool for overload, the budget and the breaker are the tools for an outage.
const OUTAGE = [
  { ...RF_NO_BUDGET, name: 'retry-fetch, no budget' },
  { ...RF_BUDGET, name: 'retry-fetch + ONE shared RetryBudget' },
  RF_BREAKER,
  ...PEERS,
];

// ---------------------------------------------------------------------------------------------
// Measuring.

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}
function median(values) {
  const v = values.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

/** One round: a fresh server in `mode`, `clients` calls started in one synchronous loop. */
async function runRound(server, mode, contender, clients = CLIENTS) {
  const { id: serverId, url } = await server.start({ mode });
  let stats = null;
  const stop = async () => { if (!stats) stats = await server.stop(serverId); return stats; };
  try {
    const call = contender.make();
    const times = [];
    let successes = 0;
    const errors = {};
    const t0 = performance.now();
    const calls = [];
    for (let i = 0; i < clients; i += 1) {
      calls.push(
        Promise.resolve()
          .then(() => call(url))
          .then(
            (ok) => { if (ok) successes += 1; times.push(performance.now() - t0); },
            (err) => {
              const kind = err?.name && err.name !== 'Error'
                ? `${err.name}${typeof err.reason === 'string' ? ` (${err.reason})` : ''}`
                : String(err?.message ?? err).slice(0, 60);
              errors[kind] = (errors[kind] ?? 0) + 1;
              times.push(performance.now() - t0);
            },
          ),
      );
    }
    let timer;
    const timedOut = await Promise.race([
      Promise.all(calls).then(() => false),
      new Promise((resolve) => { timer = setTimeout(() => resolve(true), ROUND_TIMEOUT_MS); }),
    ]);
    clearTimeout(timer);
    const pending = clients - times.length;
    const settled = times.slice().sort((a, b) => a - b);
    for (let i = 0; i < pending; i += 1) settled.push(ROUND_TIMEOUT_MS);
    const wallMs = performance.now() - t0;
    const s = await stop();
    if (timedOut) lingering = true; // calls still pending are abandoned (the process exits at the end)
    return {
      amplification: s.seen / clients,
      successes,
      p50Ms: percentile(settled, 0.5),
      p99Ms: percentile(settled, 0.99),
      maxMs: settled[settled.length - 1],
      wallMs,
      seen: s.seen,
      pendingAtTimeout: pending,
      errors,
      server: s,
    };
  } finally {
    await stop().catch(() => {});
  }
}

function summarize(rounds) {
  const m = (k) => median(rounds.map((r) => r[k]));
  return {
    amplification: m('amplification'),
    successes: m('successes'),
    p50Ms: m('p50Ms'),
    p99Ms: m('p99Ms'),
    maxMs: m('maxMs'),
    seen: m('seen'),
    peakOpenConnections: Math.max(...rounds.map((r) => r.server.peakOpenConnections)),
    connectionsPerRound: median(rounds.map((r) => r.server.connections)),
    peakInService: Math.max(...rounds.map((r) => r.server.peakInService)),
    errors: rounds.reduce((acc, r) => {
      for (const [k, v] of Object.entries(r.errors)) acc[k] = (acc[k] ?? 0) + v;
      return acc;
    }, {}),
  };
}

function unavailableReason(c) {
  const missing = c.needs.filter((n) => !hasExport(n));
  return missing.length ? `retry-fetch does not export ${missing.join(', ')} yet` : null;
}

/**
 * Runs every contender for ROUNDS rounds. Round-robin, so slow drift spreads over all; with
 * `sideBySide`, the contenders of a round run at the same time, each against its own server.
 */
async function runScenario(server, mode, contenders, log, { sideBySide = false } = {}) {
  const rows = contenders.map((c) => ({
    id: c.id, name: c.name, library: c.library, config: c.config,
    available: !unavailableReason(c), note: unavailableReason(c), rounds: [], median: null,
  }));
  const one = async (r, c, row) => {
    if (!row.available) return;
    try {
      const result = await runRound(server, mode, c);
      row.rounds.push(result);
      log(`${mode} round ${r + 1}/${ROUNDS} ${c.name}: amplification ${result.amplification.toFixed(2)}, `
        + `${result.successes}/${CLIENTS} ok, p99 ${result.p99Ms.toFixed(0)} ms (${(result.wallMs / 1000).toFixed(1)} s)`);
    } catch (err) {
      row.available = false;
      row.note = `error: ${String(err?.message ?? err).split('\n')[0]}`;
      log(`${mode} ${c.name}: ${row.note}`);
    }
  };
  for (let r = 0; r < ROUNDS; r += 1) {
    if (sideBySide) {
      await Promise.all(contenders.map((c, i) => one(r, c, rows[i])));
    } else {
      for (const [i, c] of contenders.entries()) await one(r, c, rows[i]);
    }
  }
  for (const row of rows) if (row.available && row.rounds.length) row.median = summarize(row.rounds);
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Printing.

const fmt = {
  amp: (x) => (x == null ? 'n/a' : x.toFixed(2)),
  int: (x) => (x == null ? 'n/a' : String(Math.round(x))),
  ms: (x) => (x == null ? 'n/a' : String(Math.round(x))),
};

function table(headers, rows) {
  const line = (cells) => `| ${cells.join(' | ')} |`;
  return [line(headers), line(headers.map((h, i) => (i === 0 ? '---' : '---:'))), ...rows.map(line)].join('\n');
}

function herdTable(rows) {
  return table(
    ['contender', 'amplification', `successes (of ${CLIENTS})`, 'p50 ms', 'p99 ms'],
    rows.map((r) => (r.median
      ? [r.name, fmt.amp(r.median.amplification), fmt.int(r.median.successes), fmt.ms(r.median.p50Ms), fmt.ms(r.median.p99Ms)]
      : [`${r.name} (${r.note})`, 'n/a', 'n/a', 'n/a', 'n/a'])),
  );
}

function outageTable(rows) {
  return table(
    ['contender', 'amplification', 'requests seen', `p99 ms (time to give up${OUTAGE_SIDE_BY_SIDE ? '; rows ran side by side' : ''})`],
    rows.map((r) => (r.median
      ? [r.name, fmt.amp(r.median.amplification), fmt.int(r.median.seen), fmt.ms(r.median.p99Ms)]
      : [`${r.name} (${r.note})`, 'n/a', 'n/a', 'n/a'])),
  );
}

function evaluateGoals(herd, outage) {
  const goals = [];
  const byId = (rows, id) => rows.find((r) => r.id === id);
  const mark = (ok) => (ok == null ? 'n/a' : ok ? 'met' : 'NOT met');

  // 1. Default options no worse than the best JS library measured, metric by metric.
  const def = byId(herd, RF_NO_BUDGET.id)?.median;
  const peers = herd.filter((r) => PEERS.some((p) => p.id === r.id) && r.median);
  const best = (key, better) => peers.reduce((b, r) => (b == null || better(r.median[key], b.median[key]) ? r : b), null);
  for (const [key, label, better, f] of [
    ['amplification', 'amplification', (a, b) => a < b, fmt.amp],
    ['successes', 'successes', (a, b) => a > b, fmt.int],
    ['p99Ms', 'p99 ms', (a, b) => a < b, fmt.ms],
  ]) {
    const b = best(key, better);
    const met = def && b ? !better(b.median[key], def[key]) : null;
    goals.push({
      goal: `herd, default options (full jitter) vs best JS library: ${label}`,
      target: b ? `${better(1, 2) ? '≤' : '≥'} ${f(b.median[key])} (${b.name})` : 'n/a',
      measured: def ? f(def[key]) : 'n/a',
      met: mark(met),
    });
  }

  // 2. Throttle.
  const t = byId(herd, RF_THROTTLE.id)?.median;
  const g = GOALS.throttle;
  goals.push({ goal: 'herd, throttle: amplification', target: `≤ ${g.maxAmplification}`, measured: t ? fmt.amp(t.amplification) : 'n/a', met: mark(t ? t.amplification <= g.maxAmplification : null) });
  goals.push({ goal: 'herd, throttle: successes', target: `${g.successes}/${CLIENTS}`, measured: t ? `${fmt.int(t.successes)}/${CLIENTS}` : 'n/a', met: mark(t ? t.successes >= g.successes : null) });
  goals.push({ goal: 'herd, throttle: p99', target: `≤ ${g.maxP99Ms} ms`, measured: t ? `${fmt.ms(t.p99Ms)} ms` : 'n/a', met: mark(t ? t.p99Ms <= g.maxP99Ms : null) });

  // 3. Outage with one shared budget.
  const o = byId(outage, RF_BUDGET.id)?.median;
  const go = GOALS.outageBudget;
  goals.push({ goal: 'outage, one shared RetryBudget: amplification', target: `≤ ${go.maxAmplification}`, measured: o ? fmt.amp(o.amplification) : 'n/a', met: mark(o ? o.amplification <= go.maxAmplification : null) });
  return goals;
}

// ---------------------------------------------------------------------------------------------

async function main() {
  const started = performance.now();
  const server = spawnStormServer();
  try {
    // Warm-up, not recorded: JIT, the wasm module, each library's first call, undici's pools.
    for (const c of [...HERD, RF_BREAKER]) {
      if (unavailableReason(c)) continue;
      await runRound(server, 'storm', c, 10).catch(() => {});
    }
    log(`herd: ${CLIENTS} clients, ${ROUNDS} round(s) per contender`);
    const herd = await runScenario(server, 'storm', HERD, log);
    log(`outage: ${CLIENTS} clients, ${ROUNDS} round(s) per contender${OUTAGE_SIDE_BY_SIDE ? ', contenders side by side' : ''}`);
    const outage = await runScenario(server, 'outage', OUTAGE, log, { sideBySide: OUTAGE_SIDE_BY_SIDE });
    const goals = evaluateGoals(herd, outage);
    const totalSeconds = (performance.now() - started) / 1000;

    const peakConn = Math.max(0, ...[...herd, ...outage].filter((r) => r.median).map((r) => r.median.peakOpenConnections));
    const peakInService = Math.max(0, ...herd.filter((r) => r.median).map((r) => r.median.peakInService));
    const out = [];
    out.push(`## Storms (${ROUNDS} round(s), medians; Node ${process.version}, ${os.cpus().length} cores)`);
    out.push('');
    out.push(`Server: 503 when ${SERVER.maxInService} requests are in service or its ${SERVER.ratePerSec} req/s bucket `
      + `(capacity ${SERVER.burst}) is empty, else 200 after ${SERVER.serviceMs} ms. Clients: ${CLIENTS} calls started at once, `
      + `${RETRIES} retries (${RETRIES + 1} attempts), base ${BASE_MS} ms, cap ${CAP_MS} ms. `
      + `Amplification = requests the server saw / ${CLIENTS}.`);
    out.push('');
    out.push(`### Herd`);
    out.push('');
    out.push(herdTable(herd));
    out.push('');
    out.push(`### Outage (always 503)`);
    out.push('');
    out.push(outageTable(outage));
    out.push('');
    out.push(`### Goals (informational, not assertions)`);
    out.push('');
    out.push(table(['goal', 'target', 'measured', ''], goals.map((g) => [g.goal, g.target, g.measured, g.met])));
    out.push('');
    out.push(`Checks: at most ${peakConn} connections were open at once on the server (${CLIENTS} clients: `
      + `${peakConn >= CLIENTS ? 'no client-side connection cap queued requests' : 'FEWER than the clients: a client-side cap may have queued requests'}); `
      + `at most ${peakInService} requests were in service (limit ${SERVER.maxInService}). Run took ${totalSeconds.toFixed(0)} s.`);
    const rejected = [...herd.map((r) => ['herd', r]), ...outage.map((r) => ['outage', r])]
      .filter(([, r]) => r.median && Object.keys(r.median.errors).length)
      .map(([scenario, r]) => `${scenario} ${r.name}: ${Object.entries(r.median.errors).map(([k, v]) => `${v} ${k}`).join(', ')}`);
    const timedOut = [...herd, ...outage].filter((r) => r.rounds.some((x) => x.pendingAtTimeout > 0))
      .map((r) => `${r.name} (${r.rounds.map((x) => x.pendingAtTimeout).join('/')} calls still pending after ${ROUND_TIMEOUT_MS / 1000} s, counted as failures)`);
    out.push('');
    out.push(`Calls that rejected instead of resolving with a Response (all rounds): ${rejected.length ? rejected.join('; ') : 'none'}.`);
    if (timedOut.length) out.push(`Rounds cut at ${ROUND_TIMEOUT_MS / 1000} s: ${timedOut.join('; ')}.`);
    await printMarkdown(out);

    writeResults(RESULTS, {
      generatedAt: new Date().toISOString(),
      node: process.version,
      platform: `${os.platform()} ${os.arch()}`,
      cpus: os.cpus().length,
      rounds: ROUNDS,
      clients: CLIENTS,
      outageSideBySide: OUTAGE_SIDE_BY_SIDE,
      policy: { retries: RETRIES, attempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS },
      server: { ...SERVER, note: 'burst = token bucket capacity; 503s take no token' },
      exports: Object.keys(rf).sort(),
      goals,
      herd,
      outage,
      totalSeconds,
    });
  } finally {
    await server.terminate();
  }
}

await main();
// A round that hit ROUND_TIMEOUT_MS may have left calls waiting on timers: do not wait for them.
if (lingering) process.exit(process.exitCode ?? 0);
