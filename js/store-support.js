// Helpers the idempotency stores and toNodeHandler share: their errors are worded by the
// wasm, as its own are (`<where>: invalid option "<option>": got <value>; expected
// <expected>`, an unknown option with its closest known name): the rules live in Rust.
import { describeValue, invalidOptionError, unknownOptionError } from './server-wasm.js';

/** A short rendering of a value for an error message. */
export const describe = describeValue;

/** `<where>: invalid option "<option>": got <value>; expected <expected>`, a TypeError. */
export const optionError = invalidOptionError;

/**
 * Throws the TypeError for the first own enumerable option of `options` not in `known`
 * (an option set to `undefined` counts as absent, as everywhere in this package).
 */
export function checkOptionNames(where, options, known) {
  for (const name of Object.keys(options)) {
    if (options[name] !== undefined && !known.includes(name)) throw unknownOptionError(where, name, known); // Rust: the closest known name
  }
}
