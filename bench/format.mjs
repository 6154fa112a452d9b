// Small helpers shared by overhead.mjs, coldstart.mjs and report.mjs: statistics and the
// markdown tables (the scripts print them, report.mjs renders the same ones from the JSON).

export function median(values) {
  const v = values.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = Math.floor(v.length / 2);
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

/** Nearest-rank percentile (p in 0..1). */
export function percentile(values, p) {
  const v = values.filter((x) => typeof x === 'number' && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil(p * v.length) - 1))];
}

export function table(headers, rows, align) {
  const line = (cells) => `| ${cells.join(' | ')} |`;
  const sep = headers.map((_, i) => (align ? align[i] : i === 0 ? '---' : '---:'));
  return [line(headers), line(sep), ...rows.map(line)].join('\n');
}

export function goalsTable(goals) {
  return table(['goal', 'target', 'measured', ''], goals.map((g) => [g.goal, g.target, g.measured, g.met]),
    ['---', '---', '---:', '---']);
}

/** overhead.json rows -> markdown. */
export function overheadTable(rows, modes) {
  const headers = ['contender'];
  for (const m of modes) {
    headers.push(`${m.name}: throughput ratio to plain fetch (IQR of rounds)`, `${m.name}: calls/s`, `${m.name}: µs added per call`);
  }
  return table(headers, rows.map((r) => {
    const cells = [r.name];
    for (const m of modes) {
      const x = r[m.id];
      cells.push(
        r.reference ? '1 (reference)' : `**${x.ratio.toFixed(3)}** (${x.ratioP25.toFixed(2)}–${x.ratioP75.toFixed(2)})`,
        x.perSec.toFixed(0),
        r.reference ? '0' : `${x.addedUsPerCall >= 0 ? '+' : ''}${x.addedUsPerCall.toFixed(0)}`,
      );
    }
    return cells;
  }));
}

export const fmtBytes = (n) => (n == null ? 'n/a' : n.toLocaleString('en-US'));
export const fmtKB = (n) => (n == null ? 'n/a' : `${(n / 1000).toFixed(1)} kB`);
export const fmtMs = (x, digits = 2) => (x == null ? 'n/a' : x.toFixed(digits));

/** companion.json rows -> markdown (a skipped row: its reason, n/a). */
export function companionTable(rows, modes) {
  const headers = ['contender'];
  for (const m of modes) {
    headers.push(`${m.name}: throughput ratio to the bare handler (IQR of rounds)`, `${m.name}: requests/s`, `${m.name}: µs added per request`);
  }
  return table(headers, rows.map((r) => {
    if (r.skipped) return [`${r.name} (skipped: ${r.skipped})`, ...modes.flatMap(() => ['n/a', 'n/a', 'n/a'])];
    const cells = [r.name];
    for (const m of modes) {
      const x = r[m.id];
      cells.push(
        r.reference ? '1 (reference)' : `**${x.ratio.toFixed(3)}** (${x.ratioP25.toFixed(2)}–${x.ratioP75.toFixed(2)})`,
        x.perSec.toFixed(0),
        r.reference ? '0' : `${x.addedUsPerRequest >= 0 ? '+' : ''}${x.addedUsPerRequest.toFixed(0)}`,
      );
    }
    return cells;
  }));
}
