// Small helpers shared by overhead.mjs, coldstart.mjs, companion.mjs, storms.mjs, chart.mjs and
// report.mjs: statistics and the markdown tables (the scripts print them, report.mjs renders the
// same ones from the JSON). No imports: coldstart.mjs times this module's import as its floor.

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

/**
 * Rows of per-round throughput ratios -> markdown: per mode, the median ratio to the
 * reference (IQR of rounds), the rate, and the µs added per unit (`addedKey` of each mode's
 * cell). A skipped row (`skipped`: its reason) reads n/a.
 */
function ratioTable(rows, modes, { against, rate, per, addedKey }) {
  const headers = ['contender'];
  for (const m of modes) {
    headers.push(`${m.name}: throughput ratio to ${against} (IQR of rounds)`, `${m.name}: ${rate}`, `${m.name}: µs added per ${per}`);
  }
  return table(headers, rows.map((r) => {
    if (r.skipped) return [`${r.name} (skipped: ${r.skipped})`, ...modes.flatMap(() => ['n/a', 'n/a', 'n/a'])];
    const cells = [r.name];
    for (const m of modes) {
      const x = r[m.id];
      cells.push(
        r.reference ? '1 (reference)' : `**${x.ratio.toFixed(3)}** (${x.ratioP25.toFixed(2)}–${x.ratioP75.toFixed(2)})`,
        x.perSec.toFixed(0),
        r.reference ? '0' : `${x[addedKey] >= 0 ? '+' : ''}${x[addedKey].toFixed(0)}`,
      );
    }
    return cells;
  }));
}

/** overhead.json rows -> markdown. */
export function overheadTable(rows, modes) {
  return ratioTable(rows, modes, { against: 'plain fetch', rate: 'calls/s', per: 'call', addedKey: 'addedUsPerCall' });
}

/** overhead.json's `ownCost` (the libraries' own cost with fetch stubbed) -> markdown. */
export function ownCostTable(own) {
  if (!own) return '';
  const rows = own.rows.map((r) => `| ${r.name} | ${r.usPerCall.toFixed(2)} | ${r.reference ? '0 (reference)' : `${r.addedUsPerCall >= 0 ? '+' : ''}${r.addedUsPerCall.toFixed(2)}`} |`);
  return [
    `The libraries' own cost per call, without the network: \`fetch\` stubbed in-process (a new \`Response('ok')\`, resolved at once), each contender called ${own.callsPerBatch} times in a row, ${own.rounds} rounds with the order rotated, medians:`,
    '',
    '| contender | µs per call | µs added to the stubbed fetch |',
    '| --- | ---: | ---: |',
    ...rows,
  ].join('\n');
}

/**
 * One contender's cell of a mode from its rounds: median ratio, IQR, extremes, median rate,
 * and the median µs added per unit against the round's `referenceId` (stored as `addedKey`).
 */
export function ratioCell(rounds, modeId, id, referenceId, count, addedKey) {
  const ratios = rounds.map((r) => r[modeId][id].ratio);
  const perSec = rounds.map((r) => r[modeId][id].perSec);
  // Wall time added per unit against the same round's reference, in µs (wall time / count).
  const added = rounds.map((r) => ((r[modeId][id].ms - r[modeId][referenceId].ms) * 1000) / count);
  return {
    ratio: median(ratios),
    ratioP25: percentile(ratios, 0.25),
    ratioP75: percentile(ratios, 0.75),
    ratioMin: Math.min(...ratios),
    ratioMax: Math.max(...ratios),
    perSec: median(perSec),
    [addedKey]: median(added),
  };
}

export const fmtBytes = (n) => (n == null ? 'n/a' : n.toLocaleString('en-US'));
export const fmtKB = (n) => (n == null ? 'n/a' : `${(n / 1000).toFixed(1)} kB`);
export const fmtMs = (x, digits = 2) => (x == null ? 'n/a' : x.toFixed(digits));

/** companion.json rows -> markdown (a skipped row: its reason, n/a). */
export function companionTable(rows, modes) {
  return ratioTable(rows, modes, { against: 'the bare handler', rate: 'requests/s', per: 'request', addedKey: 'addedUsPerRequest' });
}

// ---- Retry storms (storms.mjs prints these tables, report.mjs renders them from storms.json).

export const stormFmt = {
  amp: (x) => (x == null ? 'n/a' : x.toFixed(2)),
  int: (x) => (x == null ? 'n/a' : String(Math.round(x))),
  ratio: (x) => (x == null || !Number.isFinite(x) ? 'n/a' : `${x.toFixed(2)}×`),
};
/**
 * storms.json -> { kinds, outage }, whatever its version: the results of a run before the
 * server kinds (one `herd` table against the 'storm' server) become one kind.
 */
export function normalizeStorms(s) {
  if (Array.isArray(s.kinds)) return s;
  return {
    ...s,
    kinds: [{
      id: 'storm',
      title: 'herd',
      description: `${s.server?.ratePerSec} req/s bucket (capacity ${s.server?.burst}) and at most ${s.server?.maxInService} in service, service ${s.server?.serviceMs} ms (results from before the server kinds)`,
      server: s.server,
      idealMs: null,
      rows: s.herd ?? [],
    }],
    outage: { description: '503 to every request', rows: s.outage ?? [] },
  };
}

/** The herd rows of every server kind, one table with a group row per kind. */
export function stormHerdTable(kinds, clients) {
  const rows = [];
  for (const k of kinds) {
    const ideal = Number.isFinite(k.idealMs) ? `; ideal ${Math.round(k.idealMs)} ms` : '';
    rows.push([`**${k.title}**: ${k.description}${ideal}`, '', '', '', '', '', '']);
    for (const r of k.rows) {
      const m = r.median;
      rows.push(m
        ? [r.name, stormFmt.amp(m.amplification), stormFmt.amp(m.floor), stormFmt.int(m.successes),
          stormFmt.int(m.p50Ms), stormFmt.int(m.p99Ms), stormFmt.ratio(m.p99OverIdeal)]
        : [`${r.name} (${r.note ?? 'no result'})`, 'n/a', 'n/a', 'n/a', 'n/a', 'n/a', 'n/a']);
    }
  }
  return table(['server kind / contender', 'amplification', `floor (1 + first ${clients} refused / ${clients})`,
    `successes (of ${clients})`, 'p50 ms', 'p99 ms', 'p99 / ideal'], rows);
}

/** The outage rows. */
export function stormOutageTable(rows, sideBySide) {
  return table(['contender', 'amplification', 'requests seen', `p99 ms (time to give up${sideBySide ? '; rows ran side by side' : ''})`],
    rows.map((r) => (r.median
      ? [r.name, stormFmt.amp(r.median.amplification), stormFmt.int(r.median.seen), stormFmt.int(r.median.p99Ms)]
      : [`${r.name} (${r.note ?? 'no result'})`, 'n/a', 'n/a', 'n/a'])));
}

/**
 * The lines under the storm tables: the checks (connections open at once, requests in service
 * against a concurrency limit), the calls that rejected, the rounds cut by the timeout.
 */
export function stormNotes(kinds, outage, clients, roundTimeoutMs) {
  const all = [...kinds.flatMap((k) => k.rows.map((r) => [k.title, r])), ...outage.rows.map((r) => ['outage', r])];
  const withMedian = all.filter(([, r]) => r.median);
  const peakConn = Math.max(0, ...withMedian.map(([, r]) => r.median.peakOpenConnections ?? 0));
  const inService = kinds.filter((k) => k.server?.maxInService > 0).map((k) => {
    const peak = Math.max(0, ...k.rows.filter((r) => r.median).map((r) => r.median.peakInService ?? 0));
    return `${k.title}: at most ${peak} requests in service (limit ${k.server.maxInService})`;
  });
  const checks = `Checks: at most ${peakConn} connections were open at once on a server (${clients} clients: `
    + `${peakConn >= clients ? 'no client-side connection cap queued requests' : 'FEWER than the clients: a client-side cap may have queued requests'})`
    + `${inService.length ? `; ${inService.join('; ')}` : ''}.`;
  const rejected = withMedian
    .filter(([, r]) => Object.keys(r.median.errors ?? {}).length)
    .map(([kind, r]) => `${kind} ${r.name}: ${Object.entries(r.median.errors).map(([k, v]) => `${v} ${k}`).join(', ')}`);
  const cut = all.filter(([, r]) => (r.rounds ?? []).some((x) => x.pendingAtTimeout > 0))
    .map(([kind, r]) => `${kind} ${r.name} (${r.rounds.map((x) => x.pendingAtTimeout).join('/')} calls still pending after ${roundTimeoutMs / 1000} s, counted as failures)`);
  return {
    checks,
    rejected: `Calls that rejected instead of resolving with a Response (all rounds together): ${rejected.length ? rejected.join('; ') : 'none'}.`,
    cut: cut.length ? `Rounds cut at ${roundTimeoutMs / 1000} s: ${cut.join('; ')}.` : null,
  };
}

/**
 * adapters.json -> markdown, one table per mode: per framework, its bare route's requests/s,
 * the wrapped route's requests/s, its throughput ratio to the bare route (median, IQR of
 * rounds), the µs added per request, the server thread's busy time per request (bare → with
 * the adapter; when the results have it), and the noise row's ratio (bare again / bare).
 */
export function adaptersTable(rows, frameworks, mode) {
  const byId = Object.fromEntries(rows.map((r) => [r.id, r]));
  const ratio = (x) => (x ? `**${x.ratio.toFixed(3)}** (${x.ratioP25.toFixed(2)}–${x.ratioP75.toFixed(2)})` : 'n/a');
  const rate = (x) => (x ? x.perSec.toFixed(0) : 'n/a');
  const busy = (x) => (typeof x?.serverBusyUs === 'number' ? x.serverBusyUs.toFixed(0) : 'n/a');
  const withBusy = rows.some((r) => typeof r[mode.id]?.serverBusyUs === 'number');
  return table([
    'framework (adapter)',
    `${mode.name}: bare, requests/s`,
    `${mode.name}: with the adapter, requests/s`,
    `${mode.name}: throughput ratio, with the adapter / bare (IQR of rounds)`,
    `${mode.name}: µs added per request`,
    ...(withBusy ? [`${mode.name}: server thread busy per request, µs (bare → with the adapter)`] : []),
    `${mode.name}: noise, bare again / bare (IQR of rounds)`,
  ], frameworks.map((f) => {
    const bare = byId[`${f.id}:bare`]?.[mode.id];
    const wrapped = byId[`${f.id}:wrapped`]?.[mode.id];
    const again = byId[`${f.id}:again`]?.[mode.id];
    const versions = Object.entries(f.versions ?? {}).filter(([, v]) => v).map(([p, v]) => `${p} ${v}`).join(', ');
    const added = wrapped ? `${wrapped.addedUsPerRequest >= 0 ? '+' : ''}${wrapped.addedUsPerRequest.toFixed(0)}` : 'n/a';
    return [`${f.name}${versions ? ` (${versions})` : ''}, \`${f.adapter}\``, rate(bare), rate(wrapped), ratio(wrapped), added,
      ...(withBusy ? [`${busy(bare)} → ${busy(wrapped)}`] : []), ratio(again)];
  }));
}

/** The table of bench/keyed-post.mjs's results: per mode, the ratio to the hand-keyed plain fetch. */
export function keyedPostTable(res) {
  const headers = ['contender'];
  for (const m of res.modes) headers.push(`${m.name}: ratio to plain fetch (IQR)`, `${m.name}: calls/s`, `${m.name}: µs added per call`);
  return table(headers, res.rows.map((r) => {
    const cells = [r.name];
    for (const m of res.modes) {
      const x = r[m.id];
      const ref = r.id === 'fetch';
      cells.push(ref ? '1 (reference)' : `**${x.ratio.toFixed(3)}** (${x.q1.toFixed(2)}–${x.q3.toFixed(2)})`,
        x.perSecond.toFixed(0), ref ? '0' : `${x.addedUs >= 0 ? '+' : ''}${x.addedUs.toFixed(0)}`);
    }
    return cells;
  }));
}
