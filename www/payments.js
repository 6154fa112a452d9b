// The payments tab: a checkout whose Pay button calls `retryFetch` POST /api/payments (one
// Idempotency-Key, the same on every attempt), the faults the server's proxy puts in front of
// the API, the live attempt timeline, the server's ledger (polled) and the backoff schedule.
import { $, STOP_TEXT, createTimeline, drawSchedule, el, fmtMs, statusLine, tok, trackedTransport } from './ui.js';

const MAX_BARS = 16;
const LEDGER_POLL_MS = 1000;
/** Where a payment not confirmed is kept across reloads (this tab's sessionStorage). */
const PENDING_STORAGE = 'retry-fetch-demo:unconfirmed-payments';

const euros = (cents) => `€${(cents / 100).toLocaleString('en-IE', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;

export function initPayments(lib) {
  const els = {
    form: $('#pay-form'),
    amount: $('#pay-amount'),
    card: $('#pay-card'),
    order: $('#pay-order'),
    button: $('#pay-button'),
    label: $('#pay-label'),
    result: $('#pay-result'),
    resultTitle: $('#pay-result-title'),
    resultDetail: $('#pay-result-detail'),
    facts: $('#pay-facts'),
    again: $('#pay-again'),
    faultCount: $('#fault-count'),
    faultHint: $('#fault-hint'),
    faultSync: $('#fault-sync'),
    faultsCard: $('#faults-card'),
    jitter: $('#pay-jitter'),
    maxAttempts: $('#pay-max-attempts'),
    baseDelay: $('#pay-base-delay'),
    timeout: $('#pay-timeout'),
    policy: $('#pay-policy'),
    code: $('#pay-code code'),
    serverCode: $('#pay-server-code code'),
    runLabel: $('#pay-run-label'),
    status: $('#pay-status'),
    ledgerRows: $('#ledger-rows'),
    ledgerEmpty: $('#ledger-empty'),
    ledgerCount: $('#ledger-count'),
    ledgerTotal: $('#ledger-total'),
    ledgerRequests: $('#ledger-requests'),
    ledgerDuplicates: $('#ledger-duplicates'),
    ledgerBadge: $('#ledger-badge'),
    ledgerReset: $('#ledger-reset'),
    chart: $('#pay-schedule-chart'),
    scheduleCall: $('#pay-schedule-call'),
    scheduleTotal: $('#pay-schedule-total'),
    legendJitter: $('#pay-legend-jitter'),
    reseed: $('#pay-reseed'),
  };
  const timeline = createTimeline($('#pay-timeline'), $('#pay-timeline-empty'));
  let seed = 42;
  let runDelays = [];
  let busy = false;
  // The payments that could not be confirmed, by order (amount and card): { key, amount,
  // last4 }, kept in this tab's sessionStorage. Paying the same order again, after a reload
  // or after other payments, sends its key, so it cannot be charged twice. `pending` is the
  // last of them ("Try again").
  const orderOf = (p) => `${p.amount}/${p.last4}`;
  const unconfirmed = loadUnconfirmed();
  let pending = Object.values(unconfirmed).at(-1) ?? null;
  let latestKey = null; // the key of the last payment, highlighted in the ledger
  let ledgerSignature = '';
  let order = 1042;

  function loadUnconfirmed() {
    const kept = {};
    try {
      const all = JSON.parse(sessionStorage.getItem(PENDING_STORAGE) ?? '[]');
      for (const p of Array.isArray(all) ? all : []) {
        const valid = p && typeof p.key === 'string' && Number.isInteger(p.amount) && typeof p.last4 === 'string';
        if (valid) kept[orderOf(p)] = { key: p.key, amount: p.amount, last4: p.last4 };
      }
    } catch {
      // storage off (a private window's policy), or not ours: nothing kept
    }
    return kept;
  }

  function saveUnconfirmed() {
    try {
      const all = Object.values(unconfirmed);
      if (all.length > 0) sessionStorage.setItem(PENDING_STORAGE, JSON.stringify(all));
      else sessionStorage.removeItem(PENDING_STORAGE);
    } catch {
      // storage off: kept for this page only
    }
  }

  /** `payment` (sent with `key`) was not confirmed: paid again, it sends that key. */
  function notConfirmed(payment, key) {
    if (!key) return;
    pending = { ...payment, key };
    delete unconfirmed[orderOf(pending)]; // the newest last
    unconfirmed[orderOf(pending)] = pending;
    saveUnconfirmed();
  }

  /** `payment`, sent with `key`, got its final answer (charged, or declined). */
  function settled(payment, key) {
    if (unconfirmed[orderOf(payment)]?.key === key) delete unconfirmed[orderOf(payment)];
    if (pending?.key === key) pending = Object.values(unconfirmed).at(-1) ?? null;
    saveUnconfirmed();
  }

  // ----------------------------------------------------------------------------------------
  // Form state

  function readForm() {
    const num = (input) => (input.value.trim() === '' ? null : Number(input.value));
    const digits = els.card.value.replace(/\D/g, '');
    return {
      amount: parseAmount(els.amount.value),
      last4: digits.length >= 4 ? digits.slice(-4) : '4242',
      fault: els.faultsCard.querySelector('input[name="fault"]:checked')?.value ?? 'none',
      count: num(els.faultCount) ?? 1,
      jitter: els.jitter.value,
      maxAttempts: num(els.maxAttempts),
      baseDelayMs: num(els.baseDelay),
      timeoutMs: num(els.timeout),
    };
  }

  /** "42", "42.5", "1,042.00" -> cents, or null. */
  function parseAmount(text) {
    const clean = text.trim().replace(/[€\s,]/g, '');
    if (!/^\d{1,7}(\.\d{1,2})?$/.test(clean)) return null;
    const cents = Math.round(Number(clean) * 100);
    return cents >= 1 ? cents : null;
  }

  function policyOf(v) {
    const options = { jitter: v.jitter };
    if (v.maxAttempts !== null) options.maxAttempts = v.maxAttempts;
    if (v.baseDelayMs !== null) options.baseDelayMs = v.baseDelayMs;
    if (v.timeoutMs !== null && v.timeoutMs > 0) options.timeoutMs = v.timeoutMs;
    // The demo's API honours keys: a 202 Accepted is followed to the charge.
    options.followAccepted = true;
    return options;
  }

  /** How long the proxy holds a "slow" answer: comfortably longer than the client's timeout. */
  function slowDelayOf(v) {
    return v.timeoutMs > 0 ? Math.min(30_000, Math.round(v.timeoutMs * 2 + 500)) : 2500;
  }

  /** How long the payment provider takes under the "long work" fault. */
  const LONG_WORK_MS = 3000;

  // ----------------------------------------------------------------------------------------
  // Faults (server-side settings of the proxy in front of the payments API)

  function faultHint(v) {
    const n = v.count;
    const first = n === 1 ? 'The first attempt' : `The first ${n} attempts`;
    const of = ' of each payment';
    switch (v.fault) {
      case 'none':
        return 'Every attempt reaches the payment handler and is answered at once.';
      case '503':
        return `${first}${of} ${n === 1 ? 'is' : 'are'} answered <b>503 Service Unavailable</b> by the proxy: nothing is charged, and <code>retryFetch</code> backs off with jitter and tries again.`;
      case '429':
        return `${first}${of} ${n === 1 ? 'gets' : 'get'} <b>429 Too Many Requests</b> with <code>Retry-After: 1</code>: the client waits at least the second the server asked for (spread a little above it, so refused clients do not come back together) instead of its own backoff.`;
      case 'slow': {
        const warn = v.timeoutMs > 0 ? '' : ' <span class="warn">Set a timeoutMs to see the timeouts.</span>';
        return `The charge happens at once, but the answer to ${first.toLowerCase()}${of} is held for <b>${fmtMs(slowDelayOf(v))}</b>, longer than <code>timeoutMs</code>. The client times out without knowing whether it was charged and retries with the same key: the server replays the stored charge.${warn}`;
      }
      case 'long':
        return `The payment provider takes <b>${fmtMs(LONG_WORK_MS)}</b>. After half a second the server answers <b>202 Accepted</b> with <code>Retry-After</code> while the charge goes on; with <code>followAccepted: true</code> the client asks again with the <b>same Idempotency-Key</b>, gets 202 until the charge is done, then the stored <b>201</b>: one charge.`;
      case 'drop':
        return `The handler <b>charges the card</b>, then the connection is cut before the answer leaves (${first.toLowerCase()}${of}). The client sees a network error and retries with the <b>same Idempotency-Key</b>; the companion answers with the stored charge instead of charging again.${n > 1 ? ' Retries answered from the store lose their answer the same way.' : ''}`;
      default:
        return '';
    }
  }

  let syncSeq = 0;
  /** Sends the fault settings to the server; resolves once they are in force. */
  async function syncFaults(v = readForm()) {
    const seq = ++syncSeq;
    const body = { mode: v.fault, count: Math.max(1, Math.min(10, Math.trunc(v.count) || 1)), delayMs: v.fault === 'long' ? LONG_WORK_MS : slowDelayOf(v) };
    els.faultSync.dataset.state = 'saving';
    els.faultSync.textContent = 'Applying…';
    try {
      const res = await fetch('/api/faults', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      if (!res.ok) throw new Error((await res.json().catch(() => null))?.error ?? `HTTP ${res.status}`);
      const applied = await res.json();
      if (seq === syncSeq) {
        els.faultSync.dataset.state = 'ok';
        els.faultSync.dataset.mode = applied.mode;
        const name = { 503: '503 storm', 429: '429 + Retry-After', slow: 'slow answers', drop: 'charge, then drop', long: 'long work (202 Accepted)' }[applied.mode];
        const which = applied.count === 1 ? 'the first attempt' : `the first ${applied.count} attempts`;
        els.faultSync.textContent = applied.mode === 'none' ? 'Proxy: no faults' : `Proxy: ${name} on ${which} of each payment`;
      }
      return applied;
    } catch (e) {
      if (seq === syncSeq) {
        els.faultSync.dataset.state = 'error';
        els.faultSync.textContent = `Could not apply the faults: ${e.message}`;
      }
      throw e;
    }
  }

  /** Reflects the server's current fault settings in the form (another tab may have set them). */
  async function loadFaults() {
    try {
      const res = await fetch('/api/faults', { cache: 'no-store' });
      if (!res.ok) return;
      const f = await res.json();
      const input = els.faultsCard.querySelector(`input[name="fault"][value="${f.mode}"]`);
      if (input) input.checked = true;
      if (Number.isInteger(f.count) && f.count >= 1) els.faultCount.value = String(f.count);
    } catch { /* keep the form's defaults */ }
  }

  // ----------------------------------------------------------------------------------------
  // Rendering

  function renderCode(v) {
    const o = policyOf(v);
    const opts = [`${tok.key('jitter')}: ${tok.str(o.jitter)}`];
    if ('maxAttempts' in o) opts.push(`${tok.key('maxAttempts')}: ${tok.num(o.maxAttempts)}`);
    if ('baseDelayMs' in o) opts.push(`${tok.key('baseDelayMs')}: ${tok.num(o.baseDelayMs)}`);
    if ('timeoutMs' in o) opts.push(`${tok.key('timeoutMs')}: ${tok.num(o.timeoutMs)}`);
    if (o.followAccepted) opts.push(`${tok.key('followAccepted')}: ${tok.kw('true')}`);
    els.code.innerHTML = [
      `${tok.kw('const')} res = ${tok.kw('await')} ${tok.fn('retryFetch')}(${tok.str('/api/payments')}, {`,
      `  ${tok.key('method')}: ${tok.str('POST')},`,
      `  ${tok.key('headers')}: { ${tok.str('Content-Type')}: ${tok.str('application/json')} },`,
      `  ${tok.key('body')}: JSON.${tok.fn('stringify')}({ ${tok.key('amount')}: ${tok.num(v.amount ?? 0)}, ${tok.key('currency')}: ${tok.str('EUR')} }),`,
      `}, { ${opts.join(', ')} });`,
      tok.com("// idempotencyKey: 'auto': one key for the call, on every attempt"),
    ].join('\n');
    els.serverCode.innerHTML = [
      `${tok.kw('import')} { idempotency, MemoryStore, toNodeHandler } ${tok.kw('from')} ${tok.str('retry-fetch/server')};`,
      '',
      `${tok.kw('const')} pay = ${tok.fn('idempotency')}(${tok.kw('async')} (request) => {`,
      `  ${tok.kw('const')} { amount } = ${tok.kw('await')} request.${tok.fn('json')}();`,
      `  ${tok.kw('const')} charge = ${tok.kw('await')} ledger.${tok.fn('charge')}(amount);`,
      `  ${tok.kw('return')} Response.${tok.fn('json')}({ ${tok.key('chargeId')}: charge.id, amount }, { ${tok.key('status')}: ${tok.num(201)} });`,
      `}, { ${tok.key('store')}: ${tok.kw('new')} ${tok.fn('MemoryStore')}(), ${tok.key('acceptAfterMs')}: ${tok.num(500)} });`,
      `http.${tok.fn('createServer')}(${tok.fn('toNodeHandler')}(pay));`,
    ].join('\n');
  }

  function renderSchedule(v = readForm()) {
    const options = policyOf(v);
    const waits = Math.max(0, Math.min((v.maxAttempts ?? 3) - 1, MAX_BARS));
    els.legendJitter.textContent = v.jitter;
    els.scheduleCall.textContent = `backoffDelays({ jitter: '${v.jitter}', baseDelayMs: ${options.baseDelayMs ?? 500} }, ${waits}, ${seed})`;
    const total = drawSchedule(els.chart, { lib, options, waits, seed, actual: runDelays });
    els.scheduleTotal.textContent = total === null ? '' : `total wait ${fmtMs(total)} over ${waits} retr${waits === 1 ? 'y' : 'ies'}`;
  }

  function renderButton(v = readForm()) {
    els.label.textContent = busy ? 'Processing…' : v.amount === null ? 'Enter an amount' : `Pay ${euros(v.amount)}`;
    els.button.disabled = busy || v.amount === null;
    els.amount.setAttribute('aria-invalid', String(v.amount === null));
  }

  function refresh({ sync = false } = {}) {
    const v = readForm();
    els.faultHint.innerHTML = faultHint(v);
    els.faultCount.disabled = v.fault === 'none';
    renderCode(v);
    renderSchedule(v);
    renderButton(v);
    if (sync) syncFaults(v).catch(() => {});
  }

  function setStatus(outcome, text) {
    els.status.dataset.outcome = outcome;
    const t = el('span', 'result-text', text);
    els.status.replaceChildren(...(outcome === 'running' ? [el('span', 'spinner'), t] : [t]));
  }

  /** The receipt under the Pay button. `facts` is a list of [term, value, testid]. */
  function setReceipt(outcome, title, detail, facts = []) {
    els.result.dataset.outcome = outcome;
    els.resultTitle.textContent = title;
    els.resultDetail.textContent = detail;
    els.facts.replaceChildren();
    for (const [term, value, testid] of facts) {
      const dt = el('dt', '', term);
      const dd = el('dd', '', value);
      if (testid) dd.setAttribute('data-testid', testid);
      els.facts.append(dt, dd);
    }
    els.facts.hidden = facts.length === 0;
  }

  // ----------------------------------------------------------------------------------------
  // The ledger

  const shortKey = (key) => (key && key.length > 13 ? `${key.slice(0, 8)}…${key.slice(-4)}` : key ?? '—');
  const clock = (iso) => new Date(iso).toLocaleTimeString('en-GB', { hour12: false });

  function renderLedger(view) {
    const signature = JSON.stringify([view, latestKey]);
    if (signature === ledgerSignature) return;
    ledgerSignature = signature;
    const dups = new Set(view.duplicates);
    const requests = new Map();
    for (const c of view.charges) requests.set(c.key, c.requests);
    els.ledgerCount.textContent = String(view.count);
    els.ledgerTotal.textContent = euros(view.total);
    els.ledgerRequests.textContent = String([...requests.values()].reduce((a, b) => a + b, 0));
    els.ledgerDuplicates.textContent = String(view.duplicates.length);
    els.ledgerDuplicates.closest('.stat').dataset.state = view.duplicates.length ? 'bad' : 'ok';
    const badge = els.ledgerBadge;
    if (view.duplicates.length) {
      badge.dataset.state = 'dup';
      badge.textContent = `${view.duplicates.length} key${view.duplicates.length === 1 ? '' : 's'} charged twice`;
    } else if (view.count) {
      badge.dataset.state = 'ok';
      badge.textContent = 'Exactly once: no duplicates';
    } else {
      badge.dataset.state = 'empty';
      badge.textContent = 'No charges yet';
    }
    const rows = [...view.charges].reverse().map((c) => {
      const tr = el('tr');
      tr.setAttribute('data-testid', 'ledger-row');
      tr.dataset.chargeId = c.id;
      tr.dataset.key = c.key ?? '';
      tr.dataset.amount = String(c.amount);
      if (dups.has(c.key)) tr.classList.add('is-dup');
      if (c.key && c.key === latestKey) tr.classList.add('is-latest');
      const id = el('td', 'mono');
      id.append(el('span', 'charge-id', c.id));
      if (dups.has(c.key)) id.append(chipEl('duplicate', 'bad'));
      const key = el('td', 'mono');
      const k = el('code', 'key', shortKey(c.key));
      k.title = c.key ?? '';
      key.append(k);
      tr.append(
        id,
        el('td', 'num strong', euros(c.amount)),
        el('td', 'muted', c.last4 ? `•••• ${c.last4}` : '—'),
        key,
        el('td', 'num', String(c.requests)),
        el('td', 'num muted mono', clock(c.at)),
      );
      return tr;
    });
    els.ledgerRows.replaceChildren(...rows);
    els.ledgerEmpty.hidden = rows.length > 0;
  }

  function chipEl(text, kind) {
    return el('span', `chip chip-${kind}`, text);
  }

  let ledgerInFlight = null;
  /** Reads the ledger (an idempotent GET, so retryFetch may retry it freely). */
  function refreshLedger() {
    ledgerInFlight ??= lib.retryFetch('/api/ledger', { cache: 'no-store' }, { maxAttempts: 3, baseDelayMs: 200, timeoutMs: 3000 })
      .then((res) => (res.ok ? res.json() : null))
      .then((view) => { if (view) renderLedger(view); return view; })
      .catch(() => null)
      .finally(() => { ledgerInFlight = null; });
    return ledgerInFlight;
  }

  // ----------------------------------------------------------------------------------------
  // Paying

  async function pay({ retryPending = false } = {}) {
    if (busy) return;
    const v = readForm();
    // The same order (same amount, same card) not yet confirmed is paid again with its key:
    // the main button too, so a second press can never charge it twice. A changed form is a
    // new payment, with a new key.
    const payment = (retryPending && pending) || unconfirmed[orderOf(v)] || { key: null, amount: v.amount, last4: v.last4 };
    if (payment.amount === null) return;
    busy = true;
    renderButton(v);
    els.again.hidden = true;
    runDelays = [];
    renderSchedule(v);
    timeline.clear();
    setStatus('running', 'Paying…');
    setReceipt('running', 'Processing payment…', `${euros(payment.amount)} to Northwind Coffee. Don't close this page.`);
    els.runLabel.textContent = `POST /api/payments · ${euros(payment.amount)}${payment.key ? ' · same key as before' : ''}`;

    const { rows, transport, t0 } = trackedTransport(timeline, { timeoutMs: v.timeoutMs });
    const onRetry = (info) => {
      rows[info.attempt - 1]?.retry(info);
      runDelays[info.attempt - 1] = info.delayMs;
      renderSchedule(v);
    };
    const init = {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ amount: payment.amount, currency: 'EUR', card: payment.last4 }),
    };
    let key = payment.key;
    try {
      await syncFaults(v);
      const res = await lib.retryFetch('/api/payments', init, {
        ...policyOf(v),
        idempotencyKey: payment.key ?? 'auto',
        fetch: transport,
        onRetry,
      });
      key = rows[0]?.li.dataset.key ?? key;
      latestKey = key;
      const data = await res.json().catch(() => null);
      rows.at(-1)?.final(res.ok ? 'ok' : 'bad');
      const tries = `${rows.length} attempt${rows.length === 1 ? '' : 's'}`;
      const elapsed = fmtMs(performance.now() - t0);
      if (res.status === 201 && data?.chargeId) {
        settled(payment, key);
        const replayed = res.headers.get('Idempotent-Replayed') === 'true';
        setStatus('success', `${statusLine(res.status, res.statusText)} · ${tries} · ${elapsed}`);
        const view = await refreshLedger();
        const charges = view ? view.charges.filter((c) => c.key === key).length : null;
        const accepted = rows.some((r) => r.li.dataset.status === '202');
        setReceipt('success', `Paid ${euros(data.amount)}`, accepted
          ? 'Confirmed. The provider took its time: the server answered 202 Accepted, and the client asked again with the same key until the stored charge came back.'
          : replayed
          ? 'Confirmed. The first attempt was charged; its answer was lost, and the server replayed it for the retry.'
          : rows.length > 1 ? 'Confirmed after the retries above.' : 'Confirmed on the first attempt.', [
          ['Charge', data.chargeId, 'pay-charge-id'],
          ['Card', `•••• ${data.last4 ?? payment.last4}`],
          ['Attempts', String(rows.length), 'pay-attempts'],
          ['Charges for this key', charges === null ? '…' : String(charges), 'pay-charges-for-key'],
        ]);
        els.result.dataset.chargeId = data.chargeId;
        els.result.dataset.key = key ?? '';
        els.result.dataset.replayed = String(replayed);
        order += 1;
        els.order.textContent = `#${order}`;
      } else {
        const reason = data?.error ?? data?.detail ?? data?.title;
        const message = reason ? `: ${reason}` : '';
        setStatus('failure', `${statusLine(res.status, res.statusText)} · ${tries} · ${elapsed}`);
        // A success whose body could not be read is not a confirmation either.
        const retryable = res.ok || res.status >= 500 || res.status === 429 || res.status === 408;
        if (retryable) {
          notConfirmed(payment, key);
          setReceipt('failure', 'Payment not confirmed', `The server still answered ${res.status} after ${tries}. Nothing is lost: trying again sends the same Idempotency-Key, so you cannot be charged twice.`);
          els.again.hidden = false;
          timeline.addNote('failed', `Returned the last response (${res.status})`, 'retryFetch resolves with the last response when it stops retrying: check res.ok.');
        } else {
          settled(payment, key);
          setReceipt('failure', 'Payment declined', `${statusLine(res.status, res.statusText)}${message}`);
          timeline.addNote('failed', `${res.status} is not retried`, 'A 4xx answer is final: retrying it would not help.');
        }
        await refreshLedger();
      }
    } catch (e) {
      const elapsed = fmtMs(performance.now() - t0);
      key = rows[0]?.li.dataset.key ?? key;
      latestKey = key;
      rows.at(-1)?.final('bad');
      if (lib.isRetryError(e)) {
        notConfirmed(payment, key);
        const n = e.attempts.length;
        setStatus('failure', `Failed · ${STOP_TEXT[e.reason] ?? e.reason} · ${n} attempt${n === 1 ? '' : 's'} · ${elapsed}`);
        setReceipt('failure', 'Payment not confirmed', `We could not reach the payment server (${n} attempt${n === 1 ? '' : 's'}). You may or may not have been charged: trying again sends the same Idempotency-Key, so it cannot charge twice.`);
        els.again.hidden = false;
        const cause = e.cause === undefined ? e.message : `${e.cause?.name ?? 'Error'}: ${e.cause?.message ?? e.cause}`;
        timeline.addNote('failed', `Rejected with RetryError (reason '${e.reason}')`, cause);
      } else {
        setStatus('error', `Not sent · ${e?.name ?? 'Error'}`);
        setReceipt('error', 'Payment not sent', String(e?.message ?? e));
        // An order still not confirmed from before keeps its key: it can be tried again.
        els.again.hidden = pending === null;
        timeline.addNote('failed', e?.name ?? 'Error', String(e?.message ?? e));
      }
      await refreshLedger();
    } finally {
      busy = false;
      renderButton();
    }
  }

  // ----------------------------------------------------------------------------------------
  // Wiring

  els.form.addEventListener('submit', (e) => {
    e.preventDefault();
    pay();
  });
  els.again.addEventListener('click', () => pay({ retryPending: true }));
  els.amount.addEventListener('input', () => refresh());
  els.amount.addEventListener('blur', () => {
    const cents = parseAmount(els.amount.value);
    if (cents !== null) els.amount.value = (cents / 100).toFixed(2);
  });
  els.card.addEventListener('input', () => {
    const digits = els.card.value.replace(/\D/g, '').slice(0, 19);
    els.card.value = digits.replace(/(\d{4})(?=\d)/g, '$1 ');
  });
  els.faultsCard.addEventListener('change', () => refresh({ sync: true }));
  els.faultCount.addEventListener('input', () => refresh({ sync: true }));
  els.policy.addEventListener('input', () => refresh({ sync: readForm().fault === 'slow' }));
  els.policy.addEventListener('change', () => refresh());
  els.reseed.addEventListener('click', () => {
    seed = crypto.getRandomValues(new Uint32Array(1))[0] % 100000;
    renderSchedule();
  });
  els.ledgerReset.addEventListener('click', async () => {
    await fetch('/api/ledger/reset', { method: 'POST' }).catch(() => {});
    latestKey = null;
    await refreshLedger();
  });

  // Poll the ledger while the page is visible and this tab is shown.
  setInterval(() => {
    if (document.visibilityState === 'visible' && !els.form.closest('[hidden]')) refreshLedger();
  }, LEDGER_POLL_MS);

  // A payment not confirmed before a reload can be tried again, with its key.
  els.again.hidden = pending === null;
  refresh();
  return {
    /** Loads the server's state (faults, ledger); resolves when the tab is usable. */
    async start() {
      await loadFaults();
      refresh();
      await Promise.all([syncFaults().catch(() => {}), refreshLedger()]);
    },
    refreshLedger,
  };
}
