// The end-to-end scenarios against the built package (imported as 'retry-fetch', linked to
// pkg/ by scripts/test.sh) and a local fault-injecting server on a random port.
import * as api from 'retry-fetch';
import { runScenarios } from './runner.mjs';
import { scenarios } from './scenarios.mjs';

runScenarios(api, scenarios, 'node');
