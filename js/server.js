// Server entry, `retry-fetch/server`: the other half of idempotency keys (seed 002, rules 10,
// 11, 17 and 19; the IETF Idempotency-Key draft). `idempotency(handler)` wraps a fetch-style
// handler so that a request repeated with the same key is answered with the stored response
// instead of being processed twice. For Node 20+ (and Deno and Bun, which have `node:fs`).
// Types and every default: server.d.ts.
//
// The key parsing, the fingerprint, the identity-scoped store key, the option checks and the
// per-key decision are Rust (src/core/idempotency.rs), in a wasm build of its own
// (retry_fetch_server_bg.wasm), so the browser client's .wasm carries none of it.
import { readFileSync } from 'node:fs';
import { Buffer } from 'node:buffer';
import { Readable } from 'node:stream';
import {
  initSync,
  readServerOptions,
  parseIdempotencyKey,
  requestFingerprint,
  storeKey,
  keyRequiredByDefault,
  decideAction,
} from './retry_fetch_server.js';

initSync({ module: readFileSync(new URL('./retry_fetch_server_bg.wasm', import.meta.url)) });

/** The header added to a replayed response. */
const REPLAYED_HEADER = 'Idempotent-Replayed';

/** The `type` of every problem answer: the draft that defines these errors. */
const PROBLEM_TYPE = 'https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/';

/** Statuses whose Response must have a null body. */
const NULL_BODY_STATUSES = new Set([204, 205, 304]);

/** A short rendering of a value for an error message (as the wasm side does it). */
function describe(value) {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) return 'an array';
  try {
    return String(value);
  } catch {
    return 'an object';
  }
}

function optionError(where, option, value, expected) {
  return new TypeError(`${where}: invalid option "${option}": got ${describe(value)}; expected ${expected}`);
}

/** An RFC 9457 problem answer (`application/problem+json`). */
function problem(status, code, title, detail, headers = {}) {
  return new Response(JSON.stringify({ type: PROBLEM_TYPE, title, status, detail, code }), {
    status,
    headers: { 'Content-Type': 'application/problem+json', 'Cache-Control': 'no-store', ...headers },
  });
}

/** Resolve after `ms`, or reject with the signal's reason when it aborts first. */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Is `value` Response-like enough to be stored? */
function isResponseLike(value) {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof value.status === 'number' &&
    typeof value.arrayBuffer === 'function' &&
    typeof value.headers === 'object' &&
    value.headers !== null
  );
}

/** The response as a `StoredResponse` (headers in order, `Set-Cookie` kept apart, body base64). */
async function toStored(response) {
  const bytes = new Uint8Array(await response.arrayBuffer());
  const headers = [];
  for (const [name, value] of new Headers(response.headers)) headers.push([name, value]);
  return {
    status: response.status,
    statusText: typeof response.statusText === 'string' ? response.statusText : '',
    headers,
    body: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64'),
  };
}

/** A `Response` from a `StoredResponse`; `replayed` adds `Idempotent-Replayed: true`. */
function fromStored(stored, replayed) {
  const ok =
    typeof stored === 'object' &&
    stored !== null &&
    Number.isInteger(stored.status) &&
    stored.status >= 200 &&
    stored.status <= 599 &&
    Array.isArray(stored.headers) &&
    stored.headers.every((h) => Array.isArray(h) && typeof h[0] === 'string' && typeof h[1] === 'string') &&
    typeof stored.body === 'string';
  if (!ok) throw new TypeError(`idempotency: the store returned a malformed stored response: ${describe(stored)}`);
  const headers = new Headers();
  for (const [name, value] of stored.headers) headers.append(name, value);
  if (replayed) headers.set(REPLAYED_HEADER, 'true');
  const body = NULL_BODY_STATUSES.has(stored.status) ? null : Buffer.from(stored.body, 'base64');
  const init = { status: stored.status, headers };
  if (typeof stored.statusText === 'string' && stored.statusText !== '') init.statusText = stored.statusText;
  return new Response(body, init);
}

function defaultOnStoreError(error, operation) {
  console.error(`retry-fetch/server: idempotency store ${operation}() failed:`, error);
}

/**
 * Wrap a fetch-style handler so that requests carrying an idempotency key are processed once.
 * See server.d.ts for every option and its default.
 */
export function idempotency(handler, options) {
  if (typeof handler !== 'function') {
    throw new TypeError(`idempotency: the handler must be a function (request) => Promise<Response>; got ${describe(handler)}`);
  }
  const o = readServerOptions(options); // TypeError naming the option on a bad value
  const store = options?.store ?? new MemoryStore();
  const required = options?.required;
  const identity = options?.identity;
  const onStoreError = options?.onStoreError ?? defaultOnStoreError;
  const header = o.header;

  async function isRequired(request) {
    if (required === undefined) return keyRequiredByDefault(request.method);
    if (typeof required === 'boolean') return required;
    const r = await required(request);
    if (typeof r !== 'boolean') {
      throw new TypeError(`idempotency: option "required" returned ${describe(r)}; expected true or false`);
    }
    return r;
  }

  // A store failure after the handler ran must not turn its response into an error: report it.
  async function storeQuietly(operation, run) {
    try {
      return await run();
    } catch (error) {
      onStoreError(error, operation);
      return undefined;
    }
  }

  // Holds the lock: run the handler, store its response, answer with it.
  async function processWithLock(request, key, token, fingerprint) {
    let stored;
    try {
      const response = await handler(request);
      if (!isResponseLike(response)) {
        throw new TypeError(`idempotency: the handler must resolve with a Response; got ${describe(response)}`);
      }
      stored = await toStored(response);
    } catch (error) {
      // Nothing is stored and the lock is released, so a retry runs the handler again.
      await storeQuietly('release', () => store.release(key, token));
      throw error;
    }
    const record = { state: 'completed', fingerprint, response: stored, completedAt: Date.now() };
    const kept = await storeQuietly('complete', () => store.complete(key, token, record, o.ttlMs));
    if (kept === false) {
      // complete() refused: the lock expired (the handler ran longer than lockTimeoutMs) and
      // another request may have taken it over. The response is still this request's answer.
      onStoreError(new Error('the lock was lost before the response could be stored (did the handler run longer than lockTimeoutMs?)'), 'complete');
    }
    return fromStored(stored, false);
  }

  return async function idempotentHandler(request) {
    const raw = request.headers.get(header);
    if (raw === null) {
      if (await isRequired(request)) {
        return problem(400, 'idempotency-key-missing', `${header} is missing`,
          `${request.method} ${new URL(request.url).pathname} requires an ${header} header (a unique key per operation, the same on every retry).`);
      }
      return handler(request);
    }
    let key;
    try {
      key = parseIdempotencyKey(raw);
    } catch (error) {
      if (error?.name !== 'IdempotencyKeyError') throw error;
      return problem(400, 'idempotency-key-invalid', `${header} is invalid`, `${error.message}.`);
    }
    const scoped = storeKey(identity === undefined ? undefined : await identity(request), key);
    const body = request.body === null ? new Uint8Array(0) : new Uint8Array(await request.clone().arrayBuffer());
    const url = new URL(request.url);
    const fingerprint = requestFingerprint(request.method, url.pathname + url.search, body);
    const token = crypto.randomUUID();
    const waitUntil = Date.now() + o.waitTimeoutMs;

    for (;;) {
      const lock = { state: 'in-progress', token, fingerprint, lockExpiresAt: Date.now() + o.lockTimeoutMs };
      const existing = await store.acquire(scoped, lock, o.lockTimeoutMs);
      if (existing === null || existing === undefined) return processWithLock(request, scoped, token, fingerprint);

      const action = decideAction(existing, fingerprint, Date.now());
      if (action === 'replay') return fromStored(existing.response, true);
      if (action === 'mismatch') {
        return problem(422, 'idempotency-key-reused', `${header} is already used`,
          `This ${header} was already used for a different request (method, path, query or body); use a new key for a new operation.`);
      }
      if (action === 'lock-expired') {
        // The holder died: take its lock over (compare-and-swap on its token) and process.
        if (await store.reclaim(scoped, existing.token, lock, o.lockTimeoutMs)) {
          return processWithLock(request, scoped, token, fingerprint);
        }
      } else if (o.concurrent === 'reject') {
        return problem(409, 'idempotency-key-in-progress', `A request is outstanding for this ${header}`,
          `A request with this ${header} is still being processed; retry later with the same key.`, { 'Retry-After': '1' });
      }
      const left = waitUntil - Date.now();
      if (left <= 0) {
        return problem(409, 'idempotency-key-in-progress', `A request is outstanding for this ${header}`,
          `A request with this ${header} is still being processed after waiting ${o.waitTimeoutMs} ms; retry later with the same key.`, { 'Retry-After': '1' });
      }
      await sleep(Math.min(o.pollMs, left), request.signal);
    }
  };
}

/** The live entry for `key` in `map`, dropping it when it has expired. */
function liveEntry(map, key, now) {
  const entry = map.get(key);
  if (entry === undefined) return undefined;
  if (entry.expiresAt <= now) {
    map.delete(key);
    return undefined;
  }
  return entry;
}

function holds(entry, token) {
  return entry !== undefined && entry.record.state === 'in-progress' && entry.record.token === token;
}

/**
 * An IdempotencyStore in this process's memory: for one server process (several processes or
 * machines need a shared store such as RedisStore). Atomic because JavaScript runs one
 * callback at a time and no method awaits before it has decided. Records expire by time.
 */
export class MemoryStore {
  #records = new Map(); // key -> { record, expiresAt }
  #lastSweep = 0;

  /** Drop expired records, at most once a second (each call is O(records)). */
  #sweep(now) {
    if (now - this.#lastSweep < 1000) return;
    this.#lastSweep = now;
    for (const [key, entry] of this.#records) if (entry.expiresAt <= now) this.#records.delete(key);
  }

  async acquire(key, lock, lockTimeoutMs) {
    const now = Date.now();
    this.#sweep(now);
    const entry = liveEntry(this.#records, key, now);
    if (entry !== undefined) return structuredClone(entry.record);
    this.#records.set(key, { record: structuredClone(lock), expiresAt: now + lockTimeoutMs });
    return null;
  }

  async reclaim(key, staleToken, lock, lockTimeoutMs) {
    const now = Date.now();
    if (!holds(liveEntry(this.#records, key, now), staleToken)) return false;
    this.#records.set(key, { record: structuredClone(lock), expiresAt: now + lockTimeoutMs });
    return true;
  }

  async complete(key, token, record, ttlMs) {
    const now = Date.now();
    if (!holds(liveEntry(this.#records, key, now), token)) return false;
    this.#records.set(key, { record: structuredClone(record), expiresAt: now + ttlMs });
    return true;
  }

  async release(key, token) {
    if (!holds(liveEntry(this.#records, key, Date.now()), token)) return false;
    this.#records.delete(key);
    return true;
  }

  /** How many records (locks and completed responses) are live. */
  get size() {
    const now = Date.now();
    let n = 0;
    for (const entry of this.#records.values()) if (entry.expiresAt > now) n++;
    return n;
  }

  /** Forget every record. */
  clear() {
    this.#records.clear();
  }
}

// Replace (or delete) the record at KEYS[1] only if it is the lock held by ARGV[1]:
// ARGV[2] is the new value ('' deletes), ARGV[3] its lifetime in ms. Returns 1 if done, else 0.
const OWNER_SWAP = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, r = pcall(cjson.decode, v)
if not ok or type(r) ~= 'table' or r.state ~= 'in-progress' or r.token ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
`;

function parseRecord(value, key) {
  try {
    return JSON.parse(typeof value === 'string' ? value : String(value));
  } catch {
    throw new TypeError(`RedisStore: the value at ${JSON.stringify(key)} is not a JSON idempotency record`);
  }
}

/**
 * An IdempotencyStore in Redis, shared by every server instance: the lock is
 * `SET key value NX PX lockTimeoutMs` (seed 002, rule 19), a completed response is stored with
 * `PX ttlMs`, and only the lock's owner may complete, release or take it over (a Lua script
 * comparing the owner token). `client` is a connected node-redis (`redis` v4+) client you
 * create; this package does not depend on it.
 */
export class RedisStore {
  #client;
  #prefix;

  constructor(options) {
    if (typeof options !== 'object' || options === null) {
      throw optionError('RedisStore', 'options', options, 'an object { client, prefix? }');
    }
    const { client, prefix = 'idem:' } = options;
    const isClient =
      typeof client === 'object' &&
      client !== null &&
      typeof client.set === 'function' &&
      typeof client.get === 'function' &&
      typeof client.eval === 'function';
    if (!isClient) {
      throw optionError('RedisStore', 'client', client, "a connected node-redis client (createClient() from the 'redis' package, then connect())");
    }
    if (typeof prefix !== 'string') throw optionError('RedisStore', 'prefix', prefix, 'a string');
    this.#client = client;
    this.#prefix = prefix;
  }

  /** The key prefix (default `'idem:'`). */
  get prefix() {
    return this.#prefix;
  }

  async acquire(key, lock, lockTimeoutMs) {
    const k = this.#prefix + key;
    const value = JSON.stringify(lock);
    // SET NX fails when a record exists; it may expire or be released before the GET, then try again.
    for (let i = 0; i < 10; i++) {
      const set = await this.#client.set(k, value, { NX: true, PX: lockTimeoutMs });
      if (set !== null && set !== undefined) return null;
      const existing = await this.#client.get(k);
      if (existing !== null && existing !== undefined) return parseRecord(existing, k);
    }
    throw new Error(`RedisStore: the record at ${JSON.stringify(k)} kept changing; giving up`);
  }

  async #swap(key, token, value, ms) {
    const reply = await this.#client.eval(OWNER_SWAP, {
      keys: [this.#prefix + key],
      arguments: [token, value, String(ms)],
    });
    return Number(reply) === 1;
  }

  reclaim(key, staleToken, lock, lockTimeoutMs) {
    return this.#swap(key, staleToken, JSON.stringify(lock), lockTimeoutMs);
  }

  complete(key, token, record, ttlMs) {
    return this.#swap(key, token, JSON.stringify(record), ttlMs);
  }

  release(key, token) {
    return this.#swap(key, token, '', 0);
  }
}

/** A `Request` for a node:http request (body streamed, `duplex: 'half'`). */
function toRequest(req, signal) {
  const proto = req.socket?.encrypted ? 'https' : 'http';
  const path = typeof req.url === 'string' && req.url !== '' ? req.url : '/';
  let url;
  try {
    url = new URL(path, `${proto}://${req.headers?.host ?? 'localhost'}`);
  } catch {
    url = new URL(path, `${proto}://localhost`); // a Host header that is not a host
  }
  const headers = new Headers();
  const raw = Array.isArray(req.rawHeaders) ? req.rawHeaders : [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i].startsWith(':')) continue; // HTTP/2 pseudo-headers
    try {
      headers.append(raw[i], raw[i + 1]);
    } catch {
      // a header the Fetch API refuses: leave it out
    }
  }
  const method = req.method ?? 'GET';
  const init = { method, headers, signal };
  if (method !== 'GET' && method !== 'HEAD') {
    init.body = Readable.toWeb(req);
    init.duplex = 'half';
  }
  return new Request(url, init);
}

/** Resolves on 'drain' or 'close', whichever comes first. */
function drained(res) {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

async function writeResponse(response, req, res) {
  const headers = [];
  for (const [name, value] of new Headers(response.headers)) headers.push(name, value);
  if (typeof response.statusText === 'string' && response.statusText !== '') {
    res.writeHead(response.status, response.statusText, headers);
  } else {
    res.writeHead(response.status, headers);
  }
  const body = response.body;
  if (body === null || body === undefined || req.method === 'HEAD') {
    res.end();
    return;
  }
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (res.destroyed) {
      await reader.cancel().catch(() => {});
      return;
    }
    if (!res.write(value)) await drained(res);
  }
  if (!res.destroyed) res.end();
}

async function serve(handler, req, res, onError) {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) controller.abort(new DOMException('the client closed the connection', 'AbortError'));
  });
  // Writes to a socket the client has closed fail; that is not the server's error.
  res.on('error', () => {});
  let response;
  try {
    response = await handler(toRequest(req, controller.signal));
    if (!isResponseLike(response)) {
      throw new TypeError(`toNodeHandler: the handler must resolve with a Response; got ${describe(response)}`);
    }
  } catch (error) {
    if (!controller.signal.aborted) onError(error);
    if (!res.headersSent && !res.destroyed) {
      res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('Internal Server Error\n');
    }
    return;
  }
  try {
    await writeResponse(response, req, res);
  } catch (error) {
    if (!controller.signal.aborted) onError(error);
    if (!res.headersSent && !res.destroyed) {
      res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('Internal Server Error\n');
    } else {
      res.destroy(); // mid-body: the client must not take a cut body for a whole one
    }
  }
}

/**
 * Adapt a fetch-style handler to `node:http`'s `(req, res)` listener. A handler that throws,
 * or does not resolve with a Response, is answered 500 and reported to `onError`. The listener
 * returns a promise that resolves when the response is written and never rejects.
 */
export function toNodeHandler(handler, options) {
  if (typeof handler !== 'function') {
    throw new TypeError(`toNodeHandler: the handler must be a function (request) => Promise<Response>; got ${describe(handler)}`);
  }
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw optionError('toNodeHandler', 'options', options, 'an object { onError? }');
  }
  const report = options?.onError ?? ((error) => console.error('retry-fetch/server: the handler failed:', error));
  if (typeof report !== 'function') throw optionError('toNodeHandler', 'onError', report, 'a function');
  const onError = (error) => {
    try {
      report(error);
    } catch {
      // a throwing onError must not become an unhandled rejection
    }
  };
  // Resolves when the response is written (or abandoned); never rejects.
  return function nodeHandler(req, res) {
    return serve(handler, req, res, onError).catch(onError);
  };
}
