// A Vite app that imports the package by name; the test reads the result from the page.
import { retryFetch } from 'retry-fetch';

const target = new URLSearchParams(location.search).get('target');
retryFetch(target, undefined, { baseDelayMs: 5 })
  .then((res) => {
    document.body.dataset.status = String(res.status);
  })
  .catch((e) => {
    document.body.dataset.status = `error: ${e?.name}: ${e?.message}`;
  });
