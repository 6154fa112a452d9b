// A Node-only TypeScript consumer (tsconfig.node.json: lib ES2022, types ["node"], no DOM
// lib): the package's types must compile with only @types/node's fetch globals, and they must
// fit Node's own fetch, Buffer and node:http. Run by `scripts/test.sh types`.
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import { retryFetch, createRetryFetch, type RetryFetchInput, type RetryOptions } from 'retry-fetch';
import { init } from 'retry-fetch/manual';
import { idempotency, MemoryStore, toNodeHandler, type FetchHandler } from 'retry-fetch/server';

async function main(): Promise<void> {
  // The manual entry takes the .wasm bytes a Node app read itself (a Buffer is a Uint8Array).
  await init(await readFile(new URL('./retry_fetch_bg.wasm', import.meta.url)));
  await init(new URL('https://cdn.example/retry_fetch_bg.wasm'));
  await init(undefined);
  // @ts-expect-error: not a URL, bytes or a module
  await init(42);

  // Every input fetch takes: a string, a URL, a Request.
  const inputs: RetryFetchInput[] = ['https://api.example/', new URL('https://api.example/'), new Request('https://api.example/')];
  for (const input of inputs) {
    const res: Response = await retryFetch(input, { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    void res.status;
  }
  // @ts-expect-error: a number is no input
  await retryFetch(42);

  // Node's own fetch is a transport as it is.
  const options: RetryOptions = { fetch: globalThis.fetch, signal: AbortSignal.timeout(5_000) };
  const api = createRetryFetch(options);
  await api('https://api.example/', undefined, { fetch: (input, init) => fetch(input, init) });
  // @ts-expect-error: a transport resolves with a Response
  await api('https://api.example/', undefined, { fetch: async () => 'not a response' });

  // The server half on node:http, with Node's own request and response types.
  const handler: FetchHandler = async (request) => Response.json({ method: request.method });
  const server = http.createServer(toNodeHandler(idempotency(handler, { store: new MemoryStore() })));
  server.close();
}
void main;
