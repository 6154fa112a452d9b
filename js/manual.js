// Entry without top-level await, for service workers (which may not use it) and for apps
// that want to choose when and from where the .wasm is loaded: call `await init()` once
// (e.g. in the service worker's `install` event or before the first call), then use the API.
import initWasm from './retry_fetch.js';

let ready;

/** Load and instantiate the .wasm once; later calls return the same promise. */
export function init(wasm) {
  ready ??= initWasm({ module_or_path: wasm ?? new URL('./retry_fetch_bg.wasm', import.meta.url) });
  return ready.then(() => undefined);
}

export * from './client.js';
