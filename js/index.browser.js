// Browser and worker entry (an ES module, no bundler needed): fetch and instantiate the wasm
// once, with top-level await, before the exports can be used. Everything else is the wasm's.
import { setErrorClasses } from './retry_fetch.js';
import { loadWasm } from './load-wasm.js';
import { RetryError, CircuitOpenError } from './errors.js';

await loadWasm(new URL('./retry_fetch_bg.wasm', import.meta.url));

setErrorClasses(RetryError, CircuitOpenError);

export {
  retryFetch, createRetryFetch, backoffDelays, isRetryError, isCircuitOpenError,
  RetryBudget, AdaptiveThrottle, CircuitBreaker,
} from './retry_fetch.js';
export { RetryError, CircuitOpenError };
