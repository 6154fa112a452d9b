// A TypeScript consumer of the built package: `tsc --noEmit --strict
// --exactOptionalPropertyTypes` must accept the correct uses and reject the wrong ones (each @ts-expect-error fails the build if the
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
  type RetryBudgetOptions,
  type AdaptiveThrottleOptions,
  type CircuitBreakerOptions,
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
  retryOnStatus: [429, 503] as const,
  headers: [['X-Client', 'web']] as string[][],
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
  followAccepted: true,
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

  // Guard methods take a URL string or a URL (the runtime reads a URL's href).
  const origin = new URL('https://a.example');
  const urlTokens: number = budget.tokens(origin);
  const urlRate: number | undefined = throttle.rate(new URL('https://a.example/path?q=1'));
  const urlState: 'closed' | 'open' | 'half-open' = breaker.state(origin);
  void urlTokens;
  void urlRate;
  void urlState;
  // @ts-expect-error: a url is a string or a URL, not a number
  budget.tokens(42);
  // @ts-expect-error: nor a Request
  throttle.rate(new Request('https://a.example/'));
  // @ts-expect-error: nor nothing
  breaker.state();

  // Guards are disposable (Symbol.dispose is free()), without `using` and without lib
  // esnext.disposable in the tsconfig: the package's types declare Symbol.dispose.
  const scratch = new RetryBudget();
  scratch[Symbol.dispose]();
  new AdaptiveThrottle()[Symbol.dispose]();
  new CircuitBreaker()[Symbol.dispose]();
  interface DisposableGuard {
    [Symbol.dispose](): void;
  }
  const disposables: DisposableGuard[] = [budget, throttle, breaker];
  void disposables;
  // @ts-expect-error: [Symbol.dispose]() returns nothing (the member is typed, not any)
  const disposed: number = budget[Symbol.dispose]();
  void disposed;

  // createRetryFetch needs no argument (the package's defaults).
  const plain: typeof retryFetch = createRetryFetch();
  await plain('https://api.example/');
  // @ts-expect-error: defaults are an options object
  createRetryFetch(3);

  // exactOptionalPropertyTypes: every option takes an explicit undefined (ignored at runtime),
  // e.g. an optional value passed through. The mapped type makes this list every option.
  const everyOptionUndefined: { [K in keyof Required<RetryOptions>]: undefined } = {
    maxAttempts: undefined,
    baseDelayMs: undefined,
    factor: undefined,
    maxDelayMs: undefined,
    jitter: undefined,
    retryOnStatus: undefined,
    retryOnNetworkError: undefined,
    retryOnTimeout: undefined,
    timeoutMs: undefined,
    deadlineMs: undefined,
    signal: undefined,
    respectRetryAfter: undefined,
    maxRetryAfterMs: undefined,
    idempotencyKey: undefined,
    idempotencyHeader: undefined,
    idempotencyKeyFormat: undefined,
    retryHeaders: undefined,
    maxBufferedBodyBytes: undefined,
    followAccepted: undefined,
    shouldRetry: undefined,
    onRetry: undefined,
    beforeRetry: undefined,
    onSettled: undefined,
    headers: undefined,
    fetch: undefined,
    budget: undefined,
    throttle: undefined,
    breaker: undefined,
  };
  const undefinedOptions: RetryOptions = everyOptionUndefined;
  await retryFetch('/', undefined, undefinedOptions);
  const passedThrough = (timeoutMs?: number, signal?: AbortSignal): RetryOptions => ({ timeoutMs, signal });
  const sparse: RetryOptions = { timeoutMs: undefined, signal: undefined };
  await createRetryFetch(sparse)('/', undefined, passedThrough());
  backoffDelays({ maxAttempts: undefined, jitter: undefined }, 3);
  // The options whose `null` means none (or, for budget, the default budget).
  const nulls: RetryOptions = {
    timeoutMs: null,
    deadlineMs: null,
    maxRetryAfterMs: null,
    signal: null,
    shouldRetry: null,
    onRetry: null,
    fetch: null,
    budget: null,
    throttle: null,
    breaker: null,
  };
  await retryFetch('/', undefined, nulls);
  await retryFetch('/', undefined, { throttle: false, budget: false });
  // @ts-expect-error: maxAttempts has no null (the runtime refuses it)
  await retryFetch('/', undefined, { maxAttempts: null });
  // @ts-expect-error: undefined is accepted, but a wrong type still is not
  const wrongSparse: RetryOptions = { timeoutMs: undefined, signal: 'abort' };
  void wrongSparse;

  // The guards' options too.
  const budgetOptions: { [K in keyof Required<RetryBudgetOptions>]: undefined } = {
    maxTokens: undefined,
    tokenRatio: undefined,
    refillPerSecond: undefined,
  };
  const throttleOptions: { [K in keyof Required<AdaptiveThrottleOptions>]: undefined } = {
    initialRate: undefined,
    rampMs: undefined,
    beta: undefined,
    scale: undefined,
    minRate: undefined,
    maxWaitMs: undefined,
  };
  const breakerOptions: { [K in keyof Required<CircuitBreakerOptions>]: undefined } = {
    failureThreshold: undefined,
    openMs: undefined,
    halfOpenMaxCalls: undefined,
    onStateChange: undefined,
  };
  new RetryBudget(budgetOptions);
  new AdaptiveThrottle(throttleOptions);
  new CircuitBreaker(breakerOptions);
  new CircuitBreaker({ onStateChange: null });
  // @ts-expect-error: a guard setting has no null (the runtime refuses it)
  new CircuitBreaker({ openMs: null });
  // @ts-expect-error: nor a wrong type
  new RetryBudget({ maxTokens: undefined, tokenRatio: '0.1' });

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
  // followAccepted is a boolean (off by default), for a call, a client and extend
  await createRetryFetch({ followAccepted: true }).extend({ followAccepted: false })('/', undefined, { followAccepted: true });
  // @ts-expect-error: followAccepted is true or false, not a string
  await retryFetch('/', undefined, { followAccepted: 'yes' });
  // @ts-expect-error: nor null (the runtime refuses it)
  await retryFetch('/', undefined, { followAccepted: null });
}
void main;

// The error classes: instanceof narrows.
import { RetryError as RetryErrorClass, CircuitOpenError as CircuitOpenErrorClass } from 'retry-fetch';
export function describeFailure(e: unknown): string {
  if (e instanceof RetryErrorClass) return `${e.reason} after ${e.attempts.length}`;
  if (e instanceof CircuitOpenErrorClass) return `open for ${e.retryAfterMs} ms at ${e.origin}`;
  return 'other';
}
// @ts-expect-error: the classes are made by the package only
new RetryErrorClass();

// shouldRetry's context carries the failed response's headers; a budget's settings are
// read-only getters; the headers option takes the runtime's forms.
export async function contextHeadersAndBudgetSettings(): Promise<void> {
  await retryFetch('/', undefined, {
    shouldRetry: (ctx: RetryContext) => ctx.headers?.get('retry-after') !== '120',
    beforeRetry: (info: RetryInfo) => (info.attempt > 2 ? { 'X-Retry-Of': String(info.attempt - 1) } : undefined),
    headers: [['X-Client', 'web']],
  });
  await retryFetch('/', undefined, { headers: { 'X-Client': 'web' }, beforeRetry: null, onSettled: null });
  // @ts-expect-error: ctx.headers is a Headers, not a record
  await retryFetch('/', undefined, { shouldRetry: (ctx: RetryContext) => ctx.headers?.['retry-after'] === '1' });
  const budget = new RetryBudget({ maxTokens: 4 });
  const settings: [number, number, number] = [budget.maxTokens, budget.tokenRatio, budget.refillPerSecond];
  void settings;
  // @ts-expect-error: the settings are read-only
  budget.maxTokens = 5;
}
