//! wasm-bindgen tests of the wasm shell (`retry_fetch::wasm`): the decision objects the
//! JavaScript driver (`js/client.js`) asks at each step of a call, `Policy` (options read and
//! validated once) and `Call` (breaker, throttle, time limits, retry or stop), with the guard
//! classes, `backoffDelays` and `isIdempotent`, against real JavaScript: option objects,
//! `TypeError`s, `AbortController` signals, `URL`, `crypto.getRandomValues`, `Date` and a JS
//! `onStateChange` listener. No server is needed: the driver performs the I/O, and each test
//! plays the driver's part with the outcome codes and times it would pass in.
//!
//! The same binary runs in Node (the default) and in headless Chromium
//! (`WASM_BINDGEN_USE_BROWSER=1`), so nothing here uses `window`. `scripts/test.sh wasm` runs
//! both (the `RF_TEST_SERVER` it still sets is not read).
//!
//! Everything is called by name from `retry_fetch::wasm`: `Policy::new()` is `new Policy()`, and
//! the guards are made with their Rust constructors (`RetryBudgetHandle::new(options)` is
//! `new RetryBudget(options)`) and turned into the JS objects the driver and users hold with
//! `JsValue::from` (wasm-bindgen wraps the Rust value in its exported JS class, so `free()`,
//! `tokens()`, `state()` and `rate()` are the real methods), which go into the options.
#![cfg(target_arch = "wasm32")]

use std::collections::HashSet;

use js_sys::{Array, Date, Function, Object, Reflect, RegExp, JSON};
use retry_fetch::wasm::{
    backoff_delays, is_idempotent, AdaptiveThrottleHandle, Call, CircuitBreakerHandle, Policy,
    RetryBudgetHandle, FLAG_AUTO_KEY, FLAG_BREAKER, FLAG_FIXED_KEY, FLAG_GUARDS,
    FLAG_RETRY_AFTER, FLAG_RETRY_HEADERS, FLAG_RETRY_SUCCESS, FLAG_THROTTLE, FLAG_TIME_LIMIT, NETWORK_ERROR,
    TIMEOUT,
};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::*;

#[wasm_bindgen(inline_js = r#"
// A JS function that records its argument, for onStateChange.
export function recorder() {
  const events = [];
  const f = (event) => { events.push(event); };
  f.events = events;
  return f;
}
"#)]
extern "C" {
    fn recorder() -> Function;
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// `new Call(policy, url, now)`; without a URL as the driver makes it when no guard is set.
macro_rules! call {
    ($p:expr, $now:expr) => {
        Call::new($p, None, $now)
    };
    ($p:expr, $url:expr, $now:expr) => {
        Call::new($p, Some(String::from($url)), $now)
    };
}

/// `new Policy().read(js(src))`, which must succeed.
macro_rules! policy {
    ($src:expr) => {
        policy!(Policy::new(), $src)
    };
    ($base:expr, $src:expr) => {{
        let src: &str = $src;
        $base.read(js(src)).unwrap_or_else(|e| panic!("options {src} were rejected: {}", message(&e)))
    }};
}

/// `call.decide(policy, code, ...)` as the driver asks it for an idempotent request without a
/// key, with a replayable body and no server headers.
macro_rules! decide {
    ($call:expr, $p:expr, $code:expr, $now:expr) => {
        $call.decide($p, $code, true, false, true, None, None, None, $now)
    };
}

/// One attempt the way the driver makes it: breaker, send, outcome, decision. Returns the delay.
macro_rules! attempt {
    ($call:expr, $p:expr, $code:expr, $now:expr) => {{
        let now: f64 = $now;
        assert_eq!($call.admit(now), -1.0, "the breaker refused an attempt at {now}");
        $call.send($p, now);
        $call.settle($p, $code, now);
        decide!($call, $p, $code, now)
    }};
}

/// Evaluate a JavaScript expression: `js("({ maxAttempts: 0 })")`.
fn js(src: &str) -> JsValue {
    Function::new_no_args(&format!("return ({src});"))
        .call0(&JsValue::UNDEFINED)
        .unwrap_or_else(|e| panic!("evaluating {src} threw {}", message(&e)))
}

/// `JSON.stringify(v)`, or `String(v)`, for assertion messages.
fn show(v: &JsValue) -> String {
    match JSON::stringify(v) {
        Ok(s) if !s.is_undefined() => String::from(s),
        _ => format!("{v:?}"),
    }
}

/// The `message` of a thrown error (or the value shown).
fn message(e: &JsValue) -> String {
    get(e, "message").as_string().unwrap_or_else(|| show(e))
}

fn get(target: &JsValue, key: &str) -> JsValue {
    if !target.is_object() && !target.is_function() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// `target[name](...args)`.
fn call_method(target: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(target, name).dyn_into().unwrap_or_else(|_| panic!("{name} is not a method"));
    f.apply(target, &args.iter().collect::<Array>())
}

/// A real JS `TypeError` (by `instanceof` and by `name`) with exactly this message.
#[track_caller]
fn assert_type_error(err: &JsValue, expected: &str) {
    assert!(err.is_instance_of::<js_sys::TypeError>(), "not a TypeError: {}", show(err));
    assert_eq!(get(err, "name").as_string().as_deref(), Some("TypeError"));
    assert_eq!(message(err), expected);
}

/// `read(options)` over the defaults must throw a TypeError with exactly this message.
#[track_caller]
fn assert_rejected(options: JsValue, expected: &str) {
    match Policy::new().read(options.clone()) {
        Ok(_) => panic!("options {} were accepted; expected: {expected}", show(&options)),
        Err(e) => assert_type_error(&e, expected),
    }
}

/// `new RetryBudget(options)`: the Rust constructor, and the JS object that wraps the result.
fn new_budget(options: JsValue) -> Result<JsValue, JsValue> {
    RetryBudgetHandle::new(options).map(JsValue::from)
}

/// `new CircuitBreaker(options)`, as a JS object.
fn new_breaker(options: JsValue) -> Result<JsValue, JsValue> {
    CircuitBreakerHandle::new(options).map(JsValue::from)
}

/// `new AdaptiveThrottle(options)`, as a JS object.
fn new_throttle(options: JsValue) -> Result<JsValue, JsValue> {
    AdaptiveThrottleHandle::new(options).map(JsValue::from)
}

/// `{ <name>: guard, ...extra }` from JS source for the rest (`extra` without braces).
fn with_guard(name: &str, guard: &JsValue, extra: &str) -> JsValue {
    let o: JsValue = if extra.is_empty() { Object::new().into() } else { js(&format!("{{ {extra} }}")) };
    Reflect::set(&o, &JsValue::from_str(name), guard).unwrap();
    o
}

fn is_uuid_v4(s: &str) -> bool {
    RegExp::new("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", "").test(s)
}

fn numbers(a: &Array) -> Vec<f64> {
    a.iter().map(|v| v.as_f64().expect("not a number")).collect()
}

// ---------------------------------------------------------------------------------------------
// Options: validation and merging

#[wasm_bindgen_test]
fn invalid_numbers_are_type_errors_naming_option_value_and_rule() {
    let cases: &[(&str, &str)] = &[
        ("({ maxAttempts: 0 })", r#"retryFetch: invalid option "maxAttempts": got 0; expected an integer from 1 to 100"#),
        ("({ maxAttempts: 2.5 })", r#"retryFetch: invalid option "maxAttempts": got 2.5; expected an integer from 1 to 100"#),
        ("({ maxAttempts: '3' })", r#"retryFetch: invalid option "maxAttempts": got "3"; expected an integer from 1 to 100"#),
        ("({ baseDelayMs: NaN })", r#"retryFetch: invalid option "baseDelayMs": got NaN; expected a finite number of milliseconds >= 0"#),
        ("({ maxDelayMs: -Infinity })", r#"retryFetch: invalid option "maxDelayMs": got -Infinity; expected a finite number of milliseconds >= 0"#),
        ("({ factor: 0.5 })", r#"retryFetch: invalid option "factor": got 0.5; expected a finite number from 1 to 100"#),
        ("({ timeoutMs: 0 })", r#"retryFetch: invalid option "timeoutMs": got 0; expected a number of milliseconds > 0 and <= 2147483647"#),
        ("({ deadlineMs: 2147483648 })", r#"retryFetch: invalid option "deadlineMs": got 2147483648; expected a number of milliseconds > 0 and <= 2147483647"#),
        ("({ retryOnStatus: [503, 600] })", r#"retryFetch: invalid option "retryOnStatus": got 600; expected an array of integer HTTP statuses from 100 to 599"#),
        ("({ retryOnStatus: 503 })", r#"retryFetch: invalid option "retryOnStatus": got 503; expected an array of integer HTTP statuses from 100 to 599"#),
        ("({ maxBufferedBodyBytes: -1 })", r#"retryFetch: invalid option "maxBufferedBodyBytes": got -1; expected an integer number of bytes from 0 to 2147483647"#),
    ];
    for (src, expected) in cases {
        assert_rejected(js(src), expected);
    }
}

#[wasm_bindgen_test]
fn invalid_names_flags_and_keys_are_type_errors() {
    let cases: &[(&str, &str)] = &[
        ("({ jitter: 'x' })", r#"retryFetch: invalid option "jitter": got "x"; expected 'none', 'full', 'equal', 'decorrelated' or 'additive'"#),
        ("({ jitter: 'Full' })", r#"retryFetch: invalid option "jitter": got "Full"; expected 'none', 'full', 'equal', 'decorrelated' or 'additive'"#),
        ("({ retryOnTimeout: 1 })", r#"retryFetch: invalid option "retryOnTimeout": got 1; expected true or false"#),
        ("({ idempotencyKey: true })", r#"retryFetch: invalid option "idempotencyKey": got true; expected 'auto', false, or a key of 1 to 255 visible ASCII characters"#),
        ("({ idempotencyKey: 'a b' })", r#"retryFetch: invalid option "idempotencyKey": got "a b"; expected 'auto', false, or a key of 1 to 255 visible ASCII characters"#),
        ("({ idempotencyKey: 'k'.repeat(256) })", &format!(r#"retryFetch: invalid option "idempotencyKey": got "{}"; expected 'auto', false, or a key of 1 to 255 visible ASCII characters"#, "k".repeat(256))),
        ("({ idempotencyKeyFormat: 'quoted' })", r#"retryFetch: invalid option "idempotencyKeyFormat": got "quoted"; expected 'plain' or 'sf-string'"#),
        ("({ idempotencyHeader: 'Bad Header' })", "retryFetch: invalid option \"idempotencyHeader\": got \"Bad Header\"; expected an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"),
    ];
    for (src, expected) in cases {
        assert_rejected(js(src), expected);
    }
    // the limits themselves are accepted
    policy!("({ idempotencyKey: '~'.repeat(255), maxAttempts: 100, factor: 100, timeoutMs: 2147483647 })");
}

#[wasm_bindgen_test]
fn options_that_are_not_an_object_are_type_errors() {
    assert_rejected(js("42"), r#"retryFetch: invalid option "options": got 42; expected an object"#);
    assert_rejected(js("'fast'"), r#"retryFetch: invalid option "options": got "fast"; expected an object"#);
    assert_rejected(js("true"), r#"retryFetch: invalid option "options": got true; expected an object"#);
    assert_rejected(js("() => 3"), r#"retryFetch: invalid option "options": got a function; expected an object"#);
    // undefined and null mean "no options"
    assert_eq!(Policy::new().read(JsValue::UNDEFINED).unwrap().deadline_ms(), -1.0);
    assert_eq!(Policy::new().read(JsValue::NULL).unwrap().deadline_ms(), -1.0);
    // a throwing getter rejects with its own error, not a panic
    let err = Policy::new().read(js("({ get maxAttempts() { throw new RangeError('boom') } })")).err().expect("accepted");
    assert!(err.is_instance_of::<js_sys::RangeError>(), "{}", show(&err));
    assert_eq!(message(&err), "boom");
}

#[wasm_bindgen_test]
fn javascript_parts_are_checked_and_handed_back() {
    assert_rejected(js("({ signal: {} })"), r#"retryFetch: invalid option "signal": got [object Object]; expected an AbortSignal"#);
    assert_rejected(js("({ signal: 'abort' })"), r#"retryFetch: invalid option "signal": got "abort"; expected an AbortSignal"#);
    assert_rejected(js("({ shouldRetry: 'yes' })"), r#"retryFetch: invalid option "shouldRetry": got "yes"; expected a function"#);
    assert_rejected(js("({ onRetry: {} })"), r#"retryFetch: invalid option "onRetry": got [object Object]; expected a function"#);
    assert_rejected(js("({ fetch: [] })"), r#"retryFetch: invalid option "fetch": got an array; expected a function"#);
    assert_rejected(js("({ budget: {} })"), r#"retryFetch: invalid option "budget": got [object Object]; expected a RetryBudget"#);
    assert_rejected(js("({ throttle: 7 })"), r#"retryFetch: invalid option "throttle": got 7; expected an AdaptiveThrottle"#);
    assert_rejected(js("({ breaker: true })"), r#"retryFetch: invalid option "breaker": got true; expected a CircuitBreaker"#);

    // the real objects come back as they are (the driver reads them through the getters)
    let controller = js("new AbortController()");
    let options: JsValue = Object::new().into();
    let signal = get(&controller, "signal");
    let should_retry = js("(ctx) => true");
    let fetch = js("async () => new Response('ok')");
    Reflect::set(&options, &"signal".into(), &signal).unwrap();
    Reflect::set(&options, &"shouldRetry".into(), &should_retry).unwrap();
    Reflect::set(&options, &"fetch".into(), &fetch).unwrap();
    let p = Policy::new().read(options).unwrap();
    assert!(Object::is(&p.signal(), &signal));
    assert!(Object::is(&p.should_retry(), &should_retry));
    assert!(Object::is(&p.fetch(), &fetch));
    assert!(p.on_retry().is_undefined());
    // null clears them again
    let cleared = policy!(p, "({ signal: null, shouldRetry: null, fetch: null })");
    assert!(cleared.signal().is_undefined() && cleared.should_retry().is_undefined() && cleared.fetch().is_undefined());
    // an already aborted signal is still a signal
    policy!("({ signal: AbortSignal.abort() })");
}

#[wasm_bindgen_test]
fn getters_report_the_defaults_and_flags() {
    let p = Policy::new();
    assert_eq!(p.flags(), FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    assert_eq!(
        Policy::new().read(js("({ respectRetryAfter: false })")).unwrap().flags() & FLAG_RETRY_AFTER,
        0,
        "respectRetryAfter: false clears FLAG_RETRY_AFTER"
    );
    assert_eq!(p.deadline_ms(), -1.0);
    assert_eq!(p.max_body(), 1_048_576);
    assert_eq!(p.header(), "Idempotency-Key");
    assert!(p.signal().is_undefined() && p.should_retry().is_undefined() && p.on_retry().is_undefined() && p.fetch().is_undefined());
    let q = policy!("({ retryHeaders: true, deadlineMs: 1500, maxBufferedBodyBytes: 0, idempotencyHeader: 'X-Request-Key' })");
    assert_eq!(q.flags(), FLAG_RETRY_HEADERS | FLAG_TIME_LIMIT | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    assert_eq!(policy!("({ idempotencyKey: false })").flags(), FLAG_RETRY_AFTER);
    assert_eq!(policy!("({ idempotencyKey: 'order-42' })").flags(), FLAG_FIXED_KEY | FLAG_RETRY_AFTER);
    assert_eq!(q.deadline_ms(), 1500.0);
    assert_eq!(q.max_body(), 0);
    assert_eq!(q.header(), "X-Request-Key");
    // unknown names are ignored (TypeScript flags them), as are undefined values
    assert_eq!(policy!("({ maxAtempts: 0, deadlineMs: undefined })").deadline_ms(), -1.0);
    assert_eq!(policy!("({ maxAtempts: 0, deadlineMs: undefined })").flags(), FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
}

#[wasm_bindgen_test]
fn the_time_limit_flag_follows_timeout_ms_and_deadline_ms() {
    assert_eq!(Policy::new().flags() & FLAG_TIME_LIMIT, 0, "no time limit by default");
    assert_eq!(policy!("({ timeoutMs: 1000 })").flags(), FLAG_TIME_LIMIT | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    assert_eq!(policy!("({ deadlineMs: 1 })").flags(), FLAG_TIME_LIMIT | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    let both = policy!("({ timeoutMs: 1000, deadlineMs: 60000, idempotencyKey: false, respectRetryAfter: false })");
    assert_eq!(both.flags(), FLAG_TIME_LIMIT);
    // null clears one; the flag stays while the other is set, and goes with the last
    let deadline_only = policy!(both, "({ timeoutMs: null })");
    assert_eq!(deadline_only.flags(), FLAG_TIME_LIMIT);
    let timeout_only = policy!(both, "({ deadlineMs: null })");
    assert_eq!(timeout_only.flags(), FLAG_TIME_LIMIT);
    assert_eq!(policy!(deadline_only, "({ deadlineMs: null })").flags(), 0);
    assert_eq!(policy!(both, "({ timeoutMs: null, deadlineMs: null })").flags(), 0);
    // undefined keeps the base's limits
    assert_eq!(policy!(both, "({ timeoutMs: undefined, deadlineMs: undefined })").flags(), FLAG_TIME_LIMIT);
    // and the flag says what send does: a limit with it, none without
    let none = policy!(both, "({ timeoutMs: null, deadlineMs: null })");
    assert_eq!(call!(&none, 0.0).send(&none, 0.0), -1.0);
    assert_eq!(call!(&timeout_only, 0.0).send(&timeout_only, 0.0), 1000.0);
    assert_eq!(call!(&deadline_only, 0.0).send(&deadline_only, 0.0), 60000.0);
}

#[wasm_bindgen_test]
fn the_retry_success_flag_is_set_by_a_retried_status_below_400() {
    // the default statuses (408, 429, 500, 502, 503, 504) are all errors
    assert_eq!(Policy::new().flags() & FLAG_RETRY_SUCCESS, 0);
    let p = policy!("({ retryOnStatus: [304, 503] })");
    assert_eq!(p.flags(), FLAG_RETRY_SUCCESS | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    for statuses in ["[100]", "[200]", "[399, 500]"] {
        assert_ne!(policy!(&format!("({{ retryOnStatus: {statuses} }})")).flags() & FLAG_RETRY_SUCCESS, 0, "{statuses}");
    }
    for statuses in ["[]", "[400]", "[404, 503, 599]"] {
        assert_eq!(policy!(&format!("({{ retryOnStatus: {statuses} }})")).flags() & FLAG_RETRY_SUCCESS, 0, "{statuses}");
    }
    // a new list replaces the base's; undefined keeps it
    assert_eq!(policy!(p, "({ retryOnStatus: [503] })").flags(), FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    assert_eq!(policy!(p, "({ retryOnStatus: undefined })").flags(), FLAG_RETRY_SUCCESS | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    // and the flag is right that such a response is retried
    let p = policy!("({ retryOnStatus: [304, 503], jitter: 'none' })");
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert_eq!(decide!(c, &p, 304, 0.0), 500.0);
    assert_eq!(c.reason(), "status");
}

#[wasm_bindgen_test]
fn options_read_over_a_base_keep_its_values_and_null_clears() {
    let base = policy!("({ maxAttempts: 4, jitter: 'none', baseDelayMs: 100, timeoutMs: 1000, deadlineMs: 60000 })");
    let over = policy!(base, "({ baseDelayMs: 200, timeoutMs: null, maxAttempts: undefined })");

    // the base is unchanged: 100 ms backoff, 1 s per attempt
    let mut c = call!(&base, 0.0);
    assert_eq!(c.send(&base, 0.0), 1000.0);
    assert_eq!(decide!(c, &base, 503, 0.0), 100.0);

    // the merged policy: its own baseDelayMs, no timeout (only the deadline limits an
    // attempt), and the base's maxAttempts, jitter and deadline
    let mut c = call!(&over, 0.0);
    let mut delays = Vec::new();
    let mut now = 0.0;
    loop {
        assert_eq!(c.send(&over, now), 60000.0 - now, "the time limit at {now}");
        let d = decide!(c, &over, 503, now);
        if d < 0.0 {
            break;
        }
        delays.push(d);
        now += d;
    }
    assert_eq!(delays, [200.0, 400.0, 800.0]);
    assert_eq!(c.reason(), "attempts");
    assert_eq!(over.deadline_ms(), 60000.0);
    assert_eq!(base.flags(), FLAG_TIME_LIMIT | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    assert_eq!(over.flags(), FLAG_TIME_LIMIT | FLAG_AUTO_KEY | FLAG_RETRY_AFTER, "the deadline is still a time limit");
}

// ---------------------------------------------------------------------------------------------
// Call: retry or stop

#[wasm_bindgen_test]
fn a_503_is_retried_with_a_jittered_delay_within_bounds() {
    let p = Policy::new(); // full jitter, 500 ms base, factor 2, 3 attempts
    let mut seen = HashSet::new();
    for _ in 0..200 {
        let mut c = call!(&p, 0.0);
        c.send(&p, 0.0);
        let first = decide!(c, &p, 503, 0.0);
        assert!((0.0..=500.0).contains(&first) && first.fract() == 0.0, "first delay {first}");
        assert_eq!(c.reason(), "status");
        c.send(&p, first);
        let second = decide!(c, &p, 503, first);
        assert!((0.0..=1000.0).contains(&second), "second delay {second}");
        c.send(&p, first + second);
        assert_eq!(decide!(c, &p, 503, first + second), -1.0);
        assert_eq!(c.reason(), "attempts");
        seen.insert(first as u64);
    }
    assert!(seen.len() > 20, "full jitter gave only {} distinct delays in 200 calls", seen.len());
}

#[wasm_bindgen_test]
fn permanent_answers_stop_with_not_retryable() {
    let p = Policy::new();
    for code in [200, 201, 204, 301, 400, 401, 404, 409, 501, 0, 999] {
        let mut c = call!(&p, 0.0);
        c.send(&p, 0.0);
        assert_eq!(decide!(c, &p, code, 0.0), -1.0, "status {code}");
        assert_eq!(c.reason(), "not-retryable", "status {code}");
    }
    // a status only retried when listed
    let p = policy!("({ retryOnStatus: [404], retryOnNetworkError: false })");
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert!(decide!(c, &p, 404, 0.0) >= 0.0);
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert_eq!(decide!(c, &p, 503, 0.0), -1.0);
    assert_eq!(c.reason(), "not-retryable");
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert_eq!(decide!(c, &p, NETWORK_ERROR, 0.0), -1.0);
    assert_eq!(c.reason(), "not-retryable");
}

#[wasm_bindgen_test]
fn a_post_is_retried_after_an_unknown_outcome_only_with_a_key() {
    let p = policy!("({ jitter: 'none' })");
    let post = |code: u32, has_key: bool| {
        let mut c = call!(&p, 0.0);
        c.send(&p, 0.0);
        let d = c.decide(&p, code, is_idempotent("POST"), has_key, true, None, None, None, 0.0);
        (d, c.reason())
    };
    assert_eq!(post(NETWORK_ERROR, false), (-1.0, "unsafe".to_string()));
    assert_eq!(post(TIMEOUT, false), (-1.0, "unsafe".to_string()));
    assert_eq!(post(503, false), (-1.0, "unsafe".to_string()));
    // the server said it did not process it
    assert_eq!(post(429, false), (500.0, "status".to_string()));
    assert_eq!(post(408, false), (500.0, "status".to_string()));
    // with an idempotency key every transient outcome is retried, 409 too
    assert_eq!(post(NETWORK_ERROR, true), (500.0, "network".to_string()));
    assert_eq!(post(TIMEOUT, true), (500.0, "timeout".to_string()));
    assert_eq!(post(503, true), (500.0, "status".to_string()));
    assert_eq!(post(409, true), (500.0, "status".to_string()));
    assert_eq!(post(409, false), (-1.0, "not-retryable".to_string()));
    // a body that cannot be sent again stops a retry that would otherwise happen
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert_eq!(c.decide(&p, 503, true, false, false, None, None, None, 0.0), -1.0);
    assert_eq!(c.reason(), "body-not-replayable");
}

#[wasm_bindgen_test]
fn attempts_are_counted_by_send() {
    let p = policy!("({ maxAttempts: 2, jitter: 'none', baseDelayMs: 10 })");
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert_eq!(decide!(c, &p, NETWORK_ERROR, 0.0), 10.0);
    assert_eq!(c.reason(), "network");
    c.send(&p, 10.0);
    assert_eq!(decide!(c, &p, TIMEOUT, 10.0), -1.0);
    assert_eq!(c.reason(), "attempts");

    let one = policy!("({ maxAttempts: 1 })");
    let mut c = call!(&one, 0.0);
    c.send(&one, 0.0);
    assert_eq!(decide!(c, &one, 503, 0.0), -1.0);
    assert_eq!(c.reason(), "attempts");
}

#[wasm_bindgen_test]
fn retry_after_seconds_replace_the_backoff_within_the_cap() {
    let p = policy!("({ jitter: 'none' })");
    let ask = |p: &_, code: u32, ra: Option<&str>, reset: Option<&str>, rl: Option<&str>| {
        let mut c = call!(p, 0.0);
        c.send(p, 0.0);
        let d = c.decide(p, code, true, false, true, ra.map(String::from), reset.map(String::from), rl.map(String::from), 0.0);
        (d, c.reason())
    };
    assert_eq!(ask(&p, 503, Some("2"), None, None), (2000.0, "status".to_string()));
    assert_eq!(ask(&p, 429, Some(" 0 "), None, None), (0.0, "status".to_string()));
    // past the cap (maxRetryAfterMs, by default maxDelayMs = 30 s): stop at once
    assert_eq!(ask(&p, 503, Some("120"), None, None), (-1.0, "retry-after".to_string()));
    let patient = policy!("({ jitter: 'none', maxRetryAfterMs: 200000 })");
    assert_eq!(ask(&patient, 503, Some("120"), None, None), (120_000.0, "status".to_string()));
    // unreadable values fall back to the backoff
    for junk in ["soon", "-1", "1.5", "1e3", "", "٣"] {
        assert_eq!(ask(&p, 503, Some(junk), None, None), (500.0, "status".to_string()), "Retry-After {junk:?}");
    }
    // ignored when respectRetryAfter is false
    let deaf = policy!("({ jitter: 'none', respectRetryAfter: false })");
    assert_eq!(ask(&deaf, 503, Some("2"), None, None), (500.0, "status".to_string()));
    // RateLimit-Reset, then RateLimit, when Retry-After says nothing; Retry-After wins
    assert_eq!(ask(&p, 429, None, Some("3"), None), (3000.0, "status".to_string()));
    assert_eq!(ask(&p, 429, None, None, Some(r#""default";r=0;t=4"#)), (4000.0, "status".to_string()));
    assert_eq!(ask(&p, 429, None, None, Some(r#""default";r=5;t=4"#)), (500.0, "status".to_string()));
    assert_eq!(ask(&p, 429, Some("1"), Some("3"), Some(r#""default";r=0;t=4"#)), (1000.0, "status".to_string()));
}

#[wasm_bindgen_test]
fn retry_after_http_dates_are_read_against_now() {
    let p = policy!("({ jitter: 'none' })");
    // now: a whole second, so the JS date string (second precision) is exact
    let now = (Date::now() / 1000.0).floor() * 1000.0;
    let at = |ms: f64| String::from(Date::new(&JsValue::from_f64(ms)).to_utc_string());
    let ask = |value: String, now: f64| {
        let mut c = call!(&p, now);
        c.send(&p, now);
        let d = c.decide(&p, 503, true, false, true, Some(value), None, None, now);
        (d, c.reason())
    };
    // real JS `toUTCString()` gives the IMF-fixdate form
    assert_eq!(ask(at(now + 7000.0), now), (7000.0, "status".to_string()));
    assert_eq!(ask(at(now - 60_000.0), now), (0.0, "status".to_string()), "a date in the past means now");
    assert_eq!(ask(at(now + 3_600_000.0), now), (-1.0, "retry-after".to_string()));
    // RFC 9110's three forms
    let epoch_1994 = 784_111_777_000.0; // Sun, 06 Nov 1994 08:49:37 GMT
    for form in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
        assert_eq!(ask(form.into(), epoch_1994 - 5000.0), (5000.0, "status".to_string()), "{form}");
    }
    // a wrong weekday is not a date: the backoff is used
    assert_eq!(ask("Mon, 06 Nov 1994 08:49:37 GMT".into(), epoch_1994 - 5000.0), (500.0, "status".to_string()));
}

#[wasm_bindgen_test]
fn time_limits_and_the_deadline() {
    let none = Policy::new();
    let mut c = call!(&none, 0.0);
    assert_eq!(c.send(&none, 0.0), -1.0, "no timeoutMs, no deadlineMs: no limit");

    let p = policy!("({ timeoutMs: 1000 })");
    let mut c = call!(&p, 5.0);
    assert_eq!(c.send(&p, 5.0), 1000.0);
    assert_eq!(c.send(&p, 1e12), 1000.0);

    // timeoutMs, shortened to what is left of deadlineMs (counted from the call's start)
    let p = policy!("({ timeoutMs: 1000, deadlineMs: 1500, jitter: 'none' })");
    let start = 1_000_000.0;
    let mut c = call!(&p, start);
    assert_eq!(c.send(&p, start), 1000.0);
    assert_eq!(c.send(&p, start + 1000.0), 500.0);
    assert_eq!(c.send(&p, start + 9000.0), 0.0);

    // a wait that would end at or after the deadline is not started
    let p = policy!("({ deadlineMs: 1200, jitter: 'none', maxAttempts: 10 })");
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert_eq!(decide!(c, &p, 503, 0.0), 500.0); // ends at 500
    c.send(&p, 600.0);
    assert_eq!(decide!(c, &p, 503, 600.0), -1.0); // 1000 more would end at 1600
    assert_eq!(c.reason(), "deadline");
    // a Retry-After that would end past the deadline stops too
    let mut c = call!(&p, 0.0);
    c.send(&p, 0.0);
    assert_eq!(c.decide(&p, 503, true, false, true, Some("2".into()), None, None, 0.0), -1.0);
    assert_eq!(c.reason(), "deadline");
}

// ---------------------------------------------------------------------------------------------
// Idempotency keys, isIdempotent, backoffDelays

#[wasm_bindgen_test]
fn auto_keys_are_fresh_uuid_v4s_for_non_idempotent_methods_only() {
    let p = Policy::new();
    let mut keys = HashSet::new();
    for _ in 0..100 {
        let key = p.key(false, false).expect("crypto.getRandomValues failed").expect("no key for a POST");
        assert!(is_uuid_v4(&key), "not a UUID v4: {key}");
        keys.insert(key);
    }
    assert_eq!(keys.len(), 100, "keys repeat");
    assert_eq!(p.key(true, false).unwrap(), None, "a GET gets no key");
    assert_eq!(p.key(false, true).unwrap(), None, "the caller's own key is kept");
    let key = p.key(false, false).unwrap().unwrap();
    assert_eq!(p.wire(&key), key, "plain is the default format");

    let off = policy!("({ idempotencyKey: false })");
    assert_eq!(off.key(false, false).unwrap(), None);
    // 'auto' turns it back on over a base that had it off
    assert!(policy!(off, "({ idempotencyKey: 'auto' })").key(false, false).unwrap().is_some());
}

#[wasm_bindgen_test]
fn a_fixed_key_wins_and_sf_string_quotes_it() {
    let p = policy!("({ idempotencyKey: 'order-42' })");
    for (idempotent, existing) in [(false, false), (true, false), (false, true), (true, true)] {
        assert_eq!(p.key(idempotent, existing).unwrap().as_deref(), Some("order-42"));
    }
    assert_eq!(p.wire("order-42"), "order-42");
    let sf = policy!(p, "({ idempotencyKeyFormat: 'sf-string' })");
    assert_eq!(sf.key(true, true).unwrap().as_deref(), Some("order-42"));
    assert_eq!(sf.wire("order-42"), r#""order-42""#);
    assert_eq!(sf.wire(r#"a"b\c"#), r#""a\"b\\c""#);
    let quirky = policy!(r#"({ idempotencyKey: 'a"b\\c', idempotencyKeyFormat: 'sf-string' })"#);
    let key = quirky.key(false, false).unwrap().unwrap();
    assert_eq!(key, r#"a"b\c"#);
    assert_eq!(quirky.wire(&key), r#""a\"b\\c""#);
}

#[wasm_bindgen_test]
fn idempotent_methods_per_rfc_9110() {
    for m in ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "get", "Delete"] {
        assert!(is_idempotent(m), "{m}");
    }
    for m in ["POST", "PATCH", "CONNECT", "PURGE", "", "GET ", "GETS"] {
        assert!(!is_idempotent(m), "{m:?}");
    }
}

#[wasm_bindgen_test]
fn backoff_delays_are_reproducible_with_a_seed_and_check_their_arguments() {
    let n = |v: f64| JsValue::from_f64(v);
    let none = backoff_delays(js("({ jitter: 'none' })"), n(6.0), JsValue::UNDEFINED).unwrap();
    assert_eq!(numbers(&none), [500.0, 1000.0, 2000.0, 4000.0, 8000.0, 16000.0]);
    let capped = backoff_delays(js("({ jitter: 'none', baseDelayMs: 1000, factor: 10, maxDelayMs: 5000 })"), n(3.0), JsValue::NULL).unwrap();
    assert_eq!(numbers(&capped), [1000.0, 5000.0, 5000.0]);

    let a = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(42.0)).unwrap());
    let b = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(42.0)).unwrap());
    let c = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(43.0)).unwrap());
    assert_eq!(a, b, "the same seed gives the same delays");
    assert_ne!(a, c, "another seed gives other delays");
    for (i, d) in a.iter().enumerate() {
        let cap = (500.0 * 2f64.powi(i as i32)).min(30_000.0);
        assert!((0.0..=cap).contains(d), "delay {i} = {d} outside 0..={cap}");
    }
    assert_eq!(backoff_delays(JsValue::UNDEFINED, n(0.0), n(1.0)).unwrap().length(), 0);
    assert_eq!(backoff_delays(JsValue::UNDEFINED, n(10_000.0), JsValue::UNDEFINED).unwrap().length(), 10_000);

    let count = |v: JsValue, got: &str| {
        let e = backoff_delays(JsValue::UNDEFINED, v, JsValue::UNDEFINED).err().expect("accepted");
        assert_type_error(&e, &format!(r#"retryFetch: invalid option "count": got {got}; expected an integer from 0 to 10000"#));
    };
    count(n(-1.0), "-1");
    count(n(1.5), "1.5");
    count(n(10_001.0), "10001");
    count(n(f64::NAN), "NaN");
    count(JsValue::from_str("3"), r#""3""#);
    count(JsValue::UNDEFINED, "undefined");
    for (seed, got) in [(n(f64::NAN), "NaN"), (n(f64::INFINITY), "Infinity"), (JsValue::from_str("x"), r#""x""#)] {
        let e = backoff_delays(JsValue::UNDEFINED, n(1.0), seed).err().expect("accepted");
        assert_type_error(&e, &format!(r#"retryFetch: invalid option "seed": got {got}; expected a finite number"#));
    }
    let e = backoff_delays(js("({ jitter: 'x' })"), n(1.0), JsValue::UNDEFINED).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "jitter": got "x"; expected 'none', 'full', 'equal', 'decorrelated' or 'additive'"#);
}

// ---------------------------------------------------------------------------------------------
// The guards: RetryBudget, CircuitBreaker, AdaptiveThrottle

#[wasm_bindgen_test]
fn guard_constructors_validate_and_guards_are_not_interchangeable() {
    let e = new_budget(js("({ maxTokens: 0 })")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "maxTokens": got 0; expected a number > 0 and <= 1000000"#);
    let e = new_budget(js("({ maxTokens: 2, tokenRatio: 3 })")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "tokenRatio": got 3; expected a number > 0 and <= maxTokens"#);
    let e = new_breaker(js("({ failureThreshold: 1.5 })")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "failureThreshold": got 1.5; expected an integer from 1 to 1000"#);
    let e = new_breaker(js("({ onStateChange: 5 })")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "onStateChange": got 5; expected a function"#);
    let e = new_throttle(js("'x'")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "AdaptiveThrottle": got "x"; expected an options object or undefined"#);
    let e = new_throttle(js("({ beta: 1 })")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "beta": got 1; expected a number between 0 and 1 (exclusive)"#);

    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    let breaker = new_breaker(JsValue::UNDEFINED).unwrap();
    let throttle = new_throttle(js("({})")).unwrap();
    assert_eq!(Policy::new().read(with_guard("budget", &budget, "")).unwrap().flags(), FLAG_GUARDS | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    assert_eq!(Policy::new().read(with_guard("breaker", &breaker, "")).unwrap().flags(), FLAG_GUARDS | FLAG_BREAKER | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    assert_eq!(Policy::new().read(with_guard("throttle", &throttle, "")).unwrap().flags(), FLAG_GUARDS | FLAG_THROTTLE | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    // a guard of another kind is not accepted
    let e = Policy::new().read(with_guard("budget", &breaker, "")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "budget": got [object Object]; expected a RetryBudget"#);
    let e = Policy::new().read(with_guard("breaker", &throttle, "")).err().expect("accepted");
    assert_type_error(&e, r#"retryFetch: invalid option "breaker": got [object Object]; expected a CircuitBreaker"#);
    // null over a base with a guard removes it
    let guarded = Policy::new().read(with_guard("budget", &budget, "")).unwrap();
    assert_eq!(policy!(guarded, "({ budget: null })").flags(), FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    // a freed guard is no guard any more
    call_method(&budget, "free", &[]).unwrap();
    let e = Policy::new().read(with_guard("budget", &budget, "")).err().expect("a freed RetryBudget was accepted");
    assert!(e.is_instance_of::<js_sys::TypeError>(), "{}", show(&e));
}

#[wasm_bindgen_test]
fn the_retry_budget_stops_retries_per_origin() {
    let budget = new_budget(js("({ maxTokens: 4, tokenRatio: 1 })")).unwrap();
    let tokens = |url: &str| call_method(&budget, "tokens", &[url.into()]).unwrap().as_f64().unwrap();
    let p = Policy::new().read(with_guard("budget", &budget, "jitter: 'none', maxAttempts: 10")).unwrap();
    let url = "https://api.example/pay?id=1";
    assert_eq!(tokens(url), 4.0, "full when never seen");

    let mut c = call!(&p, url, 0.0);
    assert_eq!(c.origin(), "https://api.example");
    c.send(&p, 0.0);
    c.settle(&p, 503, 0.0);
    assert_eq!(tokens(url), 3.0);
    assert_eq!(decide!(c, &p, 503, 0.0), 500.0, "3 tokens > 4 / 2: retry");
    c.send(&p, 500.0);
    c.settle(&p, NETWORK_ERROR, 500.0);
    assert_eq!(tokens(url), 2.0);
    assert_eq!(decide!(c, &p, NETWORK_ERROR, 500.0), -1.0);
    assert_eq!(c.reason(), "budget");

    // the budget is shared: another call to the same origin is not retried either (another
    // origin is), and a success gives tokenRatio back
    let mut c = call!(&p, "https://api.example/other", 0.0);
    c.send(&p, 0.0);
    c.settle(&p, 503, 0.0);
    assert_eq!(decide!(c, &p, 503, 0.0), -1.0);
    assert_eq!(c.reason(), "budget");
    let mut elsewhere = call!(&p, "https://other.example/", 0.0);
    assert_eq!(attempt!(elsewhere, &p, 503, 0.0), 500.0);
    assert_eq!(tokens("https://other.example/y"), 3.0);
    let mut ok = call!(&p, url, 0.0);
    ok.send(&p, 0.0);
    ok.settle(&p, 200, 0.0);
    assert_eq!(tokens(url), 2.0, "a success gives back tokenRatio (1 token left + 1)");
    // permanent answers neither take nor give tokens
    let mut c = call!(&p, url, 0.0);
    c.send(&p, 0.0);
    c.settle(&p, 404, 0.0);
    assert_eq!(tokens(url), 2.0);
}

#[wasm_bindgen_test]
fn the_circuit_breaker_opens_and_tells_on_state_change() {
    let listener = recorder();
    let options: JsValue = js("({ failureThreshold: 2, openMs: 10000 })");
    Reflect::set(&options, &"onStateChange".into(), &listener).unwrap();
    let breaker = new_breaker(options).unwrap();
    let state = |url: &str| call_method(&breaker, "state", &[url.into()]).unwrap().as_string().unwrap();
    let events = || -> Vec<(String, String, String)> {
        Array::from(&get(&listener, "events"))
            .iter()
            .map(|e| (get(&e, "origin").as_string().unwrap(), get(&e, "from").as_string().unwrap(), get(&e, "to").as_string().unwrap()))
            .collect()
    };
    let p = Policy::new().read(with_guard("breaker", &breaker, "jitter: 'none'")).unwrap();
    let url = "http://127.0.0.1:1234/x?y";
    let origin = "http://127.0.0.1:1234";
    let t0 = Date::now();

    let mut c = call!(&p, url, t0);
    assert_eq!(c.origin(), origin, "the origin as the real URL gives it");
    assert_eq!(attempt!(c, &p, 503, t0), 500.0);
    assert_eq!(state(url), "closed");
    assert!(events().is_empty());
    // the second transient failure opens it; the retry would wait into the open period
    assert_eq!(attempt!(c, &p, NETWORK_ERROR, t0 + 500.0), -1.0);
    assert_eq!(c.reason(), "circuit-open");
    assert_eq!(events(), [(origin.to_string(), "closed".to_string(), "open".to_string())]);
    assert_eq!(state(url), "open");
    assert_eq!(state("http://127.0.0.1:1234/another/path"), "open");
    assert_eq!(state("http://127.0.0.1:1235/"), "closed");

    // while open nothing is sent: admit says how long until a probe may go
    let mut c = call!(&p, "http://127.0.0.1:1234/z", t0 + 600.0);
    assert_eq!(c.admit(t0 + 600.0), 9900.0);
    let mut other = call!(&p, "http://127.0.0.1:1235/", t0 + 600.0);
    assert_eq!(other.admit(t0 + 600.0), -1.0);

    // after openMs one probe goes through; its success closes the circuit
    let later = t0 + 500.0 + 10_000.0;
    let mut probe = call!(&p, url, later);
    assert_eq!(attempt!(probe, &p, 204, later), -1.0);
    assert_eq!(probe.reason(), "not-retryable");
    assert_eq!(
        events(),
        [
            (origin.to_string(), "closed".to_string(), "open".to_string()),
            (origin.to_string(), "open".to_string(), "half-open".to_string()),
            (origin.to_string(), "half-open".to_string(), "closed".to_string()),
        ]
    );
    assert_eq!(state(url), "closed");
    // the event is a plain object with exactly these fields
    let first = Array::from(&get(&listener, "events")).get(0);
    assert_eq!(show(&first), format!(r#"{{"origin":"{origin}","from":"closed","to":"open"}}"#));
}

#[wasm_bindgen_test]
fn dropping_a_call_gives_back_its_probe_slot() {
    let breaker = new_breaker(js("({ failureThreshold: 1, openMs: 1000, halfOpenMaxCalls: 1, onStateChange() { throw new Error('listener bug') } })")).unwrap();
    let p = Policy::new().read(with_guard("breaker", &breaker, "")).unwrap();
    let url = "https://svc.example/a";
    let t0 = 5_000_000.0;
    // a throwing listener changes nothing
    let mut c = call!(&p, url, t0);
    assert_eq!(attempt!(c, &p, 500, t0), -1.0);
    assert_eq!(c.reason(), "circuit-open");
    drop(c);

    let t1 = t0 + 1000.0;
    let mut a = call!(&p, url, t1);
    assert_eq!(a.admit(t1), -1.0, "the half-open probe");
    let mut b = call!(&p, url, t1);
    assert!(b.admit(t1) >= 0.0, "a second probe while one is in flight");
    drop(a); // aborted before its outcome: the slot is free again
    let mut c = call!(&p, url, t1);
    assert_eq!(c.admit(t1), -1.0, "the slot of a dropped call was not given back");
    // the probe fails: open again for another openMs
    c.send(&p, t1);
    c.settle(&p, TIMEOUT, t1 + 10.0);
    let mut d = call!(&p, url, t1 + 20.0);
    assert_eq!(d.admit(t1 + 20.0), 990.0);
}

#[wasm_bindgen_test]
fn the_throttle_gives_turns_in_order_and_stops_at_max_wait_or_the_deadline() {
    // 1 request per second with slow start made negligible
    let throttle = new_throttle(js("({ initialRate: 1, minRate: 0.5, rampMs: 1e9, maxWaitMs: 5000 })")).unwrap();
    let rate = |url: &str| call_method(&throttle, "rate", &[url.into()]).unwrap();
    let p = Policy::new().read(with_guard("throttle", &throttle, "")).unwrap();
    let url = "https://slow.example/q";
    assert!(rate(url).is_undefined(), "an origin never seen has no rate");
    let t0 = Date::now();

    let mut a = call!(&p, url, t0);
    assert_eq!(a.turn(t0), -1.0, "the first request goes at once");
    a.send(&p, t0);

    let mut b = call!(&p, url, t0);
    let wait_b = b.turn(t0);
    assert!((900.0..=1100.0).contains(&wait_b), "the second waits about a second, not {wait_b}");
    let mut c = call!(&p, url, t0);
    let wait_c = c.turn(t0);
    assert!(wait_c > wait_b + 500.0, "the third waits behind the second: {wait_c} vs {wait_b}");
    drop(b); // gives its turn back
    assert!((900.0..=1100.0).contains(&c.turn(t0)), "the abandoned turn still blocks the queue");
    assert_eq!(c.turn(t0 + 1100.0), -1.0, "its turn came");

    // a turn beyond maxWaitMs, or past the deadline, stops the call
    let short = Policy::new().read(with_guard("throttle", &throttle, "deadlineMs: 100")).unwrap();
    let mut d = call!(&short, url, t0 + 1100.0);
    assert_eq!(d.turn(t0 + 1100.0), -2.0);
    assert_eq!(d.reason(), "deadline");
    // read last: `rate` refills the origin's tokens at the real clock, not the tests' times
    let r = rate(url).as_f64().expect("no rate after a send");
    assert!((0.99..1.01).contains(&r), "rate {r}");
    let impatient = new_throttle(js("({ initialRate: 1, rampMs: 1e9, maxWaitMs: 500 })")).unwrap();
    let p2 = Policy::new().read(with_guard("throttle", &impatient, "")).unwrap();
    let mut e = call!(&p2, url, t0);
    assert_eq!(e.turn(t0), -1.0);
    let mut f = call!(&p2, url, t0);
    assert_eq!(f.turn(t0), -2.0);
    assert_eq!(f.reason(), "throttled");
}

#[wasm_bindgen_test]
fn origins_come_from_the_real_url_parser() {
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    let p = Policy::new().read(with_guard("budget", &budget, "")).unwrap();
    for (url, origin) in [
        ("http://127.0.0.1:1234/x?y", "http://127.0.0.1:1234"),
        ("HTTPS://API.Example.COM:443/a#b", "https://api.example.com"),
        ("http://example.com:80", "http://example.com"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("https://bücher.example/", "https://xn--bcher-kva.example"),
    ] {
        assert_eq!(call!(&p, url, 0.0).origin(), origin, "{url}");
    }
    // without guards the driver passes no URL: no origin
    assert_eq!(call!(&Policy::new(), 0.0).origin(), "");
}

// ---------------------------------------------------------------------------------------------
// Robustness

#[wasm_bindgen_test]
fn weird_input_never_panics() {
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    let breaker = new_breaker(JsValue::UNDEFINED).unwrap();
    let throttle = new_throttle(JsValue::UNDEFINED).unwrap();
    let options = with_guard("budget", &budget, "maxDelayMs: 1e308, baseDelayMs: 1e308, factor: 100, maxAttempts: 100, deadlineMs: 2147483647, timeoutMs: 1e-300");
    Reflect::set(&options, &"breaker".into(), &breaker).unwrap();
    Reflect::set(&options, &"throttle".into(), &throttle).unwrap();
    let p = Policy::new().read(options).unwrap();
    assert_eq!(p.flags(), FLAG_GUARDS | FLAG_THROTTLE | FLAG_BREAKER | FLAG_TIME_LIMIT | FLAG_AUTO_KEY | FLAG_RETRY_AFTER);
    let long = "9".repeat(10_000);
    let urls = ["", "not a url", "http://", "javascript:alert(1)", "data:text/plain,x", &format!("https://a.example/{long}")];
    let headers: [Option<String>; 7] = [
        None,
        Some(String::new()),
        Some(long.clone()),
        Some("x".repeat(10_000)),
        Some("Sun, 06 Nov 1994 08:49:37 GMT".repeat(300)),
        Some("\u{0}\u{ffff}😀".into()),
        Some(r#""a;b";r=0;t=99999999999999999999999, "#.repeat(500)),
    ];
    let nows = [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e308, -1e308, 8.64e15];
    for url in urls {
        for now in nows {
            let mut c = call!(&p, url, now);
            let _ = c.origin();
            let admit = c.admit(now);
            assert!(admit == -1.0 || admit >= 0.0, "admit {admit}");
            let turn = c.turn(now);
            assert!(turn == -1.0 || turn == -2.0 || turn >= 0.0, "turn {turn}");
            let limit = c.send(&p, now);
            assert!(limit == -1.0 || limit >= 0.0, "send {limit}");
            for code in [0, 1, 99, 503, 999, NETWORK_ERROR, TIMEOUT, 1002, u32::MAX] {
                c.settle(&p, code, now);
                for h in &headers {
                    let d = c.decide(&p, code, false, true, true, h.clone(), h.clone(), h.clone(), now);
                    assert!(d == -1.0 || (0.0..=2_147_483_647.0).contains(&d), "decide {d} for {code} at {now}");
                }
            }
        }
    }
    // the guards' own readers take any URL
    for url in urls {
        assert!(call_method(&budget, "tokens", &[url.into()]).unwrap().as_f64().is_some());
        assert!(call_method(&breaker, "state", &[url.into()]).unwrap().as_string().is_some());
        call_method(&throttle, "rate", &[url.into()]).unwrap();
    }
    // and so do the pure functions
    assert!(!is_idempotent(&long));
    let wire = policy!("({ idempotencyKeyFormat: 'sf-string' })").wire(&"\"\\".repeat(5_000));
    assert_eq!(wire.len(), 20_002);
}
