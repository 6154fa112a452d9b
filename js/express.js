// `retry-fetch/express`: the idempotency companion as Express 5 (and Connect) middleware.
// Types and documentation: express.d.ts. A thin layer over `idempotency()` of server.js: it
// builds a fetch Request of the node:http request, runs the route as the companion's handler
// (adapter-support.js) and writes the companion's Response back. Only node:http's own API is
// used on `req` and `res` (no Express helpers), so plain Connect works too.
import { canonicalBody, fingerprintsJson } from './server-wasm.js';
import {
  deferredCompanion,
  toResponse,
  finalHeaders,
  bodyBytes,
  withoutEncoding,
  chunkBytes,
  nodeRequestHeaders,
  nodeRequestUrl,
  lingerAfterEarlyAnswer,
  methodHasBody,
  declaresBody,
  rereadableBody,
  partialMultipart,
  takenBodyRequest,
  watchGiveUp,
  withTarget,
  KEY_HELD,
} from './adapter-support.js';

/** Was the request's body read by a body parser before this middleware? */
function parsed(req) {
  // body-parser 1 sets `_body`; body-parser 2 (Express 5) reads the stream to its end.
  return req._body === true || req.readableEnded === true || (req.complete === true && req.readable === false);
}

/**
 * The JSON body's bytes a parser kept (`req.rawBody`, from `express.json()`'s `verify`), when
 * they are this request's: a JSON type (a form keeps its parsed value's fingerprint, as
 * documented), not empty, and as long as the `Content-Length` sent (unless a
 * `Content-Encoding` was decoded). Anything else (a placeholder, another purpose's value) is
 * not trusted: `undefined`.
 */
function keptJsonBytes(req) {
  const raw = req.rawBody;
  const bytes = typeof raw === 'string' ? Buffer.from(raw) : raw instanceof Uint8Array ? raw : raw instanceof ArrayBuffer ? new Uint8Array(raw) : undefined;
  if (!bytes?.byteLength || !fingerprintsJson(String(req.headers['content-type'] ?? ''))) return undefined;
  const declared = req.headers['content-length'];
  if (declared !== undefined && !req.headers['content-encoding'] && Number(declared) !== bytes.byteLength) return undefined;
  return bytes;
}

/** The fetch Request the companion gets for `req`; `streamed` when its body is `req` itself. */
function fetchRequest(req) {
  const { request, streamed } = requestOf(req);
  // The fingerprint covers the target as received, as the router reads it.
  return { request: withTarget(request, req.originalUrl ?? req.url), streamed };
}

/** {@link fetchRequest}'s `Request`, with the target as a URL parser makes it. */
function requestOf(req) {
  const method = req.method ?? 'GET';
  const init = { method, headers: nodeRequestHeaders(req) };
  const url = nodeRequestUrl(req, req.originalUrl ?? req.url);
  let streamed = false;
  if (methodHasBody(method)) {
    if (parsed(req)) {
      // An upload parser's fields without its files, or a body read by a middleware that left
      // nothing in `req.body` (one that keeps the raw bytes for a signature check): nothing to
      // fingerprint, the companion's 500 (read as no bytes, every payload under a key would be
      // the same request).
      const taken =
        req.body === undefined
          ? declaresBody(req) && Number(req.headers['content-length']) !== 0
          : partialMultipart(req.headers['content-type'], req.body);
      if (taken) return { request: takenBodyRequest(url, init), streamed };
      // A parser consumed the bytes: the fingerprint is of the bytes it kept for a signature
      // check (`req.rawBody`, from its `verify` option), as received, as every instance
      // reading the bytes takes them (a number past a double's precision, which a parsed
      // value has lost); else of what it made of them.
      init.body = canonicalBody(keptJsonBytes(req) ?? req.body);
    } else if (declaresBody(req)) {
      // Read by the companion, at most maxBodyBytes (a longer one is its 413, and the rest of
      // the upload is read and dropped), and left in `req` for what reads it after this
      // middleware: an upload parser (multer), a route that reads the stream, a proxy.
      init.body = rereadableBody(req);
      init.duplex = 'half';
      streamed = true;
    }
  }
  return { request: new Request(url, init), streamed };
}

/** The headers of `res` as `[name, value]` pairs. */
function currentHeaders(res) {
  return Object.entries(res.getHeaders());
}

/**
 * Writes the companion's `response` to `res` (with the headers set before the adapter ran,
 * `before`), through `writeHead`/`end` as they were before the adapter wrapped them.
 */
async function send(req, res, response, before, { writeHead, end }, early = false) {
  const body = await bodyBytes(response);
  if (res.destroyed || res.writableEnded) return;
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  for (const [name, value] of finalHeaders(before, response)) res.setHeader(name, value);
  // An answer given before the request body was read to its end (a 413, an early refusal):
  // the rest of the upload is read and dropped, for a short while at most (node-request.js).
  if (req.complete === false) lingerAfterEarlyAnswer(req, res, early);
  res.statusCode = response.status;
  // HTTP/2 has no status text (Node warns when given one).
  if (typeof response.statusText === 'string' && response.statusText !== '' && !(req.httpVersionMajor >= 2)) {
    res.statusMessage = response.statusText;
    writeHead.call(res, response.status, response.statusText);
  } else {
    writeHead.call(res, response.status);
  }
  if (req.method === 'HEAD' || body.byteLength === 0) end.call(res);
  else end.call(res, Buffer.from(body.buffer, body.byteOffset, body.byteLength));
}

const WRAPPED = ['writeHead', 'write', 'end', 'flushHeaders', 'setHeader', 'appendHeader', 'removeHeader'];

/**
 * Buffers what the route writes to `res` (status, headers, body) instead of sending it, and
 * calls `done(response)` with it once the route ends the response (`headersSentRead()` is told
 * when `res.headersSent` is read as true). `release()` puts `res`'s methods back; `originals`
 * are the ones to send the final answer through.
 */
function capture(res, done, headersSentRead) {
  const originals = {};
  const own = {};
  for (const name of WRAPPED) {
    originals[name] = res[name];
    own[name] = Object.hasOwn(res, name);
  }
  const chunks = [];
  let head = null; // { status, statusText } once writeHead ran
  let ended = false;
  let released = false;
  // Released before the route ended (the companion answered without its answer: its time
  // limit ran out): whatever it writes later is dropped, the final answer is already out.
  let abandoned = false;
  const wrappers = {
    writeHead(statusCode, reason, headers) {
      if (released && !abandoned) return originals.writeHead.apply(this, arguments);
      if (abandoned) return this;
      if (ended || head !== null) return this;
      let statusText = typeof reason === 'string' ? reason : undefined;
      const obj = typeof reason === 'string' ? headers : reason;
      // As node:http merges them: the headers passed here win over setHeader's.
      if (Array.isArray(obj)) {
        for (let i = 0; i + 1 < obj.length; i += 2) res.removeHeader(obj[i]);
        for (let i = 0; i + 1 < obj.length; i += 2) res.appendHeader(obj[i], obj[i + 1]);
      } else if (obj && typeof obj === 'object') {
        for (const name of Object.keys(obj)) res.setHeader(name, obj[name]);
      }
      res.statusCode = statusCode;
      // HTTP/2 has none (its response warns when it is read or set).
      const h2 = res.stream !== undefined;
      if (statusText !== undefined && !h2) res.statusMessage = statusText;
      head = { status: statusCode, statusText: h2 ? undefined : res.statusMessage };
      return this;
    },
    write(chunk, encoding, callback) {
      if (released && !abandoned) return originals.write.apply(this, arguments);
      if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
      if (!ended && !abandoned) {
        if (head === null) res.writeHead(res.statusCode);
        const bytes = chunkBytes(chunk, encoding);
        if (bytes !== null && bytes.byteLength > 0) chunks.push(Buffer.from(bytes));
      }
      if (typeof callback === 'function') process.nextTick(callback);
      return true;
    },
    end(chunk, encoding, callback) {
      if (released && !abandoned) return originals.end.apply(this, arguments);
      if (typeof chunk === 'function') [callback, chunk, encoding] = [chunk, undefined, undefined];
      else if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
      if (abandoned) {
        if (typeof callback === 'function') process.nextTick(callback);
        return this;
      }
      if (!ended) {
        if (chunk !== undefined && chunk !== null) wrappers.write.call(this, chunk, encoding);
        else if (head === null) res.writeHead(res.statusCode);
        ended = true;
        let response;
        try {
          response = toResponse({
            status: head.status,
            statusText: head.statusText,
            headers: currentHeaders(res),
            body: Buffer.concat(chunks),
          });
        } catch (error) {
          done(null, error); // not a Response (a status the Fetch API refuses): the route failed
          return this;
        }
        done(response);
      }
      if (typeof callback === 'function') res.once('finish', callback);
      return this;
    },
    flushHeaders() {
      if (released && !abandoned) return originals.flushHeaders.apply(this, arguments);
      // nothing is sent before the companion has the whole answer
    },
    // Headers: as they are, except that an abandoned route's late ones are dropped once the
    // final answer is out (node:http would throw ERR_HTTP_HEADERS_SENT into the route).
    setHeader() {
      if (abandoned && res._header) return this;
      return originals.setHeader.apply(this, arguments);
    },
    appendHeader() {
      if (abandoned && res._header) return this;
      return originals.appendHeader.apply(this, arguments);
    },
    removeHeader() {
      if (abandoned && res._header) return undefined;
      return originals.removeHeader.apply(this, arguments);
    },
  };
  for (const name of WRAPPED) res[name] = wrappers[name];
  // What the route and later middleware see: the headers are "sent" once it wrote them.
  Object.defineProperty(res, 'headersSent', {
    configurable: true,
    get() {
      if (released) return Boolean(res._header);
      if (head !== null) headersSentRead();
      return head !== null;
    },
  });
  return {
    originals,
    /** Did the route end its answer (`end()`)? */
    get ended() {
      return ended;
    },
    release() {
      if (released) return;
      released = true;
      delete res.headersSent;
      if (!ended) {
        abandoned = true; // the wrappers stay, and drop what the route still writes
        return;
      }
      for (const name of WRAPPED) {
        if (res[name] !== wrappers[name]) continue; // wrapped again by a later middleware: it calls ours, which passes through
        if (own[name]) res[name] = originals[name];
        else delete res[name];
      }
    },
  };
}

async function handle(start, req, res, next) {
  // A request whose key a companion holds, met again (app-wide and on a route): passed on.
  if (req[KEY_HELD] === true) {
    next();
    return;
  }
  // Writes to a socket the client has closed fail; that is not the server's error.
  res.on('error', () => {});
  const before = currentHeaders(res);
  const sendThrough = { writeHead: res.writeHead, end: res.end };
  const { request, streamed } = fetchRequest(req);
  const run = start(request, before);
  let early;
  try {
    early = await run.first();
  } catch (error) {
    next(error);
    return;
  }
  if (early !== null) {
    await send(req, res, early, before, sendThrough, true); // the route did not run
    return;
  }
  try {
    if (streamed) {
      // The bytes the companion read are req.body, and still in req's stream: a body parser
      // after this middleware (an upload parser too) reads and parses them from there, as it
      // would without the adapter, and a route may read the stream itself.
      req.body = Buffer.from(await run.request.arrayBuffer());
    }
    req.idempotency = run.ctx;
  } catch (error) {
    run.fail(error);
    await send(req, res, await run.result, before, sendThrough);
    return;
  }
  if (run.passThrough) {
    // Nothing of its answer is kept: the route writes to res as without the adapter (a stream
    // flows as it is written). The companion's call is settled with a stand-in.
    run.answer(new Response(null));
    next();
    return;
  }
  req[KEY_HELD] = true;
  // A route that gives its answer up has failed after it started: the companion's rule for
  // a throw (its 500, stored).
  let captured;
  const watch = watchGiveUp(req, res, () => captured.ended, () =>
    run.fail(new Error('retry-fetch/express: the route gave its answer up (the response or its connection destroyed)')));
  captured = capture(res, (response, error) => {
    if (response) withoutEncoding(response).then(run.answer, run.fail);
    else run.fail(error);
  }, watch.headersSentRead);
  try {
    next();
  } catch (error) {
    run.fail(error); // Connect calls the route synchronously and catches; Express 5 too
  }
  let final;
  try {
    final = await run.result;
  } catch (error) {
    // The companion failed outside its rules (it answers every rule with a Response): the
    // route ran, so `next(error)` cannot be called again; answered as toNodeHandler would.
    console.error('retry-fetch/express: the companion failed:', error);
    final = new Response('Internal Server Error\n', { status: 500, headers: { 'Content-Type': 'text/plain; charset=utf-8' } });
  } finally {
    captured.release();
  }
  await send(req, res, final, before, captured.originals);
}

/**
 * Express 5 / Connect middleware: `app.use(idempotency(options))`, or per route
 * `app.post('/pay', express.json(), idempotency(options), handler)`. `options` are those of
 * `idempotency()` (server.d.ts).
 */
export function idempotency(options) {
  const start = deferredCompanion(options);
  return function idempotencyMiddleware(req, res, next) {
    handle(start, req, res, next).catch((error) => {
      if (!res.headersSent && !res.destroyed) next(error);
      else res.destroy();
    });
  };
}
