// Long work through a crash: a keyed POST whose handler takes 5 s behind the companion's
// `acceptAfterMs: 300` (a 202 while it runs), followed by a real `retryFetch` client with
// `followAccepted: true`, on two server instances sharing a PostgresStore, the charge written
// through ctx.tx. A proxy in this process stands for the load balancer: it sends every request
// to the first instance while it lives, then to the second.
//   - no crash: the call resolves with the handler's answer, the handler ran once, every
//     request carried one key;
//   - the instance running the handler is SIGKILLed mid-run: its transaction (and the charge
//     written in it) dies with it; the client's next repeat, same key, reaches the second
//     instance, which runs the handler once more from the start: the call still resolves with
//     a 201, and there is exactly one charge.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { PostgresStore } from '../../pkg/server.js';
import { retryFetch } from '../../pkg/index.node.js';
import { freePort, runId, snapshotPackage, tempDir } from './harness.mjs';
import { DATABASE_URL, needs } from '../support/services.mjs';

const skip = needs('DATABASE_URL');
const SERVER = fileURLToPath(new URL('./long-work-server.mjs', import.meta.url));
const HANDLER_MS = 5_000;
const ACCEPT_AFTER_MS = 300;

let pool;
let tmp;
let pkgDir;
const tables = [];

before(async () => {
  if (skip) return;
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
  pool.on('error', () => {});
  tmp = tempDir();
  pkgDir = await snapshotPackage(tmp.dir);
});

after(async () => {
  if (!pool) return;
  for (const t of tables) await pool.query(`DROP TABLE IF EXISTS "${t}"`);
  await pool.end();
  tmp.cleanup();
});

/** An instance of long-work-server.mjs; resolves once it listens. `charging` gets its messages. */
async function instance(index, env, charging) {
  const port = await freePort();
  const child = spawn(process.execPath, [SERVER], {
    env: { ...process.env, ...env, PORT: String(port), INSTANCE: String(index), PKG_DIR: pkgDir },
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk) => { stderr = (stderr + chunk).slice(-8192); });
  child.on('message', (m) => { if (m?.charging) charging.push(m.charging); });
  await new Promise((resolve, reject) => {
    child.on('message', (m) => { if (m?.ready) resolve(); });
    child.once('exit', (code, signal) => reject(new Error(`instance ${index} exited (${signal ?? code}):\n${stderr}`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    stderr: () => stderr,
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** The load balancer: every request to the first live target; logs method and key. */
async function proxy(targets) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const live = targets.find((t) => t.child.exitCode === null && t.child.signalCode === null);
    seen.push({ method: req.method, key: req.headers['idempotency-key'], to: targets.indexOf(live) });
    const upstream = http.request(`${live.url}${req.url}`, { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${server.address().port}`, seen, close: () => { server.closeAllConnections(); server.close(); } };
}

async function setup() {
  const id = runId();
  const idem = `lw_idem_${id}`;
  const charges = `lw_charges_${id}`;
  tables.push(idem, `${idem}_runs`, charges);
  await new PostgresStore({ pool, table: idem }).migrate();
  await pool.query(`CREATE TABLE "${charges}" (id serial PRIMARY KEY, payment_id text NOT NULL, amount int NOT NULL, instance int NOT NULL)`);
  const env = {
    DATABASE_URL, IDEM_TABLE: idem, CHARGES_TABLE: charges,
    HANDLER_MS: String(HANDLER_MS), ACCEPT_AFTER_MS: String(ACCEPT_AFTER_MS), LOCK_TIMEOUT_MS: '2000',
  };
  const charging = [];
  const servers = [await instance(0, env, charging), await instance(1, env, charging)];
  const balancer = await proxy(servers);
  return {
    servers, balancer, charging,
    rows: async () => (await pool.query(`SELECT payment_id, instance FROM "${charges}" ORDER BY id`)).rows,
    async close() { balancer.close(); await Promise.all(servers.map((s) => s.kill())); },
  };
}

const pay = (url, paymentId) => retryFetch(`${url}/payments`, {
  method: 'POST',
  headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify({ paymentId, amount: 4200 }),
}, { followAccepted: true, deadlineMs: 60_000, maxAttempts: 5, baseDelayMs: 200 });

test('long work: a 5 s handler behind acceptAfterMs: 300 is followed to its 201 with one key; the handler ran once', { skip, timeout: 60_000 }, async () => {
  const s = await setup();
  try {
    const res = await pay(s.balancer.url, 'p-1');
    assert.equal(res.status, 201);
    const body = await res.json();
    assert.deepEqual([body.paymentId, body.instance], ['p-1', 0]);
    assert.equal(res.headers.get('idempotent-replayed'), 'true', 'the final answer is the stored one');
    const posts = s.balancer.seen.filter((r) => r.method === 'POST');
    assert.ok(posts.length >= 2, `the 202 was followed: ${JSON.stringify(s.balancer.seen)}`);
    assert.equal(new Set(posts.map((r) => r.key)).size, 1, 'one key on every request');
    assert.equal(s.charging.length, 1, 'the handler ran once');
    assert.deepEqual(await s.rows(), [{ payment_id: 'p-1', instance: 0 }]);
  } finally {
    await s.close();
  }
});

test('long work through a SIGKILL of the instance running the handler: the repeat runs it once more on the other instance, one charge, a 201', { skip, timeout: 60_000 }, async () => {
  const s = await setup();
  try {
    const call = pay(s.balancer.url, 'p-2');
    // The handler has written its charge (uncommitted, in ctx.tx) and the client has its 202.
    while (s.charging.length === 0) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, ACCEPT_AFTER_MS + 200));
    await s.servers[0].kill();
    const res = await call;
    assert.equal(res.status, 201, `${res.status}: ${await res.clone().text()}\n${s.servers[1].stderr()}`);
    const body = await res.json();
    assert.deepEqual([body.paymentId, body.instance], ['p-2', 1], 'answered by the run on the second instance');
    const posts = s.balancer.seen.filter((r) => r.method === 'POST');
    assert.equal(new Set(posts.map((r) => r.key)).size, 1, 'one key on every request');
    assert.ok(posts.some((r) => r.to === 0) && posts.some((r) => r.to === 1), JSON.stringify(posts));
    assert.deepEqual(s.charging.map((c) => c.instance), [0, 1], 'ran on the first, then once more from the start on the second');
    assert.deepEqual(await s.rows(), [{ payment_id: 'p-2', instance: 1 }], 'one charge: the killed run\'s rolled back with its connection');
  } finally {
    await s.close();
  }
});
