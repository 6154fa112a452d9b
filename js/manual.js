// Entry without top-level await, for service workers (which may not use it) and for apps
// that want to choose when and from where the .wasm is loaded: call `await init()` once
// (e.g. in the service worker's `install` event or before the first call), then use the API.
// This file only loads the wasm: until it is loaded, every export says to call init().
import * as wasm from './retry_fetch.js';
import { loadWasm } from './load-wasm.js';
import { RetryError, CircuitOpenError } from './errors.js';

export { RetryError, CircuitOpenError };

let ready;
let loaded = false;

/**
 * Load and instantiate the .wasm once (from `wasm`: a URL, a Response or the bytes; by default
 * the file next to this one). Later calls return the same promise; a failed load is not kept,
 * so a later `init()` can try again.
 */
export function init(wasmSource) {
  ready ??= loadWasm(wasmSource ?? besideThisFile())
    .then(() => {
      // (loadWasm has refused a module without this package's exports before instantiating it.)
      wasm.setErrorClasses(RetryError, CircuitOpenError);
      loaded = true;
    })
    .catch((error) => {
      ready = undefined;
      throw error;
    });
  return ready;
}

/** The .wasm next to this file; a bundle that dropped `import.meta.url` (an iife) cannot say where that is. */
async function besideThisFile() {
  if (typeof import.meta.url !== 'string') {
    throw new TypeError("retry-fetch/manual: this bundle has no import.meta.url to find retry_fetch_bg.wasm by: pass the .wasm's URL (or its bytes) to init()");
  }
  return new URL('./retry_fetch_bg.wasm', import.meta.url);
}

function notLoaded(name) {
  return new Error(`retry-fetch/manual: ${name} was used before the wasm was loaded; call \`await init()\` first`);
}

export function retryFetch(input, init, options) {
  return loaded ? wasm.retryFetch(input, init, options) : Promise.reject(notLoaded('retryFetch'));
}

export function createRetryFetch(defaults) {
  if (!loaded) throw notLoaded('createRetryFetch');
  return wasm.createRetryFetch(defaults);
}

export function backoffDelays(options, count, seed) {
  if (!loaded) throw notLoaded('backoffDelays');
  return wasm.backoffDelays(options, count, seed);
}

export function isRetryError(error) {
  if (!loaded) throw notLoaded('isRetryError');
  return wasm.isRetryError(error);
}

export function isCircuitOpenError(error) {
  if (!loaded) throw notLoaded('isCircuitOpenError');
  return wasm.isCircuitOpenError(error);
}

/** The class, refusing `new` until the wasm is loaded. */
const guarded = (Class, name) =>
  new Proxy(Class, {
    construct(target, args, newTarget) {
      if (!loaded) throw notLoaded(`new ${name}()`);
      return Reflect.construct(target, args, newTarget);
    },
  });

export const RetryBudget = guarded(wasm.RetryBudget, 'RetryBudget');
export const AdaptiveThrottle = guarded(wasm.AdaptiveThrottle, 'AdaptiveThrottle');
export const CircuitBreaker = guarded(wasm.CircuitBreaker, 'CircuitBreaker');
