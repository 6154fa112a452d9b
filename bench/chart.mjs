// Renders bench/results/storms.json (written by storms.mjs) to bench/results/storms.svg: a
// grouped bar chart of amplification per contender, one bar per server kind of the herd and one
// for the outage. Hand-written SVG, no dependencies.
//
//   node bench/chart.mjs [in.json] [out.svg]
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { normalizeStorms } from './format.mjs';

const input = process.argv[2] ?? fileURLToPath(new URL('./results/storms.json', import.meta.url));
const output = process.argv[3] ?? input.replace(/\.json$/, '.svg');
const data = normalizeStorms(JSON.parse(readFileSync(input, 'utf8')));

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const amp = (row) => row?.median?.amplification ?? null;

// One series per server kind, then the outage.
const COLORS = ['#3b6fb6', '#8e63b5', '#17a2b8', '#a0522d', '#d9822b', '#c0504d', '#7f7f7f'];
const series = [
  ...data.kinds.map((k) => ({ key: k.id, title: k.title, rows: k.rows })),
  { key: 'outage', title: 'outage (always 503)', rows: data.outage.rows },
].map((s, i) => ({ ...s, color: COLORS[i % COLORS.length] }));

// One group per contender id, in first-seen order.
const groups = [];
const byId = new Map();
for (const s of series) {
  for (const row of s.rows) {
    let g = byId.get(row.id);
    if (!g) {
      g = { id: row.id, label: row.name.replace(/ \(extra\)$/, '').replace(/^retry-fetch, /, 'retry-fetch '), rows: {} };
      byId.set(row.id, g);
      groups.push(g);
    }
    g.rows[s.key] = row;
  }
}

const BAR = series.length > 2 ? 13 : 24;
const W_GROUP = BAR * series.length + 16;
const M = { top: 70, right: 100, bottom: 170, left: 140 };
const plotW = groups.length * W_GROUP;
const plotH = 300;
const width = M.left + plotW + M.right;
const height = M.top + plotH + M.bottom;
const maxValue = Math.max(1, ...groups.flatMap((g) => series.map((s) => amp(g.rows[s.key]) ?? 0)));
const yMax = Math.ceil(maxValue + 0.5);
const y = (v) => M.top + plotH - (v / yMax) * plotH;

const parts = [];
parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12">`);
parts.push(`<rect width="${width}" height="${height}" fill="#fff"/>`);
parts.push(`<text x="20" y="24" font-size="16" font-weight="600">Retry amplification: requests the server saw per client call (lower is better)</text>`);
parts.push(`<text x="20" y="42" fill="#555">${esc(`${data.clients} clients at once, ${data.policy.attempts} attempts, base ${data.policy.baseDelayMs} ms, cap ${data.policy.maxDelayMs} ms; median of ${data.rounds} round(s); Node ${data.node}, ${data.cpus} cores; ${data.generatedAt.slice(0, 10)}`)}</text>`);

// Legend.
let lx = 20;
for (const s of series) {
  parts.push(`<rect x="${lx}" y="52" width="12" height="12" fill="${s.color}"/>`);
  parts.push(`<text x="${lx + 18}" y="62">${esc(s.title)}</text>`);
  lx += 18 + 7 * s.title.length + 24;
}

// Grid and y axis.
const step = yMax > 6 ? 1 : 0.5;
for (let v = 0; v <= yMax + 1e-9; v += step) {
  parts.push(`<line x1="${M.left}" x2="${M.left + plotW}" y1="${y(v)}" y2="${y(v)}" stroke="${v === 0 ? '#333' : '#e3e3e3'}"/>`);
  parts.push(`<text x="${M.left - 8}" y="${y(v) + 4}" text-anchor="end" fill="#444">${v}</text>`);
}
parts.push(`<text transform="translate(${M.left - 40} ${M.top + plotH / 2}) rotate(-90)" text-anchor="middle" fill="#444">amplification (× requests per call)</text>`);

// Reference line: 1 = no retries at all.
parts.push(`<line x1="${M.left}" x2="${M.left + plotW}" y1="${y(1)}" y2="${y(1)}" stroke="#2a9d4b" stroke-dasharray="5 4"/>`);
parts.push(`<text x="${M.left + plotW + 6}" y="${y(1) + 4}" fill="#2a9d4b">1 = no retries</text>`);

// Bars (values above them, turned when the bars are narrow).
groups.forEach((g, gi) => {
  const gx = M.left + gi * W_GROUP + (W_GROUP - BAR * series.length) / 2;
  series.forEach((s, si) => {
    const x = gx + si * BAR;
    const row = g.rows[s.key];
    if (!row) return; // not run against this kind
    const v = amp(row);
    const cx = x + BAR / 2 - 1;
    const label = (text, at, fill) => (BAR < 20
      ? `<text transform="translate(${cx + 3} ${at}) rotate(-90)" font-size="9" fill="${fill}">${esc(text)}</text>`
      : `<text x="${cx}" y="${at}" text-anchor="middle" font-size="10" fill="${fill}">${esc(text)}</text>`);
    if (v == null) {
      parts.push(label('n/a', y(0) - 4, '#999'));
      return;
    }
    parts.push(`<rect x="${x}" y="${y(v)}" width="${BAR - 2}" height="${y(0) - y(v)}" fill="${s.color}"><title>${esc(`${row.name} — ${s.title}: ${v.toFixed(2)}`)}</title></rect>`);
    parts.push(label(v.toFixed(v < 2 ? 2 : 1), y(v) - 4, '#222'));
  });
  const lxg = M.left + gi * W_GROUP + W_GROUP / 2;
  parts.push(`<text transform="translate(${lxg + 4} ${M.top + plotH + 12}) rotate(-40)" text-anchor="end" fill="#222">${esc(g.label)}</text>`);
});

parts.push('</svg>');
writeFileSync(output, `${parts.join('\n')}\n`);
console.error(`wrote ${output}`);
