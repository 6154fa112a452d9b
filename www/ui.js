// Shared pieces of the demo page: formatting, the attempt timeline, the backoff chart and
// the code-token helpers. Used by payments.js (the checkout) and playground.js.

export const $ = (selector, root = document) => root.querySelector(selector);
const SVG_NS = 'http://www.w3.org/2000/svg';

export const STATUS_TEXT = {
  200: 'OK', 201: 'Created', 400: 'Bad Request', 404: 'Not Found', 405: 'Method Not Allowed',
  408: 'Request Timeout', 409: 'Conflict', 422: 'Unprocessable Content', 429: 'Too Many Requests',
  500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout',
};

export const STOP_TEXT = {
  attempts: 'maxAttempts reached',
  deadline: 'deadline reached',
  unsafe: 'not safe to retry',
  'not-retryable': 'not retryable',
  'retry-after': 'Retry-After too long',
  'body-not-replayable': 'body not replayable',
  shouldRetry: 'vetoed by shouldRetry',
  budget: 'retry budget spent',
  'circuit-open': 'circuit open',
};

// ------------------------------------------------------------------------------------------
// Formatting and DOM helpers

export function fmtMs(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  return `${s < 10 ? s.toFixed(2).replace(/0$/, '') : s.toFixed(1)} s`;
}

export function fmtTick(ms) {
  if (ms === 0) return '0';
  if (ms < 1000) return `${Math.round(ms)}`;
  return `${+(ms / 1000).toFixed(1)}s`;
}

export function statusLine(status, statusText) {
  return `${status} ${statusText || STATUS_TEXT[status] || ''}`.trim();
}

export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

export function chip(text, kind) {
  return el('span', `chip chip-${kind}`, text);
}

/** A request header, from `init.headers` or a `Request` input. */
export function headerOf(input, init, name) {
  try {
    if (init?.headers) {
      const v = new Headers(init.headers).get(name);
      if (v) return v;
    }
    if (input instanceof Request) return input.headers.get(name);
  } catch { /* no headers to read */ }
  return null;
}

// Syntax-highlighting tokens for the code previews.
export const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
export const tok = {
  str: (s) => `<span class="t-str">'${esc(s)}'</span>`,
  num: (n) => `<span class="t-num">${esc(n)}</span>`,
  key: (k) => `<span class="t-key">${esc(k)}</span>`,
  fn: (f) => `<span class="t-fn">${esc(f)}</span>`,
  kw: (k) => `<span class="t-kw">${esc(k)}</span>`,
  com: (c) => `<span class="t-com">${esc(c)}</span>`,
};

// ------------------------------------------------------------------------------------------
// Backoff schedule chart

/** A round axis top and step for values up to `max`. */
function niceScale(max, ticks = 4) {
  if (!(max > 0)) return { top: 100, step: 25 };
  const rough = max / ticks;
  const pow = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((s) => s >= rough);
  return { top: Math.ceil(max / step) * step, step };
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, val] of Object.entries(attrs)) node.setAttribute(k, String(val));
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * Draws the schedule `backoffDelays` computes into `chart`: per wait, the delay without jitter
 * (pale), the seeded jittered delay (solid) and the wait of the current run (orange marker).
 * Returns the total jittered wait, or null when there is nothing to draw.
 */
export function drawSchedule(chart, { lib, options, waits, seed, actual = [] }) {
  chart.replaceChildren();
  if (waits === 0) {
    chart.append(el('p', 'chart-empty', 'maxAttempts is 1: a single attempt, no waits.'));
    return null;
  }
  let jittered;
  let plain;
  try {
    jittered = lib.backoffDelays(options, waits, seed);
    plain = lib.backoffDelays({ ...options, jitter: 'none' }, waits, seed);
  } catch (e) {
    chart.append(el('p', 'chart-empty chart-error', e.message));
    chart.dataset.valid = 'false';
    return null;
  }
  chart.dataset.valid = 'true';

  const W = 640;
  const H = 210;
  const pad = { l: 46, r: 10, t: 22, b: 30 };
  const pw = W - pad.l - pad.r;
  const ph = H - pad.t - pad.b;
  const shown = actual.slice(0, waits);
  const { top, step } = niceScale(Math.max(1, ...jittered, ...plain, ...shown.filter((d) => d !== undefined)));
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
    const a = shown[i];
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
  chart.append(root);
  return jittered.reduce((a, b) => a + b, 0);
}

// ------------------------------------------------------------------------------------------
// Timeline

/**
 * A live attempt timeline in `list` (an <ol>); `empty` is shown while it has no entries.
 * Entries carry data-testid="timeline-entry" and data-attempt / data-kind / data-status /
 * data-reason / data-delay-ms / data-key / data-replayed for tests.
 */
export function createTimeline(list, empty) {
  function keyLine(key) {
    const k = el('div', 'entry-key');
    k.append(el('span', 'muted', 'Idempotency-Key'), el('code', 'key', key));
    return k;
  }

  return {
    clear() {
      list.replaceChildren();
      empty.hidden = false;
    },

    /** One attempt's row; its methods update it as the attempt progresses. */
    addAttempt(n, startMs, key, timeoutMs) {
      empty.hidden = true;
      const li = el('li', 'entry is-pending');
      li.setAttribute('data-testid', 'timeline-entry');
      li.dataset.attempt = String(n);
      li.dataset.kind = 'pending';
      const body = el('div', 'entry-body');
      const head = el('div', 'entry-head');
      head.append(el('span', 'entry-title', `Attempt ${n}`), el('span', 'entry-time', `+${fmtMs(startMs)}`));
      const line = el('div', 'entry-line');
      line.append(el('span', 'spinner'), el('span', 'muted', 'sending…'));
      body.append(head, line);
      if (key) {
        li.dataset.key = key;
        body.append(keyLine(key));
      }
      li.append(el('span', 'entry-dot'), body);
      list.append(li);

      const setLine = (...nodes) => line.replaceChildren(...nodes);
      return {
        li,
        /** The transport answered. */
        responded(res, ms) {
          li.dataset.status = String(res.status);
          const nodes = [chip(statusLine(res.status, res.statusText), res.ok ? 'ok' : 'bad'), el('span', 'muted', fmtMs(ms))];
          const retryAfter = res.headers.get('Retry-After');
          if (retryAfter !== null) nodes.push(chip(`Retry-After: ${retryAfter}`, 'info'));
          if (res.headers.get('Idempotent-Replayed') === 'true') {
            li.dataset.replayed = 'true';
            nodes.push(chip('replayed', 'replay'));
          }
          if (res.status === 202) {
            // Taken, not done: the call follows it (followAccepted) with the same key.
            li.classList.remove('is-pending');
            li.dataset.kind = 'accepted';
            nodes.push(el('span', 'muted', 'accepted, still processing · asking again with the same key'));
          }
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
            setLine(chip('network error', 'bad'), el('span', 'muted err', String(info.error?.message ?? info.error)));
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
            body.append(keyLine(info.idempotencyKey));
          }
        },
        /** The call ended on this attempt. */
        final(kind) {
          li.classList.remove('is-pending');
          li.classList.add(kind === 'ok' ? 'is-ok' : 'is-failed');
          li.dataset.kind = 'final';
        },
      };
    },

    /** A note after the attempts (gave up, cancelled, ...). */
    addNote(kind, title, detail) {
      empty.hidden = true;
      const li = el('li', `entry entry-note is-${kind}`);
      li.setAttribute('data-testid', 'timeline-note');
      li.dataset.kind = 'note';
      const body = el('div', 'entry-body');
      body.append(el('div', 'entry-title', title));
      if (detail) body.append(el('div', 'entry-line muted', detail));
      li.append(el('span', 'entry-dot'), body);
      list.append(li);
    },
  };
}

/**
 * A transport for `retryFetch({ fetch })` that reports every attempt to `timeline` and
 * returns the attempt rows (so `onRetry` can update them).
 */
export function trackedTransport(timeline, { timeoutMs, t0 = performance.now() } = {}) {
  const rows = [];
  const transport = (input, init) => {
    const start = performance.now();
    const row = timeline.addAttempt(rows.length + 1, start - t0, headerOf(input, init, 'Idempotency-Key'), timeoutMs);
    rows.push(row);
    return fetch(input, init).then(
      (res) => { row.responded(res, performance.now() - start); return res; },
      (err) => { row.failed(err, performance.now() - start); throw err; },
    );
  };
  return { rows, transport, t0 };
}
