// Loads the client .wasm for the entries that load it asynchronously (the browser entry and
// retry-fetch/manual): the .wasm is compiled first, then instantiated with the glue's initSync
// in one step, so that one instance serves every entry of this copy of the package. initSync
// hands back the instance another entry already made; the glue's asynchronous init checks for
// one only before its await and replaces whatever another entry made meanwhile (every guard and
// client made on it then reads freed memory).
import { initSync } from './retry_fetch.js';

/** Instantiate the .wasm from `source` (a URL, a `Request`, a `Response`, the bytes or a compiled `WebAssembly.Module`, or a promise of one), unless this glue already has an instance. */
export async function loadWasm(source) {
  if (instantiated()) return;
  const module = await compile(await source);
  // Another module would be kept as the glue's instance, and no later init() could replace it.
  if (!WebAssembly.Module.exports(module).some((e) => e.name === 'setErrorClasses')) {
    throw new TypeError("retry-fetch: this .wasm is not retry-fetch's client (retry_fetch_bg.wasm)");
  }
  initSync({ module });
}

/** Has this glue an instance already? initSync hands back the one it has before it reads its module, and throws for none without one. */
function instantiated() {
  try {
    initSync({ module: null });
    return true;
  } catch {
    return false;
  }
}

async function compile(source) {
  if (source instanceof WebAssembly.Module) return source;
  if (typeof source === 'string' || source instanceof URL || (typeof Request === 'function' && source instanceof Request)) {
    const url = typeof Request === 'function' && source instanceof Request ? source.url : String(source);
    source = await fetch(source).catch((cause) => {
      throw new Error(`retry-fetch: the .wasm could not be loaded: fetching ${url} failed (${cause?.message ?? cause})`, { cause });
    });
  }
  if (typeof Response === 'function' && source instanceof Response) {
    if (!source.ok) throw new Error(`retry-fetch: the .wasm could not be loaded: ${source.status} ${source.statusText} from ${source.url}`);
    // Streaming compilation needs the wasm media type; a server that sends another gets the bytes compiled.
    if (typeof WebAssembly.compileStreaming === 'function' && source.headers.get('content-type')?.split(';')[0].trim() === 'application/wasm') {
      return WebAssembly.compileStreaming(source);
    }
    source = await source.arrayBuffer();
  }
  return WebAssembly.compile(source);
}
