// Server entry, `retry-fetch/server`: the other half of idempotency keys (the IETF
// Idempotency-Key draft: stored answers, a lock per key, keys unique per caller). For Node 20+
// (and Deno and Bun, which have `node:fs`). Types and every default: server.d.ts.
//
// Rust drives: `idempotency(handler, options)` and `idempotent(fn, options)` are wasm exports
// (src/wasm/server/, in a build of its own, retry_fetch_server_bg.wasm, so the browser
// client's .wasm carries none of it) that await the store and the handler and ask the core
// (src/core/idempotency/) for every decision. This file only loads that module and adds
// what is Node-specific (`toNodeHandler`); the stores are in their own files.
import { AsyncResource } from 'node:async_hooks';
import { hostname } from 'node:os';
import { Readable } from 'node:stream';
import { setContextCapture, setDefaultStore, setInstance } from './server-wasm.js';
import { MemoryStore } from './memory-store.js';
import { checkOptionNames, describe, optionError } from './store-support.js';
import { lingerAfterEarlyAnswer, nodeRequestHeaders, nodeRequestUrl, restructuredTarget } from './node-request.js';

setDefaultStore(() => new MemoryStore());
// The handler runs in the async context of its own request (src/wasm/server/context.rs): what
// AsyncLocalStorage.snapshot() captures, through an AsyncResource of its own (snapshot() also
// binds a function and defines its properties, some 30 µs a request in Node 20).
setContextCapture(() => {
  const resource = new AsyncResource('retry-fetch');
  return (fn, ...args) => resource.runInAsyncScope(fn, undefined, ...args);
});
// This process's name in the run history (RunRecord.instance).
setInstance(`${hostname()}:${process.pid}`);

export { idempotency, idempotent } from './server-wasm.js';
export { MemoryStore } from './memory-store.js';
export { RedisStore } from './redis-store.js';
export { PostgresStore } from './postgres-store.js';

/** Where a Response of the companion keeps its body's bytes (src/wasm/server/answers.rs). */
const ANSWER_BYTES = Symbol.for('retry-fetch.answerBytes');

/**
 * Is `value` Response-like enough to be written back? Its status a final one, an integer from
 * 200 to 599, as a fetch Response's (another implementation's may hold anything: a 1xx written
 * and ended would leave the client waiting for a final answer).
 */
function isResponseLike(value) {
  return (
    typeof value === 'object' &&
    value !== null &&
    Number.isInteger(value.status) &&
    value.status >= 200 &&
    value.status <= 599 &&
    typeof value.headers === 'object' &&
    value.headers !== null
  );
}

/**
 * Answer a bare 500 in place of an answer that could not be written, or end the connection
 * when even that cannot be sent: a status text node:http refused stays in `res.statusMessage`
 * (writeHead sets it before it checks it), so the 500 names its own.
 */
function internalError(res) {
  try {
    res.writeHead(500, 'Internal Server Error', { 'Content-Type': 'text/plain; charset=utf-8' });
    res.end('Internal Server Error\n');
  } catch {
    res.destroy();
  }
}

/** A `Request` for a node:http request (body streamed, `duplex: 'half'`). */
function toRequest(req, signal) {
  return streamedRequest(req, req.method ?? 'GET', nodeRequestUrl(req, req.url), nodeRequestHeaders(req), signal);
}

function streamedRequest(req, method, url, headers, signal) {
  const init = { method, headers, signal };
  if (method !== 'GET' && method !== 'HEAD') {
    init.body = Readable.toWeb(req);
    init.duplex = 'half';
  }
  return new Request(url, init);
}

/**
 * A node:http request as the companion takes it from toNodeHandler (src/wasm/server/incoming.rs):
 * its method, headers and target, its body read once into bytes, and the one `Request` the
 * handler gets, built from them.
 */
class NodeSource {
  #req;
  #url;
  #controller;
  #names = [];

  constructor(req, controller) {
    this.#req = req;
    this.method = req.method ?? 'GET';
    this.headers = nodeRequestHeaders(req, this.#names);
    this.#controller = controller;
    this.#url = nodeRequestUrl(req, req.url);
  }

  /**
   * The names `headers` holds, as sent (any case), one a line: the companion asks `headers`
   * only for a name among them (a lookup of an absent name costs as much as one that finds it).
   */
  get headerNames() {
    return this.#names.join('\n');
  }

  /**
   * Aborted when the client goes away. Made on first use (an AbortSignal costs some 5 µs to
   * make, and a keyed request reads it only while it waits for another holder).
   */
  get signal() {
    return this.#controller.signal;
  }

  /**
   * The path and query the fingerprint covers: the request's original target where a router
   * that mounts the handler under a path stripped it from `req.url` (Express's and Connect's
   * `req.originalUrl`), so two handlers mounted under two paths never share a key's answer;
   * as received where a URL parser would restructure its path (`restructuredTarget`).
   * The handler's `Request` keeps `req.url`, as mounted.
   */
  get target() {
    const original = this.#req.originalUrl;
    const target = typeof original === 'string' ? original : this.#req.url;
    const raw = restructuredTarget(target);
    if (raw !== undefined) return raw;
    const url = target !== this.#req.url ? nodeRequestUrl(this.#req, target) : this.#url;
    return url.pathname + url.search;
  }

  /** The node:http request itself, whose stream state tells whether its body was consumed. */
  get stream() {
    return this.#req;
  }

  /**
   * The body, read whole: null when it is longer than `limit` bytes (the rest is read and
   * dropped), else its bytes (none when its stream already ended: the companion asks only
   * when nothing was read from it).
   */
  readBody(limit) {
    const req = this.#req;
    if (req.readableEnded) return Promise.resolve(new Uint8Array(0));
    if (req.destroyed) {
      return Promise.reject(new DOMException('the client closed the connection before the request body ended', 'AbortError'));
    }
    return new Promise((resolve, reject) => {
      const chunks = [];
      let size = 0;
      const done = () => {
        req.off('data', onData);
        req.off('end', onEnd);
        req.off('error', onError);
        req.off('close', onClose);
      };
      const onData = (chunk) => {
        size += chunk.length;
        if (size > limit) {
          // The rest flows on, dropped (no listener keeps it), as an early answer expects.
          done();
          resolve(null);
          return;
        }
        chunks.push(chunk);
      };
      const onEnd = () => {
        done();
        const bytes = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
        resolve(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length));
      };
      const onError = (error) => {
        done();
        reject(error);
      };
      const onClose = () => {
        done();
        reject(new DOMException('the client closed the connection before the request body ended', 'AbortError'));
      };
      req.on('data', onData);
      req.on('end', onEnd);
      req.on('error', onError);
      req.on('close', onClose);
    });
  }

  /** The request as it came: its body streamed, following the client's signal. */
  request() {
    return streamedRequest(this.#req, this.method, this.#url, this.headers, this.signal);
  }

  /**
   * What toNodeHandler writes for the handler's answer (src/wasm/server/answers.rs), no second
   * Response: `body` is its bytes (null: none), also where a companion's Response keeps them.
   */
  answer(status, statusText, headers, body) {
    const answer = { status, statusText, headers, body, bodyUsed: false };
    if (body !== null) answer[ANSWER_BYTES] = body;
    return answer;
  }

  /** The request with `body` (bytes read before, or undefined: none) and `signal` (null: none). */
  requestWith(body, signal) {
    const init = { method: this.method, headers: this.headers, signal };
    if (body !== undefined) init.body = body;
    return new Request(this.#url, init);
  }
}

/** Where the function `idempotency()` returns keeps its entry for NodeSource (src/wasm/server/mod.rs). */
const NODE_ENTRY = Symbol.for('retry-fetch.nodeEntry');

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
  const source = response.headers instanceof Headers ? response.headers : new Headers(response.headers);
  // Set one by one, then a bare writeHead: a middleware that wraps writeHead and reads its
  // headers argument (on-headers before 1.1, in compression before 1.8.1 and in Next.js's
  // bundled copy, reads an array as pairs) would otherwise scramble them (a 201's Location
  // became an invalid header: a 500 after the handler ran). A name set before (CORS, a
  // request id) is replaced by the answer's, as writeHead's headers would replace it.
  const cookies = source.getSetCookie();
  const replaced = []; // [name, the value set before (a middleware's), or undefined]
  try {
    for (const [name, value] of source) {
      if (name === 'set-cookie') continue;
      replaced.push([name, res.getHeader(name)]);
      res.setHeader(name, value);
    }
    if (cookies.length > 0) res.setHeader('set-cookie', cookies);
    // An answer given before the request body was read to its end (a 413, an early refusal):
    // the rest of the upload is read and dropped (for a short while at most: node-request.js),
    // so the client reads the answer instead of meeting a reset, and its upload is not left
    // stalled.
    if (req.complete === false && !res.destroyed) lingerAfterEarlyAnswer(req, res);
    // HTTP/2 has no status text (Node warns when given one).
    if (typeof response.statusText === 'string' && response.statusText !== '' && !(req.httpVersionMajor >= 2)) {
      res.writeHead(response.status, response.statusText);
    } else {
      res.writeHead(response.status);
    }
  } catch (error) {
    // A value fetch's Headers takes and node:http refuses (a DEL byte), or a status text it
    // refuses (another fetch implementation's Response): none of the answer's headers (a
    // Cache-Control, a Content-Length) may go out on the 500 that answers instead, and a
    // middleware's (CORS) are put back.
    for (const [name, before] of replaced.reverse()) {
      if (before === undefined) res.removeHeader(name);
      else res.setHeader(name, before);
    }
    throw error;
  }
  const body = response.body;
  if (body === null || body === undefined || req.method === 'HEAD') {
    res.end();
    return;
  }
  // A Response of the companion carries its body's bytes (src/wasm/server/answers.rs), and so
  // does the answer its NodeSource entry gives instead of a Response (there `body` is the bytes):
  // written as they are, unless something has started reading the body (then it is read as any
  // is).
  const bytes = response[ANSWER_BYTES];
  if (bytes instanceof Uint8Array && !response.bodyUsed && !body.locked) {
    if (!res.destroyed) res.end(bytes);
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
    const entry = handler[NODE_ENTRY];
    response = await (typeof entry === 'function'
      ? entry(new NodeSource(req, controller))
      : handler(toRequest(req, controller.signal)));
    if (!isResponseLike(response)) {
      throw new TypeError(`toNodeHandler: the handler must resolve with a Response; got ${describe(response)}`);
    }
  } catch (error) {
    if (!controller.signal.aborted) onError(error);
    if (!res.headersSent && !res.destroyed) internalError(res);
    return;
  }
  try {
    await writeResponse(response, req, res);
  } catch (error) {
    if (!controller.signal.aborted) onError(error);
    if (!res.headersSent && !res.destroyed) {
      internalError(res);
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
  if (options) checkOptionNames('toNodeHandler', options, ['onError']);
  const report = options?.onError ?? ((error) => console.error('retry-fetch/server: the handler failed:', error));
  if (typeof report !== 'function') throw optionError('toNodeHandler', 'onError', report, 'a function');
  const onError = (error) => {
    try {
      // An async onError that rejects must not become an unhandled rejection either.
      const result = report(error);
      if (typeof result?.then === 'function') result.then(undefined, () => {});
    } catch {
      // a throwing onError must not become an unhandled rejection
    }
  };
  // Resolves when the response is written (or abandoned); never rejects.
  return function nodeHandler(req, res) {
    return serve(handler, req, res, onError).catch(onError);
  };
}
