// What every Node e2e test file needs: the fault-injecting server (tests/support/fault-server.mjs)
// on a random port, started before the file's tests and closed after them, and `seq(steps)`,
// a scenario with its own id: `{ url, log() }` (`log()` returns what the server saw at once;
// the scenarios await it, as their browser runner's log is a fetch).
import { test, before, after } from 'node:test';
import { startFaultServer } from '../support/fault-server.mjs';

/** Start the server around this file's tests; returns `seq`. */
export function useFaultServer(prefix) {
  let server;
  let counter = 0;
  before(async () => {
    server = await startFaultServer();
  });
  after(() => server.close());
  return (steps) => {
    const id = `${prefix}-${++counter}-${Math.random().toString(36).slice(2)}`;
    return { url: server.seq(id, steps), log: () => server.log(id) };
  };
}

/** One node:test test per scenario of `scenarios` (tests/e2e/scenarios.mjs, contract.mjs). */
export function runScenarios(api, scenarios, prefix) {
  const seq = useFaultServer(prefix);
  for (const scenario of scenarios) {
    test(scenario.name, () => scenario.run({ api, seq, env: 'node' }));
  }
}
