// Plumbing shared by overhead.mjs, coldstart.mjs and storms.mjs: knobs from the environment,
// progress on stderr, the peers' versions, the machine a run was measured on, and the output
// (markdown on stdout, every number in bench/results/<name>.json). Statistics and tables are in
// format.mjs, which stays free of imports: coldstart.mjs times its import as the floor.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** `value` (an environment variable) as a positive integer, else `fallback`. */
export function positiveInt(value, fallback) {
  const n = Number(value);
  return Number.isInteger(n) && n > 0 ? n : fallback;
}

/** Progress, on stderr (stdout carries the markdown). */
export const log = (msg) => process.stderr.write(`  ${msg}\n`);

/** The version of a package installed in bench/node_modules, or '' when it is not there. */
export function versionOf(pkg) {
  try {
    return JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url), 'utf8')).version;
  } catch {
    return '';
  }
}

/** When, and on what, a run was measured: the first fields of a results file. */
export function machine() {
  return {
    generatedAt: new Date().toISOString(),
    node: process.version,
    platform: `${os.platform()} ${os.arch()}`,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? '',
  };
}

/** Prints the markdown lines to stdout; resolves once they are written. */
export function printMarkdown(lines) {
  return new Promise((resolve) => process.stdout.write(`${lines.join('\n')}\n`, resolve));
}

/** Writes `results` to `file` (bench/results/<name>.json) as indented JSON, and says so. */
export function writeResults(file, results) {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log(`wrote ${file}`);
}

/** `count` calls of `call(url)`, `concurrency` at a time; resolves with the elapsed ms. */
export async function timedBatch(call, url, count, concurrency) {
  let issued = 0;
  const loop = async () => {
    while (issued < count) {
      issued += 1;
      await call(url);
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, loop));
  return performance.now() - t0;
}

/**
 * The orders of the rounds for `n` contenders: a Williams design, i.e. a base order
 * (0, 1, n-1, 2, n-2, ...) rotated by one per round and, for an odd `n`, the same rotations
 * reversed: over a cycle (n rounds, 2n for an odd n), every contender runs at every position
 * and right after every other contender equally often. A plain rotation keeps each
 * contender's predecessor fixed: the bare handler would always run right after PostgresStore,
 * and whatever a batch leaves behind (garbage to collect, the database's background work)
 * would always land on the reference.
 */
export function roundOrders(n) {
  const base = [0];
  for (let k = 1; base.length < n; k += 1) {
    base.push(k);
    if (base.length < n) base.push(n - k);
  }
  const rows = Array.from({ length: n }, (_, r) => base.map((x) => (x + r) % n));
  return n % 2 ? [...rows, ...rows.map((row) => [...row].reverse())] : rows;
}

/** Imports a module, retrying a few times: pkg/ may be rebuilt while this runs. */
export async function importRetrying(specifier) {
  for (let i = 0; ; i += 1) {
    try {
      return await import(specifier);
    } catch (err) {
      if (i >= 4) throw err;
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }
}

/** The body the server benchmarks (companion.mjs, adapters.mjs) post. */
export const PAYMENT_BODY = JSON.stringify({ amount: 4200, currency: 'EUR' });

/**
 * One request of the server benchmarks: POST PAYMENT_BODY with a fresh key (or `key`), the
 * body read; a status other than 201 throws.
 */
export async function postPayment(url, key = crypto.randomUUID()) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: PAYMENT_BODY,
  });
  const body = await res.text();
  if (res.status !== 201) throw new Error(`${url}: unexpected status ${res.status}: ${body.slice(0, 300)}`);
  return { body, replayed: res.headers.get('idempotent-replayed') };
}
