// The keyed POST: what retry-fetch costs on the call it exists for, when nothing fails.
//
//   node bench/keyed-post.mjs   (KEYED_POST_ROUNDS=24, KEYED_POST_REQUESTS=300; about 1 minute)
//
// A local HTTP server on 127.0.0.1, in a worker thread (its own event loop), reads each body and
// answers `200 ok`. The contenders POST a small JSON payment body: the reference is plain
// `fetch(url, init)` with an `Idempotency-Key` of `crypto.randomUUID()` (what a careful caller
// writes by hand), then the same again (the noise of the run); retry-fetch's
// `retryFetch(url, init)` (its own key, every default: the default budget and throttle, Node's
// manual redirect following for a POST) and a `createRetryFetch()` client; p-retry over the
// same hand-keyed fetch. Every round runs each contender for REQUESTS calls sequentially and
// then 32 at a time, in a balanced order (common.mjs `roundOrders`); each round's throughput is
// divided by that round's reference; the median ratio over the rounds is printed, with the
// interquartile range, and the wall time added per call.
//
// Prints markdown to stdout (progress to stderr) and writes bench/results/keyed-post.json.
import { Worker } from 'node:worker_threads';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { keyedPostTable, median, percentile } from './format.mjs';
import { importRetrying, log, machine, positiveInt, printMarkdown, roundOrders, timedBatch, versionOf, writeResults, PAYMENT_BODY } from './common.mjs';

const BENCH = fileURLToPath(new URL('.', import.meta.url));
const RESULTS = path.join(BENCH, 'results/keyed-post.json');
const ROUNDS = positiveInt(process.env.KEYED_POST_ROUNDS, 24);
const REQUESTS = positiveInt(process.env.KEYED_POST_REQUESTS, 300);
const CONCURRENCY = 32;
const started = performance.now();

const server = new Worker(`
  const http = require('node:http');
  const { parentPort } = require('node:worker_threads');
  const s = http.createServer((req, res) => { req.resume(); req.on('end', () => res.end('ok')); });
  s.keepAliveTimeout = 60_000;
  s.listen(0, '127.0.0.1', () => parentPort.postMessage(s.address().port));
`, { eval: true });
const port = await new Promise((resolve) => server.once('message', resolve));
const url = `http://127.0.0.1:${port}/pay`;

const rf = await importRetrying('retry-fetch');
const { default: pRetry } = await importRetrying('p-retry');
const drain = async (res) => {
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`unexpected status ${res.status}`);
};
const keyedFetch = (u) => fetch(u, {
  method: 'POST',
  headers: { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() },
  body: PAYMENT_BODY,
});
const client = rf.createRetryFetch();
const contenders = [
  { id: 'fetch', name: 'plain fetch, keyed by hand', reference: true, call: async (u) => drain(await keyedFetch(u)) },
  { id: 'fetch:again', name: 'plain fetch, keyed by hand (again, noise)', call: async (u) => drain(await keyedFetch(u)) },
  {
    id: 'retry-fetch', name: 'retry-fetch retryFetch(url, init), its own key',
    call: async (u) => drain(await rf.retryFetch(u, { method: 'POST', headers: { 'content-type': 'application/json' }, body: PAYMENT_BODY })),
  },
  {
    id: 'retry-fetch:client', name: 'retry-fetch createRetryFetch() client, its own key',
    call: async (u) => drain(await client(u, { method: 'POST', headers: { 'content-type': 'application/json' }, body: PAYMENT_BODY })),
  },
  {
    id: 'p-retry', name: `p-retry ${versionOf('p-retry')} over the keyed fetch (one key per call)`,
    call: async (u) => {
      const headers = { 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() };
      return drain(await pRetry(() => fetch(u, { method: 'POST', headers, body: PAYMENT_BODY }), { retries: 2 }));
    },
  },
];
const MODES = [
  { id: 'sequential', name: 'sequential', concurrency: 1 },
  { id: 'concurrent', name: `${CONCURRENCY} concurrent`, concurrency: CONCURRENCY },
];

for (const c of contenders) await timedBatch(c.call, url, REQUESTS, 1); // warm-up
const orders = roundOrders(contenders.length);
const perRound = []; // [{ mode, id, perSecond }]
for (let r = 0; r < ROUNDS; r += 1) {
  for (const mode of MODES) {
    for (const i of orders[r % orders.length]) {
      const c = contenders[i];
      const ms = await timedBatch(c.call, url, REQUESTS, mode.concurrency);
      perRound.push({ round: r, mode: mode.id, id: c.id, perSecond: (REQUESTS / ms) * 1000 });
    }
  }
  log(`round ${r + 1}/${ROUNDS}`);
}
server.terminate();

const rows = contenders.map((c) => {
  const row = { id: c.id, name: c.name };
  for (const mode of MODES) {
    const ratios = [];
    const rates = [];
    const added = []; // wall time added per call against the round's reference, µs
    for (let r = 0; r < ROUNDS; r += 1) {
      const mine = perRound.find((x) => x.round === r && x.mode === mode.id && x.id === c.id);
      const ref = perRound.find((x) => x.round === r && x.mode === mode.id && x.id === 'fetch');
      ratios.push(mine.perSecond / ref.perSecond);
      rates.push(mine.perSecond);
      added.push((1 / mine.perSecond - 1 / ref.perSecond) * 1e6);
    }
    row[mode.id] = {
      ratio: median(ratios),
      q1: percentile(ratios, 0.25),
      q3: percentile(ratios, 0.75),
      perSecond: median(rates),
      addedUs: median(added),
    };
  }
  return row;
});

const results = {
  ...machine(),
  rounds: ROUNDS,
  requestsPerBatch: REQUESTS,
  concurrency: CONCURRENCY,
  body: PAYMENT_BODY,
  totalSeconds: (performance.now() - started) / 1000,
  modes: MODES,
  rows,
  perRound,
};
writeResults(RESULTS, results);
await printMarkdown([keyedPostTable(results)]);
