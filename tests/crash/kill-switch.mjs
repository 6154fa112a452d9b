// The kill points of the crash tests' child processes (payment-server.mjs, stream-worker.mjs):
// a seeded choice per request or message of where the process dies, and a real SIGKILL that
// is logged first (the parent counts kills per point from the log).
import { appendFileSync } from 'node:fs';

/** mulberry32: a small seeded PRNG, so a run's kill pattern is reproducible per process. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * `decide()`: where the next request dies, 'a', 'b', 'c' or '' (it lives), each point with
 * probability `killP`; a `force`d point comes first, once. `die(point, detail)`: log
 * `{ ...who, point, ...detail, at }` to `logFile`, then SIGKILL this process.
 */
export function killSwitch({ seed, killP, force = '', logFile, who }) {
  const random = prng(seed);
  let forced = force;
  return {
    decide() {
      if (forced) {
        const point = forced;
        forced = '';
        return point;
      }
      const r = random();
      if (r < killP) return 'a';
      if (r < 2 * killP) return 'b';
      if (r < 3 * killP) return 'c';
      return '';
    },
    die(point, detail) {
      appendFileSync(logFile, `${JSON.stringify({ ...who, point, ...detail, at: Date.now() })}\n`);
      process.kill(process.pid, 'SIGKILL');
    },
  };
}
