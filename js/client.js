// The public API over the wasm exports. Shared by every entry (Node, browser, worker).
import { retryFetch as wasmRetryFetch, backoffDelays as wasmBackoffDelays, RetryClient } from './retry_fetch.js';

export { RetryBudget, AdaptiveThrottle, CircuitBreaker } from './retry_fetch.js';

/** fetch with retries: see index.d.ts and the README. */
export function retryFetch(input, init, options) {
  return wasmRetryFetch(input, init, options);
}

/** A retryFetch whose options default to `defaults` (validated now; per-call options merge over them). */
export function createRetryFetch(defaults) {
  const client = new RetryClient(defaults);
  return function retryFetch(input, init, options) {
    return client.fetch(input, init, options);
  };
}

/** The first `count` delays (ms) the policy would wait; reproducible with a `seed`. */
export function backoffDelays(options, count, seed) {
  return wasmBackoffDelays(options, count, seed);
}

/** Is `error` a RetryError (by name, so it works across realms and copies of the package)? */
export function isRetryError(error) {
  return typeof error === 'object' && error !== null && error.name === 'RetryError';
}

/** Is `error` a CircuitOpenError (by name)? */
export function isCircuitOpenError(error) {
  return typeof error === 'object' && error !== null && error.name === 'CircuitOpenError';
}
