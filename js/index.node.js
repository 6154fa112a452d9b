// Node entry (ES module): instantiate the wasm synchronously from the file next to this one.
// Everything else is the wasm's own exports.
import { readFileSync } from 'node:fs';
import { initSync, setErrorClasses } from './retry_fetch.js';
import { RetryError, CircuitOpenError } from './errors.js';

initSync({ module: readFileSync(new URL('./retry_fetch_bg.wasm', import.meta.url)) });

setErrorClasses(RetryError, CircuitOpenError);

export {
  retryFetch, createRetryFetch, backoffDelays, isRetryError, isCircuitOpenError,
  RetryBudget, AdaptiveThrottle, CircuitBreaker,
} from './retry_fetch.js';
export { RetryError, CircuitOpenError };
