// Next.js App Router route handlers with retry-fetch/server (no adapter needed): a route file
// exports `POST = idempotency(async (request, ctx) => ...)` and Next calls it as
// `POST(request, { params: Promise<...> })`; ctx carries `params` beside `key`, `keyFor`, `tx`.
// Called directly the way Next calls it, and served by a small Next-like router (node:http,
// toNodeHandler) for the retrying client and the shared scenarios (support.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { idempotency, toNodeHandler } from 'retry-fetch/server';
import { adapterScenarios, post, snapshot, pay } from './support.mjs';

const NO_SCOPE = { identity: false };

/**
 * What Next does with an app/ route file: match the path against `routes` (`[pattern, module]`,
 * the pattern's named groups are the params) and call the module's export for the method as
 * `handler(request, { params: Promise.resolve(params) })`.
 */
async function nextLike(routes) {
  const dispatch = async (request) => {
    const { pathname } = new URL(request.url);
    for (const [pattern, mod] of routes) {
      const match = pattern.exec(pathname);
      if (match === null) continue;
      const handler = mod[request.method];
      if (handler === undefined) return new Response(null, { status: 405 });
      return handler(request, { params: Promise.resolve({ ...match.groups }) });
    }
    return new Response('not found', { status: 404 });
  };
  const server = http.createServer(toNodeHandler(dispatch, { onError: () => {} }));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The route file app/orders/[id]/pay/route.js, as a module object. */
function orderRoute() {
  const calls = [];
  const POST = idempotency(async (request, ctx) => {
    const { id } = await ctx.params;
    const { amount } = await request.json();
    calls.push({ id, key: ctx.key });
    return Response.json({ order: id, amount, key: ctx.key, charge: ctx.keyFor('charge'), run: calls.length }, { status: 201, headers: { 'X-Run': String(calls.length) } });
  }, NO_SCOPE);
  return { module: { POST }, calls };
}

const jsonPost = (url, key, body) =>
  new Request(url, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body: JSON.stringify(body) });

test('Next.js: POST(request, { params }) as Next calls it: the handler sees await ctx.params and ctx.key; a repeat is the replay; another body a 422', async () => {
  const { module, calls } = orderRoute();
  const key = crypto.randomUUID();
  const first = await module.POST(jsonPost('http://localhost:3000/orders/7/pay', key, { amount: 4200 }), { params: Promise.resolve({ id: '7' }) });
  assert.equal(first.status, 201);
  const a = await snapshot(first);
  const body = JSON.parse(a.body);
  assert.equal(body.order, '7');
  assert.equal(body.key, key);
  assert.equal(body.amount, 4200);
  const repeat = await module.POST(jsonPost('http://localhost:3000/orders/7/pay', key, { amount: 4200 }), { params: Promise.resolve({ id: '7' }) });
  assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(await snapshot(repeat), a, 'byte for byte');
  const other = await module.POST(jsonPost('http://localhost:3000/orders/7/pay', key, { amount: 1 }), { params: Promise.resolve({ id: '7' }) });
  assert.equal(other.status, 422);
  assert.deepEqual(calls, [{ id: '7', key }]);
});

test('Next.js: served (a Next-like router over node:http): the route reads its body and params; replay byte for byte; 422; a lost answer is replayed to retryFetch', async () => {
  const { module, calls } = orderRoute();
  const server = await nextLike([[/^\/orders\/(?<id>[^/]+)\/pay$/, module]]);
  try {
    const key = crypto.randomUUID();
    const first = await post(server.url, '/orders/42/pay', { key, body: { amount: 4200 } });
    assert.equal(first.status, 201);
    const a = await snapshot(first);
    assert.equal(JSON.parse(a.body).order, '42');
    const repeat = await post(server.url, '/orders/42/pay', { key, body: { amount: 4200 } });
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await snapshot(repeat), a);
    assert.equal((await post(server.url, '/orders/42/pay', { key, body: { amount: 1 } })).status, 422);
    assert.equal(calls.length, 1);

    // retryFetch: its first attempt's answer is lost (the connection cut once the route ran).
    let attempts = 0;
    const res = await retryThroughCut(server.url, '/orders/43/pay', { amount: 5 }, () => ++attempts === 1);
    assert.equal(res.status, 201);
    assert.equal(res.headers.get('idempotent-replayed'), 'true');
    assert.equal((await res.json()).order, '43');
    assert.equal(calls.length, 2, 'the route ran once for it');
  } finally {
    await server.close();
  }
});

/**
 * retryFetch through a proxy of `url` that cuts the connection after the answer arrived when
 * `cut()` says so (the answer is lost on its way back to the client).
 */
async function retryThroughCut(url, path, body, cut) {
  const { retryFetch } = await import('retry-fetch');
  return retryFetch(
    `${url}${path}`,
    { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) },
    {
      maxAttempts: 4,
      baseDelayMs: 20,
      budget: false,
      fetch: async (input, init) => {
        const res = await fetch(input, init);
        if (cut()) {
          await res.arrayBuffer();
          throw new TypeError('fetch failed', { cause: new Error('socket hang up') });
        }
        return res;
      },
    },
  );
}

/** A Next.js route file over `route`: `POST = idempotency(handler, options)`, served Next-like. */
async function startNext({ options, route }) {
  const POST = idempotency(async (request, ctx) => {
    const out = await route({ body: await request.json(), ctx });
    return Response.json(out.json, { status: out.status });
  }, options);
  return nextLike([[/^\/payments$/, { POST }]]);
}

adapterScenarios('Next.js App Router', startNext);

test('Next.js: the retrying client end to end with a key of its own (pay() helper)', async () => {
  const { module, calls } = orderRoute();
  const server = await nextLike([[/^\/payments$/, module]]);
  try {
    const res = await pay(server.url, { amount: 7 });
    assert.equal(res.status, 201);
    const body = await res.json();
    assert.equal(typeof body.key, 'string', 'retryFetch sent a key');
    assert.equal(calls.length, 1);
  } finally {
    await server.close();
  }
});
