// A module worker: no window, no DOM; retry-fetch binds fetch and setTimeout as globals.
// The target comes in the worker's own URL (a message could arrive before the module, which
// awaits the wasm at top level, has set its handler).
import { retryFetch } from './node_modules/retry-fetch/index.browser.js';

const target = new URL(self.location.href).searchParams.get('target');
try {
  const res = await retryFetch(target, undefined, { baseDelayMs: 5 });
  self.postMessage(res.status);
} catch (err) {
  self.postMessage(`error: ${err?.name}: ${err?.message}`);
}
