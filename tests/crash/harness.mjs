// Shared by the crash tests (tests/crash/*.test.mjs): child processes that SIGKILL themselves
// and are started again, the log of their kills, unique names per run.
import { spawn } from 'node:child_process';
import { readFileSync, existsSync, mkdtempSync, rmSync, cpSync } from 'node:fs';
import { once } from 'node:events';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

const PKG = fileURLToPath(new URL('../../pkg/', import.meta.url));

/**
 * A copy of pkg/ in `dir` that the child processes import (env PKG_DIR): they are started
 * again and again during a test, and each start loads the package anew, so a rebuild of pkg/
 * in the middle of a run (a developer's `scripts/build-pkg.sh`) would otherwise make them fail
 * to load, or mix two builds. The copy is checked by loading its server entry; a copy taken
 * during a build is taken again (every 10 s, for up to a minute).
 */
export async function snapshotPackage(dir) {
  for (let i = 0; ; i++) {
    const copy = path.join(dir, `pkg-${i}`);
    try {
      cpSync(PKG, copy, { recursive: true });
      await import(pathToFileURL(path.join(copy, 'server.js')).href);
      return copy;
    } catch (error) {
      if (i >= 6) throw new Error(`pkg/ does not load (is it built? scripts/build-pkg.sh): ${error?.message ?? error}`, { cause: error });
      await sleep(10_000);
    }
  }
}

/** A name part unique to this run: lower case, digits and _, usable in SQL and Redis names. */
export function runId() {
  return `${Date.now().toString(36)}_${process.pid}_${Math.floor(Math.random() * 1e6).toString(36)}`;
}

/** A temporary directory (for the kill logs), removed by `cleanup()`. */
export function tempDir() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'retry-fetch-crash-'));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** The kills written to `file` (one JSON object a line) so far. */
export function readKills(file) {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line));
}

/** `{ a: n, b: n, c: n }` of `kills`, for the points named in `points`. */
export function countKills(kills, points) {
  const counts = Object.fromEntries(points.map((p) => [p, 0]));
  for (const k of kills) counts[k.point] = (counts[k.point] ?? 0) + 1;
  return counts;
}

/** The first point of `points` no kill in `file` hit yet, or '' (forces it in the next process). */
export function missingPoint(file, points) {
  const counts = countKills(readKills(file), points);
  return points.find((p) => counts[p] === 0) ?? '';
}

/**
 * `slots` child processes running `script` (with an IPC channel); each one that exits is
 * started again (next generation) until `stop()`. `envFor(slot, generation)` gives the extra
 * environment of each start. `ready()` resolves once every first generation sent `{ ready }`.
 */
export class Fleet {
  #script;
  #envFor;
  #children = new Map(); // slot -> ChildProcess
  #stopping = false;
  #readyWaiters = [];
  exits = []; // { slot, generation, code, signal }
  starts = 0;
  stderr = new Map(); // slot -> last ~8 kB of stderr (all generations)

  constructor(script, slots, envFor) {
    this.#script = script;
    this.#envFor = envFor;
    for (let slot = 0; slot < slots; slot++) {
      this.#readyWaiters.push(new Promise((resolve, reject) => this.#spawn(slot, 0, resolve, reject)));
    }
  }

  #spawn(slot, generation, onReady, onFail) {
    this.starts++;
    const child = spawn(process.execPath, [this.#script], {
      env: { ...process.env, ...this.#envFor(slot, generation) },
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    this.#children.set(slot, child);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      const text = (this.stderr.get(slot) ?? '') + chunk;
      this.stderr.set(slot, text.slice(-8192));
    });
    child.on('message', (message) => {
      if (message?.ready) onReady?.();
    });
    child.on('exit', (code, signal) => {
      // The test's own SIGKILLs (stop()) are not the children's.
      if (!child.killedByParent) this.exits.push({ slot, generation, code, signal });
      if (this.#children.get(slot) === child) this.#children.delete(slot);
      onFail?.(new Error(`slot ${slot} exited (${signal ?? code}) before it was ready:\n${this.stderr.get(slot) ?? ''}`));
      if (!this.#stopping) this.#spawn(slot, generation + 1);
    });
  }

  /** Resolves when every first process is ready (rejects if one died before). */
  ready() {
    return Promise.all(this.#readyWaiters);
  }

  /** The exits that were not a SIGKILL (the processes kill themselves with SIGKILL only). */
  unexpectedExits() {
    return this.exits.filter((e) => e.signal !== 'SIGKILL');
  }

  /** Stop respawning, SIGKILL every live child and wait for their exits. */
  async stop() {
    this.#stopping = true;
    const live = [...this.#children.values()];
    await Promise.all(
      live.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = once(child, 'exit');
        child.killedByParent = true;
        child.kill('SIGKILL');
        await exited;
      }),
    );
    this.#children.clear();
  }

  /** The stderr of every slot, for a failure message. */
  stderrText() {
    return [...this.stderr].map(([slot, text]) => `--- slot ${slot} stderr (tail) ---\n${text}`).join('\n');
  }
}

/** Runs `tasks` (functions returning promises) at most `limit` at a time; resolves with their results in order. */
export async function pool(tasks, limit) {
  const results = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  return results;
}
