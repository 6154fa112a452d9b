// Helpers for the retry-fetch/server tests: a real node:http server around a fetch-style
// handler (through toNodeHandler), requests with real fetch, and store wrappers that spy on,
// break or cripple a store.
import http from 'node:http';
import { createHash } from 'node:crypto';
import assert from 'node:assert/strict';
import { toNodeHandler } from 'retry-fetch/server';

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Serve a node:http `listener` (an Express app, say) on 127.0.0.1 on a free port. */
export async function listen(listener) {
  const server = http.createServer(listener);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Serve `handler` on 127.0.0.1 on a free port. `wrap(req, res, next)` can intercept the
 * node request first. Errors the adapter reports are collected in `errors`.
 */
export async function serve(handler, { wrap } = {}) {
  const errors = [];
  const next = toNodeHandler(handler, { onError: (error) => errors.push(error) });
  return { errors, ...(await listen(wrap ? (req, res) => wrap(req, res, next) : next)) };
}

/** Serve `handler` (as serve() does) while `fn(server)` runs, then close the server. */
export async function withServer(handler, fn) {
  const server = await serve(handler);
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

/** The body `send()` posts unless told otherwise. */
export const DEFAULT_BODY = '{"amount":4200,"currency":"EUR"}';

/** A request to `url + path` with an optional key (plain string as is) and extra headers. */
export function send(url, { key, body = DEFAULT_BODY, method = 'POST', path = '/payments', headers = {}, signal } = {}) {
  const h = { 'Content-Type': 'application/json', ...headers };
  if (key !== undefined) h['Idempotency-Key'] = key;
  const init = { method, headers: h, signal };
  if (method !== 'GET' && method !== 'HEAD') init.body = body;
  return fetch(url + path, init);
}

/** Status, status text, headers (minus the ones that differ per answer) and body bytes. */
export async function snapshot(response) {
  const headers = [...response.headers].filter(([name]) => name !== 'date' && name !== 'idempotent-replayed');
  return {
    status: response.status,
    statusText: response.statusText,
    headers,
    body: Buffer.from(await response.arrayBuffer()),
  };
}

/** A fresh unique key. */
export const newKey = () => crypto.randomUUID();

/** A promise with its resolve function: `const d = deferred(); d.resolve(v); await d.promise`. */
export function deferred() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * Assert that `response` is one of the companion's RFC 9457 problems with this status and
 * code (and `Retry-After: 1` when `retryAfter`), and return its JSON body.
 */
export async function problemOf(response, status, code, { retryAfter = false } = {}) {
  const text = await response.text();
  assert.equal(response.status, status, `expected a ${status} problem (${code}); got ${response.status} ${text}`);
  assert.equal(response.headers.get('content-type'), 'application/problem+json');
  assert.equal(response.headers.get('retry-after'), retryAfter ? '1' : null, 'Retry-After');
  const problem = JSON.parse(text);
  assert.equal(problem.status, status);
  assert.equal(problem.code, code);
  assert.equal(typeof problem.title, 'string');
  assert.equal(typeof problem.detail, 'string');
  return problem;
}

/** The UUID shape of `ctx.keyFor(name)`: version 8, RFC 9562 variant. */
export const DERIVED_KEY = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/**
 * The fingerprint the companion computes for a request (store.d.ts: SHA-256, hex, over the
 * method, NUL, path + query, NUL, the SHA-256 of the body bytes), for a lock planted by a test.
 */
export function fingerprintOf({ method = 'POST', path = '/payments', body = DEFAULT_BODY } = {}) {
  const h = createHash('sha256');
  h.update(method);
  h.update(Buffer.from([0]));
  h.update(path);
  h.update(Buffer.from([0]));
  h.update(createHash('sha256').update(body).digest());
  return h.digest('hex');
}

/**
 * Plant the lock of a holder that died in `store` for the unscoped `key`, live for `ms`: what
 * a crashed server instance leaves behind. `request` is the shape of the request it was
 * processing (see `send()`; its fingerprint goes in the lock). With PostgresStore it is a
 * transaction holding the key that nobody renews: PostgreSQL ends it after `ms` idle.
 */
export async function plantDeadLock(store, key, ms, request = {}) {
  const lock = { state: 'in-progress', token: `dead-holder-${newKey()}`, fingerprint: fingerprintOf(request), lockExpiresAt: Date.now() + ms };
  assert.equal(await store.acquire(`-:${key}`, lock, ms), null, 'the planted lock was taken');
  return lock;
}

/**
 * `store` seen through a Proxy: every method bound to the store itself (private fields work),
 * `override[name]` replacing a property (`undefined` hides it).
 */
function through(store, override) {
  return new Proxy(store, {
    get(target, prop) {
      if (Object.hasOwn(override, prop)) return override[prop];
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** `store` without `renew`: a holder's lock lasts `lockTimeoutMs` whatever its handler does. */
export function withoutRenew(store) {
  return through(store, { renew: undefined });
}

/**
 * `store` with every call recorded in `spy.calls` as `[method, ...args]` (the store and its
 * `transactional`/`transaction` are passed through).
 */
export function spyStore(store) {
  const calls = [];
  const override = {};
  for (const method of ['acquire', 'renew', 'reclaim', 'complete', 'release']) {
    override[method] = (...args) => {
      calls.push([method, ...args]);
      return store[method](...args);
    };
  }
  return { store: through(store, override), calls };
}

/** An acquire() answer that means "someone else holds the key": its lock, or `{ state: 'held' }`. */
export const isHeld = (answer) => answer != null && answer.state !== 'completed';

/**
 * `store` with every acquire() answer recorded in `watch.answers` as `{ at: Date.now(), key,
 * token, answer }` (a request asks with one token, however often it polls), and
 * `watch.waiting(token)`, the answers that request got; `watch.also(other)` records another
 * instance's store in the same list. `watch.overlapped(n, requests)`
 * resolves once `n` requests (tokens) were told the key is held; it rejects at once if one of
 * `requests` (fetch promises) settles before that: a test that waits for duplicates to run into
 * a held key must not hang when one of them never did.
 */
export function watchAcquires(store) {
  const answers = [];
  const waiters = new Set();
  const check = () => {
    for (const w of waiters) {
      if (w.done(answers)) {
        waiters.delete(w);
        w.resolve();
      }
    }
  };
  const wrap = (target) =>
    through(target, {
      acquire: async (...args) => {
        const answer = await target.acquire(...args);
        answers.push({ at: Date.now(), key: args[0], token: args[1]?.token, answer });
        check();
        return answer;
      },
    });
  const until = (done) =>
    new Promise((resolve) => {
      waiters.add({ done, resolve });
      check();
    });
  const heldTokens = () => new Set(answers.filter((a) => isHeld(a.answer)).map((a) => a.token));
  return {
    store: wrap(store),
    /** Another store (another instance's) whose acquire() answers go in the same record. */
    also: wrap,
    answers,
    until,
    heldTokens,
    waiting: (token) => answers.filter((a) => a.token === token),
    async overlapped(n, requests = []) {
      let reached = false;
      await Promise.race([
        until(() => heldTokens().size >= n).then(() => (reached = true)),
        ...requests.map((sent) =>
          Promise.resolve(sent).then(async (outcome) => {
            if (reached) return;
            const detail = outcome instanceof Response ? `${outcome.status} ${await outcome.clone().text()}` : String(outcome);
            throw new Error(`a request ended (${detail}) before ${n} request(s) had found the key held (${heldTokens().size} had)`);
          }),
        ),
      ]);
    },
  };
}

/** `store` whose `method` fails: throws `error` (`{ sync: true }`) or rejects with it. */
export function failing(store, method, error, { sync = false } = {}) {
  const fail = sync
    ? () => {
        throw error;
      }
    : async () => {
        throw error;
      };
  return through(store, { [method]: fail });
}
