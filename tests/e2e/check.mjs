// A tiny assertion module that runs unchanged in Node and in a browser page.
export class CheckError extends Error {
  constructor(message) {
    super(message);
    this.name = 'CheckError';
  }
}

const show = (v) => {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
};

export function ok(value, message = 'expected a truthy value') {
  if (!value) throw new CheckError(message);
}

export function equal(actual, expected, message = '') {
  if (!Object.is(actual, expected)) {
    throw new CheckError(`${message} expected ${show(expected)}, got ${show(actual)}`.trim());
  }
}

export function deepEqual(actual, expected, message = '') {
  if (show(actual) !== show(expected)) {
    throw new CheckError(`${message} expected ${show(expected)}, got ${show(actual)}`.trim());
  }
}

export function match(text, regex, message = '') {
  if (typeof text !== 'string' || !regex.test(text)) {
    throw new CheckError(`${message} expected ${show(text)} to match ${regex}`.trim());
  }
}

/** Await `promise`, expect it to reject, and return the reason. */
export async function rejects(promise, message = 'expected a rejection') {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new CheckError(message);
}

export const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
