// Post-processes wasm-bindgen's glue (web and nodejs targets) so that a freed guard
// (RetryBudget, AdaptiveThrottle, CircuitBreaker after free()) throws the wasm's own
// TypeError, `freedGuardError(class, member)`, instead of "null pointer passed to rust":
// every read of `this.__wbg_ptr` passed to a guard method, and `free()` itself, go through a
// check first. Exits non-zero if the glue no longer has the shape this expects.
// Usage: node scripts/guard-glue.mjs <glue.js>...
import { readFileSync, writeFileSync } from 'node:fs';

const GUARDS = ['RetryBudget', 'AdaptiveThrottle', 'CircuitBreaker'];
const CHECK = `
function __rfLive(self, className, member) {
    if (!self.__wbg_ptr) throw freedGuardError(className, member);
    return self.__wbg_ptr;
}
`;

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
    body = body.replace(/wasm\.([a-z]+)_(\w+)\(this\.__wbg_ptr\b/g, (_, _cls, member) => {
      methods++;
      return `wasm.${_cls}_${member}(__rfLive(this, '${name}', '${member}')`;
    });
    const freeAt = body.indexOf('free() {');
    if (methods < 2 || freeAt < 0) fail(file, `class ${name}: ${methods} methods, free() ${freeAt >= 0}`);
    body = body.replace('free() {', `free() {\n        __rfLive(this, '${name}', 'free');`);
    glue = glue.slice(0, start) + body + glue.slice(end);
  }
  writeFileSync(file, glue + CHECK);
}

function fail(file, why) {
  console.error(`guard-glue: ${file}: ${why}`);
  process.exit(1);
}
