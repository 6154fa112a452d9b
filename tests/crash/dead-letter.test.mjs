// Crash test: dead letters. A Redis stream worker behind `idempotent(fn, { store: RedisStore,
// maxRuns: 2, onDeadLetter })` (tests/crash/dead-letter-worker.mjs) meets a poison message
// whose job SIGKILLs the worker mid-run every time. Workers are started one after another
// until one drains the stream. Expected: the poison job ran exactly twice (two kills), then
// the third delivery handed it to onDeadLetter, once, with a history of two crashed runs, and
// acked it; every other message ran once; a later redelivery of the poison (a new stream entry
// with the same key) is answered 'previous-run-failed' without running or a second dead letter.
//
// Needs REDIS_URL (scripts/test.sh starts a redis-server).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runId, tempDir } from './harness.mjs';
import { REDIS_URL, needs } from '../support/services.mjs';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'dead-letter-worker.mjs');
const RUN = runId();
const skip = needs('REDIS_URL');

let redis;
const cleanups = [];
after(async () => {
  for (const c of cleanups) c();
  await redis?.quit().catch(() => {});
});

/** Runs one worker to its end: its exit code, or the signal that ended it. */
function worker(env, consumer) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKER], { env: { ...process.env, ...env, CONSUMER: consumer }, stdio: ['ignore', 'inherit', 'inherit'] });
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`${consumer} ran over 30 s`)); }, 30_000);
    child.on('exit', (code, signal) => { clearTimeout(timer); resolve(signal ?? code); });
  });
}

const runsOf = (file, id) => (existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []).filter((r) => r.id === id);

test('a poison job that SIGKILLs its worker every time is dead-lettered after maxRuns, once', { skip, timeout: 120_000 }, async () => {
  const { createClient } = await import('redis');
  redis = createClient({ url: REDIS_URL });
  redis.on('error', () => {});
  await redis.connect();
  const stream = `dl:${RUN}`;
  const group = 'workers';
  await redis.xGroupCreate(stream, group, '0', { MKSTREAM: true });
  const ids = Array.from({ length: 6 }, (_, i) => `m-${RUN}-${i}`);
  const poison = ids[2];
  for (const id of ids) await redis.xAdd(stream, '*', { id, poison: id === poison ? '1' : '0' });
  const temp = tempDir();
  cleanups.push(temp.cleanup);
  const runLog = path.join(temp.dir, 'runs.jsonl');
  const env = { REDIS_URL, STREAM: stream, GROUP: group, PREFIX: `dl:${RUN}:`, MAX_RUNS: '2', RUN_LOG: runLog };

  const endings = [];
  for (let generation = 0; generation < 6; generation++) {
    const end = await worker(env, `w${generation}`);
    endings.push(end);
    if (end === 0) break;
  }
  assert.deepEqual(endings, ['SIGKILL', 'SIGKILL', 0], 'two workers died on the poison, the third drained the stream');
  assert.equal(runsOf(runLog, poison).length, 2, 'the poison job ran maxRuns times');
  for (const id of ids.filter((i) => i !== poison)) assert.equal(runsOf(runLog, id).length, 1, `${id} ran once`);

  const dead = await redis.xRange(`${stream}:dead`, '-', '+');
  assert.equal(dead.length, 1, 'one dead letter');
  const record = JSON.parse(dead[0].message.record);
  assert.equal(record.key, poison);
  assert.deepEqual(record.input, { id: poison, poison: true });
  assert.equal(record.failedRuns, 2);
  assert.equal(record.maxRuns, 2);
  assert.deepEqual(record.runs.map((r) => r.outcome), ['crashed', 'crashed']);
  for (const r of record.runs) assert.match(r.instance, /:\d+$/, 'host:pid of the worker that died');
  assert.equal((await redis.xPending(stream, group)).pending, 0, 'everything acked');

  // Redelivered later (a producer's retry): answered at once, not run, no second dead letter.
  await redis.xAdd(stream, '*', { id: poison, poison: '1' });
  assert.equal(await worker(env, 'w-late'), 0);
  assert.equal(runsOf(runLog, poison).length, 2);
  assert.equal((await redis.xRange(`${stream}:dead`, '-', '+')).length, 1);
  await redis.del([stream, `${stream}:dead`]);
});
