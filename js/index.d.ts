/**
 * retry-fetch: `fetch` with retries done right. Transient failures only, exponential backoff
 * with jitter, `Retry-After`, idempotency keys, deadlines and cancellation.
 */

/**
 * What `retryFetch` (and the `fetch` option) takes as its first argument: a URL string, a
 * `URL` or a `Request`. The DOM lib's `RequestInfo | URL`, spelled out so that the types also
 * compile without the DOM lib (a Node-only `tsconfig` with `types: ["node"]`).
 */
export type RetryFetchInput = string | URL | Request;

/** How the computed delay is randomised. */
export type Jitter = 'none' | 'full' | 'equal' | 'decorrelated' | 'additive';

/** Why an attempt is being retried. */
export type RetryReason = 'status' | 'network' | 'timeout';

/** What `shouldRetry` is given. */
export interface RetryContext {
  /** The attempt that just failed (1-based). */
  attempt: number;
  /** The wait about to be used before the next attempt, in ms. */
  delayMs: number;
  /** Why the attempt failed. */
  reason: RetryReason;
  /**
   * A clone of the response, when the failure was a retryable status: reading its body leaves
   * the response the call may return readable.
   */
  response?: Response;
  /**
   * The failed response's headers (its `Retry-After`, a request id), when there was a
   * response: the same as `onRetry`'s `info.headers`.
   */
  headers?: Headers;
  /** The response status, when there was a response. */
  status?: number;
  /** The error, when the failure was a network error or a timeout. */
  error?: unknown;
  /** The idempotency key the request carries, if any. */
  idempotencyKey?: string;
}

/** What `onSettled` is given when a call ends. */
export interface SettledInfo {
  /** How many attempts the call sent (1 when the first succeeded; 0 when it sent none). */
  attempts: number;
  /** From the call to its end, in ms. */
  durationMs: number;
  /** The response the call resolved with, if it did. */
  response?: Response;
  /** What the call rejected with, if it did. */
  error?: unknown;
  /**
   * The idempotency key the call's attempts carried (ours or yours), when they carried one:
   * to send again, with the same key, a call whose response body could not be read.
   */
  idempotencyKey?: string;
}

/**
 * Headers (the `headers` option, or what `beforeRetry` returns): a `Headers`, an object of
 * strings, or `[name, value]` pairs in an array or any other iterable (a `Map`). Each pair
 * must be exactly two strings: another length is a `TypeError` when the call runs (the type
 * also takes `string[][]`, as Node's `HeadersInit` does, so that a list built at run time
 * type-checks).
 */
export type RetryHeaders =
  | Headers
  | Record<string, string>
  | ReadonlyArray<readonly [string, string] | readonly string[]>
  | Iterable<readonly [string, string] | readonly string[]>;

/** What `onRetry` (before each wait) and `beforeRetry` (before each retry is sent) are given. */
export interface RetryInfo {
  /**
   * 1-based: for `onRetry`, the attempt that just failed; for `beforeRetry`, the attempt about
   * to be sent (the retry of the one that failed).
   */
  attempt: number;
  /** The wait before the retry, in ms (for `beforeRetry`, the wait that just ended). */
  delayMs: number;
  /** Why the failed attempt failed. */
  reason: RetryReason;
  /** The failed attempt's response status, when there was a response. */
  status?: number;
  /** The failed response's headers (its `Retry-After`, a request id), when there was one. */
  headers?: Headers;
  /** The error, when the failure was a network error or a timeout. */
  error?: unknown;
  /** The idempotency key the request carries, if any. */
  idempotencyKey?: string;
}

/**
 * Options of `retryFetch`. Every one is optional, and one set to `undefined` is ignored (as if
 * absent), so these types also accept `undefined` under `exactOptionalPropertyTypes`.
 *
 * An unknown option name (`maxAttemps`) is a `TypeError` that names it and, when one is
 * close, the closest known option (`maxAttempts`); it is not ignored (unless its value is
 * `undefined`: like a known one, it is then as if absent).
 */
export interface RetryOptions {
  /** Total attempts including the first; an integer from 1 to 100. @default 3 */
  maxAttempts?: number | undefined;
  /** Delay before the second attempt, in ms. @default 500 */
  baseDelayMs?: number | undefined;
  /** Growth of the delay per attempt (1 to 100): the delay before attempt n+1 is `min(maxDelayMs, baseDelayMs * factor^(n-1))`, then jitter. @default 2 */
  factor?: number | undefined;
  /** Upper bound of every computed delay, in ms. @default 30000 */
  maxDelayMs?: number | undefined;
  /** Jitter mode. @default 'full' */
  jitter?: Jitter | undefined;
  /**
   * Status codes worth retrying (subject to the safe-to-retry matrix). A list given here is
   * the whole list: a 409 of a request with an idempotency key is retried under the default
   * list only, so with `[503]` or `[]` it is final (put 409 in the list to keep retrying it).
   * A failed answer whose server says `X-Should-Retry: false` (or `Stripe-Should-Retry:
   * false`) is never retried, whatever its status.
   * @default [408, 429, 500, 502, 503, 504]
   */
  retryOnStatus?: readonly number[] | undefined;
  /** Retry network errors (subject to the safe-to-retry matrix). @default true */
  retryOnNetworkError?: boolean | undefined;
  /** Retry per-attempt timeouts (subject to the safe-to-retry matrix). @default true */
  retryOnTimeout?: boolean | undefined;
  /** Per-attempt timeout in ms, for the wait for response headers; `null` for none. @default undefined (none) */
  timeoutMs?: number | null | undefined;
  /** Total time budget of the call in ms; no wait or attempt starts that cannot finish inside it. @default undefined (none) */
  deadlineMs?: number | null | undefined;
  /** Cancels the call: the attempt in flight and any wait stop at once, and the call rejects with the signal's reason. `init.signal` works the same. */
  signal?: AbortSignal | null | undefined;
  /** Let `Retry-After` (or `RateLimit-Reset` / `RateLimit`) replace the computed delay. @default true */
  respectRetryAfter?: boolean | undefined;
  /**
   * Longest server-requested wait accepted, in ms (a finite number >= 0; a negative one is a
   * `TypeError`); a longer one returns the response at once. `null`: back to `maxDelayMs`.
   * @default maxDelayMs
   */
  maxRetryAfterMs?: number | null | undefined;
  /** `'auto'`: a fresh UUID v4 key on non-idempotent requests; a string: this key; `false`: none. @default 'auto' */
  idempotencyKey?: 'auto' | string | false | undefined;
  /** The header that carries the key. @default 'Idempotency-Key' */
  idempotencyHeader?: string | undefined;
  /** `'plain'`: the key as is; `'sf-string'`: the IETF draft's quoted form. @default 'plain' */
  idempotencyKeyFormat?: 'plain' | 'sf-string' | undefined;
  /** Send `X-Retry-Count` and `X-Original-Request-At` on attempts after the first (causes a CORS preflight). @default false */
  retryHeaders?: boolean | undefined;
  /** Largest `ReadableStream` body buffered for replay, in bytes; a longer one is sent once and not retried. @default 1048576 */
  maxBufferedBodyBytes?: number | undefined;
  /**
   * Follow a `202 Accepted` to the final answer instead of returning it: poll its
   * `Operation-Location` (preferred) or `Location` with `GET` until it answers something
   * other than 202 (a `303` to the result is followed), or, without one, repeat a request that
   * carries an idempotency key (same key, same body). The wait before each poll is at least
   * the 202's `Retry-After` (clamped to `maxRetryAfterMs`), spread above it by up to half of
   * it, or the backoff delay. Polls do not use `maxAttempts` (a poll that fails is retried as an attempt);
   * `deadlineMs` and the signals bound them all. A call that ends before a final answer (the
   * deadline, failed polls out of retries) returns the 202 that said where to look. Off by
   * default: a plain API's 202 means "accepted, nothing more to see".
   * @default false
   */
  followAccepted?: boolean | undefined;
  /** The caller's veto on a retry the policy would make. */
  shouldRetry?: ((context: RetryContext) => boolean | Promise<boolean>) | null | undefined;
  /** Called before each wait; if it throws, the call rejects with that error. */
  onRetry?: ((info: RetryInfo) => void | Promise<void>) | null | undefined;
  /**
   * Called when a retry is about to be sent (after the wait), with `attempt` the one about
   * to go: it may return headers to set on it and every later attempt (a refreshed token, a
   * new signature). The key and the body stay fixed: returning the key header is a
   * TypeError. A throw rejects the call. @default undefined (none)
   */
  beforeRetry?: ((info: RetryInfo) => RetryHeaders | void | undefined | Promise<RetryHeaders | void | undefined>) | null | undefined;
  /**
   * Called once when the call ends (after it started: an invalid option rejects before),
   * with how many attempts it sent: `{ attempts, durationMs, response }` or
   * `{ attempts, durationMs, error }`. Its result is not awaited; a throw or a rejection is
   * ignored. @default undefined (none)
   */
  onSettled?: ((info: SettledInfo) => void | Promise<void>) | null | undefined;
  /**
   * Headers sent on every attempt unless the request has them itself (`init.headers`, or a
   * `Request` input's: those win). Given per call, they merge over the client's defaults (the
   * call's option wins for a name both set); in a client's defaults (ky's
   * `create({ headers })`) they go on every call, and `extend` merges over them. `null`
   * drops the client's. The key's header is refused in a client's defaults. @default undefined (none)
   */
  headers?: RetryHeaders | null | undefined;
  /** The transport. @default globalThis.fetch */
  fetch?: ((input: RetryFetchInput, init?: RequestInit) => Promise<Response>) | null | undefined;
  /**
   * The retry budget. By default the package's default budget (per origin, shared by every call
   * and client): retries sent by other calls, less 2 × those the server accepted, must stay
   * below 20 (10 s decay); a refused retry is skipped (the call waits its next backoff). A
   * `RetryBudget` replaces it; `'own'` gives a `createRetryFetch` client a default budget of
   * its own (another client's failures cannot refuse its retries; its `extend`s share it);
   * `false` turns budgets off; `null` restores the default.
   * @default the default budget
   */
  budget?: RetryBudget | 'own' | false | null | undefined;
  /**
   * A shared adaptive send rate per origin: every attempt waits for its turn. Without one, the
   * default throttle (shared by every call of this copy of the package) paces the retries of a
   * herd only: from an origin's 429 or 503 while at least 10 calls to it are retrying (a call
   * is, from its first failed attempt until it ends), until none is (first attempts and a lone
   * call are never paced); `false` turns it off; `null` restores it.
   * @default the default throttle
   */
  throttle?: AdaptiveThrottle | false | null | undefined;
  /** A shared circuit breaker per origin: while open, calls reject with CircuitOpenError and nothing is sent. @default undefined (none) */
  breaker?: CircuitBreaker | null | undefined;
}

/** Options of `new RetryBudget(...)`; one set to `undefined` is ignored. An unknown option name (`maxToken`) is a `TypeError` naming it and the closest known option. */
export interface RetryBudgetOptions {
  /** Tokens per origin when full; retries are allowed only while tokens > maxTokens / 2. @default 10 */
  maxTokens?: number | undefined;
  /** Tokens a success gives back (a failed attempt takes 1). @default 0.1 */
  tokenRatio?: number | undefined;
  /** Tokens that come back each second, so an origin recovers after an outage without successes (0: only successes refill). @default 0.5 */
  refillPerSecond?: number | undefined;
}

declare global {
  interface SymbolConstructor {
    /**
     * `Symbol.dispose` (explicit resource management), which the guards' `[Symbol.dispose]()`
     * is keyed by. TypeScript's lib declares it from `esnext.disposable` (and `@types/node`
     * does too); this is the same declaration, which merges with theirs, so these types
     * compile without either (`lib: ["ES2022", "DOM"]`).
     */
    readonly dispose: unique symbol;
  }
}

/** A retry budget shared by many calls, per origin (gRPC retryThrottling semantics). */
export class RetryBudget {
  constructor(options?: RetryBudgetOptions | null);
  /** The token count for the origin of `url` (a URL string or a `URL`). */
  tokens(url: string | URL): number;
  /** The `maxTokens` it was made with (10 when not given). */
  readonly maxTokens: number;
  /** The `tokenRatio` it was made with (0.1 when not given). */
  readonly tokenRatio: number;
  /** The `refillPerSecond` it was made with (0.5 when not given). */
  readonly refillPerSecond: number;
  /** Release the wasm memory now (otherwise it is released when garbage-collected). */
  free(): void;
  /**
   * `free()`, for `using` (explicit resource management): `using budget = new RetryBudget()`
   * frees it at the end of the block. Defined when the JavaScript engine has `Symbol.dispose`
   * as the package loads (Node 18.18 / 20.4 and later, and browsers with explicit resource
   * management); elsewhere call `free()`. A guard used after it is freed (its methods, its
   * getters, a second `free()`, or passing it as an option) throws a `TypeError` that says so.
   */
  [Symbol.dispose](): void;
}

/** Options of `new AdaptiveThrottle(...)`; one set to `undefined` is ignored. An unknown option name is a `TypeError` naming it and the closest known option. */
export interface AdaptiveThrottleOptions {
  /** Starting send rate of a new origin, requests per second. @default 200 */
  initialRate?: number | undefined;
  /** Slow start doubles the rate every rampMs while callers queue, until the first 429/503; after a cut the rate returns toward the ceiling with a time constant of rampMs / 4; callers still queued 2 × rampMs after a cut start slow start again. After a 429/503 that asked for a wait (Retry-After or a RateLimit reset, read when respectRetryAfter is on), the rate stays at the cut (CUBIC alone) while the wait lasts, and slow start comes no sooner than half that wait (counted up to maxWaitMs). @default 200 */
  rampMs?: number | undefined;
  /** Multiplicative decrease on a 429/503, between 0 and 1 (both excluded). @default 0.7 */
  beta?: number | undefined;
  /** CUBIC's scale constant C (req/s per s³). @default 0.4 */
  scale?: number | undefined;
  /** The lowest send rate, requests per second. @default 0.5 */
  minRate?: number | undefined;
  /**
   * The longest an attempt waits for its turn, in ms; one that would wait longer is not sent:
   * the call returns the last response, or, when it has none (a first attempt, or one after a
   * network error or a timeout), rejects with a RetryError (reason 'throttled'). @default 10000
   */
  maxWaitMs?: number | undefined;
}

/** A client-side send rate per origin that shrinks on 429/503 and grows back on success. */
export class AdaptiveThrottle {
  constructor(options?: AdaptiveThrottleOptions | null);
  /** The current send rate (req/s) for the origin of `url` (a URL string or a `URL`), or undefined if never seen. */
  rate(url: string | URL): number | undefined;
  /** Release the wasm memory now (otherwise it is released when garbage-collected). */
  free(): void;
  /** `free()`, for `using` (explicit resource management), as on `RetryBudget`. */
  [Symbol.dispose](): void;
}

/** A state of a circuit breaker. */
export type CircuitState = 'closed' | 'open' | 'half-open';

/** Options of `new CircuitBreaker(...)`; one set to `undefined` is ignored. An unknown option name is a `TypeError` naming it and the closest known option. */
export interface CircuitBreakerOptions {
  /** Consecutive transient failures that open the circuit. @default 5 */
  failureThreshold?: number | undefined;
  /** How long the circuit stays open before a probe, in ms. @default 10000 */
  openMs?: number | undefined;
  /** Probes allowed at a time while half-open. @default 1 */
  halfOpenMaxCalls?: number | undefined;
  /** Called on every state change; `null` for none. */
  onStateChange?: ((event: { origin: string; from: CircuitState; to: CircuitState }) => void) | null | undefined;
}

/** A circuit breaker per origin: closed → open → half-open → closed. */
export class CircuitBreaker {
  constructor(options?: CircuitBreakerOptions | null);
  /** The state for the origin of `url` (a URL string or a `URL`). */
  state(url: string | URL): CircuitState;
  /** Release the wasm memory now (otherwise it is released when garbage-collected). */
  free(): void;
  /** `free()`, for `using` (explicit resource management), as on `RetryBudget`. */
  [Symbol.dispose](): void;
}

/** The error a call rejects with when its origin's circuit is open (nothing was sent). */
export declare class CircuitOpenError extends Error {
  /** Made by the package only (a call rejects with one); exported for `instanceof`. */
  private constructor();
  name: 'CircuitOpenError';
  /** Time until the circuit lets a probe through, in ms. */
  retryAfterMs: number;
  /** The origin whose circuit is open. */
  origin: string;
}

/** One attempt in `RetryError.attempts`. */
export interface AttemptRecord {
  /** 1-based attempt number. */
  attempt: number;
  /** `Date.now()` when the attempt started. */
  startedAt: number;
  /** How long the attempt took, in ms. */
  durationMs: number;
  /** The response status, when there was a response. */
  status?: number;
  /** The error, when there was none. */
  error?: unknown;
  /** The wait that followed, when there was one. */
  delayMs?: number;
}

/**
 * Why a call stopped without a response to resolve with: `RetryError.reason` (and so the
 * `reason` of `onSettled`'s `error`), the only place a reason is seen. A call that stops with a
 * response in hand resolves with it, whatever stopped it, and says no reason: so
 * `'retry-after'` (the server asked for a wait longer than `maxRetryAfterMs`), which only a
 * response can ask, is never a `RetryError`'s reason (the call resolves with that response).
 */
export type StopReason =
  | 'attempts'
  | 'deadline'
  | 'unsafe'
  | 'not-retryable'
  | 'retry-after'
  | 'body-not-replayable'
  | 'shouldRetry'
  | 'budget'
  | 'circuit-open'
  | 'throttled';

/**
 * The error a call rejects with when it ends with no response to resolve with: its last
 * attempt failed without one (a network error, a timeout), or no attempt was sent (an
 * `AdaptiveThrottle` refused the first one, the deadline passed first, a stream body could not
 * be read in time).
 */
export declare class RetryError extends Error {
  /** Made by the package only (a call rejects with one); exported for `instanceof`. */
  private constructor();
  name: 'RetryError';
  /** Why it stopped. */
  reason: StopReason;
  /** One record per attempt sent (empty when none was). */
  attempts: AttemptRecord[];
  /**
   * The last attempt's error; or the deadline's `TimeoutError` when the deadline passed before
   * the next attempt, a `CircuitOpenError` when the circuit was open for it, the `TimeoutError`
   * of a stream body that could not be read in time; `undefined` when an AdaptiveThrottle
   * refused the first attempt.
   */
  cause: unknown;
  /**
   * The idempotency key the attempts carried, when the request had one: try the operation
   * again later with `idempotencyKey: error.idempotencyKey`, so that a server which got it
   * once answers from its store instead of processing it twice.
   */
  idempotencyKey?: string;
}

/**
 * `fetch` with retries. Resolves with the final `Response` (check `res.ok`). An invalid or
 * unknown option is a `TypeError` (the call rejects before anything is sent).
 */
export function retryFetch(input: RetryFetchInput, init?: RequestInit | null, options?: RetryOptions | null): Promise<Response>;

/** A `retryFetch` with defaults of its own (`createRetryFetch`). */
export interface RetryFetchClient {
  (input: RetryFetchInput, init?: RequestInit | null, options?: RetryOptions | null): Promise<Response>;
  /**
   * A new client whose defaults are this one's with `options` merged over them (as ky's
   * `extend`); this client is unchanged. A `signal` given here and this client's both
   * cancel the new client's calls. @throws TypeError for an invalid or unknown option, or a
   * key every call would share.
   */
  extend(options?: RetryOptions | null): RetryFetchClient;
}

/**
 * A `retryFetch` whose options default to `defaults` (without it, the package's defaults);
 * per-call options merge over them. An invalid or unknown option in `defaults` throws a
 * `TypeError` here, at once; so does a key every call would share (a string `idempotencyKey`,
 * or the key's header in `headers`): a key is given per call.
 */
export function createRetryFetch(defaults?: RetryOptions | null): RetryFetchClient;

/** The first `count` delays (ms) the policy would wait; reproducible with a `seed`. */
export function backoffDelays(options: RetryOptions | null | undefined, count: number, seed?: number | null): number[];

/** Is `error` a `RetryError`? (By `name`, so it works across realms.) */
export function isRetryError(error: unknown): error is RetryError;

/** Is `error` a `CircuitOpenError`? (By `name`.) */
export function isCircuitOpenError(error: unknown): error is CircuitOpenError;
