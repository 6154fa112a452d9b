'use strict';
// CommonJS entry for Node (`require('retry-fetch')`): the same API as the ES module entries,
// over wasm-bindgen's `nodejs` build (./cjs/), which loads the .wasm synchronously.
const wasm = require('./cjs/retry_fetch.js');

/** fetch with retries: see index.d.ts and the README. */
function retryFetch(input, init, options) {
  return wasm.retryFetch(input, init, options);
}

/** A retryFetch whose options default to `defaults` (validated now; per-call options merge over them). */
function createRetryFetch(defaults) {
  const client = new wasm.RetryClient(defaults);
  return function retryFetch(input, init, options) {
    return client.fetch(input, init, options);
  };
}

/** The first `count` delays (ms) the policy would wait; reproducible with a `seed`. */
function backoffDelays(options, count, seed) {
  return wasm.backoffDelays(options, count, seed);
}

/** Is `error` a RetryError (by name, so it works across realms and copies of the package)? */
function isRetryError(error) {
  return typeof error === 'object' && error !== null && error.name === 'RetryError';
}

/** Is `error` a CircuitOpenError (by name)? */
function isCircuitOpenError(error) {
  return typeof error === 'object' && error !== null && error.name === 'CircuitOpenError';
}

module.exports = {
  retryFetch,
  createRetryFetch,
  backoffDelays,
  isRetryError,
  isCircuitOpenError,
  RetryBudget: wasm.RetryBudget,
  AdaptiveThrottle: wasm.AdaptiveThrottle,
  CircuitBreaker: wasm.CircuitBreaker,
};
