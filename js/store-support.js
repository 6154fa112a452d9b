// Helpers the idempotency stores share (memory-store.js, redis-store.js, postgres-store.js):
// the wording of their option errors, the same as the wasm side's
// (`<where>: invalid option "<option>": got <value>; expected <expected>`). An unknown option's
// error, and its closest known name, come from the wasm (the rule lives in Rust).
import { unknownOptionError } from './server-wasm.js';

/** A short rendering of a value for an error message (as the wasm side does it). */
export function describe(value) {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  if (Array.isArray(value)) return 'an array';
  try {
    return String(value);
  } catch {
    return 'an object';
  }
}

/** `<where>: invalid option "<option>": got <value>; expected <expected>`, a TypeError. */
export function optionError(where, option, value, expected) {
  return new TypeError(`${where}: invalid option "${option}": got ${describe(value)}; expected ${expected}`);
}

/**
 * Throws the TypeError for the first own enumerable option of `options` not in `known`
 * (an option set to `undefined` counts as absent, as everywhere in this package).
 */
export function checkOptionNames(where, options, known) {
  for (const name of Object.keys(options)) {
    if (options[name] !== undefined && !known.includes(name)) throw unknownOptionError(where, name, known); // Rust: the closest known name
  }
}
