// A TypeScript consumer of the built package: `tsc --noEmit --strict` must accept the
// correct uses and reject the wrong ones (each @ts-expect-error fails the build if the
// line it marks compiles, so the types are proved precise, not `any`).
import {
  retryFetch,
  createRetryFetch,
  backoffDelays,
  isRetryError,
  type RetryOptions,
  type RetryInfo,
  type RetryContext,
  type StopReason,
  RetryBudget,
  AdaptiveThrottle,
  CircuitBreaker,
  isCircuitOpenError,
} from 'retry-fetch';
import { init, retryFetch as manualRetryFetch } from 'retry-fetch/manual';

const options: RetryOptions = {
  maxAttempts: 5,
  baseDelayMs: 100,
  factor: 2,
  maxDelayMs: 10_000,
  jitter: 'decorrelated',
  retryOnStatus: [429, 503],
  retryOnNetworkError: true,
  retryOnTimeout: false,
  timeoutMs: 2_000,
  deadlineMs: 30_000,
  signal: new AbortController().signal,
  respectRetryAfter: true,
  maxRetryAfterMs: 60_000,
  idempotencyKey: 'auto',
  idempotencyHeader: 'Idempotency-Key',
  idempotencyKeyFormat: 'sf-string',
  retryHeaders: false,
  maxBufferedBodyBytes: 1 << 20,
  shouldRetry: async (ctx: RetryContext) => ctx.attempt < 3 && ctx.reason !== 'timeout',
  onRetry: (info: RetryInfo) => {
    const n: number = info.delayMs;
    const key: string | undefined = info.idempotencyKey;
    void n;
    void key;
  },
  fetch: (input, init) => fetch(input, init),
};

async function main(): Promise<void> {
  await init();
  const manual: Response = await manualRetryFetch('https://api.example/');
  void manual;
  const res: Response = await retryFetch('https://api.example/pay', { method: 'POST', body: '{}' }, options);
  const ok: boolean = res.ok;
  void ok;
  const client = createRetryFetch({ maxAttempts: 2 });
  await client(new URL('https://api.example/'), undefined, { idempotencyKey: false });
  const delays: number[] = backoffDelays({ jitter: 'full' }, 5, 42);
  void delays;
  try {
    await retryFetch('https://api.example/');
  } catch (e) {
    if (isRetryError(e)) {
      const reason: StopReason = e.reason;
      const n: number = e.attempts.length;
      void reason;
      void n;
    }
  }

  const budget = new RetryBudget({ maxTokens: 20, tokenRatio: 0.2 });
  const throttle = new AdaptiveThrottle({ initialRate: 50 });
  const breaker = new CircuitBreaker({ failureThreshold: 3, openMs: 5_000, onStateChange: (e) => void e.to });
  const guarded = createRetryFetch({ budget, throttle, breaker });
  try {
    await guarded('https://api.example/');
  } catch (e) {
    if (isCircuitOpenError(e)) {
      const wait: number = e.retryAfterMs;
      void wait;
    }
  }
  const tokens: number = budget.tokens('https://api.example/');
  const state: 'closed' | 'open' | 'half-open' = breaker.state('https://api.example/');
  const rate: number | undefined = throttle.rate('https://api.example/');
  void tokens;
  void state;
  void rate;
  // @ts-expect-error: a budget is a RetryBudget, not a number
  await retryFetch('/', undefined, { budget: 10 });

  // @ts-expect-error: jitter is one of five names
  await retryFetch('/', undefined, { jitter: 'random' });
  // @ts-expect-error: maxAttempts is a number
  await retryFetch('/', undefined, { maxAttempts: '3' });
  // @ts-expect-error: idempotencyKey cannot be true
  await retryFetch('/', undefined, { idempotencyKey: true });
  // @ts-expect-error: no such option
  await retryFetch('/', undefined, { retries: 3 });
  // @ts-expect-error: shouldRetry returns a boolean
  await retryFetch('/', undefined, { shouldRetry: () => 'yes' });
}
void main;
