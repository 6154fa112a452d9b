// The retry-fetch demo page: loads the package (the wasm is instantiated by its top-level
// await), then wires the two tabs: Payments (payments.js, the headline) and Playground
// (playground.js). `body[data-ready="true"]` tells tests the page is usable.
import { $ } from './ui.js';
import { initPayments } from './payments.js';
import { initPlayground } from './playground.js';

const els = {
  fatal: $('#fatal'),
  engine: $('#engine-status'),
  version: $('#version'),
};

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
// Tabs: #payments (default) and #playground

const TABS = ['payments', 'playground'];

function showTab(name) {
  const tab = TABS.includes(name) ? name : 'payments';
  for (const t of TABS) {
    $(`#panel-${t}`).hidden = t !== tab;
    $(`#tab-${t}`).setAttribute('aria-selected', String(t === tab));
  }
  document.body.dataset.tab = tab;
}

window.addEventListener('hashchange', () => {
  showTab(location.hash.slice(1));
  window.scrollTo(0, 0);
});
showTab(location.hash.slice(1));

// ------------------------------------------------------------------------------------------
// Start

let lib = null;
try {
  lib = await import('/pkg/index.browser.js');
} catch (e) {
  els.engine.dataset.state = 'error';
  els.engine.textContent = 'wasm failed to load';
  showFatal('The retry-fetch package could not be loaded from /pkg/. Build it with <code>make pkg</code> and reload.', e);
}

if (lib) {
  els.engine.dataset.state = 'ready';
  els.engine.textContent = 'wasm ready';
  fetch('/pkg/package.json')
    .then((r) => (r.ok ? r.json() : null))
    .then((p) => { if (p?.version) els.version.textContent = `v${p.version}`; })
    .catch(() => {});
  try {
    const payments = initPayments(lib);
    initPlayground(lib);
    await payments.start();
    document.body.dataset.ready = 'true';
  } catch (e) {
    showFatal('The demo failed to start.', e);
  }
}
