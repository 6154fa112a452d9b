// What every Node e2e test file needs: the fault-injecting server (tests/support/fault-server.mjs)
// on a random port, started before the file's tests and closed after them, and `seq(steps)`,
// a scenario with its own id: `{ url, log() }` (`log()` returns what the server saw at once;
// the scenarios await it, as their browser runner's log is a fetch).
//
// Every test gets an origin of its own (another port onto the same server, opened before it and
// closed after it): the client keeps state per origin for the whole process (the default retry
// budget counts every call's failed retries there for seconds), so on one shared origin a test's
// retries would depend on the failures of the tests that ran before it.
import { test, before, after, beforeEach, afterEach } from 'node:test';
import { startFaultServer } from '../support/fault-server.mjs';

/** Start the server around this file's tests; returns `seq`, on the running test's origin. */
export function useFaultServer(prefix) {
  let server;
  let origin = null;
  let counter = 0;
  before(async () => {
    server = await startFaultServer();
  });
  after(() => server.close());
  beforeEach(async () => {
    origin = await server.origin();
  });
  afterEach(async () => {
    await origin?.close();
    origin = null;
  });
  return (steps) => {
    if (origin === null) throw new Error('seq() is for use inside a test (each test has its own origin)');
    const id = `${prefix}-${++counter}-${Math.random().toString(36).slice(2)}`;
    return { url: origin.seq(id, steps), log: () => server.log(id) };
  };
}

/** One node:test test per scenario of `scenarios` (tests/e2e/scenarios.mjs, contract.mjs). */
export function runScenarios(api, scenarios, prefix) {
  const seq = useFaultServer(prefix);
  for (const scenario of scenarios) {
    test(scenario.name, () => scenario.run({ api, seq, env: 'node' }));
  }
}
