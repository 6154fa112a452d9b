// The pieces of the .wasm binary format the glue steps (short-imports.mjs, short-exports.mjs)
// read and write: unsigned LEB128 numbers and length-prefixed names.

/** The unsigned LEB128 number at `pos` of `buf`: `[value, next position]`. */
export function leb(buf, pos) {
  let value = 0, shift = 0, byte;
  do { byte = buf[pos++]; value += (byte & 0x7f) * 2 ** shift; shift += 7; } while (byte & 0x80);
  return [value, pos];
}

/** `n` as unsigned LEB128 bytes. */
export function encodeLeb(n) {
  const out = [];
  do { let b = n & 0x7f; n = Math.floor(n / 128); if (n) b |= 0x80; out.push(b); } while (n);
  return Buffer.from(out);
}

/** `s` as a name: its UTF-8 length as LEB128, then its bytes. */
export function encodeName(s) {
  const b = Buffer.from(s, 'utf8');
  return Buffer.concat([encodeLeb(b.length), b]);
}

/** The name at `pos` of `buf`: `[name, next position]`. */
export function readName(buf, pos) {
  const [len, p] = leb(buf, pos);
  return [buf.toString('utf8', p, p + len), p + len];
}

/**
 * The sections of the .wasm `bytes`, by id: `{ start, body, end }` (where the section, its
 * contents and the next section begin). Throws when `bytes` is not a wasm module.
 */
export function sections(bytes) {
  if (bytes.readUInt32LE(0) !== 0x6d736100) throw new Error('not a wasm module');
  const found = new Map();
  let pos = 8;
  while (pos < bytes.length) {
    const [size, body] = leb(bytes, pos + 1);
    found.set(bytes[pos], { start: pos, body, end: body + size });
    pos = body + size;
  }
  return found;
}

const LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';

/** The `n`th short name: 0 -> a, 51 -> Z, 52 -> aa, ... */
export function shortName(n) {
  let s = '';
  n += 1;
  while (n > 0) { n -= 1; s = LETTERS[n % 52] + s; n = Math.floor(n / 52); }
  return s;
}

/** `s` with its `$` escaped, for a regular expression. */
export const escapeName = (s) => s.replace(/[$]/g, '\\$');
