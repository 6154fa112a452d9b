// Helpers for the retry-fetch/server tests: a real node:http server around a fetch-style
// handler (through toNodeHandler) and requests with real fetch.
import http from 'node:http';
import { toNodeHandler } from 'retry-fetch/server';

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Serve `handler` on 127.0.0.1 on a free port. `wrap(req, res, next)` can intercept the
 * node request first. Errors the adapter reports are collected in `errors`.
 */
export async function serve(handler, { wrap } = {}) {
  const errors = [];
  const next = toNodeHandler(handler, { onError: (error) => errors.push(error) });
  const server = http.createServer(wrap ? (req, res) => wrap(req, res, next) : next);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    errors,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
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

/** A request to `url + path` with an optional key (plain string as is) and extra headers. */
export function send(url, { key, body = '{"amount":4200,"currency":"EUR"}', method = 'POST', path = '/payments', headers = {}, signal } = {}) {
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
