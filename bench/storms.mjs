// Storm benchmarks: what retries do to an overloaded server, and to a dead one.
//
//   node bench/storms.mjs            (ROUNDS=3 by default; ROUNDS=1 for a quick look; WARM=0
//                                     without the warm rows; ONLY=warm only the herds whose id
//                                     contains "warm", and no outage)
//
// Herd: 200 clients in this process start the same call at the same moment against a storm
// server (bench/storm-server.mjs) of each kind:
//   - rate-limited: token bucket of 400 req/s (capacity 20), service 5 ms, 503 without Retry-After;
//   - concurrency-limited: at most 8 in service, service 20 ms (~400 req/s), 503 when full;
//   - shedding: the rate-limited server, but every 503 carries Retry-After: 1;
//   - halving: the rate-limited server, whose rate halves to 200 req/s 250 ms after the first
//     request.
// Outage: the same 200 clients against a server that answers 503 to everything.
// Each client may make 9 attempts (8 retries), base delay 50 ms, cap 2 s.
//
// Per contender, kind and round: amplification (requests the server saw / 200), the floor (1 +
// requests refused among the first 200 the server saw / 200), successes (200s out of 200), p50
// and p99 completion time (ms from the common start until the call settled, successes and
// failures alike). Each kind's ideal is the least time its server needs to serve 200 requests
// (storm-server.mjs's idealMs); each row's p99 is also given as a multiple of it. Every contender
// gets a fresh server per round; the median of the rounds is printed, as markdown, and
// everything goes to bench/results/storms.json.
//
// Warm: the same herd after 200 healthy calls through the same client (one shared
// `new AdaptiveThrottle()`, or the default options' module state), evenly spaced at half the
// server's capacity and all answered, just before it; the server's counters, bucket and
// capacity-change clock are then reset (the healthy calls are not counted). Every kind at two
// capacities (the preset, and half its rate or 4 in service for 10 ms); WARM=0 leaves them out.
//
// RetryBudget, AdaptiveThrottle and CircuitBreaker are used when the built package exports
// them (typeof ... === 'function'), and the "no budget" row (`budget: false`) when the package
// accepts that option (one call is tried at start); otherwise their rows say n/a.
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import * as rf from 'retry-fetch';
import { describe, idealMs, resolveOptions, spawnStormServer } from './storm-server.mjs';
import {
  BASE_MS, CAP_MS, COCKATIEL, FETCH_RETRY, KY, KY_JITTER, P_RETRY, POLICY, RETRIES, okAndDrain, summarizeRounds,
} from './storm-peers.mjs';
import { log, machine, positiveInt, printMarkdown, writeResults } from './common.mjs';
import {
  goalsTable, median, percentile, stormFmt as fmt, stormHerdTable, stormNotes, stormOutageTable,
} from './format.mjs';

const CLIENTS = 200;
const ROUNDS = positiveInt(process.env.ROUNDS, 3);
// Outage rows of one round run side by side, each against its own always-503 server: under a
// total outage the number of attempts does not depend on timing, and this keeps a run short.
// OUTAGE_SIDE_BY_SIDE=0 runs them one after the other like the herd. Herd rows never run side
// by side: they share the CPU, and their timing is what they measure.
const OUTAGE_SIDE_BY_SIDE = process.env.OUTAGE_SIDE_BY_SIDE !== '0';
const ROUND_TIMEOUT_MS = 30_000; // a call still pending then counts as a failure at this time
const WARM = process.env.WARM !== '0';
const WARM_CALLS = 200; // healthy calls before a warm herd
const WARM_SHARE = 0.5; // ... at this share of the server's capacity
const RESULTS = fileURLToPath(new URL('./results/storms.json', import.meta.url));

const GOALS = Object.freeze({
  // AdaptiveThrottle on every kind: all served, amplification within 0.1 of its floor, p99
  // within 1.5 x the ideal.
  throttle: { successes: CLIENTS, maxAboveFloor: 0.1, maxP99OverIdeal: 1.5 },
  // Default options (the default budget and the default throttle) on every kind: all served,
  // amplification within 0.2 of the floor, p99 within 1.5 x the ideal; against the shedding
  // server, the ideal of a client that honours its Retry-After (1 s, then the rest served at
  // capacity: 1000 ms + the kind's ideal).
  defaultStorm: { successes: CLIENTS, maxAboveFloor: 0.2, maxP99OverIdeal: 1.5, retryAfterMs: 1000 },
  outageDefault: { maxAmplification: 1.5 },
  outageBudget: { maxAmplification: 1.15 },
});

// ---------------------------------------------------------------------------------------------
// Contenders. `make()` is called once per round: state shared by the 200 clients of a round (a
// budget, a throttle, a breaker, a policy) is created there. The returned function makes one
// client's call and resolves true on a 200. Every body is read, so every connection is freed.

const hasExport = (name) => typeof rf[name] === 'function';
let lingering = false;
// Whether this build accepts `budget: false` (checked once at start, see probeBudgetFalse).
const support = { budgetFalse: null, budgetFalseNote: null };

function retryFetchContender({ id, name, options = {}, shared }) {
  return {
    id,
    name,
    library: 'retry-fetch',
    needs: shared ? [shared.cls] : [],
    needsBudgetFalse: options.budget === false,
    options, // the jitter rows add `budget: false` to it once the build is known to accept it
    get config() { return { ...POLICY, ...options, ...(shared ? { [shared.option]: `new ${shared.cls}()` } : {}) }; },
    make() {
      const o = { ...POLICY, ...options };
      if (shared) o[shared.option] = new rf[shared.cls](); // ONE instance shared by all 200
      return async (url) => okAndDrain(await rf.retryFetch(url, undefined, o));
    },
  };
}

const RF_DEFAULT = retryFetchContender({ id: 'retry-fetch:default', name: 'retry-fetch, default options' });
const RF_NO_BUDGET = retryFetchContender({ id: 'retry-fetch:no-budget', name: 'retry-fetch, no budget', options: { budget: false } });
const RF_BUDGET = retryFetchContender({
  id: 'retry-fetch:budget', name: 'retry-fetch + RetryBudget', shared: { option: 'budget', cls: 'RetryBudget' },
});
const RF_THROTTLE = retryFetchContender({
  id: 'retry-fetch:throttle', name: 'retry-fetch + AdaptiveThrottle', shared: { option: 'throttle', cls: 'AdaptiveThrottle' },
});
const RF_BREAKER = retryFetchContender({
  id: 'retry-fetch:breaker', name: 'retry-fetch + CircuitBreaker', shared: { option: 'breaker', cls: 'CircuitBreaker' },
});
// Another jitter than the default 'full', the rate-limited kind only. With `budget: false` when
// the build accepts it (see withoutBudget), so that these rows compare jitters, not the budget;
// "retry-fetch, no budget" is then their 'full' counterpart.
const RF_JITTER = ['none', 'equal', 'decorrelated', 'additive'].map((jitter) => retryFetchContender({
  id: `retry-fetch:jitter-${jitter}`, name: `retry-fetch, jitter ${jitter} (extra)`, options: { jitter },
}));
/** Once `budget: false` is known to work: the jitter rows use it too. */
function withoutBudget() {
  for (const c of RF_JITTER) {
    c.options.budget = false;
    c.name = c.name.replace(/^retry-fetch, jitter/, 'retry-fetch, no budget, jitter');
  }
}

// The warm rows: the same clients, after healthy traffic (see runRound).
const warmed = (c) => ({ ...c, id: `${c.id}:warm`, name: `${c.name}, warm`, warm: true });
const RF_DEFAULT_WARM = warmed(RF_DEFAULT);
const RF_THROTTLE_WARM = warmed(RF_THROTTLE);

const PEERS = [KY, KY_JITTER, P_RETRY, FETCH_RETRY, COCKATIEL];
const OURS = [RF_DEFAULT, RF_NO_BUDGET, RF_BUDGET, RF_THROTTLE, RF_BREAKER];
const CORE_PEERS = [KY, P_RETRY, FETCH_RETRY, COCKATIEL];

// The server kinds of the herd. The jitter variants (retry-fetch's other jitters, ky's jitter:
// true) run against the rate-limited kind only: the closest to the former herd server, and a
// full run stays under about 6 minutes.
const KINDS = [
  { id: 'rate-limited', title: 'rate-limited', server: { mode: 'rate-limited' }, contenders: [...OURS, ...RF_JITTER, KY, KY_JITTER, P_RETRY, FETCH_RETRY, COCKATIEL] },
  { id: 'concurrency-limited', title: 'concurrency-limited', server: { mode: 'concurrency-limited' }, contenders: [...OURS, ...CORE_PEERS] },
  { id: 'shedding', title: 'shedding (Retry-After)', server: { mode: 'shedding' }, contenders: [...OURS, ...CORE_PEERS] },
  { id: 'halving', title: 'capacity halving', server: { mode: 'halving' }, contenders: [...OURS, ...CORE_PEERS] },
];

// Warm herds, each kind at two capacities: the preset and one the defaults were not tuned to
// (200 req/s); and 4 in service × 10 ms, extra (Node's timers make its 10 ms service 10 to
// 12 ms, so it serves about 350 req/s, not the 400 its ideal assumes).
const WARM_KINDS = !WARM ? [] : [
  { id: 'rate-limited', title: 'rate-limited', server: { mode: 'rate-limited' } },
  { id: 'rate-limited-200', title: 'rate-limited 200 req/s', server: { mode: 'rate-limited', ratePerSec: 200, burst: 10 } },
  { id: 'concurrency-limited', title: 'concurrency-limited', server: { mode: 'concurrency-limited' } },
  { id: 'concurrency-limited-200', title: 'concurrency-limited 8 × 40 ms', server: { mode: 'concurrency-limited', serviceMs: 40 } },
  { id: 'concurrency-limited-4', title: 'concurrency-limited 4 × 10 ms (extra)', server: { mode: 'concurrency-limited', maxInService: 4, serviceMs: 10 }, extra: true },
  { id: 'shedding', title: 'shedding (Retry-After)', server: { mode: 'shedding' } },
  { id: 'shedding-200', title: 'shedding (Retry-After) 200 req/s', server: { mode: 'shedding', ratePerSec: 200, burst: 10 } },
  { id: 'halving', title: 'capacity halving', server: { mode: 'halving' } },
  { id: 'halving-200', title: 'capacity halving from 200 req/s', server: { mode: 'halving', ratePerSec: 200, burst: 10 } },
].map((k) => ({
  ...k,
  id: `warm:${k.id}`,
  title: `${k.title}, warm`,
  // default options warm at the presets only: their guards meet a herd warm as cold (the
  // simulation has every capacity), and a full run stays under 6 minutes
  contenders: k.id === k.server.mode ? [RF_THROTTLE_WARM, RF_DEFAULT_WARM] : [RF_THROTTLE_WARM],
}));

const withServer = (k) => {
  const server = resolveOptions({ ...k.server, firstWave: CLIENTS });
  return { ...k, server, description: describe(server), idealMs: idealMs(server, CLIENTS) };
};
// ONLY=<text>: only the herds whose id contains it, and no outage (a quick look at some rows).
const ONLY = process.env.ONLY ?? null;
const HERDS = [...KINDS, ...WARM_KINDS].filter((k) => ONLY == null || k.id.includes(ONLY)).map(withServer);

/** What a server serves, req/s (its rate, or its slots over the service time). */
function capacityOf(o) {
  const slots = o.maxInService > 0 ? (o.maxInService * 1000) / Math.max(1, o.serviceMs) : Infinity;
  const rate = o.ratePerSec > 0 ? o.ratePerSec : Infinity;
  return Math.min(slots, rate);
}

// No throttle row in the outage: AdaptiveThrottle paces every attempt (its rate falls to minRate,
// 0.5 req/s, under 503s), so its 200 calls wait in line for their turn (up to its maxWaitMs);
// it is a tool for overload, the budget and the breaker are the tools for an outage.
const OUTAGE = {
  server: resolveOptions({ mode: 'outage', firstWave: CLIENTS }),
  contenders: [
    RF_DEFAULT,
    RF_NO_BUDGET,
    { ...RF_BUDGET, name: 'retry-fetch + ONE shared RetryBudget' },
    { ...RF_BREAKER, name: 'retry-fetch + CircuitBreaker (extra)' },
    ...PEERS,
  ],
};

// ---------------------------------------------------------------------------------------------
// Measuring.

/** One round: a fresh server with `serverOptions`, `clients` calls started in one synchronous loop. */
async function runRound(server, serverOptions, contender, clients = CLIENTS) {
  const warming = contender.warm && clients === CLIENTS;
  // The healthy traffic meets the server before its capacity changes; the change is set (and
  // its clock started) by the reset before the herd.
  const { id: serverId, url, options } = await server.start(warming ? { ...serverOptions, halveAfterMs: null } : serverOptions);
  let stats = null;
  const stop = async () => { if (!stats) stats = await server.stop(serverId); return stats; };
  try {
    const call = contender.make();
    let warm = null;
    if (warming) {
      warm = await warmUp(call, url, capacityOf(options));
      const before = await server.reset(serverId, { halveAfterMs: serverOptions.halveAfterMs ?? null });
      warm.seen = before.seen;
      warm.refused = before.seen - before.ok;
    }
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
    const settled = times.slice();
    for (let i = 0; i < pending; i += 1) settled.push(ROUND_TIMEOUT_MS);
    const wallMs = performance.now() - t0;
    const s = await stop();
    if (timedOut) lingering = true; // calls still pending are abandoned (the process exits at the end)
    return {
      amplification: s.seen / clients,
      floor: 1 + s.firstWaveRefused / clients,
      successes,
      p50Ms: percentile(settled, 0.5),
      p99Ms: percentile(settled, 0.99),
      maxMs: Math.max(...settled),
      wallMs,
      seen: s.seen,
      pendingAtTimeout: pending,
      errors,
      server: s,
      ...(warm ? { warm } : {}),
    };
  } finally {
    await stop().catch(() => {});
  }
}

/**
 * The warm rows' healthy traffic: WARM_CALLS calls through `call`, one every
 * 1000 / (WARM_SHARE × capacity) ms (each started on time, not after the previous one
 * answered), then every answer awaited.
 */
async function warmUp(call, url, capacity) {
  const gapMs = 1000 / (WARM_SHARE * capacity);
  const t0 = performance.now();
  const calls = [];
  for (let i = 0; i < WARM_CALLS; i += 1) {
    const wait = t0 + i * gapMs - performance.now();
    if (wait >= 1) await sleep(wait);
    calls.push(call(url).catch(() => false));
  }
  const ok = (await Promise.all(calls)).filter(Boolean).length;
  return { calls: WARM_CALLS, ok, gapMs, ms: performance.now() - t0 };
}
function summarize(rounds, ideal) {
  return { ...summarizeRounds(rounds, ideal), connectionsPerRound: median(rounds.map((r) => r.server.connections)) };
}

function unavailableReason(c) {
  const missing = c.needs.filter((n) => !hasExport(n));
  if (missing.length) return `retry-fetch does not export ${missing.join(', ')} yet`;
  if (c.needsBudgetFalse && !support.budgetFalse) return support.budgetFalseNote;
  return null;
}

/**
 * Whether this build accepts `budget: false`: one call against a fresh rate-limited server. A
 * TypeError naming the option as invalid or unknown means no; anything else is reported.
 */
async function probeBudgetFalse(server) {
  const { id, url } = await server.start({ mode: 'rate-limited' });
  try {
    const res = await rf.retryFetch(url, undefined, { budget: false });
    await res.arrayBuffer();
    support.budgetFalse = true;
  } catch (err) {
    const msg = String(err?.message ?? err).split('\n')[0];
    support.budgetFalse = false;
    support.budgetFalseNote = err instanceof TypeError && /invalid|unknown/i.test(msg)
      ? '`budget: false` is not supported by this build'
      : `\`budget: false\` probe failed: ${msg}`;
    support.budgetFalseError = msg;
  } finally {
    await server.stop(id).catch(() => {});
  }
}

function newRow(c) {
  const note = unavailableReason(c);
  return { id: c.id, name: c.name, library: c.library, config: c.config, available: !note, note, rounds: [], median: null };
}

/** Runs `c` once against a fresh server and records the result in `row`. */
async function runInto(server, label, serverOptions, r, c, row) {
  if (!row.available) return;
  try {
    const result = await runRound(server, serverOptions, c);
    row.rounds.push(result);
    log(`${label} round ${r + 1}/${ROUNDS} ${c.name}: amplification ${result.amplification.toFixed(2)} `
      + `(floor ${result.floor.toFixed(2)}), ${result.successes}/${CLIENTS} ok, p99 ${result.p99Ms.toFixed(0)} ms `
      + `(${(result.wallMs / 1000).toFixed(1)} s)`);
  } catch (err) {
    row.available = false;
    row.note = `error: ${String(err?.message ?? err).split('\n')[0]}`;
    log(`${label} ${c.name}: ${row.note}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Goals.

function evaluateGoals(kinds, outage) {
  const goals = [];
  const byId = (rows, id) => rows.find((r) => r.id === id);
  const mark = (ok) => (ok == null ? 'n/a' : ok ? 'met' : 'NOT met');

  for (const k of kinds) {
    const warm = k.id.startsWith('warm:');
    const defId = warm ? RF_DEFAULT_WARM.id : RF_DEFAULT.id;
    const def = byId(k.rows, defId)?.median;
    if (!warm) {
    // Default options no worse than the best JS library measured on this kind, metric by metric.
    const peers = k.rows.filter((r) => PEERS.some((p) => p.id === r.id) && r.median);
    const best = (key, better) => peers.reduce((b, r) => (b == null || better(r.median[key], b.median[key]) ? r : b), null);
    const parts = [
      ['amplification', 'amplification', (a, b) => a < b, fmt.amp, ''],
      ['successes', 'successes', (a, b) => a > b, fmt.int, ''],
      ['p99Ms', 'p99', (a, b) => a < b, fmt.int, ' ms'],
    ].map(([key, label, better, f, unit]) => {
      const b = best(key, better);
      return {
        label,
        target: b ? `${better(1, 2) ? '≤' : '≥'} ${f(b.median[key])}${unit} (${b.name})` : 'n/a',
        measured: def ? `${f(def[key])}${unit}` : 'n/a',
        met: def && b ? !better(b.median[key], def[key]) : null,
      };
    });
    const missed = parts.filter((x) => x.met === false).map((x) => x.label);
    goals.push({
      goal: `${k.title}: default options vs the best JS library (amplification; successes; p99)`,
      target: parts.map((x) => x.target).join('; '),
      measured: parts.map((x) => x.measured).join('; '),
      met: parts.some((x) => x.met == null) ? 'n/a' : missed.length ? `NOT met (${missed.join(', ')})` : 'met',
    });
    }

    // Default options on every kind (GOALS.defaultStorm); warm, only where they ran (the
    // preset capacities: the warm default rows at the others are left out for time).
    if (def || !warm) {
      const dg = GOALS.defaultStorm;
      const shedding = k.server?.retryAfterSec != null;
      const dIdeal = shedding ? k.idealMs + dg.retryAfterMs : k.idealMs;
      goals.push({
        goal: `${k.title}, default options: successes`,
        target: `${dg.successes}/${CLIENTS}`,
        measured: def ? `${fmt.int(def.successes)}/${CLIENTS}` : 'n/a',
        met: mark(def ? def.successes >= dg.successes : null),
      });
      goals.push({
        goal: `${k.title}, default options: amplification`,
        target: def ? `≤ floor + ${dg.maxAboveFloor} = ${(def.floor + dg.maxAboveFloor).toFixed(2)} (floor ${fmt.amp(def.floor)})` : `≤ floor + ${dg.maxAboveFloor}`,
        measured: def ? fmt.amp(def.amplification) : 'n/a',
        met: mark(def ? def.amplification <= def.floor + dg.maxAboveFloor + 1e-9 : null),
      });
      goals.push({
        goal: `${k.title}, default options: p99`,
        target: `≤ ${dg.maxP99OverIdeal} × ${shedding ? 'the Retry-After ideal' : 'ideal'} = ${Math.round(dg.maxP99OverIdeal * dIdeal)} ms`,
        measured: def ? `${fmt.int(def.p99Ms)} ms (${fmt.ratio(def.p99Ms / dIdeal)})` : 'n/a',
        met: mark(def ? def.p99Ms <= dg.maxP99OverIdeal * dIdeal : null),
      });
    }

    // AdaptiveThrottle on every kind (GOALS.throttle).
    const t = byId(k.rows, warm ? RF_THROTTLE_WARM.id : RF_THROTTLE.id)?.median;
    const g = GOALS.throttle;
    goals.push({
      goal: `${k.title}, AdaptiveThrottle: successes`,
      target: `${g.successes}/${CLIENTS}`,
      measured: t ? `${fmt.int(t.successes)}/${CLIENTS}` : 'n/a',
      met: mark(t ? t.successes >= g.successes : null),
    });
    goals.push({
      goal: `${k.title}, AdaptiveThrottle: amplification`,
      target: t ? `≤ floor + ${g.maxAboveFloor} = ${(t.floor + g.maxAboveFloor).toFixed(2)} (floor ${fmt.amp(t.floor)})` : `≤ floor + ${g.maxAboveFloor}`,
      measured: t ? fmt.amp(t.amplification) : 'n/a',
      met: mark(t ? t.amplification <= t.floor + g.maxAboveFloor + 1e-9 : null),
    });
    goals.push({
      goal: `${k.title}, AdaptiveThrottle: p99`,
      target: `≤ ${g.maxP99OverIdeal} × ideal = ${Math.round(g.maxP99OverIdeal * k.idealMs)} ms`,
      measured: t ? `${fmt.int(t.p99Ms)} ms (${fmt.ratio(t.p99OverIdeal)})` : 'n/a',
      met: mark(t ? t.p99Ms <= g.maxP99OverIdeal * k.idealMs : null),
    });
  }

  const od = byId(outage.rows, RF_DEFAULT.id)?.median;
  goals.push({
    goal: 'outage, default options: amplification',
    target: `≤ ${GOALS.outageDefault.maxAmplification}`,
    measured: od ? fmt.amp(od.amplification) : 'n/a',
    met: mark(od ? od.amplification <= GOALS.outageDefault.maxAmplification : null),
  });
  const ob = byId(outage.rows, RF_BUDGET.id)?.median;
  goals.push({
    goal: 'outage, one shared RetryBudget: amplification',
    target: `≤ ${GOALS.outageBudget.maxAmplification}`,
    measured: ob ? fmt.amp(ob.amplification) : 'n/a',
    met: mark(ob ? ob.amplification <= GOALS.outageBudget.maxAmplification : null),
  });
  return goals;
}

// ---------------------------------------------------------------------------------------------

async function main() {
  const started = performance.now();
  const server = spawnStormServer();
  try {
    await probeBudgetFalse(server);
    log(`budget: false ${support.budgetFalse ? 'is supported' : `is not supported (${support.budgetFalseError})`}`);
    if (support.budgetFalse) withoutBudget();
    // Warm-up, not recorded: JIT, the wasm module, each library's first call, undici's pools.
    const everyone = [...new Set([...KINDS.flatMap((k) => k.contenders), ...OUTAGE.contenders])];
    const warmed = new Set();
    for (const c of everyone) {
      if (unavailableReason(c) || warmed.has(c.id)) continue;
      warmed.add(c.id);
      await runRound(server, { mode: 'rate-limited' }, c, 10).catch(() => {});
    }

    const kinds = HERDS.map((k) => ({
      id: k.id, title: k.title, description: k.description, server: k.server, idealMs: k.idealMs,
      rows: k.contenders.map(newRow),
    }));
    const outage = { description: describe(OUTAGE.server), server: OUTAGE.server, rows: OUTAGE.contenders.map(newRow) };
    log(`${CLIENTS} clients, ${ROUNDS} round(s); kinds: ${HERDS.map((k) => `${k.id} (ideal ${Math.round(k.idealMs)} ms)`).join(', ')}; `
      + `then the outage${OUTAGE_SIDE_BY_SIDE ? ', its contenders side by side' : ''}`);
    // Round-robin: round r of every kind and contender before round r + 1, so slow drift on the
    // machine spreads over all of them.
    for (let r = 0; r < ROUNDS; r += 1) {
      for (const [ki, k] of HERDS.entries()) {
        for (const [i, c] of k.contenders.entries()) await runInto(server, k.id, k.server, r, c, kinds[ki].rows[i]);
      }
      const one = (c, i) => runInto(server, 'outage', OUTAGE.server, r, c, outage.rows[i]);
      if (ONLY != null) continue;
      if (OUTAGE_SIDE_BY_SIDE) await Promise.all(OUTAGE.contenders.map(one));
      else for (const [i, c] of OUTAGE.contenders.entries()) await one(c, i);
    }
    for (const k of kinds) for (const row of k.rows) if (row.available && row.rounds.length) row.median = summarize(row.rounds, k.idealMs);
    for (const row of outage.rows) if (row.available && row.rounds.length) row.median = summarize(row.rounds, Infinity);
    const goals = evaluateGoals(kinds, outage);
    const n = stormNotes(kinds, outage, CLIENTS, ROUND_TIMEOUT_MS);
    const totalSeconds = (performance.now() - started) / 1000;

    const m = machine();
    const out = [];
    out.push(`## Storms (${ROUNDS} round(s), medians; Node ${m.node}, ${m.cpus} cores; ${totalSeconds.toFixed(0)} s)`);
    out.push('');
    out.push(`Clients: ${CLIENTS} calls started at once, ${RETRIES} retries (${RETRIES + 1} attempts), base ${BASE_MS} ms, `
      + `cap ${CAP_MS} ms. Amplification = requests the server saw / ${CLIENTS}; floor = 1 + requests refused among the `
      + `first ${CLIENTS} the server saw / ${CLIENTS}; ideal = the least time the server needs to serve ${CLIENTS} requests.`);
    out.push('');
    out.push('### Herd, by server kind');
    out.push('');
    out.push(stormHerdTable(kinds, CLIENTS));
    out.push('');
    out.push(`### Outage (${outage.description})`);
    out.push('');
    out.push(stormOutageTable(outage.rows, OUTAGE_SIDE_BY_SIDE));
    out.push('');
    out.push('### Goals (informational, not assertions)');
    out.push('');
    out.push(goalsTable(goals));
    out.push('');
    out.push(n.checks);
    out.push('');
    out.push(n.rejected);
    if (n.cut) out.push('', n.cut);
    await printMarkdown(out);

    writeResults(RESULTS, {
      format: 2,
      ...m,
      rounds: ROUNDS,
      clients: CLIENTS,
      outageSideBySide: OUTAGE_SIDE_BY_SIDE,
      roundTimeoutMs: ROUND_TIMEOUT_MS,
      policy: { retries: RETRIES, attempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS },
      exports: Object.keys(rf).sort(),
      budgetFalse: { supported: support.budgetFalse, error: support.budgetFalseError ?? null },
      goalTargets: GOALS,
      goals,
      kinds,
      outage,
      notes: n,
      totalSeconds,
    });
  } finally {
    await server.terminate();
  }
}

await main();
// A round that hit ROUND_TIMEOUT_MS may have left calls waiting on timers: do not wait for them.
if (lingering) process.exit(process.exitCode ?? 0);
