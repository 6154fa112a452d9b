// The path of a `.wasm` next to a Node entry, from its `new URL(name, import.meta.url)`: a
// `file:` URL, unless a bundler rewrote it (webpack makes one of its own asset path), in which
// case reading it would fail with fs's "must be of type string" error, naming no cause.

/** `url` itself when it is a `file:` URL; else a TypeError saying to keep the package external. */
export function wasmFile(url) {
  if (url?.protocol === 'file:') return url;
  throw new TypeError(`retry-fetch: the .wasm's URL is ${JSON.stringify(String(url?.href ?? url))}, not a file: a bundler rewrote it; keep retry-fetch external to the server bundle (Next.js with webpack: serverExternalPackages: ['retry-fetch'] in next.config.js; Vite SSR: ssr.external)`);
}
