// Server companion with framework adapters: what retry-fetch/express, retry-fetch/fastify and
// retry-fetch/hono cost per request, each against the same route in the bare framework, and
// the plain fetch handler pair (toNodeHandler(handler) against
// toNodeHandler(idempotency(handler))) for reference, all in one run.
//
//   node bench/adapters.mjs     (ADAPTERS_ROUNDS=12, ADAPTERS_REQUESTS=300 by default; about 1 to 2 minutes)
//
// No services: every wrapped route has its own `new MemoryStore()`, with `identity: false`.
// express, fastify, hono and @hono/node-server are the repository's devDependencies
// (../node_modules); retry-fetch comes from bench/node_modules (a link to ../pkg).
//
// Each framework serves in a worker thread of its own (its own event loop, on the core the
// client does not use; one framework is busy at a time, the others idle), on 127.0.0.1, two
// routes in the same app: /bare (the route alone: reads the JSON body, answers 201
// `{"ok":true,"amount":...}`) and /wrapped (the same route behind the adapter). Separate
// threads also keep @hono/node-server's global Request/Response (it replaces the globals by
// default) away from the other frameworks and the fetch handler. The client (the main thread)
// POSTs a small JSON body with a fresh Idempotency-Key per request with plain fetch and reads
// every body: every request is a new key, so every wrapped request takes the lock, runs the
// route and stores its answer.
//
// Contenders, per framework: the bare route (that framework's reference), the bare route again
// (a second, separate contender on /bare: its ratio to the first is the noise of the run), and
// the wrapped route. Two modes: sequential and 32 concurrent. Every round runs each contender
// for REQUESTS requests in each mode, in a balanced order (common.mjs roundOrders, a
// Williams design: over 12 rounds each of the 12 contenders runs at every position and right
// after every other one once). Each round's throughput is divided by the same round's
// throughput of that framework's bare route; the median ratio over the rounds is printed with
// the interquartile range of the rounds, the median requests/s and the median wall time added
// per request. Also per batch: how long each server thread's event loop was busy (not waiting
// for I/O) per request, read from the main thread with worker.performance.eventLoopUtilization(),
// and the same for the client (32 concurrent, the bare routes are bound by the client, whose
// fetch costs more per request than a bare route; the wrapped ones by the server thread).
//
// Prints markdown to stdout (progress to stderr) and writes bench/results/adapters.json.
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { adaptersTable, median, ratioCell, table } from './format.mjs';
import { PAYMENT_BODY, importRetrying, log, machine, positiveInt, postPayment, printMarkdown, roundOrders, timedBatch, writeResults } from './common.mjs';

const RESULTS = fileURLToPath(new URL('./results/adapters.json', import.meta.url));

/** The frameworks, in the tables' order; `packages`: whose versions are recorded. */
const FRAMEWORKS = [
  {
    id: 'express',
    name: 'Express',
    packages: ['express'],
    adapter: 'retry-fetch/express',
    bare: "app.post('/bare', express.json(), route)",
    wrapped: "app.post('/wrapped', express.json(), idempotency({ store: new MemoryStore(), identity: false }), route)",
    route: '(req, res) => res.status(201).json({ ok: true, amount: req.body.amount })',
  },
  {
    id: 'fastify',
    name: 'Fastify',
    packages: ['fastify'],
    adapter: 'retry-fetch/fastify',
    bare: "app.post('/bare', route)",
    wrapped: "app.register(async (scope) => { await scope.register(idempotency, { store: new MemoryStore(), identity: false }); scope.post('/wrapped', route); })",
    route: 'async (request, reply) => reply.code(201).send({ ok: true, amount: request.body.amount })',
  },
  {
    id: 'hono',
    name: 'Hono',
    packages: ['hono', '@hono/node-server'],
    adapter: 'retry-fetch/hono',
    bare: "app.post('/bare', route)",
    wrapped: "app.post('/wrapped', idempotency({ store: new MemoryStore(), identity: false }), route)",
    route: 'async (c) => { const { amount } = await c.req.json(); return c.json({ ok: true, amount }, 201); }',
    note: "served by @hono/node-server's serve() with its default options (which replace the global Request and Response in its thread)",
  },
  {
    id: 'fetch',
    name: 'fetch handler',
    packages: [],
    adapter: 'retry-fetch/server',
    bare: "'/bare' -> toNodeHandler(route)",
    wrapped: "'/wrapped' -> toNodeHandler(idempotency(route, { store: new MemoryStore(), identity: false }))",
    route: 'async (request) => { const { amount } = await request.json(); return Response.json({ ok: true, amount }, { status: 201 }); }',
    note: 'node:http, as in the server companion benchmark',
  },
];

/** The version of a package in the repository's node_modules (the frameworks), or ''. */
function versionOfRoot(pkg) {
  try {
    return JSON.parse(readFileSync(new URL(`../node_modules/${pkg}/package.json`, import.meta.url), 'utf8')).version;
  } catch {
    return '';
  }
}

// ---------------------------------------------------------------------------------------------
// The servers (one worker thread per framework).  (The entry point is at the end.)

async function serve({ framework }) {
  const { MemoryStore } = await importRetrying('retry-fetch/server');
  const c = { runs: { bare: 0, wrapped: 0 }, errors: [], connections: 0 };
  const note = (what) => { if (c.errors.length < 20) c.errors.push(what); };
  const store = new MemoryStore();
  const options = {
    store,
    identity: false,
    onStoreError: (error, operation) => note(`store ${operation}: ${error?.message ?? error}`),
    onError: (error) => note(`route: ${error?.message ?? error}`),
  };
  const listen = (server) => new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', 511, () => { server.off('error', reject); resolve(server); });
  });

  let server; // the node:http server
  let close = () => new Promise((resolve) => server.close(resolve));
  if (framework === 'express') {
    const { default: express } = await import('express');
    const { idempotency } = await importRetrying('retry-fetch/express');
    const app = express();
    const route = (id) => (req, res) => {
      c.runs[id] += 1;
      res.status(201).json({ ok: true, amount: req.body.amount });
    };
    app.post('/bare', express.json(), route('bare'));
    app.post('/wrapped', express.json(), idempotency(options), route('wrapped'));
    // Only reached on an error (none expected): noted, then a 500 that aborts the run.
    app.use((error, req, res, next) => { // eslint-disable-line no-unused-vars
      note(`express: ${error?.message ?? error}`);
      res.status(500).json({ error: String(error?.message ?? error) });
    });
    server = await listen(http.createServer(app));
  } else if (framework === 'fastify') {
    const { default: Fastify } = await import('fastify');
    const { idempotency } = await importRetrying('retry-fetch/fastify');
    const app = Fastify();
    const route = (id) => async (request, reply) => {
      c.runs[id] += 1;
      return reply.code(201).send({ ok: true, amount: request.body.amount });
    };
    app.post('/bare', route('bare'));
    // The plugin applies to the context it is registered in: a child context of its own, so
    // /bare does not go through its hooks at all.
    await app.register(async (scope) => {
      await scope.register(idempotency, options);
      scope.post('/wrapped', route('wrapped'));
    });
    app.setErrorHandler((error, request, reply) => {
      note(`fastify: ${error?.message ?? error}`);
      reply.code(500).send({ error: String(error?.message ?? error) });
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    server = app.server;
    close = () => app.close();
  } else if (framework === 'hono') {
    const { Hono } = await import('hono');
    const { serve: honoServe } = await import('@hono/node-server');
    const { idempotency } = await importRetrying('retry-fetch/hono');
    const app = new Hono();
    const route = (id) => async (ctx) => {
      c.runs[id] += 1;
      const { amount } = await ctx.req.json();
      return ctx.json({ ok: true, amount }, 201);
    };
    app.post('/bare', route('bare'));
    app.post('/wrapped', idempotency(options), route('wrapped'));
    app.onError((error, ctx) => {
      note(`hono: ${error?.message ?? error}`);
      return ctx.json({ error: String(error?.message ?? error) }, 500);
    });
    server = honoServe({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    if (!server.listening) await new Promise((resolve) => server.once('listening', resolve));
  } else if (framework === 'fetch') {
    const { idempotency, toNodeHandler } = await importRetrying('retry-fetch/server');
    const handlerFor = (id) => async (request) => {
      c.runs[id] += 1;
      const { amount } = await request.json();
      return Response.json({ ok: true, amount }, { status: 201 });
    };
    const onError = (error) => note(`toNodeHandler: ${error?.message ?? error}`);
    const routes = new Map([
      ['/bare', toNodeHandler(handlerFor('bare'), { onError })],
      ['/wrapped', toNodeHandler(idempotency(handlerFor('wrapped'), options), { onError })],
    ]);
    server = await listen(http.createServer((req, res) => {
      const route = routes.get(req.url);
      if (route) return route(req, res);
      req.resume();
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
      return undefined;
    }));
  } else {
    throw new Error(`unknown framework ${framework}`);
  }
  server.keepAliveTimeout = 60_000;
  server.headersTimeout = 61_000;
  server.requestTimeout = 0;
  server.on('connection', (socket) => { c.connections += 1; socket.setNoDelay(true); });

  parentPort.on('message', async (msg) => {
    if (msg === 'stats') parentPort.postMessage({ stats: structuredClone(c) });
    // Records left in the wrapped route's store: one completed record per key, up to its maxEntries.
    if (msg === 'records') parentPort.postMessage({ records: { size: store.size, maxEntries: store.maxEntries ?? null } });
    if (msg === 'close') {
      server.closeAllConnections?.();
      await close();
      parentPort.postMessage({ closed: structuredClone(c) });
    }
  });
  parentPort.postMessage({ ready: { port: server.address().port } });
}

// ---------------------------------------------------------------------------------------------
// The client (main thread).

function startServer(framework) {
  const worker = new Worker(fileURLToPath(import.meta.url), { workerData: { adaptersServer: true, framework } });
  const next = (key) => new Promise((resolve, reject) => {
    const onMessage = (msg) => {
      if ('failed' in msg) { cleanup(); reject(new Error(`${framework} server: ${msg.failed}`)); }
      if (key in msg) { cleanup(); resolve(msg[key]); }
    };
    const onError = (err) => { cleanup(); reject(err); };
    const cleanup = () => { worker.off('message', onMessage); worker.off('error', onError); };
    worker.on('message', onMessage);
    worker.once('error', onError);
  });
  const ask = (key) => { const p = next(key); worker.postMessage(key === 'closed' ? 'close' : key); return p; };
  return next('ready').then(({ port }) => ({
    base: `http://127.0.0.1:${port}`,
    /** The server thread's event-loop utilization (cumulative, or since `since`), read from here. */
    elu: (since) => worker.performance.eventLoopUtilization(since),
    stats: () => ask('stats'),
    records: () => ask('records'),
    close: async () => {
      const s = await ask('closed');
      await worker.terminate();
      return s;
    },
  }), async (err) => { await worker.terminate(); throw err; });
}

const sent = new Map(); // url -> requests sent (for the checks)

/** postPayment, counted per URL. */
function post(url, key) {
  sent.set(url, (sent.get(url) ?? 0) + 1);
  return postPayment(url, key);
}


async function main() {
  const ROUNDS = positiveInt(process.env.ADAPTERS_ROUNDS, 12);
  const REQUESTS = positiveInt(process.env.ADAPTERS_REQUESTS, 300);
  const CONCURRENCY = 32;
  const started = performance.now();

  const servers = {};
  try {
    for (const f of FRAMEWORKS) servers[f.id] = await startServer(f.id);
    const frameworks = FRAMEWORKS.map((f) => ({
      id: f.id,
      name: f.name,
      adapter: f.adapter,
      versions: Object.fromEntries(f.packages.map((p) => [p, versionOfRoot(p)])),
      route: f.route,
      note: f.note,
      bare: f.bare,
      wrapped: f.wrapped,
    }));
    const label = (f) => (f.packages.length ? `${f.name} ${versionOfRoot(f.packages[0]).split('.')[0]}` : f.name);
    const contenders = FRAMEWORKS.flatMap((f) => [
      { id: `${f.id}:bare`, framework: f.id, kind: 'bare', name: `${label(f)}: bare`, url: `${servers[f.id].base}/bare`, path: '/bare', reference: true, config: f.bare },
      { id: `${f.id}:again`, framework: f.id, kind: 'again', name: `${label(f)}: bare (again, noise)`, url: `${servers[f.id].base}/bare`, path: '/bare', noise: true, config: f.bare, note: 'a second, separate contender on /bare' },
      { id: `${f.id}:wrapped`, framework: f.id, kind: 'wrapped', name: `${label(f)}: + ${f.adapter}`, url: `${servers[f.id].base}/wrapped`, path: '/wrapped', config: f.wrapped },
    ]);
    const MODES = [
      { id: 'sequential', name: 'sequential', concurrency: 1 },
      { id: 'concurrent', name: `${CONCURRENCY} concurrent`, concurrency: CONCURRENCY },
    ];

    // Sanity: a repeated key is replayed on every wrapped route (the adapter and its store are
    // in use), and runs the route again on every bare one.
    for (const c of contenders.filter((x) => x.kind !== 'again')) {
      const key = crypto.randomUUID();
      const first = await post(c.url, key);
      const second = await post(c.url, key);
      const ok = c.reference ? second.replayed === null : second.replayed === 'true' && second.body === first.body;
      if (!ok) throw new Error(`${c.name} (${c.path}): a repeated key was ${c.reference ? '' : 'not '}replayed (Idempotent-Replayed: ${second.replayed})`);
    }
    log(`adapters: a repeated key is replayed on /wrapped of ${FRAMEWORKS.map((f) => f.name).join(', ')} (and runs again on /bare)`);

    // Warm-up, not recorded: JIT, wasm, undici's connections to each server.
    for (const mode of MODES) {
      for (const c of contenders) await timedBatch(post, c.url, Math.ceil(REQUESTS / 3), mode.concurrency);
    }
    log(`adapters: ${contenders.length} contenders × ${MODES.length} modes × ${ROUNDS} rounds × ${REQUESTS} requests`);

    const rounds = []; // rounds[r][mode][id] = { ms, perSec, ratio }
    const orders = roundOrders(contenders.length);
    for (let r = 0; r < ROUNDS; r += 1) {
      const round = {};
      const order = orders[r % orders.length].map((i) => contenders[i]);
      for (const mode of MODES) {
        round[mode.id] = {};
        for (const c of order) {
          const server = servers[c.framework];
          const s0 = server.elu();
          const c0 = performance.eventLoopUtilization();
          const ms = await timedBatch(post, c.url, REQUESTS, mode.concurrency);
          const s1 = server.elu(s0);
          const c1 = performance.eventLoopUtilization(c0);
          round[mode.id][c.id] = {
            ms,
            perSec: (REQUESTS * 1000) / ms,
            // Time each thread's event loop was busy (not waiting for I/O), per request, in µs.
            serverBusyUs: (s1.active * 1000) / REQUESTS,
            clientBusyUs: (c1.active * 1000) / REQUESTS,
          };
        }
        for (const c of contenders) round[mode.id][c.id].ratio = round[mode.id][c.id].perSec / round[mode.id][`${c.framework}:bare`].perSec;
      }
      rounds.push({ order: order.map((c) => c.id), ...round });
      log(`round ${r + 1}/${ROUNDS}: ${MODES.map((m) => `${m.id} ${FRAMEWORKS.map((f) => `${f.id} ${round[m.id][`${f.id}:bare`].perSec.toFixed(0)}/s ×${round[m.id][`${f.id}:wrapped`].ratio.toFixed(2)}`).join(', ')}`).join('; ')}`);
    }

    const rows = contenders.map((c) => {
      const row = {
        id: c.id, framework: c.framework, kind: c.kind, name: c.name, path: c.path, config: c.config, note: c.note, reference: !!c.reference, noise: !!c.noise,
      };
      for (const mode of MODES) {
        row[mode.id] = {
          ...ratioCell(rounds, mode.id, c.id, `${c.framework}:bare`, REQUESTS, 'addedUsPerRequest'),
          serverBusyUs: median(rounds.map((r) => r[mode.id][c.id].serverBusyUs)),
          clientBusyUs: median(rounds.map((r) => r[mode.id][c.id].clientBusyUs)),
        };
      }
      return row;
    });

    // Checks: every request was a new key, so each route ran once per request (on /wrapped,
    // the sanity check's replay excepted) and each wrapped route's store kept one completed
    // record per key (up to its maxEntries, past which the oldest answers are evicted).
    const checks = [];
    const serverStats = {};
    const records = {};
    for (const f of FRAMEWORKS) {
      const stats = await servers[f.id].stats();
      const rec = await servers[f.id].records();
      serverStats[f.id] = stats;
      records[f.id] = rec;
      const bareSent = sent.get(`${servers[f.id].base}/bare`) ?? 0;
      const wrappedSent = sent.get(`${servers[f.id].base}/wrapped`) ?? 0;
      const expectedRecords = rec.maxEntries ? Math.min(stats.runs.wrapped, rec.maxEntries) : stats.runs.wrapped;
      let line = `${f.name}: /bare ${bareSent} requests, the route ran ${stats.runs.bare} times`
        + `${stats.runs.bare === bareSent ? '' : ` (EXPECTED ${bareSent})`}; /wrapped ${wrappedSent} requests, the route ran ${stats.runs.wrapped} times`
        + `${stats.runs.wrapped === wrappedSent - 1 ? ' (once per key, the replay excepted)' : ` (EXPECTED ${wrappedSent - 1})`}`;
      line += `, ${rec.size} records stored${rec.size === expectedRecords ? '' : ` (EXPECTED ${expectedRecords})`}`;
      line += `; ${stats.connections} connections`;
      checks.push(line);
    }
    const errors = FRAMEWORKS.flatMap((f) => serverStats[f.id].errors.map((e) => `${f.name}: ${e}`));

    // One line per mode for the report's goals-at-a-glance table: a measurement, no goal.
    const byId = Object.fromEntries(rows.map((r) => [r.id, r]));
    const summary = MODES.map((mode) => ({
      goal: `${mode.name}: throughput / bare framework, ${FRAMEWORKS.map((f) => f.name).join(' / ')}`,
      target: 'none (a measurement)',
      measured: FRAMEWORKS.map((f) => byId[`${f.id}:wrapped`][mode.id].ratio.toFixed(2)).join(' / '),
      met: '',
    }));

    const totalSeconds = (performance.now() - started) / 1000;
    const meta = {
      ...machine(),
      rounds: ROUNDS,
      requestsPerBatch: REQUESTS,
      concurrency: CONCURRENCY,
      frameworks,
      server: 'one worker thread per framework, node:http on 127.0.0.1; /bare (the route alone) and /wrapped (the same route behind the adapter, a MemoryStore of its own, identity: false) in the same app; the route reads the JSON body and answers 201 {"ok":true,"amount":...}',
      requestBody: PAYMENT_BODY,
    };

    const out = [];
    out.push(`## Server companion with framework adapters (${ROUNDS} rounds × ${REQUESTS} requests per contender and mode, medians; Node ${process.version}, ${meta.cpus} cores)`);
    out.push('');
    for (const mode of MODES) {
      out.push(`### ${mode.name}`);
      out.push('');
      out.push(adaptersTable(rows, frameworks, mode));
      out.push('');
    }
    out.push(table(['summary', 'target', 'measured'], summary.map((s) => [s.goal, s.target, s.measured]), ['---', '---', '---:']));
    out.push('');
    out.push(`Checks: ${checks.join('. ')}. Store and route errors: ${errors.length ? errors.join('; ') : 'none'}.`);
    out.push('');
    out.push(`Run took ${totalSeconds.toFixed(0)} s.`);
    await printMarkdown(out);

    writeResults(RESULTS, {
      ...meta, modes: MODES, summary, rows, checks, errors, records, roundResults: rounds, serverStats, totalSeconds,
    });
  } finally {
    for (const s of Object.values(servers)) await s.close().catch((err) => log(`adapters: closing a server: ${err?.message ?? err}`));
  }
}

// ---------------------------------------------------------------------------------------------
// Entry: the worker threads serve; the main thread measures.

if (!isMainThread && workerData?.adaptersServer) {
  try {
    await serve(workerData);
  } catch (err) {
    parentPort.postMessage({ failed: err?.stack ?? String(err) });
  }
} else if (isMainThread) {
  await main();
}
