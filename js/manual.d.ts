/**
 * retry-fetch without top-level await: for service workers and for apps that load the .wasm
 * themselves. Call `await init()` once before using the API (calls before it throw).
 */
export * from './index.js';

/**
 * Load and instantiate the .wasm (from `wasm`: a URL, a Response, bytes or a compiled
 * module; by default the file next to this module). Later calls return the same promise.
 */
export function init(wasm?: URL | string | Response | BufferSource | WebAssembly.Module): Promise<void>;
