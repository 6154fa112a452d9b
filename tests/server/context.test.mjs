// The handler runs in the async context (AsyncLocalStorage) of its own request: the companion
// awaits the store from Rust (wasm-bindgen-futures runs every task from one shared microtask
// queue), and without carrying each request's context a handler would read another request's
// request id, trace or logger. Same for `required`, `identity`, and `idempotent`'s `key` and
// function.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AsyncLocalStorage } from 'node:async_hooks';
import { idempotency, idempotent, MemoryStore } from 'retry-fetch/server';

const als = new AsyncLocalStorage();
const tick = () => new Promise((resolve) => setTimeout(resolve, Math.random() * 5));

/** A store whose every method takes a little while, so that requests interleave. */
class SlowStore extends MemoryStore {
  async acquire(...a) { await tick(); return super.acquire(...a); }
  async complete(...a) { await tick(); return super.complete(...a); }
  async release(...a) { await tick(); return super.release(...a); }
}

test('200 interleaved requests: each handler, required and identity see their own request context', async () => {
  const seen = [];
  const handler = idempotency(async (request, ctx) => {
    const before = als.getStore();
    await tick();
    seen.push([request.headers.get('x-id'), before, als.getStore()]);
    return Response.json({ id: als.getStore(), key: ctx.key });
  }, {
    store: new SlowStore(),
    required: (request) => { assert.equal(als.getStore(), request.headers.get('x-id')); return true; },
    identity: (request) => { assert.equal(als.getStore(), request.headers.get('x-id')); return undefined; },
  });
  const calls = Array.from({ length: 200 }, (_, i) => {
    const id = `req-${i}`;
    const request = new Request('http://x/pay', { method: 'POST', body: '{}', headers: { 'x-id': id, 'Idempotency-Key': `k-${i}` } });
    return als.run(id, () => handler(request)).then(async (response) => [id, (await response.json()).id]);
  });
  for (const [id, answered] of await Promise.all(calls)) assert.equal(answered, id);
  assert.equal(seen.length, 200);
  for (const [id, before, after] of seen) {
    assert.equal(before, id, 'at the start of the handler');
    assert.equal(after, id, 'after an await in the handler');
  }
});

test('idempotent(): key and fn run in the context of their own call', async () => {
  const run = idempotent(async (message) => {
    await tick();
    return { message: message.id, context: als.getStore() };
  }, {
    store: new SlowStore(),
    key: (message) => { assert.equal(als.getStore(), `ctx-${message.id}`); return message.id; },
  });
  const results = await Promise.all(Array.from({ length: 100 }, (_, i) => als.run(`ctx-m${i}`, () => run({ id: `m${i}` }))));
  for (const [i, r] of results.entries()) assert.deepEqual(r, { message: `m${i}`, context: `ctx-m${i}` });
});
