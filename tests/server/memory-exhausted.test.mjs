// The companion's wasm memory full (wasm32 tops out at 4 GiB; many large bodies in flight at
// once): a request body or an answer it cannot copy in is answered, never an abort of the
// instance (which would end the process, and with MemoryStore every stored answer). Run in a
// child process: the memory is grown to its ceiling there, for good.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const child = `
import http from 'node:http';
import { idempotency, toNodeHandler } from 'retry-fetch/server';
import { initSync } from './node_modules/retry-fetch/retry_fetch_server.js';
const out = {};
let runs = 0;
const h = idempotency(async (req) => {
  runs++;
  const size = Number(new URL(req.url).searchParams.get('answer') ?? 2);
  await req.arrayBuffer();
  const bytes = new Uint8Array(size).fill(120);
  // A response of another fetch implementation (not instanceof Response): read as one.
  if (new URL(req.url).searchParams.has('foreign')) return { status: 201, headers: {}, arrayBuffer: async () => bytes.buffer };
  return new Response(bytes, { status: 201 });
}, { maxBodyBytes: 8 << 20, identity: false });
const server = http.createServer(toNodeHandler(h, { onError: () => {} }));
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = 'http://127.0.0.1:' + server.address().port;
const post = (path, key, size) => fetch(base + path, { method: 'POST', headers: { 'Idempotency-Key': key }, body: new Uint8Array(size) });
out.warm = (await post('/pay', 'warm', 1000)).status;
// Every page the memory can still have, taken from JS: the wasm's allocator finds none.
const { memory } = initSync({ module: new Uint8Array(0) });
for (let step = 32768; step >= 1; step >>= 1) { try { memory.grow(step); } catch {} }
out.pages = memory.buffer.byteLength / 65536;
const big = await post('/pay', 'big', 4 << 20);
out.big = { status: big.status, problem: (await big.json()).code, retryAfter: big.headers.get('retry-after') };
const large = await post('/pay?answer=' + (4 << 20), 'large-answer', 10);
out.largeAnswer = { status: large.status, bytes: (await large.arrayBuffer()).byteLength };
const again = await post('/pay?answer=' + (4 << 20), 'large-answer', 10);
out.largeAgain = { status: again.status, problem: (await again.json()).code };
const foreign = await post('/pay?foreign&answer=' + (4 << 20), 'foreign-answer', 10);
out.foreign = { status: foreign.status, bytes: (await foreign.arrayBuffer()).byteLength };
out.small = (await post('/pay', 'small', 100)).status;
out.runs = runs;
server.close(); server.closeAllConnections();
console.log(JSON.stringify(out));
`;

test('a full wasm memory: a request body it cannot hold is a 503 with Retry-After (nothing ran), an answer it cannot copy is sent whole and kept as too large; the process lives on', { timeout: 120_000 }, async () => {
  const cwd = fileURLToPath(new URL('.', import.meta.url));
  const stdout = await new Promise((resolve, reject) => {
    execFile(process.execPath, ['--input-type=module', '-e', child], { cwd, timeout: 100_000 }, (error, out, err) => {
      if (error) reject(new Error(`the child failed (${error.code ?? error.signal}): ${err}`));
      else resolve(out);
    });
  });
  const out = JSON.parse(stdout.trim().split('\n').pop());
  assert.equal(out.warm, 201);
  assert.equal(out.pages, 65536, 'the memory at its ceiling');
  assert.deepEqual(out.big, { status: 503, problem: 'idempotency-out-of-memory', retryAfter: out.big.retryAfter });
  assert.ok(Number(out.big.retryAfter) > 0, `Retry-After: ${out.big.retryAfter}`);
  assert.deepEqual(out.largeAnswer, { status: 201, bytes: 4 << 20 }, 'the answer sent whole');
  assert.deepEqual(out.largeAgain, { status: 500, problem: 'idempotency-answer-too-large' }, 'and kept as too large');
  assert.deepEqual(out.foreign, { status: 201, bytes: 4 << 20 }, 'another implementation\'s answer too');
  assert.equal(out.small, 201, 'a small request still works');
  assert.equal(out.runs, 4, 'the 503 ran nothing; the repeat of the large answer did not run');
});
