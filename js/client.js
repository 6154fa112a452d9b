// The public API, shared by every entry (Node, browser, worker; index.cjs is generated from it).
//
// Rust decides, JavaScript performs. The wasm reads and validates the options once (`Policy`)
// and makes every decision of a call (`Call`: circuit breaker, throttle turn, time limits,
// retry or stop, the wait, the retry budget, Retry-After). This driver does the I/O the wasm
// cannot do cheaply: it prepares the request, calls fetch, runs timers and abort signals,
// calls the hooks and builds the errors. Each crossing carries numbers or short strings.
import { Policy, Call, isIdempotent, backoffDelays as wasmBackoffDelays } from './retry_fetch.js';

export { RetryBudget, AdaptiveThrottle, CircuitBreaker } from './retry_fetch.js';

// Outcome codes and Policy.flags bits: the constants of src/wasm/call.rs and options.rs.
const NETWORK_ERROR = 1000;
const TIMEOUT = 1001;
const FLAG_GUARDS = 1;
const FLAG_THROTTLE = 2;
const FLAG_BREAKER = 4;
const FLAG_RETRY_HEADERS = 8;
const FLAG_FIXED_KEY = 16;
const FLAG_AUTO_KEY = 32;
const FLAG_TIME_LIMIT = 64;
const FLAG_RETRY_SUCCESS = 128;
const FLAG_RETRY_AFTER = 256;
// The longest delay setTimeout accepts (2^31 - 1 ms); longer ones fire at once.
const MAX_TIMER_MS = 2147483647;

// The built-in defaults, made on first use (the entry instantiates the wasm after this module
// is evaluated).
let builtIn;
const defaults = () => (builtIn ??= client(new Policy()));

/**
 * What the driver needs of a policy on every call, read from the wasm once per policy (a
 * policy never changes): its flags, the caller's signal and transport.
 */
function view(policy) {
  return { policy, flags: policy.flags, signal: policy.signal, fetch: policy.fetch };
}

/** A client: its base policy (the defaults it merges per-call options over) and its last read. */
function client(base) {
  return { base, view: view(base), last: undefined };
}

/** fetch with retries: see index.d.ts and the README. */
export function retryFetch(input, init, options) {
  return call(defaults(), input, init, options);
}

/** A retryFetch whose options default to `defaults` (validated now; per-call options merge over them). */
export function createRetryFetch(options) {
  const own = client(defaults().base.read(options));
  return function retryFetch(input, init, options) {
    return call(own, input, init, options);
  };
}

/** The first `count` delays (ms) the policy would wait; reproducible with a `seed`. */
export function backoffDelays(options, count, seed) {
  return wasmBackoffDelays(options, count, seed);
}

/** Is `error` a RetryError (by name, so it works across realms and copies of the package)? */
export function isRetryError(error) {
  return typeof error === 'object' && error !== null && error.name === 'RetryError';
}

/** Is `error` a CircuitOpenError (by name)? */
export function isCircuitOpenError(error) {
  return typeof error === 'object' && error !== null && error.name === 'CircuitOpenError';
}

function call(client, input, init, options) {
  return options === undefined || options === null ? run(client.view, input, init, undefined) : runWith(client, input, init, options);
}

async function runWith(client, input, init, options) {
  const read = readOptions(client, options); // an invalid option rejects before anything is sent
  return run(read.view, input, init, read);
}

/**
 * What a read can be reused for: the option values as they were read, with arrays copied
 * (`retryOnStatus` may be mutated between calls). `undefined` when a value could change
 * without its identity changing in a way the wasm would see (a guard can be freed, any other
 * object can be changed): then the options are read again every call.
 */
function reusableValues(values) {
  const out = new Array(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (Array.isArray(v)) {
      if (!v.every((x) => x === null || (typeof x !== 'object' && typeof x !== 'function'))) return undefined;
      out[i] = { array: v.slice() };
    } else if (v === null || typeof v !== 'object' || isAbortSignal(v)) {
      out[i] = v; // primitives, functions, and signals (read live by the driver)
    } else {
      return undefined;
    }
  }
  return out;
}

function sameList(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

function sameValues(kept, values) {
  if (kept.length !== values.length) return false;
  for (let i = 0; i < kept.length; i++) {
    const k = kept[i];
    const v = values[i];
    if (typeof k === 'object' && k !== null && !isAbortSignal(k)) {
      if (!Array.isArray(v) || !sameList(k.array, v)) return false;
    } else if (!Object.is(k, v)) {
      return false;
    }
  }
  return true;
}

/**
 * The policy for per-call `options` over `client.base`. The wasm reads and validates them; the
 * last read is kept, so calls that pass the same option values again (the same object, or a
 * new literal with the same values) reuse it without crossing into the wasm. Values that can
 * change behind the same identity (arrays are compared item by item; guards and other objects
 * are never reused) are read again. A read counts its calls in flight, and is freed once
 * replaced and no call uses it.
 */
function readOptions(client, options) {
  if (typeof options !== 'object') return { policy: client.base.read(options), users: 1, stale: true };
  const keys = Object.keys(options);
  const values = keys.map((k) => options[k]); // each getter runs once per call
  const last = client.last;
  if (last !== undefined && last.values !== undefined && sameList(last.keys, keys) && sameValues(last.values, values)) {
    last.users++;
    return last;
  }
  const snapshot = {};
  keys.forEach((k, i) => (snapshot[k] = values[i]));
  const policy = client.base.read(snapshot); // may run a signal's getters, even a nested call
  const read = { keys, values: reusableValues(values), policy, view: view(policy), users: 1, stale: false };
  const replaced = client.last;
  client.last = read;
  if (replaced !== undefined) release(replaced, true);
  return read;
}

/** A call is done with `read` (or, with `replaced`, the client moved on from it). */
function release(read, replaced) {
  if (replaced) read.stale = true;
  else read.users--;
  if (read.stale && read.users === 0 && read.policy !== undefined) {
    const policy = read.policy;
    read.policy = undefined; // freed once, whatever happens next
    policy.free();
  }
}

// ---- errors -------------------------------------------------------------------------------

function namedError(name, message) {
  const e = new Error(message);
  e.name = name;
  return e;
}

/** The `TimeoutError` of an attempt that ran out of time after `ms`. */
function timeoutError(ms) {
  return namedError('TimeoutError', `retryFetch: the attempt timed out after ${ms} ms`);
}

function messageOf(value) {
  try {
    const m = (typeof value === 'object' && value !== null) || typeof value === 'function' ? value.message : undefined;
    return typeof m === 'string' ? m : undefined;
  } catch {
    return undefined;
  }
}

/** The `RetryError` that ends a call without a response: `reason`, `attempts`, `cause`. */
function retryError(reason, attempts, cause) {
  const n = attempts.length;
  const m = messageOf(cause);
  const e = namedError(
    'RetryError',
    `retryFetch failed after ${n} attempt${n === 1 ? '' : 's'} (${reason})${m === undefined ? '' : `: ${m}`}`,
  );
  e.reason = reason;
  e.attempts = attempts;
  e.cause = cause;
  return e;
}

/** The `CircuitOpenError` of a call refused by an open circuit: nothing was sent. */
function circuitOpenError(origin, retryAfterMs) {
  const wait = Math.ceil(retryAfterMs);
  const e = namedError(
    'CircuitOpenError',
    `retryFetch: the circuit for ${origin} is open; nothing was sent (retry after ${wait} ms)`,
  );
  e.retryAfterMs = wait;
  e.origin = origin;
  return e;
}

// ---- signals and timers -------------------------------------------------------------------

/** Is `v` an AbortSignal (duck-typed, so signals from another realm or a polyfill work)? */
function isAbortSignal(v) {
  return typeof v === 'object' && v !== null && typeof v.addEventListener === 'function' && typeof v.aborted === 'boolean';
}

function abortedSignal(signals) {
  for (const s of signals) if (s.aborted) return s;
  return undefined;
}

function timer(ms, callback) {
  return setTimeout(callback, ms > 0 ? Math.min(ms, MAX_TIMER_MS) : 0);
}

/** Listen for `abort` on each of `signals`; the returned function removes the listeners. */
function onAbort(signals, callback) {
  const listeners = signals.map((s) => {
    const listener = () => callback(s.reason);
    s.addEventListener('abort', listener);
    return () => s.removeEventListener('abort', listener);
  });
  return () => listeners.forEach((remove) => remove());
}

/** Wait `ms`, or reject at once with the reason of the first of `signals` to abort. */
function sleep(ms, signals) {
  const aborted = abortedSignal(signals);
  if (aborted) return Promise.reject(aborted.reason);
  return new Promise((resolve, reject) => {
    const unlisten = onAbort(signals, (reason) => {
      clearTimeout(handle);
      unlisten();
      reject(reason);
    });
    const handle = timer(ms, () => {
      unlisten();
      resolve();
    });
  });
}

/**
 * The abort signal of one attempt: it aborts when a caller signal does (with its reason) or
 * when the time limit fires (then `timedOut` is set). `AbortSignal.any` joins the caller's
 * signals, so aborting one after the Response arrived still cancels its body, as with plain
 * fetch. `done()` clears the time limit: `timeoutMs` bounds the wait for the response headers.
 * `undefined` when nothing can abort the attempt.
 */
function attemptAbort(signals, limitMs, timeoutCause) {
  if (limitMs < 0) {
    if (signals.length === 0) return undefined;
    if (signals.length === 1) return { signal: signals[0], timedOut: false, done() {} };
  }
  const controller = new AbortController();
  const abort = { signal: controller.signal, timedOut: false, done: undefined };
  const handle = limitMs < 0 ? undefined : timer(limitMs, () => {
    abort.timedOut = true;
    controller.abort(timeoutCause);
  });
  let unlink;
  if (signals.length > 0) {
    try {
      abort.signal = AbortSignal.any([...signals, controller.signal]);
    } catch {
      // No AbortSignal.any, or a signal it does not take (a polyfill's): link by listeners.
      unlink = onAbort(signals, (reason) => controller.abort(reason));
    }
  }
  abort.done = () => {
    if (handle !== undefined) clearTimeout(handle);
    if (unlink) unlink();
  };
  return abort;
}

// ---- the request, prepared once and replayed intact ----------------------------------------

/** Cancel the body of a response we will not hand out, so its connection is freed. */
async function discard(response) {
  try {
    const body = response.body;
    if (typeof body === 'object' && body !== null) await body.cancel();
  } catch {
    // nothing to free
  }
}

function ignoreRejection(promise) {
  promise.then(undefined, () => {});
}

/**
 * Read `stream` through one branch of a tee, up to `limit` bytes. Within the limit the bytes
 * are kept for replay; beyond it the other branch (which still holds every byte) is sent once.
 */
async function bufferStream(stream, limit) {
  const [probe, whole] = stream.tee();
  const reader = probe.getReader();
  const chunks = [];
  let size = 0;
  for (;;) {
    const step = await reader.read();
    if (step.done) break;
    const chunk = step.value;
    if (!(chunk instanceof Uint8Array)) {
      ignoreRejection(reader.cancel());
      throw new TypeError('retryFetch: a ReadableStream body must yield Uint8Array chunks');
    }
    if (size + chunk.length > limit) {
      // Not awaited: a tee branch's cancel settles only once the other branch is done.
      ignoreRejection(reader.cancel());
      return { bytes: undefined, stream: whole };
    }
    chunks.push(chunk.slice());
    size += chunk.length;
  }
  ignoreRejection(whole.cancel());
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.length;
  }
  return { bytes, stream: undefined };
}

/**
 * Everything needed to send attempt after attempt of the same request:
 * - `input` may be a string, a `URL` or a `Request`; a `Request` is cloned per attempt.
 * - Bodies fetch can send again (string, buffers, `Blob`, `URLSearchParams`, `FormData`) stay
 *   in the caller's `init`; a `ReadableStream` is read into memory up to
 *   `maxBufferedBodyBytes` and replayed from there, a longer one is sent once, not retried.
 * - Headers are merged once (fetch semantics: `init.headers` replaces a `Request`'s), then the
 *   idempotency key is added; the caller's `init` is passed untouched when nothing changes.
 */
// Is a method idempotent? The core's answer, remembered per method name (a handful in practice).
const idempotentMethods = new Map();
function idempotent(method) {
  let answer = idempotentMethods.get(method);
  if (answer === undefined) {
    answer = isIdempotent(method);
    if (idempotentMethods.size < 64) idempotentMethods.set(method, answer);
  }
  return answer;
}

class RequestTemplate {
  constructor({ policy, flags, signal }, input, init) {
    if (!(init === undefined || init === null || typeof init === 'object')) {
      throw new TypeError('retryFetch: init must be an object (a RequestInit) or undefined');
    }
    const request = typeof Request === 'function' && input instanceof Request ? input : undefined;
    if (request !== undefined && request.bodyUsed) {
      throw new TypeError("retryFetch: the Request's body was already used, so it cannot be sent");
    }
    const given = init ?? undefined;
    const m = given?.method;
    const method = typeof m === 'string' ? m : m != null ? String(m) : request !== undefined ? request.method : 'GET';
    const h = given?.headers;
    this.headerSource = h != null ? h : request?.headers;
    const callerHeaders = this.headerSource === undefined ? undefined : new Headers(this.headerSource);

    this.signals = [];
    for (const s of [signal, given?.signal, request?.signal]) if (isAbortSignal(s)) this.signals.push(s);

    this.idempotent = idempotent(method);
    this.input = input;
    this.request = request;
    this.init = init;
    this.sendHeaders = undefined;
    this.key = undefined;
    const header = callerHeaders === undefined ? undefined : policy.header;
    const existing = callerHeaders === undefined ? null : callerHeaders.get(header);
    const needsKey = flags & FLAG_FIXED_KEY || (flags & FLAG_AUTO_KEY && !this.idempotent && existing === null);
    const ours = needsKey ? policy.key(this.idempotent, existing !== null) : undefined;
    if (ours !== undefined) {
      this.key = ours;
      this.sendHeaders = callerHeaders ?? new Headers();
      this.sendHeaders.set(header ?? policy.header, policy.wire(ours));
    } else if (existing !== null) {
      this.key = existing;
    }

    // A stream body is read (up to the limit) before the first attempt.
    this.body = undefined;
    this.oneShot = undefined;
    this.ready = undefined;
    const body = given?.body;
    if (typeof ReadableStream === 'function' && body instanceof ReadableStream) {
      this.ready = bufferStream(body, policy.maxBody).then(({ bytes, stream }) => {
        this.body = bytes;
        this.oneShot = stream;
      });
    }
  }

  /** The request URL (`Request.url`, or the string / `URL` given). */
  url() {
    if (this.request !== undefined) return this.request.url;
    try {
      return String(this.input);
    } catch {
      return '';
    }
  }

  /** Can the request be sent more than once? */
  get replayable() {
    return this.oneShot === undefined;
  }

  /**
   * The `[input, init]` of one attempt, aborted through `signal` when given. `retryHeaders`:
   * `[count, firstAttemptAt]` for `X-Retry-Count` / `X-Original-Request-At`, or undefined.
   */
  attempt(signal, retryHeaders) {
    const input = this.request !== undefined ? this.request.clone() : this.input;
    const setBody = this.body !== undefined || this.oneShot !== undefined;
    if (signal === undefined && this.sendHeaders === undefined && retryHeaders === undefined && !setBody) {
      return [input, this.init];
    }
    const init = typeof this.init === 'object' && this.init !== null ? { ...this.init } : {};
    if (retryHeaders !== undefined) {
      const headers = new Headers(this.sendHeaders ?? this.headerSource);
      headers.set('X-Retry-Count', String(retryHeaders[0]));
      headers.set('X-Original-Request-At', retryHeaders[1]);
      init.headers = headers;
    } else if (this.sendHeaders !== undefined) {
      // fetch copies the headers it is given, so one object serves every attempt
      init.headers = this.sendHeaders;
    }
    if (signal !== undefined) init.signal = signal;
    if (this.body !== undefined) init.body = this.body;
    if (this.oneShot !== undefined) {
      init.body = this.oneShot;
      init.duplex = 'half';
    }
    return [input, init];
  }
}

// ---- the loop -----------------------------------------------------------------------------

function statusOf(response) {
  const s = response.status;
  return typeof s === 'number' && s >= 0 && s <= 999 ? Math.trunc(s) : 0;
}

function headerOf(response, name) {
  try {
    const v = response.headers.get(name);
    return typeof v === 'string' ? v : undefined;
  } catch {
    return undefined;
  }
}

/** The object given to `shouldRetry` (with `response`) and `onRetry` (without). */
function retryContext(attempt, delayMs, reason, response, code, error, key) {
  const ctx = { attempt, delayMs, reason };
  if (response !== undefined) ctx.response = response;
  if (code < NETWORK_ERROR) ctx.status = code;
  else ctx.error = error;
  if (key !== undefined) ctx.idempotencyKey = key;
  return ctx;
}

/**
 * One call to its end. `read`: the per-call options read for it (released at the end).
 *
 * The `Call` (the wasm's decisions) is made before the first attempt when a guard or a time
 * limit needs it; otherwise only once the first attempt did not simply succeed. So a call that needs no new
 * key (a GET, say) and gets its answer below 400 at once does not cross into the wasm at all:
 * the policy's flags, signal and transport were read with the policy (`view`).
 */
async function run(driverView, input, init, read) {
  let decisions;
  try {
    const { policy, flags } = driverView;
    const request = new RequestTemplate(driverView, input, init);
    if (request.ready !== undefined) await request.ready;
    const callStarted = Date.now();
    const signals = request.signals;
    const transport = driverView.fetch;
    const history = [];
    const firstAttemptAt = flags & FLAG_RETRY_HEADERS ? new Date(callStarted).toISOString() : undefined;
    if (flags & (FLAG_GUARDS | FLAG_TIME_LIMIT)) {
      decisions = new Call(policy, flags & FLAG_GUARDS ? request.url() : undefined, callStarted);
    }
    for (;;) {
      const aborted = abortedSignal(signals);
      if (aborted) throw aborted.reason;
      // The circuit breaker: an open circuit sends nothing.
      if (flags & FLAG_BREAKER) {
        const wait = decisions.admit(Date.now());
        if (wait >= 0) {
          const open = circuitOpenError(decisions.origin, wait);
          throw history.length === 0 ? open : retryError('circuit-open', history, open);
        }
      }
      // The adaptive throttle: wait for this attempt's turn.
      if (flags & FLAG_THROTTLE) {
        for (let wait = decisions.turn(Date.now()); wait !== -1; wait = decisions.turn(Date.now())) {
          if (wait === -2) {
            const reason = decisions.reason;
            const cause = reason === 'deadline' ? timeoutError(Math.ceil(policy.deadlineMs)) : undefined;
            throw retryError(reason, history, cause);
          }
          await sleep(wait, signals);
        }
      }

      const attempt = history.length + 1;
      const started = Date.now();
      const limit = decisions === undefined ? -1 : decisions.send(policy, started);
      const timeoutCause = limit < 0 ? undefined : timeoutError(Math.ceil(limit));
      const abort = attemptAbort(signals, limit, timeoutCause);
      let response;
      let error;
      let failed = false;
      let timedOut = false;
      try {
        const [attemptInput, attemptInit] = request.attempt(
          abort?.signal,
          firstAttemptAt !== undefined && attempt > 1 ? [attempt - 1, firstAttemptAt] : undefined,
        );
        try {
          // A transport that throws synchronously failed like one that rejects: a network error.
          response = await (transport === undefined ? fetch(attemptInput, attemptInit) : transport(attemptInput, attemptInit));
        } catch (e) {
          failed = true;
          error = e;
        }
        timedOut = abort !== undefined && abort.timedOut;
      } finally {
        if (abort !== undefined) abort.done(); // the time limit and signal links end with the attempt
      }
      const ended = Date.now();

      const abortedNow = abortedSignal(signals);
      if (abortedNow) {
        if (!failed && typeof response === 'object' && response !== null) await discard(response);
        throw abortedNow.reason;
      }
      if (!failed && (typeof response !== 'object' || response === null)) {
        throw new TypeError('retryFetch: fetch resolved to something that is not a Response');
      }
      if (failed && timedOut) error = timeoutCause;
      const code = failed ? (timedOut ? TIMEOUT : NETWORK_ERROR) : statusOf(response);
      if (decisions === undefined) {
        // The policy retries no status below 400 (the wasm says so in FLAG_RETRY_SUCCESS):
        // a response below 400 is the answer, as the Call would decide.
        if (code < 400 && !(flags & FLAG_RETRY_SUCCESS)) return response;
        decisions = new Call(policy, undefined, callStarted);
        decisions.send(policy, started);
      }
      if (flags & FLAG_GUARDS) decisions.settle(policy, code, ended);

      const record = { attempt, startedAt: started, durationMs: ended - started };
      if (!failed) record.status = code;
      else record.error = error;
      history.push(record);

      const serverAsks = flags & FLAG_RETRY_AFTER && code >= 400 && code < NETWORK_ERROR;
      const delay = decisions.decide(
        policy,
        code,
        request.idempotent,
        request.key !== undefined,
        request.replayable,
        serverAsks ? headerOf(response, 'retry-after') : undefined,
        serverAsks ? headerOf(response, 'ratelimit-reset') : undefined,
        serverAsks ? headerOf(response, 'ratelimit') : undefined,
        Date.now(),
      );
      const finish = (reason) => {
        if (!failed) return response;
        throw retryError(reason, history, error);
      };
      if (delay < 0) return finish(decisions.reason);
      const reason = decisions.reason;

      const shouldRetry = policy.shouldRetry;
      if (shouldRetry !== undefined) {
        const verdict = await shouldRetry(retryContext(attempt, delay, reason, response, code, error, request.key));
        if (verdict === false) return finish('shouldRetry');
        if (verdict !== true) {
          throw new TypeError('retryFetch: shouldRetry must return true or false (or a promise of one)');
        }
      }
      const onRetry = policy.onRetry;
      if (onRetry !== undefined) await onRetry(retryContext(attempt, delay, reason, undefined, code, error, request.key));
      if (!failed) await discard(response);
      record.delayMs = delay;
      await sleep(delay, signals);
    }
  } finally {
    if (decisions !== undefined) decisions.free(); // gives back a probe slot or throttle turn
    if (read !== undefined) release(read, false);
  }
}
