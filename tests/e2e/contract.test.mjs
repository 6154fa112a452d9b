// The contract scenarios (tests/e2e/contract.mjs) against the built package (imported as
// 'retry-fetch', linked to pkg/ by scripts/test.sh) and a local fault-injecting server on a
// random port.
import { test, before, after } from 'node:test';
import * as api from 'retry-fetch';
import { startFaultServer } from '../support/fault-server.mjs';
import { scenarios } from './contract.mjs';

let server;
let counter = 0;
before(async () => {
  server = await startFaultServer();
});
after(() => server.close());

const seq = (steps) => {
  const id = `contract-${++counter}-${Math.random().toString(36).slice(2)}`;
  return { url: server.seq(id, steps), log: async () => server.log(id) };
};

for (const scenario of scenarios) {
  test(scenario.name, () => scenario.run({ api, seq, env: 'node' }));
}
