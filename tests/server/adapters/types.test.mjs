// The adapters' types (express.d.ts, fastify.d.ts, hono.d.ts) as a TypeScript user sees them:
// tsc --strict on a consumer that imports 'retry-fetch/express' (with node:http; Express's own
// types are not installed here, and the adapter must not need them), 'retry-fetch/fastify' and
// 'retry-fetch/hono' (both frameworks ship their types), in a temporary folder whose
// node_modules link to the package (pkg/) and to the repository's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, symlinkSync, writeFileSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');

const CONSUMER = `
import http from 'node:http';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { idempotency as expressIdempotency, type IdempotencyMiddleware } from 'retry-fetch/express';
import fastifyIdempotency, { idempotency as namedFastify } from 'retry-fetch/fastify';
import { idempotency as honoIdempotency, type IdempotencyEnv } from 'retry-fetch/hono';
import { MemoryStore, type IdempotencyContext } from 'retry-fetch/server';

// Express / Connect: node:http's req and res are accepted.
const mw: IdempotencyMiddleware = expressIdempotency({ store: new MemoryStore(), lockTimeoutMs: 2_000, concurrent: 'reject' });
http.createServer((req, res) => mw(req, res, (error) => {
  res.statusCode = error === undefined ? 404 : 500;
  res.end();
}));
// @ts-expect-error an unknown option
expressIdempotency({ lockTimeout: 5 });
// @ts-expect-error acceptAfterMs: the adapters refuse it (the route answers through the framework)
expressIdempotency({ acceptAfterMs: 2_000 });
// @ts-expect-error acceptAfterMs, likewise
honoIdempotency({ acceptAfterMs: 2_000 });
// Express's Request is augmented (a global namespace that exists without @types/express too).
const seen: Express.Request['idempotency'] = undefined;

// Fastify: a plugin with the companion's options; request.idempotency and the opt-out are typed.
const app = Fastify();
await app.register(fastifyIdempotency, { ttlMs: 60_000 });
await app.register(namedFastify);
app.post('/pay', { config: { idempotency: false } }, async (request) => {
  const ctx: IdempotencyContext | null | undefined = request.idempotency;
  return { key: ctx?.key ?? null, derived: ctx?.keyFor('charge') };
});
// Outside the plugin's context request.idempotency is undefined, not null: a null check alone
// does not make it a context.
app.post('/outside', async (request) =>
  // @ts-expect-error possibly undefined after the null check
  (request.idempotency === null ? 'not covered' : request.idempotency.key));

// Hono: c.get('idempotency') / c.var.idempotency, typed; IdempotencyEnv<Tx> for a typed tx.
const h = new Hono();
h.post('/pay', honoIdempotency({ maxBodyBytes: 1024 }), (c) => c.json({ key: c.get('idempotency').key, other: c.var.idempotency.keyFor('x') }));
// app.use() on a path, the route declared apart: typed through Hono's ContextVariableMap.
type IsAny<T> = 0 extends 1 & T ? true : false;
h.use('/orders/*', honoIdempotency());
h.post('/orders/:id', (c) => {
  const ctx = c.get('idempotency');
  const notAny: IsAny<typeof ctx> = false;
  const key: string | null = ctx.key;
  return c.json({ key, notAny });
});
interface Tx { query(sql: string): Promise<unknown> }
const typed = new Hono<IdempotencyEnv<Tx>>();
typed.post('/pay', honoIdempotency<Tx>(), async (c) => {
  await c.var.idempotency.tx?.query('SELECT 1');
  return c.text('ok');
});
export { seen };
`;

test('the adapters\' types: tsc --strict on a consumer of retry-fetch/express, /fastify and /hono', { timeout: 60_000 }, () => {
  assert.ok(existsSync(TSC), 'typescript is installed (npm ci at the repository root)');
  const dir = mkdtempSync(path.join(os.tmpdir(), 'retry-fetch-adapter-types-'));
  try {
    mkdirSync(path.join(dir, 'node_modules/@types'), { recursive: true });
    symlinkSync(path.join(ROOT, 'pkg'), path.join(dir, 'node_modules/retry-fetch'));
    for (const name of ['fastify', 'hono', 'undici-types']) {
      symlinkSync(path.join(ROOT, 'node_modules', name), path.join(dir, 'node_modules', name));
    }
    symlinkSync(path.join(ROOT, 'node_modules/@types/node'), path.join(dir, 'node_modules/@types/node'));
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }));
    writeFileSync(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { strict: true, noEmit: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', lib: ['es2022', 'dom'], types: ['node'] },
        files: ['consumer.ts'],
      }),
    );
    writeFileSync(path.join(dir, 'consumer.ts'), CONSUMER);
    try {
      execFileSync(process.execPath, [TSC, '-p', dir], { stdio: 'pipe', cwd: dir });
    } catch (error) {
      assert.fail(`tsc failed:\n${error.stdout?.toString() ?? ''}${error.stderr?.toString() ?? ''}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
