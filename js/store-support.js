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

/** A new store secret: 32 random bytes as 64 lower-case hex digits. */
export function newSecret() {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  let hex = '';
  for (const b of bytes) hex += b.toString(16).padStart(2, '0');
  return hex;
}

/** What a store secret looks like (newSecret()). */
export const SECRET_FORMAT = /^[0-9a-f]{64}$/;

/**
 * `secret()` of a store that keeps its secret in a shared backend: `read()` creates it there if
 * missing and resolves with it. The first success is cached for the instance; callers that come
 * while a read is in flight share it; a failure is not cached (the next call reads again).
 */
export function cachedSecret(read) {
  let value;
  let pending;
  return () => {
    if (value !== undefined) return Promise.resolve(value);
    pending ??= Promise.resolve()
      .then(read)
      .then(
        (secret) => {
          value = secret;
          pending = undefined;
          return secret;
        },
        (error) => {
          pending = undefined;
          throw error;
        },
      );
    return pending;
  };
}
