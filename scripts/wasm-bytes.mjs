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
