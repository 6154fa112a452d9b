// Shared by the framework adapters (express.js, fastify.js, hono.js): how a framework's route
// runs as the companion's handler. Nothing here decides anything about keys, fingerprints or
// answers: that is all the companion's (`idempotency()` of server.js, driven by the wasm).
// The adapters only translate between their framework and a fetch Request/Response.
//
// The "deferred handler": per request the adapter builds a fetch Request and calls the
// companion with it. The companion's handler, made once per middleware, does not answer by
// itself: it hands the adapter the `ctx` (the key is held now) and returns a promise that the
// adapter settles with the route's answer once the framework's route has run. If the
// companion answers first (a replay, 400, 409, 413, 422, 503...), the route does not run.
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { idempotency } from './server.js';
import { invalidOptionError } from './server-wasm.js';

/** The property of `route` (and so of `ctx`) that carries one request's state to the handler. */
const STATE = Symbol('retry-fetch adapter state');
const HELD = Symbol('held');

/** `Promise.withResolvers()` (Node 22+), for Node 20. */
function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * The companion for one middleware instance, with `options` as `idempotency()` takes them
 * (validated there: a bad option is its TypeError). Returns `start(request)`, which runs one
 * request through it and returns a `Run`:
 *
 * - `await run.first()`: `null` once the key is held (or the request has none) and the route
 *   must run, with `run.ctx` and `run.request` (the handler's request: the body bytes the
 *   companion read, and the companion's own signal) set; or the companion's own Response
 *   when it answered without running the route;
 * - `run.answer(response)` / `run.fail(error)`: the route's answer, or its error (the route
 *   threw); the first call counts; the headers of `before` (`[name, value]` pairs set on the
 *   framework's response before the adapter ran) that the route left as they were are not part
 *   of its answer (`withoutHeadersBefore`);
 * - `run.passThrough`: after `first()` gave null, whether the companion lets the request
 *   through (no key, or a key on a method it ignores: `ctx.key` is null): it neither stores nor
 *   replays the answer, so the route answers through the framework as without the adapter;
 * - `await run.result`: the companion's final Response (normally the route's answer; a
 *   problem when the route failed or the commit did).
 */
export function deferredCompanion(options) {
  if (options?.acceptAfterMs !== undefined) {
    // The route answers through the framework's response object, which a 202 sent ahead of it
    // would leave with nowhere to go: long work under a framework uses idempotency(handler).
    throw invalidOptionError('idempotency', 'acceptAfterMs', options.acceptAfterMs,
      'undefined: the framework adapters wait for the route (use idempotency(handler), e.g. with toNodeHandler, for 202 Accepted)');
  }
  const companion = idempotency((request, ctx) => {
    const state = ctx[STATE];
    if (state === undefined) {
      throw new TypeError('retry-fetch adapter: the companion was called without the adapter\'s state');
    }
    // The route sees ctx without the adapter's own property.
    Reflect.deleteProperty(ctx, STATE);
    state.ctx = ctx;
    state.request = request;
    state.held.resolve(HELD);
    return state.answer.promise;
  }, options);

  return function start(request, before = []) {
    const state = { ctx: undefined, request: undefined, held: deferred(), answer: deferred(), settled: false };
    // The companion resolves with a Response; should it ever reject (a bug, or a handler of
    // the user's such as `identity` that throws), the adapter passes the error on.
    const result = Promise.resolve().then(() => companion(request, { [STATE]: state }));
    result.catch(() => {}); // observed by first() or by the adapter's `await run.result`
    return {
      get ctx() {
        return state.ctx;
      },
      get request() {
        return state.request;
      },
      async first() {
        const winner = await Promise.race([state.held.promise, result]);
        return winner === HELD ? null : winner;
      },
      answer(response) {
        if (state.settled) return;
        state.settled = true;
        const keyed = state.ctx !== undefined && state.ctx.key !== null;
        state.answer.resolve(keyed ? withoutHeadersBefore(response, before) : response);
      },
      fail(error) {
        if (state.settled) return;
        state.settled = true;
        state.answer.reject(error);
      },
      get settled() {
        return state.settled;
      },
      get passThrough() {
        return state.ctx !== undefined && state.ctx.key === null;
      },
      result,
    };
  };
}

/** Marks a socket whose `destroy` is watched by `watchGiveUp`. */
const WATCHED = Symbol('retry-fetch watched socket');
/** On a socket: the give-up of the response whose `headersSent` was read as true this tick. */
const ASKED = Symbol('retry-fetch headersSent read');
/** The socket errors that say the client closed the connection (a reset, a broken pipe). */
const PEER_ERRORS = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED']);

/**
 * Watches the node:http response `res` of `req` for the route giving its answer up before
 * `answered()`: `res.destroy()` (the route's, or a `pipeline(source, res)` whose source
 * failed), or the connection destroyed right after `headersSent()` told that the head was
 * written (what Express's error handler does for a route that throws after `writeHead`: it
 * cannot answer any more); or, once `aroundFramework()` (the route answers around the
 * framework, unseen), any close. `giveUp()` is called at the close, or at the give-up when the
 * connection had closed before (the client left, then the route gave up). Nothing else that
 * closes the connection (the client going away, a timeout, the server shutting down, another
 * request on the same connection) counts: the route goes on, and its answer is stored.
 * (Knowing which code destroyed a connection would take an AsyncLocalStorage, which in Node 20
 * makes every promise of the process about three times slower once it is used.)
 */
export function watchGiveUp(req, res, answered, giveUp, aroundFramework = () => false) {
  // Closed already: the client left while a middleware before the adapter ran.
  let closed = res.closed === true || res.destroyed === true;
  let givenUp = false;
  const gaveUp = () => {
    if (answered() || givenUp) return;
    givenUp = true;
    if (closed) giveUp();
  };
  const destroy = res.destroy;
  res.destroy = function () {
    gaveUp();
    return destroy.apply(this, arguments);
  };
  // HTTP/2's compat `req.socket` is the whole session's: a stream's close says nothing of it.
  const socket = req.httpVersionMajor === 2 ? undefined : req.socket;
  if (socket && !socket[WATCHED]) {
    socket[WATCHED] = true;
    // A socket's inactivity timeout destroys it, maybe right after a `headersSent` read.
    let timingOut = false;
    socket.prependListener('timeout', () => {
      timingOut = true;
      process.nextTick(() => (timingOut = false));
    });
    const socketDestroy = socket.destroy;
    socket.destroy = function (error) {
      const asked = this[ASKED];
      if (asked !== undefined && !timingOut && !PEER_ERRORS.has(error?.code)) asked();
      return socketDestroy.apply(this, arguments);
    };
  }
  res.once('close', () => {
    closed = true;
    if (!answered() && (givenUp || aroundFramework())) giveUp();
  });
  return {
    /** `res.headersSent` was read as true: a destroy of the connection in the same tick gives up. */
    headersSentRead() {
      if (socket === undefined) return;
      socket[ASKED] = gaveUp;
      queueMicrotask(() => {
        if (socket[ASKED] === gaveUp) socket[ASKED] = undefined;
      });
    },
  };
}

/** The statuses whose Response has no body (the Fetch API refuses one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A fetch Response of what a route wrote: `status`, `statusText` (or undefined), `headers` as
 * `[name, value]` pairs (a value a string, number or array of them), `body` a Uint8Array.
 */
export function toResponse({ status, statusText, headers, body }) {
  const h = new Headers();
  for (const [name, value] of headers) {
    for (const v of Array.isArray(value) ? value : [value]) h.append(name, String(v));
  }
  const init = { status, headers: h };
  if (typeof statusText === 'string' && statusText !== '') init.statusText = statusText;
  return new Response(NULL_BODY.has(status) || body === null || body.byteLength === 0 ? null : body, init);
}

/**
 * `[name, value]` pairs of a Response's headers: one pair per name, a string, or an array for
 * several `Set-Cookie`s.
 */
export function headerPairs(response) {
  const pairs = [];
  const cookies = response.headers.getSetCookie?.() ?? [];
  if (cookies.length > 0) pairs.push(['set-cookie', cookies]);
  for (const [name, value] of response.headers) {
    if (name !== 'set-cookie') pairs.push([name, value]);
  }
  return pairs;
}

/**
 * `response` without the headers an earlier middleware set on this request (`before`) that the
 * route left as they were: the companion stores the route's own answer, and a replay gets the
 * ones its own request's middleware set (a CORS `Access-Control-Allow-Origin` echoing that
 * request's `Origin`, a request id), as every answer does (`finalHeaders`).
 */
export function withoutHeadersBefore(response, before) {
  const drop = [];
  for (const [name, value] of before) {
    const lower = name.toLowerCase();
    if (lower === 'set-cookie') continue; // never stored
    const given = Array.isArray(value) ? value.map(String).join(', ') : String(value);
    if (response.headers.get(lower) === given) drop.push(lower);
  }
  if (drop.length === 0) return response;
  const headers = new Headers(response.headers);
  for (const name of drop) headers.delete(name);
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

/**
 * The headers to send with the companion's final `response`: the ones set on this request
 * before the adapter ran (`before`: `[name, value]` pairs, e.g. CORS headers or a session
 * cookie of an earlier middleware, which a replay or a problem answer must keep), each one
 * replaced by the response's own header of that name.
 */
export function finalHeaders(before, response) {
  const own = headerPairs(response);
  const names = new Set(own.map(([name]) => name));
  return [...before.filter(([name]) => !names.has(name.toLowerCase())), ...own];
}

/** The whole body of `response` as a Uint8Array (empty for none). */
export async function bodyBytes(response) {
  if (response.body === null) return new Uint8Array(0);
  return new Uint8Array(await response.arrayBuffer());
}

/** The content codings a compression middleware uses, and how to undo each. */
const DECODERS = {
  gzip: promisify(zlib.gunzip),
  'x-gzip': promisify(zlib.gunzip),
  deflate: promisify(zlib.inflate),
  br: promisify(zlib.brotliDecompress),
};

/**
 * The route's answer without the content coding a compression middleware mounted after the
 * adapter gave it for this request's Accept-Encoding: a replay goes to clients that may not
 * accept it (one key, one answer), so the answer is stored and sent as identity bytes, without
 * Content-Encoding and Content-Length. A coding not in DECODERS (or several) is kept as it is.
 */
export async function withoutEncoding(response) {
  const decode = DECODERS[response.headers.get('content-encoding')?.trim().toLowerCase()];
  if (decode === undefined || response.body === null) return response;
  const bytes = await decode(await bodyBytes(response));
  const headers = new Headers(response.headers);
  headers.delete('content-encoding');
  headers.delete('content-length');
  return new Response(bytes.byteLength === 0 ? null : bytes, { status: response.status, statusText: response.statusText, headers });
}

/** The bytes of `chunk` as written to a node:http response (a string in `encoding`, or bytes). */
export function chunkBytes(chunk, encoding) {
  if (chunk === undefined || chunk === null) return null;
  if (typeof chunk === 'string') return Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8');
  if (chunk instanceof Uint8Array) return chunk;
  if (ArrayBuffer.isView(chunk)) return new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  if (chunk instanceof ArrayBuffer) return new Uint8Array(chunk);
  throw new TypeError(`retry-fetch adapter: a response chunk must be a string or bytes; got ${typeof chunk}`);
}

/** Is `contentType` a multipart one (an upload: `multipart/form-data`...)? */
function isMultipart(contentType) {
  return typeof contentType === 'string' && /^\s*multipart\//i.test(contentType);
}

/**
 * Did a body parser leave only part of a multipart body? Upload parsers (multer,
 * @fastify/multipart) keep the files apart from the fields they leave as the body, so only
 * bytes or text (a raw parser's) stand for such a body whole.
 */
export function partialMultipart(contentType, body) {
  return isMultipart(contentType) && typeof body !== 'string' && !(body instanceof Uint8Array) && !(body instanceof ArrayBuffer);
}

/**
 * A fetch Request whose body reads as already taken (its stream locked): what the adapter
 * gives the companion for a body it cannot fingerprint whole, so that a keyed request gets the
 * companion's `idempotency-body-already-read` answer instead of another upload passing for a
 * repeat.
 */
export function takenBodyRequest(url, init) {
  const request = new Request(url, { ...init, body: new Uint8Array(0) });
  request.body.getReader();
  return request;
}

export { declaresBody, lingerAfterEarlyAnswer, nodeRequestHeaders, nodeRequestUrl, rereadableBody, withTarget } from './node-request.js';

/** Does this method carry a body in a fetch Request? The companion's rule, from the wasm. */
export { methodCanHaveBody as methodHasBody } from './server-wasm.js';

/**
 * Set on a request (Express, Connect) or context (Hono) whose key a companion holds: an
 * adapter mounted again on its way (app-wide and on a route) passes it on, as body parsers
 * pass on a body already parsed (the second would wait for the first's lock, held by this very
 * request, and answer 409).
 */
export const KEY_HELD = Symbol.for('retry-fetch.idempotency.held');
