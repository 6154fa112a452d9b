/**
 * retry-fetch without top-level await: for service workers and for apps that load the .wasm
 * themselves. Call `await init()` once before using the API (before it, `retryFetch` rejects
 * and the other functions and constructors throw, each naming `init()`).
 */
export * from './index.js';

/**
 * A compiled `WebAssembly.Module` where the lib in use declares one (the DOM and WebWorker
 * libs); `never` without it (a Node-only `tsconfig`), so these types need no DOM lib.
 */
export type WasmModule = typeof globalThis extends { WebAssembly: { Module: { prototype: infer M } } } ? M : never;

/**
 * Load and instantiate the .wasm (from `wasm`: a URL, a Response, bytes — an `ArrayBuffer`
 * or a view of one, the DOM's `BufferSource` — or a compiled module; by default the file
 * next to this module). A call while it loads or after it succeeded returns the same
 * promise; a failed `init()` is not kept, so a later call (e.g. `init(bytes)`) tries again.
 */
export function init(wasm?: URL | string | Response | ArrayBuffer | ArrayBufferView | WasmModule): Promise<void>;
