// Node entry: instantiate the wasm synchronously from the file next to this one.
import { readFileSync } from 'node:fs';
import { initSync } from './retry_fetch.js';

initSync({ module: readFileSync(new URL('./retry_fetch_bg.wasm', import.meta.url)) });

export * from './client.js';
