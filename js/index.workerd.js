// Cloudflare Workers entry (the `workerd` export condition, which wrangler resolves). Workers
// forbid fetching at global scope and compiling wasm from bytes; a `.wasm` import is compiled
// at deploy time instead (wrangler's default rule gives a `WebAssembly.Module`), and
// instantiating it synchronously here is allowed. Everything else is the wasm's.
import module from './retry_fetch_bg.wasm';
import { initSync, setErrorClasses } from './retry_fetch.js';
import { RetryError, CircuitOpenError } from './errors.js';

initSync({ module });

setErrorClasses(RetryError, CircuitOpenError);

export {
  retryFetch, createRetryFetch, backoffDelays, isRetryError, isCircuitOpenError,
  RetryBudget, AdaptiveThrottle, CircuitBreaker,
} from './retry_fetch.js';
export { RetryError, CircuitOpenError };
