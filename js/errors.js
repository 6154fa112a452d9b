// The classes of the errors a call rejects with, for `instanceof`: JavaScript declares a
// class, the wasm cannot. The wasm makes every such error (its message, `name` and fields:
// src/wasm/client/errors.rs) as an instance of these, once an entry hands them over with
// `setErrorClasses`; `isRetryError` / `isCircuitOpenError` (by name) stay realm-safe.
export class RetryError extends Error {}
RetryError.prototype.name = 'RetryError';
export class CircuitOpenError extends Error {}
CircuitOpenError.prototype.name = 'CircuitOpenError';
