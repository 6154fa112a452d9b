// Reading a small request body, shared by the demo server and the payments API (server-side
// only: .mjs files are not served to the browser).

/** The body of `req` as text; over `limit` bytes it throws an Error with `status: 413`. */
export async function readBody(req, limit = 64 * 1024) {
  const chunks = [];
  let size = 0;
  for await (const c of req) {
    size += c.length;
    if (size > limit) throw Object.assign(new Error('body too large'), { status: 413 });
    chunks.push(c);
  }
  return Buffer.concat(chunks).toString('utf8');
}
