// The playground tab: pick a failure scenario and a retry policy, press Send, watch the
// attempts of a GET or POST to the flaky endpoint live, and see the backoff schedule
// `backoffDelays` computes for the chosen jitter.
import { $, STATUS_TEXT, STOP_TEXT, createTimeline, drawSchedule, el, fmtMs, tok, trackedTransport } from './ui.js';

const MAX_BARS = 16;

const MODE_HINTS = {
  503: 'Answers <b>503 Service Unavailable</b>. Retried with exponential backoff and jitter.',
  429: 'Answers <b>429</b> with <code>Retry-After: 1</code>: the server\u2019s wait is the least wait, spread above it (by up to half of it on the first retry).',
  reset: 'Drops the connection without an answer: a <b>network error</b>. GET is retried; POST only because it carries an idempotency key.',
  slow: 'Holds each failing answer for <b>2 s</b>. With a <code>timeoutMs</code> below that, the attempt times out and is retried.',
};

const TARGET_HINTS = {
  get: 'GET is idempotent: every transient failure is safe to retry.',
  post: 'POST is not idempotent, so <code>idempotencyKey: \'auto\'</code> adds one <code>Idempotency-Key</code> for the whole call, sent on every attempt.',
};

export function initPlayground(lib) {
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
    result: $('#result'),
    runLabel: $('#run-label'),
    response: $('#response'),
    responseBody: $('#response-body'),
    chart: $('#schedule-chart'),
    scheduleCall: $('#schedule-call'),
    scheduleTotal: $('#schedule-total'),
    legendJitter: $('#legend-jitter'),
  };
  const timeline = createTimeline($('#timeline'), $('#timeline-empty'));
  let runDelays = []; // the waits of the current run, by attempt index
  let current = null; // { controller }

  /** The form's values, read fresh. */
  function readForm() {
    const checked = (name) => els.form.querySelector(`input[name="${name}"]:checked`)?.value ?? null;
    const num = (input) => (input.value.trim() === '' ? null : Number(input.value));
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

  function renderCode(v) {
    const [url, init] = requestOf(v);
    const o = policyOf(v);
    const initText = init.method === 'GET'
      ? `{ ${tok.key('method')}: ${tok.str('GET')} }`
      : `{ ${tok.key('method')}: ${tok.str('POST')}, ${tok.key('headers')}, ${tok.key('body')} }`;
    const lines = [
      `${tok.kw('const')} url = ${tok.str(url)};`,
      `${tok.kw('const')} init = ${initText};`,
      `${tok.kw('const')} res = ${tok.kw('await')} ${tok.fn('retryFetch')}(url, init, {`,
      `  ${tok.key('jitter')}: ${tok.str(o.jitter)},`,
    ];
    if ('maxAttempts' in o) lines.push(`  ${tok.key('maxAttempts')}: ${tok.num(o.maxAttempts)},`);
    if ('baseDelayMs' in o) lines.push(`  ${tok.key('baseDelayMs')}: ${tok.num(o.baseDelayMs)},`);
    if ('factor' in o) lines.push(`  ${tok.key('factor')}: ${tok.num(o.factor)},`);
    if ('timeoutMs' in o) lines.push(`  ${tok.key('timeoutMs')}: ${tok.num(o.timeoutMs)},`);
    if (init.method === 'POST') lines.push(`  ${tok.com("// idempotencyKey: 'auto' (the default)")}`);
    lines.push(`  ${tok.fn('onRetry')}: (info) => timeline.${tok.fn('add')}(info),`, '});');
    els.code.innerHTML = lines.join('\n');
  }

  function renderSchedule(v = readForm()) {
    const options = policyOf(v);
    const waits = Math.max(0, Math.min((v.maxAttempts ?? 3) - 1, MAX_BARS));
    els.legendJitter.textContent = v.jitter;
    els.scheduleCall.textContent = `backoffDelays({ jitter: '${v.jitter}', baseDelayMs: ${options.baseDelayMs ?? 500}, factor: ${options.factor ?? 2} }, ${waits}, ${v.seed})`;
    const total = drawSchedule(els.chart, { lib, options, waits, seed: v.seed, actual: runDelays });
    els.scheduleTotal.textContent = total === null ? '' : `total wait ${fmtMs(total)} over ${waits} retr${waits === 1 ? 'y' : 'ies'}`;
  }

  function setResult(outcome, text, status) {
    els.result.dataset.outcome = outcome;
    if (status !== undefined) els.result.dataset.status = String(status);
    else delete els.result.dataset.status;
    const t = el('span', 'result-text', text);
    els.result.replaceChildren(...(outcome === 'running' ? [el('span', 'spinner'), t] : [t]));
  }

  function showBody(text) {
    let pretty = text;
    try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON: as is */ }
    els.responseBody.textContent = pretty;
    els.response.hidden = false;
    els.response.open = true;
  }

  async function sendRun() {
    if (current) return;
    const v = readForm();
    const run = newRunId();
    const [url, init] = requestOf(v, run);
    const controller = new AbortController();
    current = { controller };

    runDelays = [];
    renderSchedule(v);
    timeline.clear();
    els.response.hidden = true;
    els.send.disabled = true;
    els.send.classList.add('is-busy');
    els.cancel.hidden = false;
    els.runLabel.textContent = `${init.method} ${url.replace(/&run=.*$/, '')} · run ${run}`;
    setResult('running', 'Running…');
    els.result.removeAttribute('title');

    const { rows, transport, t0 } = trackedTransport(timeline, { timeoutMs: v.timeoutMs });
    const onRetry = (info) => {
      rows[info.attempt - 1]?.retry(info);
      runDelays[info.attempt - 1] = info.delayMs;
      renderSchedule(v);
    };

    try {
      const res = await lib.retryFetch(url, init, { ...policyOf(v), signal: controller.signal, fetch: transport, onRetry });
      const text = await res.text();
      rows.at(-1)?.final(res.ok ? 'ok' : 'bad');
      const elapsed = fmtMs(performance.now() - t0);
      const tries = `${rows.length} attempt${rows.length === 1 ? '' : 's'}`;
      if (res.ok) {
        setResult('success', `${res.status} ${res.statusText || STATUS_TEXT[res.status] || ''} · ${tries} · ${elapsed}`, res.status);
      } else {
        setResult('failure', `Gave up: ${res.status} after ${tries} · ${elapsed}`, res.status);
        timeline.addNote('failed', `Returned the last response (${res.status})`, rows.length >= (v.maxAttempts ?? 3)
          ? 'maxAttempts reached: retryFetch resolves with the last response, check res.ok.'
          : 'The policy stopped retrying: retryFetch resolves with the response, check res.ok.');
      }
      showBody(text);
    } catch (e) {
      const elapsed = fmtMs(performance.now() - t0);
      if (controller.signal.aborted) {
        rows.at(-1)?.final('bad');
        setResult('cancelled', `Cancelled · ${elapsed}`);
        timeline.addNote('cancelled', 'Cancelled', 'The attempt in flight and any wait stopped at once.');
      } else if (lib.isRetryError(e)) {
        rows.at(-1)?.final('bad');
        const n = e.attempts.length;
        setResult('failure', `Failed · ${STOP_TEXT[e.reason] ?? e.reason} · ${n} attempt${n === 1 ? '' : 's'} · ${elapsed}`);
        const cause = e.cause === undefined ? e.message : `${e.cause?.name ?? 'Error'}: ${e.cause?.message ?? e.cause}`;
        timeline.addNote('failed', `Rejected with RetryError (reason '${e.reason}')`, cause);
      } else {
        setResult('error', `Not sent · ${e?.name ?? 'Error'}`);
        els.result.title = String(e?.message ?? e);
        timeline.addNote('failed', e?.name ?? 'Error', String(e?.message ?? e));
      }
    } finally {
      current = null;
      els.send.disabled = false;
      els.send.classList.remove('is-busy');
      els.cancel.hidden = true;
    }
  }

  function refresh() {
    const v = readForm();
    els.modeHint.innerHTML = MODE_HINTS[v.mode] ?? '';
    if (v.mode === 'slow' && !(v.timeoutMs > 0 && v.timeoutMs < 2000)) {
      els.modeHint.innerHTML += ' <span class="warn">Set timeoutMs below 2000 to see the timeouts.</span>';
    }
    els.targetHint.innerHTML = TARGET_HINTS[v.target] ?? '';
    renderCode(v);
    renderSchedule(v);
  }

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
}
