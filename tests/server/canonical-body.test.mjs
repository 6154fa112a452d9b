// canonicalBody(value): the bytes the Express and Fastify adapters fingerprint when a body
// parser has already read the request (`req.body`): canonical JSON, every object's keys sorted.
// Its form is fixed (a stored fingerprint must match the repeat of its request after an
// upgrade): byte for byte what `JSON.stringify(value, sortKeys)` makes, checked against that
// very expression (REFERENCE) on values of every kind, and against written-out bytes. And it
// has no depth limit of its own: a body nested thousands of levels deep, which the parsers read
// without recursion, is fingerprinted, directly and through a real Express app and Fastify app.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import express from 'express';
import Fastify from 'fastify';
import { canonicalBody } from '../../pkg/server-wasm.js';
import { idempotency as expressIdempotency } from 'retry-fetch/express';
import { idempotency as fastifyIdempotency } from 'retry-fetch/fastify';
import { listen, newKey } from './support.mjs';

/** The canonical form as it was first written: JSON.stringify with a replacer that sorts keys. */
function REFERENCE(value) {
  const sortKeys = (_key, v) => {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return v;
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]]));
  };
  return JSON.stringify(value, sortKeys) ?? '';
}

const text = (bytes) => Buffer.from(bytes).toString('utf8');

/** What canonicalBody() takes as it is at the top, not as JSON: nothing, a string, bytes. */
const raw = (v) => v === undefined || v === null || typeof v === 'string' || v instanceof Uint8Array || v instanceof ArrayBuffer;

test('canonical JSON, byte for byte as written out: keys sorted at every level (array indices first, as a JS object orders them), arrays kept in order', () => {
  const body = JSON.parse('{"b":{"z":1,"a":[3,{"y":true,"x":null}]},"a":"é\\u0000\\"","10":1,"9":2,"__proto__":{"k":-0},"n":[1e21,5e-7,-1.5,0]}');
  const expected = '{"9":2,"10":1,"__proto__":{"k":0},"a":"é\\u0000\\"","b":{"a":[3,{"x":null,"y":true}],"z":1},"n":[1e+21,5e-7,-1.5,0]}';
  assert.equal(text(canonicalBody(body)), expected);
  assert.equal(REFERENCE(body), expected, 'the reference agrees');
  // Strings, bytes, nothing.
  assert.equal(text(canonicalBody('raw {"b":1}')), 'raw {"b":1}');
  assert.deepEqual([...canonicalBody(new Uint8Array([1, 2, 3]))], [1, 2, 3]);
  assert.deepEqual([...canonicalBody(new Uint8Array([4, 5]).buffer)], [4, 5]);
  assert.equal(canonicalBody(undefined).length, 0);
  assert.equal(canonicalBody(null).length, 0);
});

test('the same bytes as JSON.stringify(value, sortKeys) for values of every kind', () => {
  const when = new Date(Date.UTC(2026, 1, 16, 10, 0, 0));
  const withToJSON = { toJSON: (key) => ({ key, b: 2, a: 1 }) };
  const lone = 'a\ud800b\udc00c';
  const values = [
    0, -0, 1.5, 1e21, 1e-7, NaN, Infinity, -Infinity, true, false, 'text', lone, '',
    {}, [], [[]], [{}], { a: [] }, { '': 1, ' ': 2, a: { '': [] } },
    { [lone]: lone, 'é': 1, 'e': 2, 'Z': 3, '😀': 4, '\uffff': 5 },
    { 4294967294: 'a', 4294967295: 'b', 1: 'c', '01': 'd', '-1': 'e', 1.5: 'f' },
    { u: undefined, f() {}, s: Symbol('s'), keep: 1, [Symbol('k')]: 2 },
    [undefined, () => 1, Symbol('s'), null, 1],
    { when, nested: { when } }, [when],
    withToJSON, { inner: withToJSON }, [withToJSON],
    { toJSON: () => undefined, x: 1 }, { a: { toJSON: () => undefined } }, [{ toJSON: () => undefined }],
    { toJSON: () => 'replaced' }, { toJSON: 'not a function', b: 1 },
    new Number(3), new String('s'), new Boolean(false), Object(1n),
    { boxed: [new Number(1), new String('x')] },
    new Map([['a', 1]]), new Set([1]), new Uint8Array([1, 2]), { typed: new Float64Array([0.5]) },
    Object.create(null, { b: { value: 1, enumerable: true }, a: { value: 2, enumerable: true }, hidden: { value: 3 } }),
    Object.assign(Object.create({ inherited: 1 }), { own: 2 }),
    { get g() { return { z: 1, y: 2 }; } },
    (() => { const a = [1, 2]; a.extra = 3; return a; })(),
    // One object reached twice (not a cycle).
    (() => { const shared = { b: 1, a: 2 }; return { x: shared, y: [shared, shared] }; })(),
  ];
  for (const value of values) {
    // (A string or bytes at the top are a raw body, their own bytes: above.)
    if (!raw(value)) assert.equal(text(canonicalBody(value)), REFERENCE(value), REFERENCE(value));
    for (const wrapped of [[value], { v: value }]) assert.equal(text(canonicalBody(wrapped)), REFERENCE(wrapped), REFERENCE(wrapped));
  }
  // Top-level values JSON.stringify makes nothing of: no bytes.
  for (const value of [() => 1, Symbol('s'), { toJSON: () => undefined }]) {
    assert.equal(canonicalBody(value).length, 0);
  }
});

test('the same bytes as JSON.stringify(value, sortKeys) on 2000 random JSON documents, parsed as a body parser parses them', () => {
  // A small deterministic generator (xorshift32), so a failure can be replayed.
  let seed = 0x2f6b_1d3a;
  const random = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 2 ** 32;
  };
  const pick = (list) => list[Math.floor(random() * list.length)];
  const KEYS = ['a', 'b', 'B', 'aa', 'é', '10', '9', '0', '01', '-1', '1.5', '4294967294', '4294967295', '99999999999', '__proto__', 'constructor', 'toJSON', '', ' ', '😀', '\ue000', '\uffff', '\ufffd', 'z\u0000', '\u001f\u007f', '\ud800', '\udc00x'];
  const number = () => {
    const n = (random() - 0.5) * 10 ** Math.floor(random() * 50 - 25);
    return pick([n, Math.round(n), Math.fround(n), n * 2 ** 53]);
  };
  const leaf = () => pick([null, true, false, 0, -0, 1, -1.25, 1e21, 1e-7, 123456789.123, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), number(), number(), 'x', '', 'é"\\\n\t\b\f\r\u0001', '\ud800', '\ufffd', '😀', '\u2028']);
  const value = (depth) => {
    const r = random();
    if (depth > 6 || r < 0.35) return leaf();
    if (r < 0.65) return Array.from({ length: Math.floor(random() * 5) }, () => value(depth + 1));
    const o = {};
    for (let i = Math.floor(random() * 6); i > 0; i--) Object.defineProperty(o, pick(KEYS), { value: value(depth + 1), enumerable: true, configurable: true, writable: true });
    return o;
  };
  for (let i = 0; i < 2000; i++) {
    // Through JSON text and JSON.parse, as express.json() and Fastify's parser make req.body.
    const root = value(0);
    const parsed = JSON.parse(JSON.stringify(raw(root) ? [root] : root));
    assert.equal(text(canonicalBody(parsed)), REFERENCE(parsed), `document ${i}`);
  }
});

test('no depth limit of its own: 5000 and 200000 levels of objects and arrays, fingerprinted without overflowing a stack', () => {
  for (const depth of [5_000, 200_000]) {
    const arrays = JSON.parse('['.repeat(depth) + ']'.repeat(depth));
    assert.equal(text(canonicalBody(arrays)), '['.repeat(depth) + ']'.repeat(depth));
    const objects = JSON.parse('{"b":1,"a":'.repeat(depth) + '[]' + '}'.repeat(depth));
    assert.equal(text(canonicalBody(objects)), '{"a":'.repeat(depth) + '[]' + ',"b":1}'.repeat(depth));
  }
  // Where the reference itself manages (its recursion), the same bytes.
  const shallow = JSON.parse('{"b":[{"d":1,"c":'.repeat(300) + 'null' + '}]}'.repeat(300));
  assert.equal(text(canonicalBody(shallow)), REFERENCE(shallow));
});

test('a cycle is a TypeError (as JSON.stringify\'s), never a hang; a toJSON\'s throw is passed on; a getter that throws leaves its member out, as ever', () => {
  const object = { a: 1 };
  object.self = { back: object };
  const array = [1];
  array.push([array]);
  for (const cyclic of [object, array]) {
    assert.throws(() => canonicalBody(cyclic), { name: 'TypeError', message: /circular/ });
  }
  const boom = new Error('toJSON failed');
  assert.throws(() => canonicalBody([{ a: { toJSON() { throw boom; } } }]), (error) => error === boom);
  assert.equal(text(canonicalBody([{ b: 1, get x() { throw boom; } }])), '[{"b":1}]');
  assert.throws(() => canonicalBody({ n: 1n }), { name: 'TypeError' }, 'a BigInt, as JSON.stringify');
  // The wasm is still sound after the throws.
  assert.equal(text(canonicalBody({ b: 1, a: 2 })), '{"a":2,"b":1}');
});

/** A JSON body nested `depth` levels deep (objects in arrays), with `leaf` at the bottom. */
const deepBody = (depth, leaf) => '[{"v":'.repeat(depth) + JSON.stringify(leaf) + '}]'.repeat(depth);

/**
 * Sends `url` a 5000-level body under one key, then the same body, then another: the first is
 * a 201 (`{ run: 1, array: true }`), the repeat a replay, the other a 422, whose problem is
 * returned; the route ran once (`runs()`).
 */
async function deepBodyKeyed(url, runs) {
  const key = newKey();
  const send = (body) => fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key }, body });
  const first = await send(deepBody(5_000, 'a'));
  assert.equal(first.status, 201, await first.clone().text());
  assert.deepEqual(await first.json(), { run: 1, array: true });
  const repeat = await send(deepBody(5_000, 'a'));
  assert.equal(repeat.status, 201);
  assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
  const other = await send(deepBody(5_000, 'b'));
  assert.equal(other.status, 422, await other.clone().text());
  assert.equal(runs(), 1);
  return other.json();
}

test('Express: a JSON body nested 5000 levels deep after express.json() is fingerprinted: the route runs once, a repeat replays, another one is a 422', async () => {
  let runs = 0;
  const app = express();
  app.set('env', 'test');
  app.post('/deep', express.json({ limit: '1mb' }), expressIdempotency({ identity: false }), (req, res) => {
    runs++;
    res.status(201).json({ run: runs, array: Array.isArray(req.body) });
  });
  const { url, close } = await listen(app);
  try {
    const problem = await deepBodyKeyed(`${url}/deep`, () => runs);
    assert.equal(problem.code, 'idempotency-key-reused');
  } finally {
    await close();
  }
});

test('Fastify: a JSON body nested 5000 levels deep is fingerprinted: the route runs once, a repeat replays, another one is a 422', async () => {
  let runs = 0;
  const app = Fastify();
  await app.register(fastifyIdempotency, { identity: false });
  app.post('/deep', async (request, reply) => {
    runs++;
    return reply.code(201).send({ run: runs, array: Array.isArray(request.body) });
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${app.server.address().port}`;
  try {
    await deepBodyKeyed(`${url}/deep`, () => runs);
  } finally {
    await app.close();
  }
});

test('one fingerprint for a JSON body however it was read: a retry landing on an instance that mounts the companion otherwise (plain, Express before or after express.json(), Fastify, Hono), on one store, is a replay, not a 422', async () => {
  const { idempotency, MemoryStore, toNodeHandler } = await import('retry-fetch/server');
  const { idempotency: honoIdempotency } = await import('retry-fetch/hono');
  const { Hono } = await import('hono');
  const { getRequestListener } = await import('@hono/node-server');
  const store = new MemoryStore();
  const options = { store, identity: false };
  let charges = 0;
  const charge = (body) => ({ charge: ++charges, amount: body.amount });
  const plain = toNodeHandler(idempotency(async (request) => Response.json(charge(await request.json()), { status: 201 }), options));
  const parsedFirst = express();
  parsedFirst.post('/pay', express.json(), expressIdempotency(options), (req, res) => res.status(201).json(charge(req.body)));
  const adapterFirst = express();
  adapterFirst.post('/pay', expressIdempotency(options), express.json(), (req, res) => res.status(201).json(charge(req.body)));
  const fastify = Fastify();
  await fastify.register(fastifyIdempotency, options);
  fastify.post('/pay', async (request, reply) => reply.code(201).send(charge(request.body)));
  await fastify.ready();
  const hono = new Hono();
  hono.post('/pay', honoIdempotency(options), async (c) => c.json(charge(await c.req.json()), 201));
  const instances = {
    plain: await listen(plain),
    'express (express.json() first)': await listen(parsedFirst),
    'express (adapter first)': await listen(adapterFirst),
    fastify: await listen((req, res) => fastify.routing(req, res)),
    hono: await listen(getRequestListener(hono.fetch)),
  };
  const post = (name, key, body, type = 'application/json') =>
    fetch(`${instances[name].url}/pay`, { method: 'POST', headers: { 'content-type': type, 'idempotency-key': key }, body });
  try {
    const names = Object.keys(instances);
    // Keys out of order and spaces, as JSON.stringify of an object literal or Python's json.dumps send.
    const body = '{"orderId": "o-1", "amount": 4200, "card": {"last4": "4242", "brand": "visa"}}';
    for (const first of names) {
      for (const then of names) {
        if (first === then) continue;
        const key = newKey();
        charges = 0;
        const a = await post(first, key, body);
        assert.equal(a.status, 201, `${first}`);
        const b = await post(then, key, body);
        assert.equal(b.status, 201, `${first} then ${then}: the stored answer, not ${b.status}`);
        assert.equal(b.headers.get('idempotent-replayed'), 'true', `${first} then ${then}`);
        assert.deepEqual(await b.json(), await a.json());
        assert.equal(charges, 1, `${first} then ${then}: charged once`);
        // Another JSON value under the key is still another request, wherever it lands.
        const c = await post(then, key, '{"orderId": "o-1", "amount": 4201, "card": {"last4": "4242", "brand": "visa"}}');
        assert.equal(c.status, 422, `${first} then ${then}: another amount`);
        await c.arrayBuffer();
      }
    }
    // A body of another type is its bytes: another spacing is another request.
    const key = newKey();
    assert.equal((await post('plain', key, '{"amount":4200}', 'text/plain')).status, 201);
    assert.equal((await post('hono', key, '{"amount": 4200}', 'text/plain')).status, 422);
  } finally {
    await Promise.all(Object.values(instances).map((i) => i.close()));
    await fastify.close();
  }
});

test('a JSON body read by the companion is its value only where every number reads back exactly: ids past a double\'s precision, 1e400 are their bytes (another id, another request); a body too deep for JSON.stringify is its bytes, never a 500', async () => {
  const { idempotency, MemoryStore } = await import('retry-fetch/server');
  let runs = 0;
  const handler = idempotency(async (request) => (runs++, new Response(await request.text(), { status: 201 })), { store: new MemoryStore(), identity: false, maxBodyBytes: 4 * 1024 * 1024 });
  const post = (key, body) => handler(new Request('http://localhost/pay', { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body }));
  for (const [a, b] of [
    ['{"to": 12345678901234567891}', '{"to": 12345678901234567892}'],
    ['[1e400]', '[null]'],
    ['[1e400]', '[-1e400]'],
    ['[0.1]', '[0.1000000000000000055511151231257827]'],
    // An exponent of i64::MIN, whose absolute value does not fit: not exact, not 0.
    ['[0]', '[1e-9223372036854775808]'],
  ]) {
    const key = newKey();
    assert.equal((await post(key, a)).status, 201, a);
    const second = await post(key, b);
    assert.equal(second.status, 422, `${a} then ${b}`);
  }
  // Exact numbers: the value, whatever its spelling.
  const key = newKey();
  assert.equal((await post(key, '{"b": 1.50, "a": 100e-2}')).status, 201);
  const same = await post(key, '{"a":1,"b":1.5}');
  assert.equal(same.headers.get('idempotent-replayed'), 'true');
  // A byte order mark before the JSON (which express.json() skips) is the same value.
  const bomKey = newKey();
  assert.equal((await post(bomKey, '\uFEFF{"amount": 7}')).status, 201);
  const noBom = await post(bomKey, '{"amount":7}');
  assert.equal(noBom.headers.get('idempotent-replayed'), 'true', 'a BOM changes nothing');
  // Nested deeper than JSON.stringify goes: fingerprinted as its bytes, run once, replayed.
  const deep = '['.repeat(1_000_000) + ']'.repeat(1_000_000);
  const deepKey = newKey();
  runs = 0;
  assert.equal((await post(deepKey, deep)).status, 201);
  const again = await post(deepKey, deep);
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(runs, 1);
});

test('Express: with the bytes kept by express.json()\'s verify (req.rawBody), an id past a double\'s precision is the bytes, as where the companion reads them: another id under the key is a 422, and a retry moving between that app and a plain handler is a replay', async () => {
  const { idempotency, MemoryStore, toNodeHandler } = await import('retry-fetch/server');
  const store = new MemoryStore();
  const options = { store, identity: false };
  let charges = 0;
  const app = express();
  app.post('/pay', express.json({ verify: (req, _res, buf) => (req.rawBody = buf) }), expressIdempotency(options), (req, res) => res.status(201).json({ charge: ++charges }));
  const plain = toNodeHandler(idempotency(async () => Response.json({ charge: ++charges }, { status: 201 }), options));
  const instances = { express: await listen(app), plain: await listen(plain) };
  const post = (name, key, body) => fetch(`${instances[name].url}/pay`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body });
  try {
    const key = newKey();
    assert.equal((await post('express', key, '{"to": 12345678901234567891}')).status, 201);
    const other = await post('express', key, '{"to": 12345678901234567892}');
    assert.equal(other.status, 422, 'another account under the key: not the first one\'s answer');
    const moved = await post('plain', key, '{"to": 12345678901234567891}');
    assert.equal(moved.headers.get('idempotent-replayed'), 'true', 'the retry on the plain instance');
    assert.equal(charges, 1);
  } finally {
    await Promise.all(Object.values(instances).map((i) => i.close()));
  }
});

test('Express: a req.rawBody that is not this JSON body\'s bytes (a placeholder, a form\'s bytes) is not fingerprinted: a form is its parsed value, another one under the key is a 422', async () => {
  const { MemoryStore } = await import('retry-fetch/server');
  const app = express();
  app.use((req, _res, next) => ((req.rawBody = ''), next())); // filled only by the JSON parser's verify
  app.use(express.json({ verify: (req, _res, buf) => (req.rawBody = buf) }));
  app.use(express.urlencoded({ extended: false, verify: (req, _res, buf) => (req.rawBody = buf) }));
  let sent = 0;
  app.post('/transfer', expressIdempotency({ store: new MemoryStore(), identity: false }), (req, res) => res.status(201).json({ sent: ++sent }));
  const server = await listen(app);
  const post = (key, body, type = 'application/x-www-form-urlencoded') => fetch(`${server.url}/transfer`, { method: 'POST', headers: { 'content-type': type, 'idempotency-key': key }, body });
  try {
    const key = newKey();
    assert.equal((await post(key, 'amount=10&to=alice')).status, 201);
    assert.equal((await post(key, 'to=alice&amount=10')).headers.get('idempotent-replayed'), 'true', 'the same form value in another order');
    assert.equal((await post(key, 'amount=9999&to=mallory')).status, 422, 'another form under the key');
    // A JSON body whose placeholder the parser never filled (an empty body): not the bytes of ''.
    const jsonKey = newKey();
    assert.equal((await post(jsonKey, '{"a":1}', 'application/json')).status, 201);
    assert.equal((await post(jsonKey, '{"a":2}', 'application/json')).status, 422);
    assert.equal(sent, 2);
  } finally {
    await server.close();
  }
});

test('a realm that refuses to make code from strings (node --disallow-code-generation-from-strings): a JSON body is fingerprinted as elsewhere, not a crash', async () => {
  const { spawnSync } = await import('node:child_process');
  const script = `
    const { idempotency, MemoryStore } = await import('retry-fetch/server');
    let runs = 0;
    const h = idempotency(async () => new Response('run ' + ++runs, { status: 201 }), { store: new MemoryStore(), identity: false });
    const post = (body) => h(new Request('http://localhost/pay', { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'k1' }, body }));
    const a = await post('{"b": 2, "a": 1}');
    const b = await post('{"a":1,"b":2}');
    const c = await post('{"a":1,"b":3}');
    console.log(JSON.stringify([a.status, b.status, b.headers.get('idempotent-replayed'), c.status, runs]));
  `;
  const child = spawnSync(process.execPath, ['--disallow-code-generation-from-strings', '--input-type=module', '-e', script], { cwd: new URL('.', import.meta.url), encoding: 'utf8', timeout: 30_000 });
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout.trim()), [201, 201, 'true', 422, 1]);
});
