// Loads the server build's wasm (retry_fetch_server_bg.wasm) once, for server.js and the
// stores: whichever module is imported first initialises it (wasm-bindgen's initSync does
// nothing the second time), so a store imported on its own works too.
import { readFileSync } from 'node:fs';
import { initSync } from './retry_fetch_server.js';
import { wasmFile } from './wasm-file.js';

initSync({ module: readFileSync(wasmFile(new URL('./retry_fetch_server_bg.wasm', import.meta.url))) });

export * from './retry_fetch_server.js';
