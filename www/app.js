// The retry-fetch demo page: pick a failure scenario and a retry policy, press Send, watch the
// attempts live (through `onRetry` and a thin transport wrapper), and see the backoff schedule
// `backoffDelays` computes for the chosen jitter.

const $ = (selector) => document.querySelector(selector);
const SVG_NS = 'http://www.w3.org/2000/svg';
const MAX_BARS = 16;

const STATUS_TEXT = {
  200: 'OK', 201: 'Created', 400: 'Bad Request', 404: 'Not Found', 405: 'Method Not Allowed',
  408: 'Request Timeout', 409: 'Conflict', 429: 'Too Many Requests', 500: 'Internal Server Error',
  502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};

const STOP_TEXT = {
  attempts: 'maxAttempts reached',
  deadline: 'deadline reached',
  unsafe: 'not safe to retry',
  'not-retryable': 'not retryable',
  'retry-after': 'Retry-After too long',
  'body-not-replayable': 'body not replayable',
  shouldRetry: 'vetoed by shouldRetry',
};

const MODE_HINTS = {
  503: 'Answers <b>503 Service Unavailable</b>. Retried with exponential backoff and jitter.',
  429: 'Answers <b>429</b> with <code>Retry-After: 1</code>: the server\u2019s wait replaces the computed backoff.',
  reset: 'Drops the connection without an answer: a <b>network error</b>. GET is retried; POST only because it carries an idempotency key.',
  slow: 'Holds each failing answer for <b>2 s</b>. With a <code>timeoutMs</code> below that, the attempt times out and is retried.',
};

const TARGET_HINTS = {
  get: 'GET is idempotent: every transient failure is safe to retry.',
  post: 'POST is not idempotent, so <code>idempotencyKey: \'auto\'</code> adds one <code>Idempotency-Key</code> for the whole call, sent on every attempt.',
  payments: 'A placeholder payments API: always <b>201</b>, echoing the <code>Idempotency-Key</code> it received. The failure settings do not apply.',
};

const els = {
  form: $('#controls'),
  send: $('#send'),
  cancel: $('#cancel'),
  failures: $('#failures'),
  jitter: $('#jitter'),
  maxAttempts: $('#max-attempts'),
  baseDelay: $('#base-delay'),
  factor: $('#factor'),
  timeout: $('#timeout'),
  seed: $('#seed'),
  reseed: $('#reseed'),
  modeHint: $('#mode-hint'),
  targetHint: $('#target-hint'),
  code: $('#code-preview code'),
  timeline: $('#timeline'),
  empty: $('#timeline-empty'),
  result: $('#result'),
  runLabel: $('#run-label'),
  response: $('#response'),
  responseBody: $('#response-body'),
  chart: $('#schedule-chart'),
  scheduleCall: $('#schedule-call'),
  scheduleTotal: $('#schedule-total'),
  legendJitter: $('#legend-jitter'),
  fatal: $('#fatal'),
  engine: $('#engine-status'),
  version: $('#version'),
};

// ------------------------------------------------------------------------------------------
// The package and the fatal banner

let lib = null; // the package, once loaded (see the end of this file)

function showFatal(html, error) {
  els.fatal.innerHTML = html;
  if (error) {
    const detail = document.createElement('div');
    detail.className = 'banner-detail';
    detail.textContent = String(error?.message ?? error);
    els.fatal.append(detail);
  }
  els.fatal.hidden = false;
}

// ------------------------------------------------------------------------------------------
// Form state

/** The form's values, read fresh. */
function readForm() {
  const checked = (name) => els.form.querySelector(`input[name="${name}"]:checked`)?.value ?? null;
  const num = (el) => (el.value.trim() === '' ? null : Number(el.value));
  return {
    mode: checked('mode'),
    target: checked('target'),
    failures: num(els.failures) ?? 0,
    jitter: els.jitter.value,
    maxAttempts: num(els.maxAttempts),
    baseDelayMs: num(els.baseDelay),
    factor: num(els.factor),
    timeoutMs: num(els.timeout),
    seed: num(els.seed) ?? 0,
  };
}

/** The retry options the form describes (without the callbacks). */
function policyOf(v) {
  const options = { jitter: v.jitter };
  if (v.maxAttempts !== null) options.maxAttempts = v.maxAttempts;
  if (v.baseDelayMs !== null) options.baseDelayMs = v.baseDelayMs;
  if (v.factor !== null) options.factor = v.factor;
  if (v.timeoutMs !== null && v.timeoutMs > 0) options.timeoutMs = v.timeoutMs;
  return options;
}

/** The request the form describes: [url, init]. `run` makes the server count hits afresh. */
function requestOf(v, run) {
  if (v.target === 'payments') {
    return ['/api/payments', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ amount: 4200, currency: 'EUR' }) }];
  }
  const q = new URLSearchParams({ fail: String(v.failures), mode: v.mode });
  if (run) q.set('run', run);
  const url = `/api/flaky?${q}`;
  if (v.target === 'post') {
    return [url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ amount: 4200, currency: 'EUR' }) }];
  }
  return [url, { method: 'GET' }];
}

function newRunId() {
  const rnd = crypto.getRandomValues(new Uint32Array(1))[0].toString(36);
  return `${Date.now().toString(36)}-${rnd}`;
}

// ------------------------------------------------------------------------------------------
// Code preview

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const tStr = (s) => `<span class="t-str">'${esc(s)}'</span>`;
const tNum = (n) => `<span class="t-num">${esc(n)}</span>`;
const tKey = (k) => `<span class="t-key">${esc(k)}</span>`;
const tFn = (f) => `<span class="t-fn">${esc(f)}</span>`;
const tKw = (k) => `<span class="t-kw">${esc(k)}</span>`;
const tCom = (c) => `<span class="t-com">${esc(c)}</span>`;

function renderCode(v) {
  const [url, init] = requestOf(v);
  const o = policyOf(v);
  const initText = init.method === 'GET'
    ? `{ ${tKey('method')}: ${tStr('GET')} }`
    : `{ ${tKey('method')}: ${tStr('POST')}, ${tKey('headers')}, ${tKey('body')} }`;
  const lines = [
    `${tKw('const')} url = ${tStr(url)};`,
    `${tKw('const')} init = ${initText};`,
    `${tKw('const')} res = ${tKw('await')} ${tFn('retryFetch')}(url, init, {`,
    `  ${tKey('jitter')}: ${tStr(o.jitter)},`,
  ];
  if ('maxAttempts' in o) lines.push(`  ${tKey('maxAttempts')}: ${tNum(o.maxAttempts)},`);
  if ('baseDelayMs' in o) lines.push(`  ${tKey('baseDelayMs')}: ${tNum(o.baseDelayMs)},`);
  if ('factor' in o) lines.push(`  ${tKey('factor')}: ${tNum(o.factor)},`);
  if ('timeoutMs' in o) lines.push(`  ${tKey('timeoutMs')}: ${tNum(o.timeoutMs)},`);
  if (init.method === 'POST') lines.push(`  ${tCom("// idempotencyKey: 'auto' (the default)")}`);
  lines.push(`  ${tFn('onRetry')}: (info) => timeline.${tFn('add')}(info),`, '});');
  els.code.innerHTML = lines.join('\n');
}

// ------------------------------------------------------------------------------------------
// Backoff schedule chart

let runDelays = []; // the waits of the current run, by attempt index

function fmtMs(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  return `${s < 10 ? s.toFixed(2).replace(/0$/, '') : s.toFixed(1)} s`;
}

function fmtTick(ms) {
  if (ms === 0) return '0';
  if (ms < 1000) return `${Math.round(ms)}`;
  return `${+(ms / 1000).toFixed(1)}s`;
}

/** A round axis top and step for values up to `max`. */
function niceScale(max, ticks = 4) {
  if (!(max > 0)) return { top: 100, step: 25 };
  const rough = max / ticks;
  const pow = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((s) => s >= rough);
  return { top: Math.ceil(max / step) * step, step };
}

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, val] of Object.entries(attrs)) el.setAttribute(k, String(val));
  if (text !== undefined) el.textContent = text;
  return el;
}

function renderSchedule(v = readForm()) {
  const options = policyOf(v);
  const waits = Math.max(0, Math.min((v.maxAttempts ?? 3) - 1, MAX_BARS));
  els.legendJitter.textContent = v.jitter;
  els.scheduleCall.textContent = `backoffDelays({ jitter: '${v.jitter}', baseDelayMs: ${options.baseDelayMs ?? 500}, factor: ${options.factor ?? 2} }, ${waits}, ${v.seed})`;
  els.chart.replaceChildren();

  if (waits === 0) {
    els.chart.append(Object.assign(document.createElement('p'), { className: 'chart-empty', textContent: 'maxAttempts is 1: a single attempt, no waits.' }));
    els.scheduleTotal.textContent = '';
    return;
  }
  let jittered;
  let plain;
  try {
    jittered = lib.backoffDelays(options, waits, v.seed);
    plain = lib.backoffDelays({ ...options, jitter: 'none' }, waits, v.seed);
  } catch (e) {
    els.chart.append(Object.assign(document.createElement('p'), { className: 'chart-empty chart-error', textContent: e.message }));
    els.chart.dataset.valid = 'false';
    els.scheduleTotal.textContent = '';
    return;
  }
  els.chart.dataset.valid = 'true';

  const W = 640;
  const H = 210;
  const pad = { l: 46, r: 10, t: 22, b: 30 };
  const pw = W - pad.l - pad.r;
  const ph = H - pad.t - pad.b;
  const actual = runDelays.slice(0, waits);
  const { top, step } = niceScale(Math.max(1, ...jittered, ...plain, ...actual.filter((d) => d !== undefined)));
  const y = (ms) => pad.t + ph - (ms / top) * ph;
  const slot = pw / waits;

  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', 'aria-hidden': 'true' });
  for (let t = 0; t <= top + 1e-9; t += step) {
    root.append(svg('line', { x1: pad.l, x2: W - pad.r, y1: y(t), y2: y(t), class: t === 0 ? 'axis' : 'grid' }));
    root.append(svg('text', { x: pad.l - 8, y: y(t) + 4, class: 'tick', 'text-anchor': 'end' }, fmtTick(t)));
  }
  const showValues = waits <= 10;
  for (let i = 0; i < waits; i++) {
    const cx = pad.l + slot * i + slot / 2;
    const gw = Math.min(44, slot * 0.7);
    const jw = Math.min(26, slot * 0.42);
    const g = svg('g', { class: 'bar', 'data-index': i });
    g.append(svg('title', {}, `wait before attempt ${i + 2}: ${fmtMs(jittered[i])} (without jitter ${fmtMs(plain[i])})`));
    g.append(svg('rect', { x: cx - gw / 2, y: y(plain[i]), width: gw, height: Math.max(0, y(0) - y(plain[i])), rx: 4, class: 'bar-plain' }));
    const hj = Math.max(1.5, y(0) - y(jittered[i]));
    g.append(svg('rect', { x: cx - jw / 2, y: y(0) - hj, width: jw, height: hj, rx: 3, class: 'bar-jitter' }));
    const a = actual[i];
    if (a !== undefined) {
      g.append(svg('line', { x1: cx - gw / 2 - 3, x2: cx + gw / 2 + 3, y1: y(a), y2: y(a), class: 'actual-line' }));
      g.append(svg('circle', { cx: cx + gw / 2 + 3, cy: y(a), r: 4, class: 'actual-dot' }));
    }
    if (showValues) {
      const topY = Math.min(y(plain[i]), y(jittered[i]), a === undefined ? Infinity : y(a) - 4, y(0) - hj);
      g.append(svg('text', { x: cx, y: topY - 7, class: 'bar-value', 'text-anchor': 'middle' }, fmtTick(jittered[i])));
    }
    g.append(svg('text', { x: cx, y: H - 10, class: 'tick', 'text-anchor': 'middle' }, `${i + 1}→${i + 2}`));
    root.append(g);
  }
  els.chart.append(root);
  const total = jittered.reduce((a, b) => a + b, 0);
  els.scheduleTotal.textContent = `total wait ${fmtMs(total)} over ${waits} retr${waits === 1 ? 'y' : 'ies'}`;
}

// ------------------------------------------------------------------------------------------
// Timeline

function headerOf(input, init, name) {
  try {
    if (init?.headers) {
      const v = new Headers(init.headers).get(name);
      if (v) return v;
    }
    if (input instanceof Request) return input.headers.get(name);
  } catch { /* no headers to read */ }
  return null;
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function chip(text, kind) {
  return el('span', `chip chip-${kind}`, text);
}

/** One attempt's row; its methods update it as the attempt progresses. */
function addAttemptRow(n, startMs, key, timeoutMs) {
  els.empty.hidden = true;
  const li = el('li', 'entry is-pending');
  li.setAttribute('data-testid', 'timeline-entry');
  li.dataset.attempt = String(n);
  li.dataset.kind = 'pending';
  const dot = el('span', 'entry-dot');
  const body = el('div', 'entry-body');
  const head = el('div', 'entry-head');
  head.append(el('span', 'entry-title', `Attempt ${n}`), el('span', 'entry-time', `+${fmtMs(startMs)}`));
  const line = el('div', 'entry-line');
  line.append(el('span', 'spinner'), el('span', 'muted', 'sending…'));
  body.append(head, line);
  if (key) {
    li.dataset.key = key;
    const k = el('div', 'entry-key');
    k.append(el('span', 'muted', 'Idempotency-Key'), el('code', 'key', key));
    body.append(k);
  }
  li.append(dot, body);
  els.timeline.append(li);

  const setLine = (...nodes) => line.replaceChildren(...nodes);
  return {
    li,
    /** The transport answered. */
    responded(res, ms, retryAfter) {
      li.dataset.status = String(res.status);
      const nodes = [chip(`${res.status} ${res.statusText || STATUS_TEXT[res.status] || ''}`.trim(), res.ok ? 'ok' : 'bad'), el('span', 'muted', fmtMs(ms))];
      if (retryAfter !== null) nodes.push(chip(`Retry-After: ${retryAfter}`, 'info'));
      setLine(...nodes);
    },
    /** The transport failed (network error, or aborted by the per-attempt timeout). */
    failed(error, ms) {
      const name = error?.name === 'AbortError' || error?.name === 'TimeoutError' ? 'aborted' : 'network error';
      setLine(chip(name, 'bad'), el('span', 'muted', fmtMs(ms)));
    },
    /** onRetry: this attempt failed and the call waits `info.delayMs` before the next one. */
    retry(info) {
      li.classList.remove('is-pending');
      li.classList.add('is-failed');
      li.dataset.kind = 'retry';
      li.dataset.reason = info.reason;
      li.dataset.delayMs = String(info.delayMs);
      if (info.status !== undefined) li.dataset.status = String(info.status);
      const reasonText = { status: 'retryable status', network: 'network error', timeout: 'timed out' }[info.reason] ?? info.reason;
      if (info.reason === 'timeout') setLine(chip('timeout', 'bad'), el('span', 'muted', timeoutMs ? `no response within ${fmtMs(timeoutMs)}` : 'no response in time'));
      if (info.reason === 'network' && info.error) {
        const msg = el('span', 'muted err', String(info.error?.message ?? info.error));
        setLine(chip('network error', 'bad'), msg);
      }
      const wait = el('div', 'entry-wait');
      wait.setAttribute('data-testid', 'wait');
      const label = el('span', 'wait-label');
      label.append(el('span', 'reason', reasonText), document.createTextNode(' · waiting '), el('b', '', fmtMs(info.delayMs)), document.createTextNode(` before attempt ${info.attempt + 1}`));
      const bar = el('span', 'wait-bar');
      const fill = el('span', 'wait-fill');
      fill.style.animationDuration = `${Math.max(0, info.delayMs)}ms`;
      bar.append(fill);
      wait.append(label, bar);
      body.insertBefore(wait, body.querySelector('.entry-key'));
      if (info.idempotencyKey && !li.dataset.key) {
        li.dataset.key = info.idempotencyKey;
        const k = el('div', 'entry-key');
        k.append(el('span', 'muted', 'Idempotency-Key'), el('code', 'key', info.idempotencyKey));
        body.append(k);
      }
    },
    /** The call ended on this attempt. */
    final(kind) {
      li.classList.remove('is-pending');
      li.classList.add(kind === 'ok' ? 'is-ok' : 'is-failed');
      li.dataset.kind = 'final';
    },
  };
}

function setResult(outcome, text, status) {
  els.result.dataset.outcome = outcome;
  if (status !== undefined) els.result.dataset.status = String(status);
  else delete els.result.dataset.status;
  const t = el('span', 'result-text', text);
  els.result.replaceChildren(...(outcome === 'running' ? [el('span', 'spinner'), t] : [t]));
}

function addNote(kind, title, detail) {
  const li = el('li', `entry entry-note is-${kind}`);
  li.setAttribute('data-testid', 'timeline-note');
  li.dataset.kind = 'note';
  const body = el('div', 'entry-body');
  body.append(el('div', 'entry-title', title));
  if (detail) body.append(el('div', 'entry-line muted', detail));
  li.append(el('span', 'entry-dot'), body);
  els.timeline.append(li);
}

// ------------------------------------------------------------------------------------------
// Sending

let current = null; // { controller }

async function sendRun() {
  if (current) return;
  const v = readForm();
  const run = newRunId();
  const [url, init] = requestOf(v, run);
  const controller = new AbortController();
  current = { controller };

  runDelays = [];
  renderSchedule(v);
  els.timeline.replaceChildren();
  els.empty.hidden = true;
  els.response.hidden = true;
  els.send.disabled = true;
  els.send.classList.add('is-busy');
  els.cancel.hidden = false;
  els.runLabel.textContent = `${init.method} ${url.replace(/&run=.*$/, '')} · run ${run}`;
  setResult('running', 'Running…');
  els.result.removeAttribute('title');

  const rows = [];
  const t0 = performance.now();
  const transport = (input, attemptInit) => {
    const n = rows.length + 1;
    const start = performance.now();
    const row = addAttemptRow(n, start - t0, headerOf(input, attemptInit, 'Idempotency-Key'), v.timeoutMs);
    rows.push(row);
    return fetch(input, attemptInit).then(
      (res) => { row.responded(res, performance.now() - start, res.headers.get('Retry-After')); return res; },
      (err) => { row.failed(err, performance.now() - start); throw err; },
    );
  };
  const onRetry = (info) => {
    rows[info.attempt - 1]?.retry(info);
    runDelays[info.attempt - 1] = info.delayMs;
    renderSchedule(v);
  };

  try {
    const res = await lib.retryFetch(url, init, { ...policyOf(v), signal: controller.signal, fetch: transport, onRetry });
    const text = await res.text();
    const last = rows.at(-1);
    last?.final(res.ok ? 'ok' : 'bad');
    const elapsed = fmtMs(performance.now() - t0);
    const tries = `${rows.length} attempt${rows.length === 1 ? '' : 's'}`;
    if (res.ok) {
      setResult('success', `${res.status} ${res.statusText || STATUS_TEXT[res.status] || ''} · ${tries} · ${elapsed}`, res.status);
    } else {
      setResult('failure', `Gave up: ${res.status} after ${tries} · ${elapsed}`, res.status);
      addNote('failed', `Returned the last response (${res.status})`, rows.length >= (v.maxAttempts ?? 3)
        ? 'maxAttempts reached: retryFetch resolves with the last response, check res.ok.'
        : 'The policy stopped retrying: retryFetch resolves with the response, check res.ok.');
    }
    showBody(text);
  } catch (e) {
    const elapsed = fmtMs(performance.now() - t0);
    if (controller.signal.aborted) {
      rows.at(-1)?.final('bad');
      setResult('cancelled', `Cancelled · ${elapsed}`);
      addNote('cancelled', 'Cancelled', 'The attempt in flight and any wait stopped at once.');
    } else if (lib.isRetryError(e)) {
      rows.at(-1)?.final('bad');
      const n = e.attempts.length;
      setResult('failure', `Failed · ${STOP_TEXT[e.reason] ?? e.reason} · ${n} attempt${n === 1 ? '' : 's'} · ${elapsed}`);
      const cause = e.cause === undefined ? e.message : `${e.cause?.name ?? 'Error'}: ${e.cause?.message ?? e.cause}`;
      addNote('failed', `Rejected with RetryError (reason '${e.reason}')`, cause);
    } else {
      setResult('error', `Not sent · ${e?.name ?? 'Error'}`);
      els.result.title = String(e?.message ?? e);
      addNote('failed', e?.name ?? 'Error', String(e?.message ?? e));
    }
  } finally {
    current = null;
    els.send.disabled = false;
    els.send.classList.remove('is-busy');
    els.cancel.hidden = true;
  }
}

function showBody(text) {
  let pretty = text;
  try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON: as is */ }
  els.responseBody.textContent = pretty;
  els.response.hidden = false;
  els.response.open = true;
}

// ------------------------------------------------------------------------------------------
// Wiring

function refresh() {
  const v = readForm();
  els.modeHint.innerHTML = MODE_HINTS[v.mode] ?? '';
  if (v.mode === 'slow' && !(v.timeoutMs > 0 && v.timeoutMs < 2000)) {
    els.modeHint.innerHTML += ' <span class="warn">Set timeoutMs below 2000 to see the timeouts.</span>';
  }
  els.targetHint.innerHTML = TARGET_HINTS[v.target] ?? '';
  els.form.classList.toggle('no-faults', v.target === 'payments');
  for (const input of els.form.querySelectorAll('input[name="mode"], #failures')) input.disabled = v.target === 'payments';
  renderCode(v);
  renderSchedule(v);
}

function init() {
  els.form.addEventListener('input', refresh);
  els.form.addEventListener('change', refresh);
  els.seed.addEventListener('input', () => renderSchedule());
  els.reseed.addEventListener('click', () => {
    els.seed.value = String(crypto.getRandomValues(new Uint32Array(1))[0] % 100000);
    renderSchedule();
  });
  els.form.addEventListener('submit', (e) => {
    e.preventDefault();
    sendRun();
  });
  els.cancel.addEventListener('click', () => current?.controller.abort(new DOMException('Cancelled by the user', 'AbortError')));
  refresh();
  els.send.disabled = false;
  document.body.dataset.ready = 'true';
}

// ------------------------------------------------------------------------------------------
// Start: load the package (the wasm is instantiated by its top-level await), then wire the page.

try {
  lib = await import('/pkg/index.browser.js');
} catch (e) {
  els.engine.dataset.state = 'error';
  els.engine.textContent = 'wasm failed to load';
  showFatal(
    'The retry-fetch package could not be loaded from /pkg/. Build it with <code>make pkg</code> and reload.',
    e,
  );
}

if (lib) {
  els.engine.dataset.state = 'ready';
  els.engine.textContent = 'wasm ready';
  fetch('/pkg/package.json')
    .then((r) => (r.ok ? r.json() : null))
    .then((p) => { if (p?.version) els.version.textContent = `v${p.version}`; })
    .catch(() => {});
  init();
}
