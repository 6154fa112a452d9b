// A node:http request as the Fetch API sees it: its headers and its absolute URL. Shared by
// toNodeHandler (server.js) and the framework adapters (adapter-support.js).

/** Fetch `Headers` of a node:http request's raw headers (HTTP/2 pseudo-headers left out). */
export function nodeRequestHeaders(req) {
  const headers = new Headers();
  const raw = Array.isArray(req.rawHeaders) ? req.rawHeaders : [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i].startsWith(':')) continue;
    try {
      headers.append(raw[i], raw[i + 1]);
    } catch {
      // a header the Fetch API refuses: leave it out
    }
  }
  return headers;
}

/** The absolute URL of a node:http request whose target is `target` (its original URL). */
export function nodeRequestUrl(req, target) {
  const proto = req.socket?.encrypted ? 'https' : 'http';
  const path = typeof target === 'string' && target !== '' ? target : '/';
  // Joined as text: `new URL('//a/b', base)` would read a target starting with `//` as a host.
  const full = path.startsWith('/') ? path : `/${path}`;
  try {
    return new URL(`${proto}://${req.headers?.host ?? 'localhost'}${full}`);
  } catch {
    return new URL(`${proto}://localhost${full}`); // a Host header that is not a host
  }
}
