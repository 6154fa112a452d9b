// Server companion: what `idempotency(handler, { store })` from retry-fetch/server costs per
// request, with MemoryStore, RedisStore and PostgresStore, against the bare handler.
//
//   node bench/companion.mjs     (COMPANION_ROUNDS=10, COMPANION_REQUESTS=300 by default; about 1 minute)
//   REDIS_URL=redis://... DATABASE_URL=postgres://... node bench/companion.mjs
//
// scripts/bench.sh starts a throwaway redis-server and PostgreSQL cluster (scripts/services.sh)
// and passes their URLs; without REDIS_URL / DATABASE_URL those rows are skipped (noted in the
// table). `redis` and `pg` are the repository's devDependencies (../node_modules).
//
// One node:http server on 127.0.0.1, in a worker thread (its own event loop, its own core on a
// 2-core machine), serves through toNodeHandler on four paths: /bare (the handler alone), and
// /memory, /redis, /postgres (the same handler wrapped by idempotency(handler, { store })). The
// handler reads the JSON body and answers 201 `{"ok":true,"amount":...}`. The client (the main
// thread) POSTs a small JSON body with a fresh Idempotency-Key (crypto.randomUUID()) per
// request with plain fetch, and reads every body: every request is a new key, so every
// wrapped request takes the lock, runs the handler and stores its answer.
//
// Two modes: sequential (one request at a time) and 32 concurrent (32 loops sharing a counter).
// Every round runs each contender for REQUESTS requests in each mode; the order of the
// contenders is rotated by one every round, from a balanced base order and mirrored (see
// roundOrders), so no contender always runs right after the same other one. Each round's throughput is divided by that round's
// bare-handler throughput; the median ratio over the rounds is printed, with the interquartile
// range of the rounds, the median requests/s and the median wall time added per request.
// "bare handler (again, noise)" is a second, separate /bare contender: its ratio to the first
// shows the noise of the run.
//
// Prints markdown to stdout (progress to stderr) and writes bench/results/companion.json.
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { companionTable, ratioCell, table } from './format.mjs';
import { PAYMENT_BODY, importRetrying, log, machine, positiveInt, postPayment, printMarkdown, roundOrders, timedBatch, writeResults } from './common.mjs';

const RESULTS = fileURLToPath(new URL('./results/companion.json', import.meta.url));
/** The goals: the companion's throughput over the bare handler's, sequential and 32 concurrent. */
const GOALS = { memory: 0.8, postgres: 0.6 };
const PG_POOL_MAX = 40;
const STORES = [
  { id: 'memory', path: '/memory', name: 'MemoryStore' },
  { id: 'redis', path: '/redis', name: 'RedisStore', env: 'REDIS_URL' },
  { id: 'postgres', path: '/postgres', name: 'PostgresStore', env: 'DATABASE_URL' },
];

const versionOfRoot = async (pkg) => {
  try {
    const { createRequire } = await import('node:module');
    return createRequire(import.meta.url)(`${pkg}/package.json`).version;
  } catch {
    return '';
  }
};

// ---------------------------------------------------------------------------------------------
// The server (worker thread).  (The entry point, which starts it or main(), is at the end.)

async function serve({ redisUrl, databaseUrl }) {
  const { idempotency, MemoryStore, RedisStore, PostgresStore, toNodeHandler } = await importRetrying('retry-fetch/server');
  const c = { seen: {}, runs: {}, storeErrors: [], handlerErrors: [], connections: 0 };
  const note = (list, what) => { if (list.length < 20) list.push(what); };

  const handlerFor = (id) => {
    c.seen[id] = 0;
    c.runs[id] = 0;
    return async (request) => {
      c.runs[id] += 1;
      const { amount } = await request.json();
      return Response.json({ ok: true, amount }, { status: 201 });
    };
  };
  const wrap = (id, store) => idempotency(handlerFor(id), {
    store,
    onStoreError: (error, operation) => note(c.storeErrors, `${id} ${operation}: ${error?.message ?? error}`),
    onError: (error) => note(c.handlerErrors, `${id}: ${error?.message ?? error}`),
  });

  const routes = new Map(); // path -> [id, node listener]
  const skipped = {};
  const cleanups = [];
  const add = (id, path, fetchHandler) => routes.set(path, [id, toNodeHandler(fetchHandler, {
    onError: (error) => note(c.handlerErrors, `${id} (adapter): ${error?.message ?? error}`),
  })]);

  add('bare', '/bare', handlerFor('bare'));

  const memory = new MemoryStore();
  add('memory', '/memory', wrap('memory', memory));
  const counts = { memory: async () => memory.size };

  if (redisUrl) {
    const { createClient } = await import('redis');
    const client = createClient({ url: redisUrl });
    client.on('error', (error) => note(c.storeErrors, `redis client: ${error?.message ?? error}`));
    await client.connect();
    const prefix = `bench-companion:${randomBytes(6).toString('hex')}:`;
    const keys = async () => {
      const found = [];
      for await (const batch of client.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
        found.push(...(Array.isArray(batch) ? batch : [batch]));
      }
      return found;
    };
    add('redis', '/redis', wrap('redis', new RedisStore({ client, prefix })));
    // The records: not the run history's streams (<prefix>runs:<key>) nor the secret.
    counts.redis = async () => (await keys()).filter((k) => !k.startsWith(`${prefix}runs:`) && k !== `${prefix}secret`).length;
    cleanups.push(async () => {
      const found = await keys();
      for (let i = 0; i < found.length; i += 1000) await client.unlink(found.slice(i, i + 1000));
      await client.quit();
    });
  } else skipped.redis = 'REDIS_URL is not set';

  if (databaseUrl) {
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({ connectionString: databaseUrl, max: PG_POOL_MAX });
    pool.on('error', (error) => note(c.storeErrors, `pg pool: ${error?.message ?? error}`));
    const table = `bench_companion_${randomBytes(6).toString('hex')}`;
    const store = new PostgresStore({ pool, table });
    await store.migrate();
    add('postgres', '/postgres', wrap('postgres', store));
    counts.postgres = async () => Number((await pool.query(`SELECT count(*) AS n FROM "${table}" WHERE response IS NOT NULL`)).rows[0].n);
    cleanups.push(async () => {
      await pool.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool.end();
    });
  } else skipped.postgres = 'DATABASE_URL is not set';

  const server = http.createServer((req, res) => {
    const route = routes.get(req.url);
    if (!route) {
      req.resume();
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
      return;
    }
    c.seen[route[0]] += 1;
    route[1](req, res);
  });
  server.keepAliveTimeout = 60_000;
  server.headersTimeout = 61_000;
  server.requestTimeout = 0;
  server.on('connection', (socket) => { c.connections += 1; socket.setNoDelay(true); });
  const snapshot = () => structuredClone(c);

  parentPort.on('message', async (msg) => {
    if (msg === 'stats') parentPort.postMessage({ stats: snapshot() });
    if (msg === 'records') {
      // Records left in each store (every request was a new key: one completed record each).
      const records = {};
      for (const [id, count] of Object.entries(counts)) {
        try { records[id] = await count(); } catch (err) { records[id] = `error: ${err?.message ?? err}`; }
      }
      parentPort.postMessage({ records });
    }
    if (msg === 'close') {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      for (const cleanup of cleanups) await cleanup().catch((err) => note(c.storeErrors, `cleanup: ${err?.message ?? err}`));
      parentPort.postMessage({ closed: snapshot() });
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', 511, resolve));
  parentPort.postMessage({ ready: { port: server.address().port, skipped } });
}

// ---------------------------------------------------------------------------------------------
// The client (main thread).

function startServer(env) {
  const worker = new Worker(fileURLToPath(import.meta.url), { workerData: { companionServer: true, ...env } });
  const next = (key) => new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if ('failed' in msg) { cleanup(); reject(new Error(`companion server: ${msg.failed}`)); }
      if (key in msg) { cleanup(); resolve(msg[key]); }
    };
    const onError = (err) => { cleanup(); reject(err); };
    const cleanup = () => { worker.off('message', onMessage); worker.off('error', onError); };
    worker.on('message', onMessage);
    worker.once('error', onError);
  });
  const ask = (key) => { const p = next(key); worker.postMessage(key === 'closed' ? 'close' : key); return p; };
  return next('ready').then(({ port, skipped }) => ({
    base: `http://127.0.0.1:${port}`,
    skipped,
    stats: () => ask('stats'),
    records: () => ask('records'),
    close: async () => {
      const s = await ask('closed');
      await worker.terminate();
      return s;
    },
  }), async (err) => { await worker.terminate(); throw err; });
}

/** postPayment: one request of the run. */
const post = postPayment;

/** The handler, as the results describe it (serve() defines it). */
const HANDLER = 'toNodeHandler(async (request) => { const { amount } = await request.json(); return Response.json({ ok: true, amount }, { status: 201 }); })';


async function main() {
  const ROUNDS = positiveInt(process.env.COMPANION_ROUNDS, 10);
  const REQUESTS = positiveInt(process.env.COMPANION_REQUESTS, 300);
  const CONCURRENCY = 32;
  const started = performance.now();
  const redisUrl = process.env.REDIS_URL || '';
  const databaseUrl = process.env.DATABASE_URL || '';

  const server = await startServer({ redisUrl, databaseUrl });
  const contenders = [
    { id: 'bare', name: 'bare handler', path: '/bare', reference: true, config: HANDLER },
    { id: 'bare:again', name: 'bare handler (again, noise)', path: '/bare', noise: true, config: HANDLER, note: 'a second, separate contender on /bare' },
    ...STORES.map((s) => ({
      id: s.id,
      name: `idempotency + ${s.name}`,
      path: s.path,
      skipped: server.skipped[s.id],
      config: {
        memory: 'toNodeHandler(idempotency(handler, { store: new MemoryStore() }))',
        redis: 'toNodeHandler(idempotency(handler, { store: new RedisStore({ client: createClient({ url: REDIS_URL }), prefix }) }))',
        postgres: `toNodeHandler(idempotency(handler, { store: new PostgresStore({ pool: new pg.Pool({ connectionString: DATABASE_URL, max: ${PG_POOL_MAX} }), table }) }))`,
      }[s.id],
      note: {
        redis: 'one connected client; a key prefix of its own, its keys deleted at the end',
        postgres: 'a table of its own, created by store.migrate() at start, dropped at the end',
      }[s.id],
    })),
  ];
  const active = contenders.filter((c) => !c.skipped);
  const MODES = [
    { id: 'sequential', name: 'sequential', concurrency: 1 },
    { id: 'concurrent', name: `${CONCURRENCY} concurrent`, concurrency: CONCURRENCY },
  ];

  try {
    // Sanity: a repeated key is replayed by every wrapped path (the store is in use), and the
    // bare path runs the handler again.
    const checks = [];
    for (const c of active.filter((x) => x.id !== 'bare:again')) {
      const key = crypto.randomUUID();
      const first = await post(server.base + c.path, key);
      const second = await post(server.base + c.path, key);
      const ok = c.reference ? second.replayed === null : second.replayed === 'true' && second.body === first.body;
      if (!ok) throw new Error(`${c.path}: a repeated key was ${c.reference ? '' : 'not '}replayed (Idempotent-Replayed: ${second.replayed})`);
      checks.push(c.path);
    }
    log(`companion: a repeated key is replayed on ${checks.filter((p) => p !== '/bare').join(', ')} (and runs again on /bare)`);

    // Warm-up, not recorded: JIT, wasm, the stores' first calls, pg's and undici's connections.
    for (const mode of MODES) {
      for (const c of active) await timedBatch(post, server.base + c.path, Math.ceil(REQUESTS / 3), mode.concurrency);
    }
    log(`companion: ${active.length} contenders × ${MODES.length} modes × ${ROUNDS} rounds × ${REQUESTS} requests`
      + `${Object.keys(server.skipped).length ? ` (skipped: ${Object.entries(server.skipped).map(([k, v]) => `${k}, ${v}`).join('; ')})` : ''}`);

    const rounds = []; // rounds[r][mode][id] = { ms, perSec, ratio }
    const orders = roundOrders(active.length);
    for (let r = 0; r < ROUNDS; r += 1) {
      const round = {};
      const order = orders[r % orders.length].map((i) => active[i]);
      for (const mode of MODES) {
        round[mode.id] = {};
        for (const c of order) {
          const ms = await timedBatch(post, server.base + c.path, REQUESTS, mode.concurrency);
          round[mode.id][c.id] = { ms, perSec: (REQUESTS * 1000) / ms };
        }
        const ref = round[mode.id].bare.perSec;
        for (const c of active) round[mode.id][c.id].ratio = round[mode.id][c.id].perSec / ref;
      }
      rounds.push({ order: order.map((c) => c.id), ...round });
      log(`round ${r + 1}/${ROUNDS}: ${MODES.map((m) => `${m.id} bare ${round[m.id].bare.perSec.toFixed(0)}/s, `
        + active.filter((c) => !c.reference).map((c) => `${c.id} ×${round[m.id][c.id].ratio.toFixed(3)}`).join(', ')).join('; ')}`);
    }
    const records = await server.records();
    const serverStats = await server.stats();

    const rows = contenders.map((c) => {
      const row = { id: c.id, name: c.name, path: c.path, config: c.config, note: c.note, reference: !!c.reference, noise: !!c.noise };
      if (c.skipped) return { ...row, skipped: c.skipped };
      for (const mode of MODES) row[mode.id] = ratioCell(rounds, mode.id, c.id, 'bare', REQUESTS, 'addedUsPerRequest');
      return row;
    });

    // Checks: every request was a new key, so the handler ran once per request (the sanity
    // check's replay excepted) and each store kept one completed record per key.
    const checkLines = [];
    for (const c of active.filter((x) => x.id !== 'bare:again')) {
      const id = c.id;
      const seen = serverStats.seen[id];
      const runs = serverStats.runs[id];
      const expectedRuns = c.reference ? seen : seen - 1;
      let line = `${c.path}: ${seen} requests, handler ran ${runs} times`;
      line += runs === expectedRuns ? ` (once per key${c.reference ? '' : ', the replay excepted'})` : ` (EXPECTED ${expectedRuns})`;
      if (id in records) {
        line += `, ${records[id]} records stored${records[id] === runs ? '' : ` (EXPECTED ${runs})`}`;
      }
      checkLines.push(line);
    }
    const errors = [...serverStats.storeErrors, ...serverStats.handlerErrors];

    // The goal lines for the report's goals-at-a-glance table, per mode: MemoryStore at least
    // GOALS.memory of the bare handler's throughput, PostgresStore at least GOALS.postgres (median
    // ratio over the rounds); RedisStore is a measurement.
    const byId = Object.fromEntries(rows.map((r) => [r.id, r]));
    const summary = MODES.flatMap((mode) => STORES.map((s) => {
      const row = byId[s.id];
      const goal = GOALS[s.id];
      const measured = row.skipped ? 'n/a' : row[mode.id].ratio.toFixed(2);
      return {
        goal: `${mode.name}: throughput / bare handler, ${s.name}`,
        target: goal === undefined ? 'none (a measurement)' : `≥ ${goal}`,
        measured,
        met: goal === undefined ? '' : row.skipped ? 'not measured' : row[mode.id].ratio >= goal ? 'met' : 'NOT met',
      };
    }));

    const totalSeconds = (performance.now() - started) / 1000;
    const meta = {
      ...machine(),
      rounds: ROUNDS,
      requestsPerBatch: REQUESTS,
      concurrency: CONCURRENCY,
      versions: { redis: await versionOfRoot('redis'), pg: await versionOfRoot('pg') },
      pgPoolMax: PG_POOL_MAX,
      server: 'node:http in a worker thread on 127.0.0.1, toNodeHandler per path; the handler reads the JSON body and answers 201 {"ok":true,"amount":...}',
      requestBody: PAYMENT_BODY,
    };

    const out = [];
    out.push(`## Server companion (${ROUNDS} rounds × ${REQUESTS} requests per contender and mode, medians; Node ${process.version}, ${meta.cpus} cores)`);
    out.push('');
    out.push(companionTable(rows, MODES));
    out.push('');
    out.push(table(['summary', 'target', 'measured', 'met'], summary.map((s) => [s.goal, s.target, s.measured, s.met]), ['---', '---', '---:', '---']));
    out.push('');
    out.push(`Checks: ${checkLines.join('; ')}. Store and handler errors: ${errors.length ? errors.join('; ') : 'none'}.`);
    out.push('');
    out.push(`Server: ${Object.values(serverStats.seen).reduce((a, b) => a + b, 0)} requests on ${serverStats.connections} connections. Run took ${totalSeconds.toFixed(0)} s.`);
    await printMarkdown(out);

    writeResults(RESULTS, {
      ...meta, modes: MODES, summary, rows, checks: checkLines, errors, records, roundResults: rounds, serverStats, totalSeconds,
    });
  } finally {
    await server.close().catch((err) => log(`companion: closing the server: ${err?.message ?? err}`));
  }
}

// ---------------------------------------------------------------------------------------------
// Entry: the worker thread serves; the main thread measures.

if (!isMainThread && workerData?.companionServer) {
  try {
    await serve(workerData);
  } catch (err) {
    parentPort.postMessage({ failed: err?.stack ?? String(err) });
  }
} else if (isMainThread) {
  await main();
}
