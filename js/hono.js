// `retry-fetch/hono`: the idempotency companion as Hono 4 middleware. Types and
// documentation: hono.d.ts. A thin layer over `idempotency()` of server.js: it builds a fetch
// Request of `c.req`, runs the rest of the chain (`next()`) as the companion's handler
// (adapter-support.js) and sets `c.res` to the companion's Response.
import { deferredCompanion, finalHeaders, lingerAfterEarlyAnswer, methodHasBody, withoutEncoding, KEY_HELD } from './adapter-support.js';

/** Whether a middleware or validator before this one read the body (Hono keeps what it read). */
function bodyRead(c) {
  const cache = c.req.bodyCache;
  return (cache !== undefined && cache !== null && Object.keys(cache).length > 0) || c.req.raw.bodyUsed === true;
}

/**
 * Stable bytes of a form a middleware before this one read with `c.req.formData()`: Hono
 * keeps only the FormData, and gives its bytes again encoded with a fresh random boundary,
 * which no retry would match. Each entry is a JSON line `[name, value]`, a file's
 * `[name, { file, type, size }]` followed by its bytes (`size` says where they end).
 */
function formBytes(form) {
  const parts = [];
  for (const [name, value] of form) {
    if (typeof value === 'string') parts.push(JSON.stringify([name, value]), '\n');
    else parts.push(JSON.stringify([name, { file: value.name, type: value.type, size: value.size }]), '\n', value);
  }
  return new Blob(parts).arrayBuffer();
}

/** `response` with the headers of `before` it does not set itself (see finalHeaders). */
function withHeaders(response, before) {
  const headers = new Headers();
  for (const [name, value] of finalHeaders(before, response)) {
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

/**
 * The headers set on `c` before this middleware ran (by one before it: CORS, a session...).
 * Reading `c.res` makes Hono create its response, whose headers it would then copy over the
 * Response the route returns (its `Set-Cookie` replaced): the response is dropped again, as if
 * never read (the headers set with `c.header()` stay for the route's `c.json()` and the rest;
 * every answer gets these through `finalHeaders`).
 */
function headersBefore(c) {
  const pairs = [];
  const finalized = c.finalized;
  const headers = c.res.headers;
  const cookies = headers.getSetCookie?.() ?? [];
  if (cookies.length > 0) pairs.push(['set-cookie', cookies]);
  for (const [name, value] of headers) if (name !== 'set-cookie') pairs.push([name, value]);
  if (!finalized) {
    c.res = undefined;
    c.finalized = false;
  }
  return pairs;
}

/** `headers` without the ones that describe a body's encoding (a new one sets its own). */
function withoutBodyType(headers) {
  const copy = new Headers(headers);
  copy.delete('content-type');
  copy.delete('content-length');
  return copy;
}

/** `form`, the FormData Hono kept, as a body: URL-encoded again if it came so (and holds no file), else multipart. */
function formBody(form, raw) {
  const urlEncoded = /^\s*application\/x-www-form-urlencoded/i.test(raw.headers.get('content-type') ?? '');
  return urlEncoded && [...form.values()].every((v) => typeof v === 'string') ? new URLSearchParams(form) : form;
}

/**
 * An answer before the route ran (a 413) with the upload not read to its end, on
 * `@hono/node-server` (`c.env` has the node:http request and response): the rest is read and
 * dropped once the answer is out, as toNodeHandler does. The body stream the companion gave up
 * had started a reader of its own on the request, which pauses it at each chunk: left so, the
 * upload stalls and the server resets the connection, failing the client's next request on it.
 */
function dropUpload(c) {
  const incoming = c.env?.incoming;
  const outgoing = c.env?.outgoing;
  if (incoming?.readableEnded === false && typeof outgoing?.once === 'function') lingerAfterEarlyAnswer(incoming, outgoing, true);
}

/** Replaces `c.res` by `response` as it is (Hono would merge the old response's headers into it). */
function replaceResponse(c, response) {
  c.res = undefined;
  c.res = response;
}

/**
 * Hono middleware: `app.use('/pay', idempotency(options))` or per route
 * `app.post('/pay', validator, idempotency(options), handler)`. `options` are those of
 * `idempotency()` (server.d.ts).
 */
export function idempotency(options) {
  const start = deferredCompanion(options);
  return async function idempotencyMiddleware(c, next) {
    // A request whose key a companion holds, met again (app-wide and on a route): passed on
    // (the second would wait for the first's lock, held by this very request, and answer 409).
    if (c[KEY_HELD] === true) return next();
    const raw = c.req.raw;
    const method = raw.method;
    const init = { method, headers: raw.headers };
    let streamed = false;
    let form = null; // the FormData, when Hono kept only that
    if (methodHasBody(method)) {
      if (bodyRead(c)) {
        // A validator read it: Hono gives its bytes again (JSON it parsed as its text), or,
        // when it kept only the FormData, a stable form of its entries.
        const cache = c.req.bodyCache;
        if (cache.arrayBuffer === undefined && cache.formData !== undefined) form = await cache.formData;
        init.body = new Uint8Array(form !== null ? await formBytes(form) : await c.req.arrayBuffer());
      } else if (raw.body !== null) {
        // Read by the companion, at most maxBodyBytes (a longer one is its 413).
        init.body = raw.body;
        init.duplex = 'half';
        streamed = true;
      }
    }
    const before = headersBefore(c);
    const run = start(new Request(raw.url, init), before);
    const early = await run.first();
    if (early !== null) {
      if (streamed) dropUpload(c);
      replaceResponse(c, withHeaders(early, before));
      return;
    }
    try {
      const request = run.request;
      if (form !== null) {
        // Hono kept only the FormData (the fingerprint's stable form is not a body): the
        // route's raw request carries the form encoded anew, with that encoding's Content-Type,
        // as Hono's cloneRawRequest gives it.
        c.req.raw = new Request(request, { headers: withoutBodyType(request.headers), body: formBody(form, raw) });
      } else if (methodHasBody(method) && (streamed || init.body !== undefined)) {
        // The route reads the bytes the companion read, through c.req (json(), text()...) or
        // c.req.raw: a Request over them with the companion's signal (not aborted when the
        // client goes away).
        const bytes = await request.arrayBuffer();
        if (streamed) c.req.bodyCache.arrayBuffer = Promise.resolve(bytes);
        c.req.raw = new Request(request, { body: bytes });
      } else {
        c.req.raw = request;
      }
      c.set('idempotency', run.ctx);
      if (!run.passThrough) c[KEY_HELD] = true;
    } catch (error) {
      run.fail(error);
      replaceResponse(c, withHeaders(await run.result, before));
      return;
    }
    let unanswered = false;
    next().then(
      // For a route that threw, what app.onError answered, as Express's adapter gets it. An
      // answer the companion lets through is left as it is (a stream, its coding). A route
      // that gave no Response (Hono: "Context is not finalized") failed: not its default 200.
      () => {
        if (!c.finalized) {
          unanswered = true;
          if (run.passThrough) return run.answer(new Response(null));
          return run.fail(new Error('retry-fetch/hono: the route returned no Response (Hono: the context is not finalized)'));
        }
        return run.passThrough ? run.answer(c.res) : withoutEncoding(c.res).then(run.answer, run.fail);
      },
      (error) => run.fail(error), // not an Error (Hono's onError only takes those): thrown through
    );
    // The route's answer as the companion gives it back, or the companion's own when it gives
    // up on the route first (one that ignores its handlerTimeoutMs abort): sent at once. A
    // request let through whose route gave no Response is left to Hono, as without the adapter.
    const final = await run.result;
    if (!(unanswered && run.passThrough)) replaceResponse(c, withHeaders(final, before));
  };
}
