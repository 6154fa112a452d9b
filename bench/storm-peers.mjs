// What the two herd benchmarks (storms.mjs: one process; independent.mjs: a copy of the package
// per client) share: the retry policy every contender is configured with, the peers (ky,
// p-retry, fetch-retry, cockatiel) configured to it, and the summary of a row's rounds.
// Importing this module runs nothing.
import ky from 'ky';
import pRetry from 'p-retry';
import fetchBuilder from 'fetch-retry';
import { retry, handleAll, ExponentialBackoff } from 'cockatiel';
import { versionOf } from './common.mjs';
import { median } from './format.mjs';

export const RETRIES = 8;
export const BASE_MS = 50;
export const CAP_MS = 2_000;
/** retry-fetch's options for the same policy. */
export const POLICY = Object.freeze({ maxAttempts: RETRIES + 1, baseDelayMs: BASE_MS, maxDelayMs: CAP_MS });

/** Reads the body and tells whether the call ended in success. */
export async function okAndDrain(res) {
  await res.arrayBuffer();
  return res.status === 200;
}

// The peers. `make()` returns one client's call (a function of the URL resolving true on a
// 200); they keep no state shared between clients.
export const KY = {
  id: 'ky', name: `ky ${versionOf('ky')}`, library: 'ky', needs: [],
  config: { retry: { limit: RETRIES, delay: `n => ${BASE_MS} * 2 ** (n - 1)`, backoffLimit: CAP_MS } },
  make() {
    const client = ky.create({
      retry: { limit: RETRIES, delay: (n) => BASE_MS * 2 ** (n - 1), backoffLimit: CAP_MS },
    });
    return async (url) => okAndDrain(await client.get(url)); // throws HTTPError on the last 503
  },
};
export const KY_JITTER = {
  ...KY, id: 'ky:jitter', name: `ky ${versionOf('ky')}, jitter: true (extra)`,
  config: { retry: { ...KY.config.retry, jitter: true } },
  make() {
    const client = ky.create({
      retry: { limit: RETRIES, delay: (n) => BASE_MS * 2 ** (n - 1), backoffLimit: CAP_MS, jitter: true },
    });
    return async (url) => okAndDrain(await client.get(url));
  },
};
export const P_RETRY = {
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
export const FETCH_RETRY = {
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
export const COCKATIEL = {
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

/**
 * The medians of a row's rounds (each the result of one run: amplification, floor, successes,
 * p50Ms, p99Ms, maxMs, seen, errors, and the storm server's counters in `server`), p99 also
 * over `ideal`.
 */
export function summarizeRounds(rounds, ideal) {
  const m = (k) => median(rounds.map((r) => r[k]));
  const p99Ms = m('p99Ms');
  return {
    amplification: m('amplification'),
    floor: m('floor'),
    successes: m('successes'),
    p50Ms: m('p50Ms'),
    p99Ms,
    p99OverIdeal: Number.isFinite(ideal) && p99Ms != null ? p99Ms / ideal : null,
    maxMs: m('maxMs'),
    seen: m('seen'),
    firstWaveRefused: median(rounds.map((r) => r.server.firstWaveRefused)),
    lastOkMs: median(rounds.map((r) => r.server.lastOkMs)),
    peakOpenConnections: Math.max(...rounds.map((r) => r.server.peakOpenConnections)),
    peakInService: Math.max(...rounds.map((r) => r.server.peakInService)),
    errors: rounds.reduce((acc, r) => {
      for (const [k, v] of Object.entries(r.errors)) acc[k] = (acc[k] ?? 0) + v;
      return acc;
    }, {}),
  };
}
