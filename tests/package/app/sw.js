// A module service worker: no top-level await allowed, so it uses the manual entry and
// calls init() inside an event.
import { init, retryFetch } from './node_modules/retry-fetch/manual.js';

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));
self.addEventListener('message', (event) => {
  event.waitUntil(
    (async () => {
      try {
        await init();
        const res = await retryFetch(event.data.target, undefined, { baseDelayMs: 5 });
        event.source.postMessage(res.status);
      } catch (e) {
        event.source.postMessage(`error: ${e?.name}: ${e?.message}`);
      }
    })(),
  );
});
