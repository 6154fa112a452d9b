// A Cloudflare Worker written as users write one, `import ... from 'retry-fetch'`: wrangler
// bundles it (resolving the package's `workerd` entry) and workerd runs it. `?target=<url>`
// is paid for with a keyed POST; the answer says what retryFetch gave.
import { retryFetch, RetryError, isRetryError } from 'retry-fetch';

export default {
  async fetch(request) {
    const params = new URL(request.url).searchParams;
    const options = { baseDelayMs: 5, maxAttempts: Number(params.get('attempts') ?? 3) };
    try {
      const res = await retryFetch(params.get('target'), { method: 'POST', body: 'pay 10' }, options);
      return Response.json({ status: res.status });
    } catch (error) {
      return Response.json({
        error: error?.name,
        isRetryError: error instanceof RetryError && isRetryError(error),
        attempts: error?.attempts?.length,
      });
    }
  },
};
