// Post-processes wasm-bindgen's glue (web and nodejs targets): every import that may throw is
// emitted as `function() { return handleError(function (args) { body }, arguments); }`, which
// materialises `arguments` and calls through `apply` on each call into JS (about 1 µs of a
// call with per-call options in Node). Each becomes `function (args) { try { body } catch (e)
// { wasm.__wbindgen_exn_store(addHeapObject(e)); } }`: what `handleError` does, inline (none of
// the bodies uses `this`). Exits non-zero, changing nothing, if the glue has another shape.
// Usage: node scripts/inline-catch.mjs <glue.js>...
import { readFileSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

/** wasm-bindgen's `handleError`, as its glue defines it (the test's fixture uses it too). */
export const HANDLE_ERROR = `function handleError(f, args) {
    try {
        return f.apply(this, args);
    } catch (e) {
        wasm.__wbindgen_exn_store(addHeapObject(e));
    }
}`;
const WRAPPED = /function\(\) \{ return handleError\(function \(([\w, ]*)\) \{\n([\s\S]*?)\n        \}, arguments\); \}/g;

const main = process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href;
for (const file of main ? process.argv.slice(2) : []) {
  const glue = readFileSync(file, 'utf8');
  if (!glue.includes(HANDLE_ERROR)) fail(file, 'no handleError of the expected shape');
  let count = 0;
  const out = glue.replace(WRAPPED, (_, args, body) => {
    if (/\bthis\b|\barguments\b/.test(body)) fail(file, `a body uses this or arguments: ${body}`);
    count++;
    return `function (${args}) { try {\n${body}\n        } catch (e) { wasm.__wbindgen_exn_store(addHeapObject(e)); } }`;
  });
  const left = out.split('handleError(').length - 1;
  if (count === 0 || left !== 1) fail(file, `${count} rewritten, ${left} handleError uses left (expected only its definition)`);
  writeFileSync(file, out.replace(HANDLE_ERROR, ''));
}

function fail(file, why) {
  console.error(`inline-catch: ${file}: ${why}`);
  process.exit(1);
}
