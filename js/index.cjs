'use strict';
// CommonJS entry for Node (`require('retry-fetch')`): wasm-bindgen's `nodejs` glue
// (./cjs/retry_fetch.js), which loads the .wasm synchronously. Everything is the wasm's.
const wasm = require('./cjs/retry_fetch.js');

// The classes of the errors a call rejects with, for `instanceof` (see errors.js).
class RetryError extends Error {}
RetryError.prototype.name = 'RetryError';
class CircuitOpenError extends Error {}
CircuitOpenError.prototype.name = 'CircuitOpenError';
wasm.setErrorClasses(RetryError, CircuitOpenError);

module.exports = {
  retryFetch: wasm.retryFetch,
  createRetryFetch: wasm.createRetryFetch,
  backoffDelays: wasm.backoffDelays,
  isRetryError: wasm.isRetryError,
  isCircuitOpenError: wasm.isCircuitOpenError,
  RetryBudget: wasm.RetryBudget,
  AdaptiveThrottle: wasm.AdaptiveThrottle,
  CircuitBreaker: wasm.CircuitBreaker,
  RetryError,
  CircuitOpenError,
};
