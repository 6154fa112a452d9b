// A real HTTP server on 127.0.0.1 that injects faults, for the end-to-end and browser tests
// and the demo. Each scenario is a path; the server counts hits per scenario id and answers
// the n-th hit with the n-th step of its script (the last step repeats).
//
//   ANY  /seq/<id>?steps=503,503,200     script of steps, comma-separated
//   GET  /log/<id>                       JSON: every request seen for <id> (hit, method, headers,
//                                        body as UTF-8 text, bodyBase64 exact bytes, at: ms time)
//   POST /reset                          forget every scenario
//   GET  /ping                           200 "pong"
//
// A step is `<what>[+<option>...]`:
//   200, 503, 429, ...   answer with that status; body `{"id":..,"hit":n,"status":s}`
//   reset                destroy the socket without answering (a network error)
//   hang                 never answer (until the client gives up)
//   +ra=<s>              Retry-After: <s> (delta-seconds)
//   +date=<s>            Retry-After: an HTTP-date <s> seconds from now
//   +raw=<text>          Retry-After: <text> as is (URL-encoded)
//   +hdate=<text>        Date: <text> as is (URL-encoded): a server whose clock is elsewhere
//   +nodate              no Date header at all
//   +rlr=<s>             RateLimit-Reset: <s>
//   +rl=<s>              RateLimit: "default";r=0;t=<s>
//   +sr=<v>              X-Should-Retry: <v>; +ssr=<v>: Stripe-Should-Retry: <v>
//   +delay=<ms>          wait <ms> before answering
//   +to=<url>            Location: <url> (URL-encoded; e.g. `303+to=<path of another seq>`,
//                        a redirect that fetch follows; a relative URL resolves against this one)
//   +opl=<url>           Operation-Location: <url> (URL-encoded; the status monitor a
//                        `202 Accepted` names, e.g. `202+opl=<path of another seq>`)
//   +slowbody=<ms>       send the status and headers at once, then a text/plain body in 20
//                        chunks, one every <ms> (the first at once), so a client can abort
//                        while it reads the body
//   +afterclose=<ms>     before answering, wait (at most <ms>) until the slow bodies of this
//                        scenario's earlier hits are closed (ended, or cut by the client); the
//                        log's `earlierOpen` says how many were still open when it answered
//
// CORS is open (any origin, any header, every header exposed) so browser pages on another
// port can use it. OPTIONS preflights are answered and not counted.
//
// `origin()` opens one more port onto the same server (the same scenarios, counts and logs):
// another origin, so another per-origin state in the client (the default retry budget, a
// breaker, a throttle). The test runners give every test an origin of its own this way, so
// that no test's failures count against another's retries, whatever the order they run in.
//
// Run alone: `node tests/support/fault-server.mjs [port]` prints the URL.
import http from 'node:http';

/** How many chunks a `+slowbody=<ms>` step sends. */
const SLOW_BODY_CHUNKS = 20;

export function parseStep(text) {
  const [what, ...opts] = text.split('+');
  const step = { what, headers: {}, delayMs: 0 };
  for (const opt of opts) {
    const eq = opt.indexOf('=');
    const key = opt.slice(0, eq);
    const value = decodeURIComponent(opt.slice(eq + 1));
    if (key === 'ra') step.headers['Retry-After'] = value;
    else if (key === 'date') step.retryAfterDateS = Number(value);
    else if (key === 'raw') step.headers['Retry-After'] = value;
    else if (key === 'hdate') step.headers.Date = value;
    else if (opt === 'nodate') step.noDate = true;
    else if (key === 'rlr') step.headers['RateLimit-Reset'] = value;
    else if (key === 'rl') step.headers.RateLimit = `"default";r=0;t=${value}`;
    else if (key === 'sr') step.headers['X-Should-Retry'] = value;
    else if (key === 'ssr') step.headers['Stripe-Should-Retry'] = value;
    else if (key === 'delay') step.delayMs = Number(value);
    else if (key === 'to') step.headers.Location = value;
    else if (key === 'opl') step.headers['Operation-Location'] = value;
    else if (key === 'slowbody') step.slowBodyMs = Number(value);
    else if (key === 'afterclose') step.afterCloseMs = Number(value);
  }
  return step;
}

export async function startFaultServer({ port = 0, host = '127.0.0.1' } = {}) {
  const hits = new Map(); // id -> count
  const logs = new Map(); // id -> [{ hit, method, headers, body, at }]
  const openBodies = new Map(); // id -> Set of promises, each settled when a slow body closes
  const sockets = new Set();

  // Connection: close on every answer: a browser silently resends a request whose reused
  // keep-alive socket was reset, which would hide an injected reset from the client.
  const cors = {
    Connection: 'close',
    'Access-Control-Allow-Origin': '*',
    'Access-Control-Allow-Headers': '*',
    'Access-Control-Allow-Methods': 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS',
    'Access-Control-Expose-Headers': '*',
    'Access-Control-Max-Age': '600',
  };

  const handle = async (req, res) => {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'OPTIONS') {
      res.writeHead(204, cors).end();
      return;
    }
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks);

    if (url.pathname === '/ping') {
      res.writeHead(200, { ...cors, 'Content-Type': 'text/plain' }).end('pong');
      return;
    }
    if (url.pathname === '/reset' && req.method === 'POST') {
      hits.clear();
      logs.clear();
      openBodies.clear();
      res.writeHead(204, cors).end();
      return;
    }
    if (url.pathname.startsWith('/log/')) {
      const id = decodeURIComponent(url.pathname.slice(5));
      res.writeHead(200, { ...cors, 'Content-Type': 'application/json' }).end(JSON.stringify(logs.get(id) ?? []));
      return;
    }
    if (!url.pathname.startsWith('/seq/')) {
      res.writeHead(404, cors).end('not found');
      return;
    }
    const id = decodeURIComponent(url.pathname.slice(5));
    const hit = (hits.get(id) ?? 0) + 1;
    hits.set(id, hit);
    if (!logs.has(id)) logs.set(id, []);
    logs.get(id).push({
      hit,
      method: req.method,
      headers: req.headers,
      body: body.toString('utf8'),
      bodyBase64: body.toString('base64'),
      at: Date.now(),
    });
    const steps = (url.searchParams.get('steps') ?? '200').split(',');
    const step = parseStep(steps[Math.min(hit, steps.length) - 1]);

    if (step.delayMs) await new Promise((r) => setTimeout(r, step.delayMs));
    if (step.afterCloseMs !== undefined) {
      const open = [...(openBodies.get(id) ?? [])];
      await Promise.race([Promise.all(open), new Promise((r) => setTimeout(r, step.afterCloseMs))]);
      logs.get(id)[hit - 1].earlierOpen = openBodies.get(id)?.size ?? 0;
    }
    if (step.what === 'reset') {
      req.socket.destroy();
      return;
    }
    if (step.what === 'hang') {
      return; // the socket stays open until the client aborts or the server closes
    }
    const status = Number(step.what);
    const headers = { ...cors, 'Content-Type': 'application/json', ...step.headers };
    if (step.noDate) res.sendDate = false;
    if (step.retryAfterDateS !== undefined) {
      headers['Retry-After'] = new Date(Date.now() + step.retryAfterDateS * 1000).toUTCString();
    }
    if (step.slowBodyMs !== undefined) {
      headers['Content-Type'] = 'text/plain';
      res.writeHead(status, headers);
      let sent = 0;
      const chunk = () => res.write(`chunk ${sent++} of ${id}\n`);
      chunk();
      const timer = setInterval(() => {
        chunk();
        if (sent === SLOW_BODY_CHUNKS) {
          clearInterval(timer);
          res.end();
        }
      }, step.slowBodyMs);
      let closed;
      const bodies = openBodies.get(id) ?? openBodies.set(id, new Set()).get(id);
      const open = new Promise((resolve) => (closed = resolve));
      bodies.add(open);
      res.on('close', () => {
        clearInterval(timer); // the client went away: stop writing
        bodies.delete(open);
        closed();
      });
      return;
    }
    res.writeHead(status, headers).end(JSON.stringify({ id, hit, status }));
  };

  /** A listener on `listenPort` (0: a free one) serving `handle`: { url, port, close() }. */
  const servers = new Set();
  const listen = async (listenPort) => {
    const server = http.createServer(handle);
    server.on('connection', (s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    await new Promise((resolve) => server.listen(listenPort, host, resolve));
    servers.add(server);
    const { port: bound } = server.address();
    return {
      url: `http://${host}:${bound}`,
      port: bound,
      close: () =>
        new Promise((resolve) => {
          servers.delete(server);
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  };
  const seqAt = (base) => (id, steps) => `${base}/seq/${encodeURIComponent(id)}?steps=${encodeURIComponent(steps)}`;

  const main = await listen(port);
  return {
    url: main.url,
    port: main.port,
    /** The URL of scenario `id` with `steps`. */
    seq: seqAt(main.url),
    /** Requests seen for `id`. */
    log: (id) => logs.get(id) ?? [],
    hits: (id) => hits.get(id) ?? 0,
    /**
     * Another port onto this server, a fresh origin: `{ url, seq(id, steps), close() }` (the
     * scenarios, counts and logs are the server's; `close()` closes that port only).
     */
    origin: async () => {
      const extra = await listen(0);
      return { url: extra.url, seq: seqAt(extra.url), close: extra.close };
    },
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        let open = servers.size;
        if (open === 0) resolve();
        for (const server of [...servers]) {
          servers.delete(server);
          server.close(() => {
            if (--open === 0) resolve();
          });
        }
      }),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const server = await startFaultServer({ port: Number(process.argv[2] ?? 0) });
  console.log(server.url);
  const stop = () => server.close().then(() => process.exit(0));
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}
