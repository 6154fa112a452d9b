'use strict';
// CommonJS entry for Node (`require('retry-fetch')`): the same API as the ES module entries.
// ./cjs/client.js is generated from client.js at build time (scripts/cjs.mjs), over
// wasm-bindgen's `nodejs` glue (./cjs/retry_fetch.js), which loads the .wasm synchronously.
module.exports = require('./cjs/client.js');
