// Node entry (ES module). Importing it loads no wasm: the .wasm next to this file is read,
// compiled and instantiated synchronously on first use (the first call of an export or the
// first `new` of a guard class), once, so `await import('retry-fetch')` costs little more than
// loading the glue. Everything else is the wasm's own exports.
//
// `node:fs` comes from `process.getBuiltinModule` (Node >= 20.16): a static `import 'node:fs'`
// builds the ES module facade of the builtin at import time, about a millisecond and a half of
// a cold start. Where it is missing (older Node versions, runtimes without it) the entry
// imports node:fs, as before.
import * as wasm from './retry_fetch.js';
import { RetryError, CircuitOpenError } from './errors.js';
import { wasmFile } from './wasm-file.js';

export { RetryError, CircuitOpenError };

const getBuiltin = globalThis.process?.getBuiltinModule;
const fsImported = typeof getBuiltin === 'function' ? undefined : await import('node:fs');

let loaded = false;

/** Instantiates the wasm the first time it is needed; a failure is thrown to that caller and not kept. */
function load() {
  if (loaded) return;
  // initSync returns at once when retry-fetch/manual already instantiated the same glue.
  const { readFileSync } = fsImported ?? getBuiltin('node:fs');
  wasm.initSync({ module: readFileSync(wasmFile(new URL('./retry_fetch_bg.wasm', import.meta.url))) });
  wasm.setErrorClasses(RetryError, CircuitOpenError);
  loaded = true;
}

export function retryFetch(input, init, options) {
  if (!loaded) {
    try {
      load();
    } catch (error) {
      return Promise.reject(error);
    }
  }
  return wasm.retryFetch(input, init, options);
}

export function createRetryFetch(defaults) {
  load();
  return wasm.createRetryFetch(defaults);
}

export function backoffDelays(options, count, seed) {
  load();
  return wasm.backoffDelays(options, count, seed);
}

export function isRetryError(error) {
  load();
  return wasm.isRetryError(error);
}

export function isCircuitOpenError(error) {
  load();
  return wasm.isCircuitOpenError(error);
}

/** The glue's class itself (same prototype, `instanceof` and statics), loading the wasm on `new`. */
const loading = (Class) =>
  new Proxy(Class, {
    construct(target, args, newTarget) {
      load();
      return Reflect.construct(target, args, newTarget);
    },
  });

export const RetryBudget = loading(wasm.RetryBudget);
export const AdaptiveThrottle = loading(wasm.AdaptiveThrottle);
export const CircuitBreaker = loading(wasm.CircuitBreaker);
