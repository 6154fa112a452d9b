// The demo's payments API on PostgreSQL: `make demo` keeps the embedded MemoryStore, and uses
// a PostgresStore (its own table) when DATABASE_URL is set (www/payments-api.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import pg from 'pg';
import { createDemoStorage, createPaymentsApi } from '../../www/payments-api.mjs';
import { DATABASE_URL, needs } from '../support/services.mjs';

async function serveApi(storage) {
  const api = createPaymentsApi({ storage });
  const server = http.createServer((req, res) => api.handle(req, res, new URL(req.url, 'http://x').pathname));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { api, url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }) };
}

const pay = (url, key) => fetch(`${url}/api/payments`, {
  method: 'POST',
  headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
  body: JSON.stringify({ amount: 4200 }),
});

test('without DATABASE_URL the demo keeps its keys in memory', async () => {
  const storage = await createDemoStorage('');
  assert.equal(storage.kind, 'memory');
});

test('with DATABASE_URL the demo keeps its keys in PostgreSQL: a repeat is replayed, reset empties the table', {
  skip: needs('DATABASE_URL'),
}, async () => {
  const storage = await createDemoStorage(DATABASE_URL);
  const check = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
  const { api, url, close } = await serveApi(storage);
  try {
    assert.equal(storage.kind, 'postgres');
    assert.equal(api.storage, 'postgres');
    const key = crypto.randomUUID();
    const first = await pay(url, key);
    assert.equal(first.status, 201);
    const again = await pay(url, key);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await again.json(), await first.json());
    assert.equal(api.ledger().count, 1, 'one charge');
    const { rows } = await check.query('SELECT count(*)::int AS n FROM retry_fetch_demo_keys WHERE key = $1', [key]);
    assert.equal(rows[0].n, 1, 'the key is stored in PostgreSQL');
    await api.reset();
    const after = await check.query('SELECT count(*)::int AS n FROM retry_fetch_demo_keys');
    assert.equal(after.rows[0].n, 0);
  } finally {
    await close();
    await check.end();
    await storage.close();
  }
});
