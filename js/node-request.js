// A node:http request as the Fetch API sees it: its headers and its absolute URL, and how an
// early answer ends it. Shared by toNodeHandler (server.js) and the framework adapters.

/**
 * Fetch `Headers` of a node:http request's raw headers (HTTP/2 pseudo-headers left out).
 * `names`: an array that gets the name of each header the `Headers` took, as sent.
 */
export function nodeRequestHeaders(req, names) {
  const headers = new Headers();
  const raw = Array.isArray(req.rawHeaders) ? req.rawHeaders : [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i].startsWith(':')) continue;
    try {
      headers.append(raw[i], raw[i + 1]);
      names?.push(raw[i]);
    } catch {
      // a header the Fetch API refuses: leave it out
    }
  }
  return headers;
}

/**
 * The absolute URL of a node:http request whose target is `target` (its original URL). A
 * target in absolute form (`POST http://host/pay HTTP/1.1`, as a proxy sends it; a server must
 * accept it) is that URL, its authority taken over the Host header's.
 */
export function nodeRequestUrl(req, target) {
  const proto = req.socket?.encrypted ? 'https' : 'http';
  const path = typeof target === 'string' && target !== '' ? target : '/';
  // A host after `//` (`http:///pay` has none: a URL parser would make `pay` the host).
  if (/^https?:\/\/[^/?#\\]/i.test(path)) {
    try {
      return new URL(path);
    } catch {
      // not a URL after all: read as a path below
    }
  }
  // Joined as text: `new URL('//a/b', base)` would read a target starting with `//` as a host.
  const full = path.startsWith('/') ? path : `/${path}`;
  try {
    return new URL(`${proto}://${req.headers?.host ?? 'localhost'}${full}`);
  } catch {
    return new URL(`${proto}://localhost${full}`); // a Host header that is not a host
  }
}

/** Where a `Request` an adapter builds for the companion carries its node:http target. */
const TARGET = Symbol.for('retry-fetch.target');

/**
 * A path a URL parser restructures: a backslash, or a `.` or `..` segment (`%2e` counts as a
 * dot), which it resolves, though Express, Fastify and node:http routers read them as written.
 */
const RESTRUCTURED = /\\|(?:^|\/)(?:\.|%2e){1,2}(?:\/|$)/i;

/**
 * The target the fingerprint covers for a node:http request whose target is `target` (its
 * original URL), where it is not the URL form (percent-encoded as a fetch client sends it, so
 * every adapter, and `Request`s, agree on a retry): the target as received when a URL parser
 * would restructure its path (`/a/../b` and `/a\b` are not `/b` and `/a/b` to a router; a
 * target in absolute form counts from its path), else `undefined`.
 */
export function restructuredTarget(target) {
  const raw = typeof target === 'string' ? target.replace(/^https?:\/\/[^/?#\\]*/i, '') : '';
  // The path ends at a query or a fragment (Node's parser lets a `#` through).
  return RESTRUCTURED.test(raw.split(/[?#]/, 1)[0]) ? raw : undefined;
}

/** `request` (built for the companion), carrying its target as received where its URL restructured it ({@link restructuredTarget}). */
export function withTarget(request, target) {
  const raw = restructuredTarget(target);
  if (raw !== undefined) request[TARGET] = raw;
  return request;
}

/**
 * Does the request declare a body (type-is's `hasBody`: Transfer-Encoding or Content-Length)?
 * Over HTTP/2, where DATA frames carry a body without either, it has one unless its HEADERS
 * ended the stream.
 */
export function declaresBody(req) {
  const h = req.headers ?? {};
  if (h['transfer-encoding'] !== undefined || (h['content-length'] !== undefined && !Number.isNaN(Number(h['content-length'])))) return true;
  return req.httpVersionMajor >= 2 && req.stream?.endAfterHeaders === false;
}

/**
 * A web ReadableStream of a node:http request's body that leaves the body in `req` for the
 * next reader: once it is read to its end, the bytes are put back (`unshift`, before 'end' is
 * emitted, which Node allows), so what reads `req` after the adapter (a body parser, an upload
 * parser such as multer or @fastify/multipart, a route reading the stream) reads the same
 * bytes. Cancelled before the end (the companion's 413), the rest flows on, dropped.
 */
export function rereadableBody(req) {
  const chunks = [];
  let detach = () => {};
  return new ReadableStream({
    start(controller) {
      // An empty body (Content-Length: 0) is not read: reading it (a 'readable' listener
      // does) emits its 'end', with no bytes to put back before it, and a route that reads
      // the stream after the adapter would wait for an 'end' already gone.
      if (Number(req.headers?.['content-length']) === 0) {
        controller.close();
        return;
      }
      const onReadable = () => {
        let chunk;
        while ((chunk = req.read()) !== null) {
          chunks.push(chunk);
          controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length));
        }
        // `complete`: node:http has pushed the end, so a null read() means all was read. An
        // HTTP/2 request says `complete` only after 'end' (too late to put the bytes back), or
        // once aborted: its end pushed is read instead, if it is the client's END_STREAM (a
        // session that died pushes an end too, after a cut body).
        const ended = req.httpVersionMajor >= 2 ? req._readableState?.ended === true : req.complete === true;
        if (ended && endedByClient(req)) {
          detach();
          const body = Buffer.concat(chunks);
          if (!lengthMatches(req, body.length)) {
            controller.error(new DOMException('the request body ended before its Content-Length', 'AbortError'));
            return;
          }
          if (body.length > 0) req.unshift(body);
          controller.close();
        } else if (ended) {
          onClose();
        }
      };
      const onError = (error) => {
        detach();
        controller.error(error);
      };
      const onClose = () => onError(new DOMException('the client closed the connection before the request body ended', 'AbortError'));
      detach = () => {
        req.off('readable', onReadable);
        req.off('error', onError);
        req.off('close', onClose);
      };
      req.on('readable', onReadable);
      req.on('error', onError);
      req.on('close', onClose);
    },
    cancel() {
      detach();
      chunks.length = 0;
      req.resume();
    },
  });
}

/**
 * Did an HTTP/2 request's body end by the client's END_STREAM, not by a reset stream or a
 * session that died (which end the request's readable side too)? An HTTP/1 one: always.
 */
function endedByClient(req) {
  if (!(req.httpVersionMajor >= 2)) return true;
  const stream = req.stream;
  return req.aborted !== true && stream?.aborted !== true && stream?.destroyed !== true && !stream?.rstCode && stream?.session?.destroyed !== true;
}

/** Is `length` the request's Content-Length, when it declares one? */
function lengthMatches(req, length) {
  const declared = req.headers?.['content-length'];
  return declared === undefined || Number(declared) === length;
}

/** How long the rest of an unread upload is read and dropped after an early answer, in ms. */
const LINGER_MS = 2000;

/**
 * An answer given before the request body was read to its end (a 413, an early refusal):
 * once the answer is out, the rest of the upload is read and dropped (not kept), and the
 * connection stays open for the client's next request; an upload still going after LINGER_MS
 * is cut (the connection destroyed). The answer must not carry `Connection: close`: Node then
 * destroys the socket as soon as the answer is written, with the upload still arriving, and
 * a socket closed with unread data sends a reset, which throws away the answer the client
 * has not read yet: it would see EPIPE or ECONNRESET instead of the 413. `dropReaders`: no
 * reader of the body is still wanted (an adapter's answer before the route ran), so the ones
 * attached are removed; otherwise a handler that answered early may still be reading.
 */
export function lingerAfterEarlyAnswer(req, res, dropReaders = false) {
  res.once('finish', () => {
    const timer = setTimeout(() => req.destroy?.(), LINGER_MS);
    timer.unref?.();
    req.once?.('end', () => clearTimeout(timer));
    req.once?.('close', () => clearTimeout(timer));
    if (dropReaders) {
      // The reader that stopped (a web stream of the body, `Readable.toWeb`, that nobody reads
      // any more) would pause `req` again at each chunk, stalling the upload (and the
      // connection) until the timer cuts it.
      req.removeAllListeners?.('data');
      req.on?.('data', () => {});
    }
    req.resume?.();
  });
}
