// Edge cases found in review: each was a wrong answer or a double run before its fix.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { idempotency, idempotent, MemoryStore, toNodeHandler } from 'retry-fetch/server';
import { withServer, newKey } from './support.mjs';

test('a request target starting with // is a path, not another host: a second path under the same key is a 422', async () => {
  let runs = 0;
  const handler = idempotency(async (request) => {
    runs++;
    return Response.json({ path: new URL(request.url).pathname, host: new URL(request.url).hostname });
  });
  const server = http.createServer(toNodeHandler(handler));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  // A raw request: fetch would normalise the target.
  const raw = (target, key) => new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: target, headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end('{}');
  });
  try {
    const key = newKey();
    const first = await raw('//payments/charge', key);
    assert.equal(first.status, 200);
    assert.deepEqual(JSON.parse(first.body), { path: '//payments/charge', host: '127.0.0.1' });
    const other = await raw('//refunds/charge', key);
    assert.equal(other.status, 422, 'another path under the same key');
    assert.equal(runs, 1);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

test('a handler resolving with a response of another fetch implementation (not instanceof Response) is stored and replayed', async () => {
  let runs = 0;
  const foreign = () => ({
    status: 201,
    statusText: 'Created',
    headers: new Headers({ 'X-Charge': 'ch_1', 'Content-Type': 'application/json' }),
    arrayBuffer: async () => new TextEncoder().encode('{"charge":"ch_1"}').buffer,
  });
  const handler = idempotency(async () => {
    runs++;
    return foreign();
  }, { store: new MemoryStore(), onError: () => {} });
  await withServer(handler, async ({ url }) => {
    const key = newKey();
    const send = () => fetch(`${url}/pay`, { method: 'POST', body: '{}', headers: { 'Idempotency-Key': key } });
    const first = await send();
    assert.equal(first.status, 201);
    assert.equal(first.headers.get('x-charge'), 'ch_1');
    assert.deepEqual(await first.json(), { charge: 'ch_1' });
    const again = await send();
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await again.json(), { charge: 'ch_1' });
    assert.equal(runs, 1);
  });
});

test('idempotent: a thrown value that is not an Error is kept as its string', async () => {
  const fn = idempotent(async () => {
    throw 'card declined'; // eslint-disable-line no-throw-literal
  }, { store: new MemoryStore(), key: (m) => m.id, onStoreError: () => {} });
  const message = { id: newKey() };
  await assert.rejects(fn(message), (e) => e === 'card declined');
  await assert.rejects(fn(message), (e) => e.name === 'IdempotencyError' && e.code === 'previous-run-failed' && /card declined/.test(e.message));
});
