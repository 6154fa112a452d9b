// `retry-fetch/fastify`: the idempotency companion as a Fastify 5 plugin. Types and
// documentation: fastify.d.ts. A thin layer over `idempotency()` of server.js: hooks build a
// fetch Request of the request (its body as Fastify parsed it), run the route as the
// companion's handler (adapter-support.js) and send the companion's Response.
//
//   preHandler  start the companion; it answers (replay, 400, 409, 413, 422, 503...) and the
//               route does not run, or it holds the key: `request.idempotency` is its ctx;
//   onSend      the route's answer (status, headers, payload; for a route that threw, what
//               the error handler answered, as Express's adapter gets it) goes to the
//               companion, and what the companion answers (normally the same, stored) is what
//               is sent.
import { canonicalBody } from './server-wasm.js';
import {
  deferredCompanion,
  toResponse,
  finalHeaders,
  bodyBytes,
  chunkBytes,
  nodeRequestHeaders,
  nodeRequestUrl,
  methodHasBody,
  declaresBody,
  rereadableBody,
  partialMultipart,
  takenBodyRequest,
  watchGiveUp,
  withTarget,
} from './adapter-support.js';

/** This request's run through the companion. */
const RUN = Symbol('retry-fetch idempotency run');

/**
 * In a route's config: the registration of the plugin that handles the route, the innermost
 * of those whose context holds it (each registration's onRoute marks the routes declared after
 * it; a child context's runs after its parents').
 */
const OWNER = Symbol('retry-fetch idempotency registration');

/** Fastify's own register options, not the companion's. */
const REGISTER_OPTIONS = ['prefix', 'logLevel', 'logSerializers'];

/** The fetch Request the companion gets: Fastify parsed the body, or left it unread. */
function fetchRequest(request) {
  // The fingerprint covers the target as received, as the router reads it.
  return withTarget(requestOf(request), request.raw.url);
}

/** {@link fetchRequest}'s `Request`, with the target as a URL parser makes it. */
function requestOf(request) {
  const raw = request.raw;
  const method = raw.method ?? 'GET';
  const url = nodeRequestUrl(raw, raw.url);
  const init = { method, headers: nodeRequestHeaders(raw) };
  if (methodHasBody(method)) {
    if (request.rawBody !== undefined) {
      // The bytes as received, kept by a raw-body plugin.
      init.body = canonicalBody(request.rawBody);
    } else if (request.body === undefined && declaresBody(raw)) {
      // Not parsed (a parser that leaves the stream to the route, as @fastify/multipart
      // does): read by the companion and left in the stream for the route; read by
      // something else already, it cannot be fingerprinted (the companion's 500).
      if (raw.readableDidRead || raw.readableEnded) return takenBodyRequest(url, init);
      init.body = rereadableBody(raw);
      init.duplex = 'half';
    } else if (partialMultipart(raw.headers['content-type'], request.body)) {
      // An upload parser's fields without its files: no fingerprint, the companion's 500.
      return takenBodyRequest(url, init);
    } else {
      init.body = canonicalBody(request.body);
    }
  }
  return new Request(url, init);
}

/** Is `payload` a fetch Response (`reply.send(response)`)? */
function isResponse(payload) {
  return typeof payload === 'object' && payload !== null && Object.prototype.toString.call(payload) === '[object Response]';
}

/** The bytes of an onSend payload: a string, bytes, a (web or node) stream, or nothing. */
async function payloadBytes(payload) {
  if (payload === undefined || payload === null) return new Uint8Array(0);
  if (typeof payload === 'string' || payload instanceof Uint8Array) return chunkBytes(payload);
  if (isResponse(payload)) return bodyBytes(payload);
  if (typeof payload[Symbol.asyncIterator] === 'function') {
    const chunks = [];
    for await (const chunk of payload) chunks.push(Buffer.from(chunkBytes(chunk)));
    return Buffer.concat(chunks);
  }
  return chunkBytes(String(payload));
}

/** Sets the companion's `response` on `reply` (status, the headers of `before` it does not replace, its own). */
async function setFinal(reply, response, before) {
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  for (const [name, value] of finalHeaders(before, response)) reply.header(name, value);
  reply.code(response.status);
  const body = await bodyBytes(response);
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
}

/**
 * Sends the companion's own `response` (given without the route's answer) as the reply; the
 * hooks then leave the request alone.
 */
async function sendOwn(request, reply, response, before) {
  request[RUN] = { early: true, untyped: !response.headers.has('content-type') };
  return reply.send(await setFinal(reply, response, before));
}

/**
 * The Fastify plugin: `await app.register(idempotency, options)`; `options` are those of
 * `idempotency()` (server.d.ts). Its hooks are added to the context it is registered in (the
 * plugin is not encapsulated, as fastify-plugin would make it), so it applies to every route
 * of that context and of its children, wherever they are declared (Fastify gives a route its
 * context's hooks when the app gets ready). A route opts out with `config: { idempotency: false }`.
 */
export async function idempotency(fastify, options) {
  let companionOptions = options;
  if (options !== null && typeof options === 'object' && REGISTER_OPTIONS.some((name) => Object.hasOwn(options, name))) {
    companionOptions = { ...options };
    for (const name of REGISTER_OPTIONS) delete companionOptions[name];
  }
  const start = deferredCompanion(companionOptions);
  const registration = Symbol('registration');

  if (!fastify.hasRequestDecorator('idempotency')) fastify.decorateRequest('idempotency', null);

  // Registered again in a child context (another store, a stricter maxBodyBytes), the plugin
  // handles the child's routes with the child's options: one run a request, never two (two
  // would each hold the key, and the outer one's would never be answered).
  fastify.addHook('onRoute', (route) => {
    route.config = { ...route.config, [OWNER]: registration };
  });

  fastify.addHook('preHandler', async (request, reply) => {
    if (request.is404) return; // no route: Fastify's 404, nothing to protect
    if (request.routeOptions?.config?.idempotency === false) return; // the route opted out
    // Another registration's route; one declared before any registration is the first's.
    const owner = request.routeOptions?.config?.[OWNER];
    if (owner === undefined ? request[RUN] !== undefined : owner !== registration) return;
    const before = Object.entries(reply.getHeaders());
    const run = start(fetchRequest(request), before);
    const early = await run.first();
    if (early !== null) return sendOwn(request, reply, early, before);
    request.idempotency = run.ctx;
    if (run.passThrough) {
      // Nothing of its answer is kept: the reply is sent as without the plugin (a stream
      // flows as it is sent). The companion's call is settled with a stand-in.
      run.answer(new Response(null));
      return;
    }
    const entry = { run, before, sent: false, hijacked: false };
    request[RUN] = entry;
    // A reply closed without Fastify's answer (onSend) failed after it started (a 500,
    // stored): the route gave it up (`reply.raw.destroy()`), or answered around Fastify, unseen
    // (it hijacked the reply, or wrote to `reply.raw`). One that wrote nothing and was not
    // hijacked is an HTTP/2 stream its client cancelled: the route goes on, its answer stored.
    const hijack = reply.hijack;
    reply.hijack = function () {
      entry.hijacked = true;
      return hijack.apply(this, arguments);
    };
    watchGiveUp(request.raw, reply.raw, () => entry.sent || run.settled || request[RUN] !== entry, () =>
      run.fail(new Error('retry-fetch/fastify: the reply was closed without Fastify\'s answer (destroyed, hijacked, or written to reply.raw); its answer was not seen')),
      () => entry.hijacked || reply.raw.headersSent);
    // The companion answers before the route did when it gives up on it (a route that ignores
    // its handlerTimeoutMs abort): that answer is sent now, not when the route ends.
    run.result
      .then((response) => {
        if (request[RUN] === entry && !entry.sent && !run.settled && !reply.sent) return sendOwn(request, reply, response, before);
      }, () => {}) // a companion that fails is reported where onSend awaits it
      .catch((error) => {
        if (!reply.sent) reply.send(error);
      });
  });

  fastify.addHook('onSend', async (request, reply, payload) => {
    const entry = request[RUN];
    if (entry === undefined || entry.sent) return payload;
    entry.sent = true;
    if (entry.early) {
      // The companion's answer as it is: without the type Fastify gives a Buffer by default.
      if (entry.untyped) reply.removeHeader('content-type');
      return payload;
    }
    const { run, before } = entry;
    if (!run.settled) {
      try {
        if (isResponse(payload)) {
          // A fetch Response sent as it is: Fastify would take its status and headers too.
          reply.code(payload.status);
          for (const [name, value] of payload.headers) reply.header(name, value);
        }
        const body = await payloadBytes(payload);
        run.answer(toResponse({ status: reply.statusCode, headers: Object.entries(reply.getHeaders()), body }));
      } catch (error) {
        run.fail(error);
      }
    }
    return setFinal(reply, await run.result, before);
  });
}

idempotency[Symbol.for('skip-override')] = true;
idempotency[Symbol.for('fastify.display-name')] = 'retry-fetch-idempotency';

export default idempotency;
