// Post-processes wasm-bindgen's glue (web and nodejs targets) so that a freed guard
// (RetryBudget, AdaptiveThrottle, CircuitBreaker after free()) throws the wasm's own
// TypeError, `freedGuardError(class, member)`, instead of "null pointer passed to rust":
// every read of `this.__wbg_ptr` passed to a guard method, and `free()` itself, go through a
// check first. The check also refuses a `this` that its class's constructor did not make
// (another guard class's instance, an object made with `Object.create(prototype)` and a
// pointer of its own): the wasm would read that pointer as the wrong struct. Exits non-zero
// if the glue no longer has the shape this expects.
// Usage: node scripts/guard-glue.mjs <glue.js>...
import { readFileSync, writeFileSync } from 'node:fs';

const GUARDS = ['RetryBudget', 'AdaptiveThrottle', 'CircuitBreaker'];
const CHECK = `
function __rfLive(self, className, member) {
    if (__rfMadeBy.get(self) !== className) {
        throw new TypeError(className + '.prototype.' + member + ' called on an object that is not ' + (/^[AEIOU]/.test(className) ? 'an ' : 'a ') + className);
    }
    if (!self.__wbg_ptr) throw freedGuardError(className, member);
    return self.__wbg_ptr;
}
`;
// Each guard its constructor made, with its class's name (the brand __rfLive checks).
const BRANDS = 'const __rfMadeBy = new WeakMap();\n';

for (const file of process.argv.slice(2)) {
  let glue = readFileSync(file, 'utf8');
  if (!/function freedGuardError\(/.test(glue)) fail(file, 'no freedGuardError export in the wasm');
  for (const name of GUARDS) {
    const start = glue.search(new RegExp(`^(export )?class ${name} \\{`, 'm'));
    if (start < 0) fail(file, `no class ${name}`);
    const end = glue.indexOf('\n}\n', start);
    if (end < 0) fail(file, `class ${name} has no end`);
    let body = glue.slice(start, end);
    let methods = 0;
    // `wasm.retrybudget_tokens(this.__wbg_ptr, url)` -> `wasm.retrybudget_tokens(__rfLive(this, ...), url)`
    body = body.replace(/wasm\.([a-z]+)_(\w+)\((retptr, )?this\.__wbg_ptr\b/g, (_, _cls, member, retptr = '') => {
      methods++;
      return `wasm.${_cls}_${member}(${retptr}__rfLive(this, '${name}', '${member}')`;
    });
    const freeAt = body.indexOf('free() {');
    if (methods < 2 || freeAt < 0) fail(file, `class ${name}: ${methods} methods, free() ${freeAt >= 0}`);
    body = body.replace('free() {', `free() {\n        __rfLive(this, '${name}', 'free');`);
    // The constructor's `this.__wbg_ptr = ret[0];` (or `ret >>> 0`): the brand, set there.
    let branded = 0;
    body = body.replace(/(constructor\([^)]*\) \{[\s\S]*?this\.__wbg_ptr = [^;]+;)/, (m) => {
      branded++;
      return `${m}\n        __rfMadeBy.set(this, '${name}');`;
    });
    if (branded !== 1) fail(file, `class ${name}: no constructor setting __wbg_ptr`);
    glue = glue.slice(0, start) + body + glue.slice(end);
  }
  writeFileSync(file, glue + BRANDS + CHECK);
}

function fail(file, why) {
  console.error(`guard-glue: ${file}: ${why}`);
  process.exit(1);
}
