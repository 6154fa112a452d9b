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

/** Is `v` a string, or one of the absent values `null`/`undefined` (both read as absent)? */
const optionalString = (v) => v === null || v === undefined || typeof v === 'string';
/** Is `v` a finite number, or absent (`null`/`undefined`)? */
const optionalTime = (v) => v === null || v === undefined || Number.isFinite(v);

/**
 * The stored form of a `RunRecord` given to `recordRun()`: a fresh plain object with exactly the
 * protocol's fields (`endedAt` and `outcome` `null` when absent; `detail` only when a string),
 * so that every store keeps and returns the same thing. A record that is not a RunRecord is a
 * TypeError naming the field (`<where>: recordRun: ...`).
 */
export function runRecord(where, run) {
  const bad = (field, expected) =>
    new TypeError(`${where}: recordRun: the run's "${field}" must be ${expected}; got ${describe(run?.[field])}`);
  if (typeof run !== 'object' || run === null) {
    throw new TypeError(`${where}: recordRun: the run must be an object (a RunRecord); got ${describe(run)}`);
  }
  for (const field of ['id', 'key', 'scope', 'instance']) {
    if (typeof run[field] !== 'string' || run[field] === '') throw bad(field, 'a non-empty string');
  }
  if (!Number.isFinite(run.startedAt)) throw bad('startedAt', 'a number (ms since the Unix epoch)');
  if (!optionalTime(run.endedAt)) throw bad('endedAt', 'a number (ms since the Unix epoch) or null');
  if (!optionalString(run.outcome)) throw bad('outcome', 'a string or null');
  if (!optionalString(run.detail)) throw bad('detail', 'a string, or absent');
  const record = {
    id: run.id,
    key: run.key,
    scope: run.scope,
    instance: run.instance,
    startedAt: run.startedAt,
    endedAt: run.endedAt ?? null,
    outcome: run.outcome ?? null,
  };
  if (typeof run.detail === 'string') record.detail = run.detail;
  return record;
}

/** The order of `runs()`: oldest `startedAt` first, then by `id` (as PostgresStore's ORDER BY). */
export function byStart(a, b) {
  if (a.startedAt !== b.startedAt) return a.startedAt - b.startedAt;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/** The `key` argument of `runs(key)`: a string, or a TypeError. */
export function runsKey(where, key) {
  if (typeof key !== 'string') throw new TypeError(`${where}: runs: the key must be a string; got ${describe(key)}`);
  return key;
}
