// Writes the CommonJS twin of js/client.js (for `require('retry-fetch')`): the same driver,
// over wasm-bindgen's `nodejs` glue in the same folder. A plain text transform of the three
// forms client.js uses (one `import {...} from`, one `export {...} from`, `export function`),
// checked so that any other form fails the build instead of shipping a broken entry.
import { readFileSync, writeFileSync } from 'node:fs';

const [source, target] = process.argv.slice(2);
let code = readFileSync(source, 'utf8');
const names = [];

code = code.replace(/^import \{([^}]*)\} from '(\.\/[^']+)';$/gm, (_, list, from) =>
  `const {${list.replace(/ as /g, ': ')}} = require('${from}');`);
code = code.replace(/^export \{([^}]*)\} from '(\.\/[^']+)';$/gm, (_, list, from) => {
  for (const n of list.split(',')) names.push(n.trim());
  return `const {${list}} = require('${from}');`;
});
code = code.replace(/^export (async )?function (\w+)/gm, (_, async, name) => {
  names.push(name);
  return `${async ?? ''}function ${name}`;
});
if (/^\s*(import|export)\b/m.test(code)) throw new Error(`${source}: an import/export form scripts/cjs.mjs does not handle`);
writeFileSync(target, `'use strict';\n${code}\nmodule.exports = { ${names.join(', ')} };\n`);
