// The demo's payments API: a charge handler protected by the idempotency companion, a
// server-side ledger, and a fault-injecting "network" in front of it that the page controls.
//
//   POST /api/payments       JSON {amount, currency?, card?} with an Idempotency-Key
//                              -> 201 JSON {chargeId, amount, currency, last4, chargedAt}
//                            (a missing key is answered 400 by the companion; a replayed key
//                            gets the stored answer with `Idempotent-Replayed: true`)
//   GET  /api/ledger         {charges: [{id, amount, currency, key, last4, at, requests}],
//                             count, total, duplicates: [keys charged more than once]}
//   POST /api/ledger/reset   clears the ledger, the companion's store and the attempt counts
//   GET  /api/faults         the fault settings
//   POST /api/faults         JSON {mode, count, delayMs?}: the first `count` attempts of every
//                            payment (counted per Idempotency-Key) meet the fault `mode`:
//                              none   no fault
//                              503    the proxy answers 503 (nothing reaches the handler)
//                              429    the proxy answers 429 with Retry-After: 1
//                              slow   the handler answers at once, the proxy holds the answer
//                                     for delayMs (the client's timeoutMs runs out first)
//                              drop   the handler charges, then the connection is destroyed
//                                     before the answer: the ambiguous case, where only the
//                                     idempotency key keeps the retry from charging twice (a
//                                     retry answered from the store is dropped the same way)
//                              long   long work: the payment provider takes delayMs; after
//                                     ACCEPT_AFTER_MS the companion answers 202 Accepted
//                                     (Retry-After) while the charge goes on, every repeat with
//                                     the key gets 202 until it is done, then the stored 201
import { AsyncLocalStorage } from 'node:async_hooks';
import { idempotency, MemoryStore, PostgresStore, toNodeHandler } from '../pkg/server.js';
import { readBody } from './read-body.mjs';

export const FAULT_MODES = ['none', '503', '429', 'slow', 'drop', 'long'];
/** Long work: a handler still running after this is answered 202 Accepted (the companion's acceptAfterMs). */
export const ACCEPT_AFTER_MS = 500;
const MAX_COUNT = 10;
const MAX_DELAY_MS = 30_000;
const MAX_LEDGER = 10_000; // oldest charges are forgotten past this
const MAX_KEYS = 10_000; // per-key attempt counters kept
const MAX_AMOUNT = 1_000_000_00; // cents

function json(res, status, body, headers = {}) {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store', ...headers });
  res.end(JSON.stringify(body));
}

async function readJson(req, limit = 16 * 1024) {
  const text = await readBody(req, limit);
  try {
    return text ? JSON.parse(text) : {};
  } catch {
    throw Object.assign(new Error('the body is not JSON'), { status: 400 });
  }
}

/** Drains a request body we answer without reading (so the client sees the answer, not a reset). */
function drain(req) {
  return new Promise((done) => {
    if (req.readableEnded) return done();
    req.on('end', done).on('error', done).on('close', done);
    req.resume();
  });
}

function randomId(prefix) {
  return `${prefix}_${crypto.randomUUID().replace(/-/g, '').slice(0, 16)}`;
}

/** Validates fault settings; throws a 400 error naming the field. */
export function parseFaults(input, current) {
  const bad = (msg) => Object.assign(new Error(msg), { status: 400 });
  if (input === null || typeof input !== 'object' || Array.isArray(input)) throw bad('expected a JSON object {mode, count, delayMs?}');
  const next = { ...current };
  if (input.mode !== undefined) {
    if (!FAULT_MODES.includes(input.mode)) throw bad(`mode must be one of ${FAULT_MODES.join(', ')}`);
    next.mode = input.mode;
  }
  if (input.count !== undefined) {
    if (!Number.isInteger(input.count) || input.count < 0 || input.count > MAX_COUNT) throw bad(`count must be an integer from 0 to ${MAX_COUNT}`);
    next.count = input.count;
  }
  if (input.delayMs !== undefined) {
    if (!Number.isInteger(input.delayMs) || input.delayMs < 0 || input.delayMs > MAX_DELAY_MS) throw bad(`delayMs must be an integer from 0 to ${MAX_DELAY_MS}`);
    next.delayMs = input.delayMs;
  }
  return next;
}

/** The table of the demo's keys when it runs on PostgreSQL. */
const DEMO_TABLE = 'retry_fetch_demo_keys';

/**
 * Where the demo keeps its idempotency keys: the embedded MemoryStore by default; a
 * PostgresStore (`pg`, a table of its own) when `databaseUrl` (DATABASE_URL) is set.
 * Resolves with `{ kind, make(), clear(), close() }`.
 */
export async function createDemoStorage(databaseUrl = process.env.DATABASE_URL) {
  if (!databaseUrl) {
    return { kind: 'memory', make: () => new MemoryStore(), clear: async () => {}, close: async () => {} };
  }
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 20 });
  pool.on('error', (e) => console.error('retry-fetch demo: PostgreSQL:', e.message));
  const store = new PostgresStore({ pool, table: DEMO_TABLE });
  await store.migrate();
  return {
    kind: 'postgres',
    make: () => store,
    clear: () => pool.query(`TRUNCATE ${DEMO_TABLE}`),
    close: () => pool.end(),
  };
}

/**
 * The payments API. `handle(req, res, path)` answers the routes above and resolves to true, or
 * resolves to false for a path it does not own. `timers` collects pending timers so that the
 * server can clear them on close.
 */
export function createPaymentsApi({ timers = new Set(), storage } = {}) {
  storage ??= { kind: 'memory', make: () => new MemoryStore(), clear: async () => {} };
  const ledger = [];
  const requests = new Map(); // Idempotency-Key -> requests that reached the server
  const context = new AsyncLocalStorage(); // { req, fault } of the request being handled
  let faults = { mode: 'none', count: 2, delayMs: 2500 };
  let store;
  let protectedCharge;

  /** The charge handler: it runs only inside the companion, once per key. */
  async function charge(request) {
    let body;
    try {
      body = await request.json();
    } catch {
      return Response.json({ error: 'the body must be JSON {amount, currency}' }, { status: 400 });
    }
    const amount = body?.amount;
    if (!Number.isInteger(amount) || amount < 1 || amount > MAX_AMOUNT) {
      return Response.json({ error: `amount must be an integer number of cents from 1 to ${MAX_AMOUNT}` }, { status: 422 });
    }
    const currency = typeof body.currency === 'string' && /^[A-Z]{3}$/.test(body.currency) ? body.currency : 'EUR';
    const last4 = typeof body.card === 'string' && /^\d{4}$/.test(body.card) ? body.card : null;
    const ctx = context.getStore();
    // Long work: the provider takes its time; the client going away does not stop the charge.
    if (ctx?.fault === 'long') await wait(faults.delayMs);
    const entry = {
      id: randomId('ch'),
      amount,
      currency,
      key: request.headers.get('idempotency-key'),
      last4,
      at: new Date().toISOString(),
    };
    ledger.push(entry); // the money moves here
    if (ledger.length > MAX_LEDGER) ledger.shift();

    if (ctx?.fault === 'drop') {
      // The charge is done; the connection dies before the answer leaves (a crash, a proxy
      // timeout, a cable): the client cannot tell whether it was charged.
      ctx.req.socket.destroy();
    }
    return Response.json(
      { chargeId: entry.id, amount, currency, last4, chargedAt: entry.at },
      { status: 201, headers: { Location: `/api/ledger#${entry.id}` } },
    );
  }

  async function reset() {
    ledger.length = 0;
    requests.clear();
    await storage.clear();
    store = storage.make();
    protectedCharge = idempotency(charge, COMPANION_OPTIONS());
  }
  // The demo has no user accounts: every page is the same caller, so keys are not scoped
  // (identity: false says so; an API with users passes identity: (request) => userId).
  // A charge still running after ACCEPT_AFTER_MS is answered 202 Accepted (the "long" fault);
  // the page follows it (followAccepted) by repeating the request with its key.
  const COMPANION_OPTIONS = () => ({ store, identity: false, acceptAfterMs: ACCEPT_AFTER_MS });
  store = storage.make();
  protectedCharge = idempotency(charge, COMPANION_OPTIONS());

  /** A wait that no request ends (cleared when the server closes). */
  function wait(ms) {
    return new Promise((done) => {
      const t = setTimeout(() => { timers.delete(t); done(); }, ms);
      timers.add(t);
    });
  }

  function sleep(ms, res) {
    return new Promise((done) => {
      const t = setTimeout(() => { timers.delete(t); done(); }, ms);
      timers.add(t);
      res.on('close', () => { clearTimeout(t); timers.delete(t); done(); });
    });
  }

  function ledgerView() {
    const byKey = new Map();
    for (const c of ledger) byKey.set(c.key, (byKey.get(c.key) ?? 0) + 1);
    return {
      charges: ledger.map((c) => ({ ...c, requests: requests.get(c.key) ?? 0 })),
      count: ledger.length,
      total: ledger.reduce((sum, c) => sum + c.amount, 0),
      duplicates: [...byKey].filter(([, n]) => n > 1).map(([key]) => key),
    };
  }

  /** POST /api/payments: the fault layer (a network/proxy), then the companion, then charge. */
  async function payments(req, res) {
    const key = req.headers['idempotency-key'];
    let fault = null;
    if (typeof key === 'string' && key !== '') {
      const n = (requests.get(key) ?? 0) + 1;
      requests.delete(key);
      requests.set(key, n);
      if (requests.size > MAX_KEYS) requests.delete(requests.keys().next().value);
      if (faults.mode !== 'none' && n <= faults.count) fault = faults.mode;
    }
    if (fault === '503') {
      await drain(req);
      return json(res, 503, { error: 'service unavailable (injected by the demo proxy)' });
    }
    if (fault === '429') {
      await drain(req);
      return json(res, 429, { error: 'too many requests (injected by the demo proxy)' }, { 'Retry-After': '1' });
    }
    const node = toNodeHandler(async (request) => {
      const response = await protectedCharge(request);
      if (fault === 'slow') await sleep(faults.delayMs, res);
      // A retry answered from the store (the handler did not run) loses its answer the same way.
      if (fault === 'drop' && !req.socket.destroyed) req.socket.destroy();
      return response;
    });
    res.on('error', () => {}); // writing to a dropped connection is expected here
    await context.run({ req, fault }, () => node(req, res));
  }

  async function route(req, res, path) {
    const only = (...methods) => {
      if (methods.includes(req.method)) return true;
      json(res, 405, { error: `use ${methods.join(' or ')}` }, { Allow: methods.join(', ') });
      return false;
    };
    switch (path) {
      case '/api/payments':
        if (only('POST')) await payments(req, res);
        return;
      case '/api/ledger':
        if (only('GET', 'HEAD')) json(res, 200, ledgerView());
        return;
      case '/api/ledger/reset':
        if (!only('POST')) return;
        await drain(req);
        await reset();
        return json(res, 200, { ok: true });
      case '/api/faults':
        if (!only('GET', 'HEAD', 'POST')) return;
        if (req.method === 'POST') faults = parseFaults(await readJson(req), faults);
        return json(res, 200, faults);
    }
  }

  const PATHS = new Set(['/api/payments', '/api/ledger', '/api/ledger/reset', '/api/faults']);

  /** Answers `path` if it is one of the API's; resolves to whether it was. */
  async function handle(req, res, path) {
    if (!PATHS.has(path)) return false;
    await route(req, res, path);
    return true;
  }

  return { handle, reset, ledger: ledgerView, storage: storage.kind, get faults() { return faults; } };
}
