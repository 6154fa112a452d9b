//! wasm-bindgen tests of the Rust-driven client exports (`retry_fetch::wasm`): `retryFetch`,
//! `createRetryFetch`, `backoffDelays`, `isRetryError`, `isCircuitOpenError` and the guard
//! classes `RetryBudget`, `AdaptiveThrottle`, `CircuitBreaker`, against real JavaScript: option
//! objects (getters, `null`, `undefined`, inherited names), `TypeError`s, `AbortController`,
//! `Request`, `URL`, `crypto.getRandomValues`, JS hooks and transports made with `Closure`,
//! and real HTTP calls to the fault-injecting test server (`tests/support/fault-server.mjs`).
//!
//! The same binary runs in Node (the default) and in headless Chromium
//! (`WASM_BINDGEN_USE_BROWSER=1`), so nothing here uses `window`. `scripts/test.sh wasm` starts
//! the fault server and passes its URL in `RF_TEST_SERVER`, read here at compile time; a test
//! that needs the server fails with a clear message when it is not set.
//!
//! Everything is called by its Rust name: `retry_fetch(input, init, options)` is
//! `retryFetch(input, init, options)` and returns the same promise; `create_retry_fetch` returns
//! the JS function; the guards are made with their Rust constructors
//! (`RetryBudgetHandle::new(options)` is `new RetryBudget(options)`) and turned into the JS
//! objects users hold with `JsValue::from` (wasm-bindgen wraps the Rust value in its exported
//! class, so `free()`, `tokens()`, `state()` and `rate()` are the real methods), which go into
//! the options. Promises are awaited with `JsFuture`.
//!
//! Each scenario on the server has a unique id (`/seq/<id>?steps=...`), so the Node and the
//! Chromium runs, which share one server, never see each other's requests; `GET /log/<id>`
//! says what the server received. The whole browser run must stay well inside the runner's
//! 20 s limit: waits are kept to a few hundred ms.
#![cfg(target_arch = "wasm32")]

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;

use js_sys::{Array, Date, Function, Object, Promise, Reflect, RegExp, JSON};
use retry_fetch::wasm::{
    backoff_delays, create_retry_fetch, is_circuit_open_error, is_retry_error, retry_fetch,
    AdaptiveThrottleHandle, CircuitBreakerHandle, RetryBudgetHandle,
};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

#[wasm_bindgen]
extern "C" {
    /// The global `fetch`, for the server's `/log` and as the custom transports' delegate.
    #[wasm_bindgen(js_name = fetch)]
    fn plain_fetch(input: &JsValue, init: &JsValue) -> Promise;

    /// `globalThis.setTimeout` (a name of its own: the shell binds the global `setTimeout` with
    /// the same signature, and two identical imports would clash at link time).
    #[wasm_bindgen(js_namespace = globalThis, js_name = setTimeout)]
    fn set_timeout(callback: &Function, ms: f64) -> JsValue;
}

// ---------------------------------------------------------------------------------------------
// Helpers: JavaScript values

/// Evaluate a JavaScript expression: `js("({ maxAttempts: 0 })")`.
fn js(src: &str) -> JsValue {
    Function::new_no_args(&format!("return ({src});"))
        .call0(&JsValue::UNDEFINED)
        .unwrap_or_else(|e| panic!("evaluating {src} threw {}", show(&e)))
}

/// Call a JavaScript function made from `params` and `body` with `args`:
/// `js_fn("url", "return new Request(url)", &[url])`.
fn js_fn(params: &str, body: &str, args: &[JsValue]) -> JsValue {
    Function::new_with_args(params, body)
        .apply(&JsValue::UNDEFINED, &args.iter().collect::<Array>())
        .unwrap_or_else(|e| panic!("({params}) => {{ {body} }} threw {}", show(&e)))
}

/// An options object from JS source without braces: `opts("maxAttempts: 2")`.
fn opts(fields: &str) -> JsValue {
    js(&format!("({{ {fields} }})"))
}

/// `target[key] = value`, returning `target` (to add Rust-made values to options).
fn with(target: JsValue, key: &str, value: &JsValue) -> JsValue {
    Reflect::set(&target, &JsValue::from_str(key), value).unwrap();
    target
}

fn get(target: &JsValue, key: &str) -> JsValue {
    if !target.is_object() && !target.is_function() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn get_str(target: &JsValue, key: &str) -> Option<String> {
    get(target, key).as_string()
}

fn get_f64(target: &JsValue, key: &str) -> Option<f64> {
    get(target, key).as_f64()
}

/// `target[name](...args)`.
fn call_method(target: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(target, name)
        .dyn_into()
        .unwrap_or_else(|_| panic!("{name} is not a method"));
    f.apply(target, &args.iter().collect::<Array>())
}

/// For assertion messages: `name: message` for errors, else `JSON.stringify(v)` or `String(v)`.
fn show(v: &JsValue) -> String {
    if v.is_instance_of::<js_sys::Error>() {
        return format!(
            "{}: {}",
            get_str(v, "name").unwrap_or_default(),
            get_str(v, "message").unwrap_or_default()
        );
    }
    match JSON::stringify(v) {
        Ok(s) if !s.is_undefined() => String::from(s),
        _ => format!("{v:?}"),
    }
}

fn message(e: &JsValue) -> String {
    get_str(e, "message").unwrap_or_else(|| show(e))
}

/// A real JS `TypeError` (by `instanceof` and by `name`) with exactly this message.
#[track_caller]
fn assert_type_error(err: &JsValue, expected: &str) {
    assert!(
        err.is_instance_of::<js_sys::TypeError>(),
        "not a TypeError: {}; expected {expected}",
        show(err)
    );
    assert_eq!(get_str(err, "name").as_deref(), Some("TypeError"));
    assert_eq!(message(err), expected);
}

/// A `TypeError` whatever its message (the platform's own, e.g. from `new Request`).
#[track_caller]
fn assert_any_type_error(err: &JsValue, what: &str) {
    assert!(
        err.is_instance_of::<js_sys::TypeError>(),
        "{what}: not a TypeError: {}",
        show(err)
    );
    assert!(!is_retry_error(err.clone()), "{what}: a RetryError");
}

fn is_uuid_v4(s: &str) -> bool {
    RegExp::new(
        "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
        "",
    )
    .test(s)
}

fn numbers(a: &Array) -> Vec<f64> {
    a.iter()
        .map(|v| v.as_f64().expect("not a number"))
        .collect()
}

fn n(v: f64) -> JsValue {
    JsValue::from_f64(v)
}

/// Running in a browser (no `process`)?
fn in_browser() -> bool {
    js("typeof process === 'undefined' || !process.versions || !process.versions.node").as_bool()
        == Some(true)
}

/// A JS function that records every argument it gets (and returns `ret` for it).
struct Recorder {
    calls: Rc<RefCell<Vec<JsValue>>>,
    function: Closure<dyn FnMut(JsValue) -> JsValue>,
}

impl Recorder {
    fn new(mut ret: impl FnMut(&JsValue) -> JsValue + 'static) -> Recorder {
        let calls = Rc::new(RefCell::new(Vec::new()));
        let seen = calls.clone();
        let function = Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |arg: JsValue| {
            let out = ret(&arg);
            seen.borrow_mut().push(arg);
            out
        });
        Recorder { calls, function }
    }

    fn js(&self) -> JsValue {
        self.function.as_ref().clone()
    }

    fn calls(&self) -> Vec<JsValue> {
        self.calls.borrow().clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers: promises, time and the server

async fn sleep(ms: f64) {
    let p = Promise::new(&mut |resolve, _| {
        set_timeout(&resolve, ms);
    });
    JsFuture::from(p).await.unwrap();
}

/// A promise that resolves to `value` after `ms`.
fn later(ms: f64, value: JsValue) -> Promise {
    Promise::new(&mut |resolve, _| {
        let f: Function = resolve.bind1(&JsValue::UNDEFINED, &value).unchecked_into();
        set_timeout(&f, ms);
    })
}

/// Await `p`, which must resolve.
async fn resolved(p: Promise, what: &str) -> JsValue {
    match JsFuture::from(p).await {
        Ok(v) => v,
        Err(e) => panic!("{what}: rejected with {}", show(&e)),
    }
}

/// Await `p`, which must reject; its reason.
async fn rejected(p: Promise, what: &str) -> JsValue {
    match JsFuture::from(p).await {
        Ok(v) => panic!("{what}: resolved with {}", show(&v)),
        Err(e) => e,
    }
}

fn status(response: &JsValue) -> u16 {
    assert!(
        response.is_instance_of::<web_sys::Response>(),
        "not a Response: {}",
        show(response)
    );
    get_f64(response, "status").expect("no status") as u16
}

async fn body_text(response: &JsValue) -> String {
    let r: &web_sys::Response = response.unchecked_ref();
    JsFuture::from(r.text().unwrap())
        .await
        .unwrap()
        .as_string()
        .unwrap()
}

/// The fault server's URL (its origin), from `RF_TEST_SERVER` at compile time.
fn server() -> &'static str {
    option_env!("RF_TEST_SERVER").expect(
        "RF_TEST_SERVER was not set when this test was compiled: run `scripts/test.sh wasm`, which starts \
         tests/support/fault-server.mjs and passes its URL",
    )
}

thread_local! {
    /// A prefix unique to this run (Node and Chromium share one server).
    static RUN: String = format!("wasm-{}-{}", Date::now() as u64, (js_sys::Math::random() * 1e9) as u64);
    static NEXT: Cell<u32> = const { Cell::new(0) };
}

fn encode(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}

/// One scripted scenario on the fault server: `url` answers its n-th request with the n-th
/// step (the last repeats); `log()` is what the server received.
struct Seq {
    id: String,
    url: String,
}

/// A new scenario with `steps` (`"503,200"`, `"hang"`, `"reset"`, `"503+ra=1,200"` ...).
fn seq(steps: &str) -> Seq {
    let id = format!(
        "{}-{}",
        RUN.with(|r| r.clone()),
        NEXT.with(|c| {
            c.set(c.get() + 1);
            c.get()
        })
    );
    let url = format!("{}/seq/{}?steps={}", server(), encode(&id), encode(steps));
    Seq { id, url }
}

impl Seq {
    /// Every request the server saw for this scenario: `{ hit, method, headers, body,
    /// bodyBase64, at }` (header names in lower case).
    async fn log(&self) -> Vec<JsValue> {
        let url = JsValue::from_str(&format!("{}/log/{}", server(), encode(&self.id)));
        let res = resolved(plain_fetch(&url, &JsValue::UNDEFINED), "GET /log").await;
        let res: web_sys::Response = res.dyn_into().unwrap();
        let json = JsFuture::from(res.json().unwrap()).await.unwrap();
        Array::from(&json).iter().collect()
    }

    async fn hits(&self) -> usize {
        self.log().await.len()
    }

    /// Wait until the server has seen `n` requests (at most about 4 s).
    async fn wait_for_hits(&self, n: usize) {
        for _ in 0..400 {
            if self.hits().await >= n {
                return;
            }
            sleep(10.0).await;
        }
        panic!("the server never saw {n} requests for {}", self.id);
    }

    fn url_js(&self) -> JsValue {
        JsValue::from_str(&self.url)
    }
}

fn header(record: &JsValue, name: &str) -> Option<String> {
    get_str(&get(record, "headers"), name)
}

/// `retryFetch(url, init, options)`.
fn rf(url: &str, init: JsValue, options: JsValue) -> Promise {
    retry_fetch(JsValue::from_str(url), init, options)
}

/// `client(url, init, options)` for a function made by `createRetryFetch`.
fn call_client(client: &JsValue, url: &str, init: JsValue, options: JsValue) -> Promise {
    let f: &Function = client.unchecked_ref();
    f.call3(
        &JsValue::UNDEFINED,
        &JsValue::from_str(url),
        &init,
        &options,
    )
    .expect("a retryFetch client threw instead of rejecting")
    .dyn_into()
    .expect("a retryFetch client did not return a promise")
}

/// `new RetryBudget(options)`, as the JS object users hold.
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

/// The records of `RetryError.attempts`.
fn attempts_of(err: &JsValue) -> Vec<JsValue> {
    let a = get(err, "attempts");
    assert!(
        Array::is_array(&a),
        "attempts is not an array: {}",
        show(err)
    );
    Array::from(&a).iter().collect()
}

/// A `RetryError` with this `reason`, `attempts.length`, and a `cause` named `cause_name`.
#[track_caller]
fn assert_retry_error(err: &JsValue, reason: &str, attempts: usize, cause_name: Option<&str>) {
    assert!(
        err.is_instance_of::<js_sys::Error>(),
        "not an Error: {}",
        show(err)
    );
    assert_eq!(
        get_str(err, "name").as_deref(),
        Some("RetryError"),
        "{}",
        show(err)
    );
    assert!(is_retry_error(err.clone()));
    assert!(!is_circuit_open_error(err.clone()));
    assert_eq!(
        get_str(err, "reason").as_deref(),
        Some(reason),
        "{}",
        show(err)
    );
    assert_eq!(
        attempts_of(err).len(),
        attempts,
        "attempts of {}",
        show(err)
    );
    match cause_name {
        Some(name) => assert_eq!(
            get_str(&get(err, "cause"), "name").as_deref(),
            Some(name),
            "cause of {}",
            show(err)
        ),
        None => assert!(
            get(err, "cause").is_undefined(),
            "cause of {}: {}",
            show(err),
            show(&get(err, "cause"))
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Options: validation

/// Invalid options: `createRetryFetch` throws and `backoffDelays` throws this `TypeError`, and
/// `retryFetch` rejects with it (tested separately, against the server).
#[track_caller]
fn assert_options_rejected(src: &str, expected: &str) {
    let e = create_retry_fetch(js(src))
        .err()
        .unwrap_or_else(|| panic!("createRetryFetch({src}) was accepted"));
    assert_type_error(&e, expected);
    let e = backoff_delays(js(src), n(1.0), JsValue::UNDEFINED)
        .err()
        .unwrap_or_else(|| panic!("backoffDelays({src}) was accepted"));
    assert_type_error(&e, expected);
}

/// `retryFetch(url, undefined, options)` rejects (never throws) with this `TypeError`.
async fn assert_call_rejected(url: &str, options: JsValue, expected: &str) {
    let e = rejected(
        rf(url, JsValue::UNDEFINED, options.clone()),
        &show(&options),
    )
    .await;
    assert_type_error(&e, expected);
}

const STATUSES: &str = "an array of integer HTTP statuses from 100 to 599";
const KEY: &str = "'auto' (lower-case), false, or a key of 1 to 255 visible ASCII characters";
const HEADER: &str = "an HTTP header name (letters, digits and !#$%&'*+-.^_`|~) that is not a forbidden request header (content-length, host, cookie, sec-*, proxy-*, ...)";

fn invalid_option_cases() -> Vec<(String, String)> {
    let inv = |option: &str, got: &str, expected: &str| {
        format!(r#"retryFetch: invalid option "{option}": got {got}; expected {expected}"#)
    };
    let item = |i: u32, got: &str| {
        format!(
            r#"retryFetch: invalid option "retryOnStatus": item [{i}] is {got}; expected {STATUSES}"#
        )
    };
    let int = "an integer from 1 to 100";
    let ms = "a finite number of milliseconds >= 0";
    let pos = "a number of milliseconds > 0 and <= 2147483647";
    let jitter = "'none', 'full', 'equal', 'decorrelated' or 'additive'";
    let bool_ = "true or false";
    let long_key = "k".repeat(256);
    vec![
        // numbers: wrong values and wrong types
        ("({ maxAttempts: 0 })".into(), inv("maxAttempts", "0", int)),
        (
            "({ maxAttempts: 2.5 })".into(),
            inv("maxAttempts", "2.5", int),
        ),
        (
            "({ maxAttempts: 101 })".into(),
            inv("maxAttempts", "101", int),
        ),
        (
            "({ maxAttempts: '3' })".into(),
            inv("maxAttempts", r#""3""#, int),
        ),
        (
            "({ maxAttempts: null })".into(),
            inv("maxAttempts", "null", int),
        ),
        (
            "({ maxAttempts: {} })".into(),
            inv("maxAttempts", "[object Object]", int),
        ),
        (
            "({ baseDelayMs: NaN })".into(),
            inv("baseDelayMs", "NaN", ms),
        ),
        ("({ baseDelayMs: -1 })".into(), inv("baseDelayMs", "-1", ms)),
        (
            "({ maxDelayMs: -Infinity })".into(),
            inv("maxDelayMs", "-Infinity", ms),
        ),
        (
            "({ maxRetryAfterMs: Infinity })".into(),
            inv("maxRetryAfterMs", "Infinity", ms),
        ),
        (
            "({ factor: 0.5 })".into(),
            inv("factor", "0.5", "a finite number from 1 to 100"),
        ),
        (
            "({ factor: 101 })".into(),
            inv("factor", "101", "a finite number from 1 to 100"),
        ),
        ("({ timeoutMs: 0 })".into(), inv("timeoutMs", "0", pos)),
        (
            "({ timeoutMs: 'soon' })".into(),
            inv("timeoutMs", r#""soon""#, pos),
        ),
        (
            "({ deadlineMs: 2147483648 })".into(),
            inv("deadlineMs", "2147483648", pos),
        ),
        (
            "({ maxBufferedBodyBytes: -1 })".into(),
            inv(
                "maxBufferedBodyBytes",
                "-1",
                "an integer number of bytes from 0 to 2147483647",
            ),
        ),
        (
            "({ maxBufferedBodyBytes: 0.5 })".into(),
            inv(
                "maxBufferedBodyBytes",
                "0.5",
                "an integer number of bytes from 0 to 2147483647",
            ),
        ),
        // names
        (
            "({ jitter: 'sometimes' })".into(),
            inv("jitter", r#""sometimes""#, jitter),
        ),
        (
            "({ jitter: 'Full' })".into(),
            inv("jitter", r#""Full""#, jitter),
        ),
        ("({ jitter: 1 })".into(), inv("jitter", "1", jitter)),
        ("({ jitter: null })".into(), inv("jitter", "null", jitter)),
        (
            "({ idempotencyKeyFormat: 'quoted' })".into(),
            inv(
                "idempotencyKeyFormat",
                r#""quoted""#,
                "'plain' or 'sf-string'",
            ),
        ),
        // booleans
        (
            "({ retryOnNetworkError: 'yes' })".into(),
            inv("retryOnNetworkError", r#""yes""#, bool_),
        ),
        (
            "({ retryOnTimeout: 1 })".into(),
            inv("retryOnTimeout", "1", bool_),
        ),
        (
            "({ respectRetryAfter: 'false' })".into(),
            inv("respectRetryAfter", r#""false""#, bool_),
        ),
        (
            "({ retryHeaders: null })".into(),
            inv("retryHeaders", "null", bool_),
        ),
        // retryOnStatus: the list and its items
        (
            "({ retryOnStatus: 503 })".into(),
            inv("retryOnStatus", "503", STATUSES),
        ),
        (
            "({ retryOnStatus: '503' })".into(),
            inv("retryOnStatus", r#""503""#, STATUSES),
        ),
        (
            "({ retryOnStatus: [503, '503'] })".into(),
            item(1, r#""503""#),
        ),
        ("({ retryOnStatus: [503, 700] })".into(), item(1, "700")),
        ("({ retryOnStatus: [99.5] })".into(), item(0, "99.5")),
        (
            "({ retryOnStatus: [500, 502, null] })".into(),
            item(2, "null"),
        ),
        ("({ retryOnStatus: [[503]] })".into(), item(0, "an array")),
        // idempotency keys and headers
        (
            "({ idempotencyKey: true })".into(),
            inv("idempotencyKey", "true", KEY),
        ),
        (
            "({ idempotencyKey: '' })".into(),
            inv("idempotencyKey", r#""""#, KEY),
        ),
        (
            "({ idempotencyKey: 'has space' })".into(),
            inv("idempotencyKey", r#""has space""#, KEY),
        ),
        (
            "({ idempotencyKey: 42 })".into(),
            inv("idempotencyKey", "42", KEY),
        ),
        (
            format!("({{ idempotencyKey: '{long_key}' }})"),
            inv("idempotencyKey", &format!("\"{long_key}\""), KEY),
        ),
        (
            "({ idempotencyHeader: 'Content-Length' })".into(),
            inv("idempotencyHeader", r#""Content-Length""#, HEADER),
        ),
        (
            "({ idempotencyHeader: 'host' })".into(),
            inv("idempotencyHeader", r#""host""#, HEADER),
        ),
        (
            "({ idempotencyHeader: 'Sec-Key' })".into(),
            inv("idempotencyHeader", r#""Sec-Key""#, HEADER),
        ),
        (
            "({ idempotencyHeader: 'Bad Header' })".into(),
            inv("idempotencyHeader", r#""Bad Header""#, HEADER),
        ),
        (
            "({ idempotencyHeader: '' })".into(),
            inv("idempotencyHeader", r#""""#, HEADER),
        ),
        // the options that stay JavaScript values
        (
            "({ signal: {} })".into(),
            inv("signal", "[object Object]", "an AbortSignal"),
        ),
        (
            "({ signal: 'abort' })".into(),
            inv("signal", r#""abort""#, "an AbortSignal"),
        ),
        (
            "({ shouldRetry: 'yes' })".into(),
            inv("shouldRetry", r#""yes""#, "a function"),
        ),
        (
            "({ onRetry: {} })".into(),
            inv("onRetry", "[object Object]", "a function"),
        ),
        (
            "({ fetch: [] })".into(),
            inv("fetch", "an array", "a function"),
        ),
        (
            "({ budget: {} })".into(),
            inv(
                "budget",
                "[object Object]",
                "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
            ),
        ),
        (
            "({ throttle: 7 })".into(),
            inv("throttle", "7", "an AdaptiveThrottle"),
        ),
        (
            "({ breaker: true })".into(),
            inv("breaker", "true", "a CircuitBreaker"),
        ),
    ]
}

#[wasm_bindgen_test]
fn invalid_options_are_type_errors_naming_the_option_the_value_and_what_is_allowed() {
    for (src, expected) in invalid_option_cases() {
        assert_options_rejected(&src, &expected);
    }
}

#[wasm_bindgen_test]
async fn retry_fetch_rejects_invalid_options_before_anything_is_sent() {
    let s = seq("200");
    for (src, expected) in invalid_option_cases() {
        assert_call_rejected(&s.url, js(&src), &expected).await;
    }
    // the same with an init and a POST (the options are read before the request)
    let e = rejected(
        rf(
            &s.url,
            opts("method: 'POST', body: 'x'"),
            opts("maxAttempts: 0"),
        ),
        "POST",
    )
    .await;
    assert_type_error(
        &e,
        r#"retryFetch: invalid option "maxAttempts": got 0; expected an integer from 1 to 100"#,
    );
    assert_eq!(s.hits().await, 0, "something was sent");
}

#[wasm_bindgen_test]
fn retry_on_status_errors_name_the_item_and_its_index() {
    // every item is checked, the first bad one is named, with its value as it was given
    for (src, index, got) in [
        ("[408, 429, '503']", 2, r#""503""#),
        ("['503', 503]", 0, r#""503""#),
        ("[503, 600]", 1, "600"),
        ("[100, 599, 99]", 2, "99"),
        ("[503, NaN]", 1, "NaN"),
        ("[503, true]", 1, "true"),
        ("[503, {}]", 1, "[object Object]"),
    ] {
        assert_options_rejected(
            &format!("({{ retryOnStatus: {src} }})"),
            &format!(
                r#"retryFetch: invalid option "retryOnStatus": item [{index}] is {got}; expected {STATUSES}"#
            ),
        );
    }
    // the limits and an empty list are fine
    create_retry_fetch(opts("retryOnStatus: [100, 599]")).unwrap();
    create_retry_fetch(opts("retryOnStatus: []")).unwrap();
}

// "item [i] is" belongs to the one list option, retryOnStatus. `serde_error` (options.rs)
// applies it to any option whose value is an array with a non-number in it, so
// `{ maxAttempts: ['3'] }` says `item [0] is "3"` of an option that has no items. Kept ignored
// until the shell is fixed: see the report.
#[wasm_bindgen_test]
fn an_array_given_to_a_non_list_option_is_not_described_by_its_items() {
    for (src, option, expected) in [
        (
            "({ maxAttempts: ['3'] })",
            "maxAttempts",
            "an integer from 1 to 100",
        ),
        (
            "({ jitter: ['full'] })",
            "jitter",
            "'none', 'full', 'equal', 'decorrelated' or 'additive'",
        ),
        (
            "({ retryHeaders: [true] })",
            "retryHeaders",
            "true or false",
        ),
    ] {
        assert_options_rejected(
            src,
            &format!(r#"retryFetch: invalid option "{option}": got an array; expected {expected}"#),
        );
    }
}

#[wasm_bindgen_test]
fn unknown_options_are_type_errors_naming_the_closest_known_name() {
    for (name, close) in [
        ("maxAttemps", "maxAttempts"),
        ("timeout", "timeoutMs"),
        ("retryOnStatuses", "retryOnStatus"),
        ("MAXATTEMPTS", "maxAttempts"),
        ("basedelay", "baseDelayMs"),
        ("idempotencyHeaders", "idempotencyHeader"),
        ("onretry", "onRetry"),
        ("breakers", "breaker"),
    ] {
        assert_options_rejected(
            &format!("({{ {name}: 3 }})"),
            &format!(r#"retryFetch: unknown option "{name}" (did you mean "{close}"?)"#),
        );
    }
    // nothing close: every name is listed
    let all = "maxAttempts, baseDelayMs, factor, maxDelayMs, jitter, retryOnStatus, retryOnNetworkError, \
               retryOnTimeout, timeoutMs, deadlineMs, respectRetryAfter, maxRetryAfterMs, idempotencyKey, \
               idempotencyHeader, idempotencyKeyFormat, retryHeaders, maxBufferedBodyBytes, followAccepted, signal, shouldRetry, \
               onRetry, beforeRetry, onSettled, headers, fetch, budget, throttle, breaker";
    assert_options_rejected(
        "({ completelyUnrelatedThing: 1 })",
        &format!(r#"retryFetch: unknown option "completelyUnrelatedThing"; the options are {all}"#),
    );
    // an unknown name set to undefined is no option (as with a spread); inherited names and
    // symbols are not read at all
    create_retry_fetch(opts("maxAttemps: undefined, maxAttempts: 2")).unwrap();
    create_retry_fetch(js("Object.create({ maxAttemps: 3 })")).unwrap();
    create_retry_fetch(js("({ [Symbol('maxAttemps')]: 3 })")).unwrap();
    // a non-enumerable own property is not read either
    create_retry_fetch(js(
        "Object.defineProperty({}, 'maxAttemps', { value: 3, enumerable: false })",
    ))
    .unwrap();
}

#[wasm_bindgen_test]
async fn unknown_options_reject_retry_fetch_and_a_client_call_before_anything_is_sent() {
    let s = seq("200");
    assert_call_rejected(
        &s.url,
        opts("maxAttemps: 3"),
        r#"retryFetch: unknown option "maxAttemps" (did you mean "maxAttempts"?)"#,
    )
    .await;
    let client = create_retry_fetch(opts("baseDelayMs: 1")).unwrap();
    let e = rejected(
        call_client(
            &client,
            &s.url,
            JsValue::UNDEFINED,
            opts("retryOnStatuses: [503]"),
        ),
        "per call",
    )
    .await;
    assert_type_error(
        &e,
        r#"retryFetch: unknown option "retryOnStatuses" (did you mean "retryOnStatus"?)"#,
    );
    let e = create_retry_fetch(opts("timeout: 5"))
        .err()
        .expect("createRetryFetch({ timeout: 5 }) was accepted");
    assert_type_error(
        &e,
        r#"retryFetch: unknown option "timeout" (did you mean "timeoutMs"?)"#,
    );
    assert_eq!(s.hits().await, 0, "something was sent");
}

#[wasm_bindgen_test]
async fn options_that_are_not_an_object_are_type_errors() {
    for (src, got) in [
        ("[]", "an array"),
        ("[1, 2]", "an array"),
        ("42", "42"),
        ("'fast'", r#""fast""#),
        ("true", "true"),
        ("() => 3", "a function"),
    ] {
        let expected =
            format!("retryFetch: invalid options: got {got}; expected an object or undefined");
        assert_options_rejected(src, &expected);
        assert_call_rejected("http://127.0.0.1:9/never", js(src), &expected).await;
    }
    // undefined and null are no options; so is an empty object
    for options in [JsValue::UNDEFINED, JsValue::NULL, Object::new().into()] {
        assert!(create_retry_fetch(options.clone()).unwrap().is_function());
        assert_eq!(backoff_delays(options, n(2.0), n(1.0)).unwrap().length(), 2);
    }
}

#[wasm_bindgen_test]
async fn getters_run_once_and_a_throwing_getter_rejects_with_its_own_error() {
    let pair = js("(() => { const c = { n: 0 }; return [c, { get maxAttempts() { c.n += 1; return 2; } }]; })()");
    let counter = Reflect::get_u32(&pair, 0).unwrap();
    let options = Reflect::get_u32(&pair, 1).unwrap();
    create_retry_fetch(options.clone()).unwrap();
    assert_eq!(
        get_f64(&counter, "n"),
        Some(1.0),
        "the getter ran more or less than once"
    );

    let throwing = js("({ get maxAttempts() { throw new RangeError('boom') } })");
    let e = create_retry_fetch(throwing.clone())
        .err()
        .expect("accepted");
    assert!(e.is_instance_of::<js_sys::RangeError>(), "{}", show(&e));
    assert_eq!(message(&e), "boom");
    let s = seq("200");
    let e = rejected(
        rf(&s.url, JsValue::UNDEFINED, throwing),
        "a throwing getter",
    )
    .await;
    assert!(e.is_instance_of::<js_sys::RangeError>(), "{}", show(&e));
    assert_eq!(message(&e), "boom");
    // a proxy whose ownKeys throws
    let proxy = js("new Proxy({}, { ownKeys() { throw new SyntaxError('no keys') } })");
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, proxy), "a throwing proxy").await;
    assert!(e.is_instance_of::<js_sys::SyntaxError>(), "{}", show(&e));
    assert_eq!(s.hits().await, 0, "something was sent");
}

#[wasm_bindgen_test]
fn valid_options_and_their_limits_are_accepted() {
    for fields in [
        "maxAttempts: 1",
        "maxAttempts: 100, factor: 100, baseDelayMs: 0, maxDelayMs: 1e308, maxRetryAfterMs: 0",
        "timeoutMs: 2147483647, deadlineMs: 0.5",
        "jitter: 'none'",
        "jitter: 'full'",
        "jitter: 'equal'",
        "jitter: 'decorrelated'",
        "jitter: 'additive'",
        "retryOnStatus: [], retryOnNetworkError: false, retryOnTimeout: false, respectRetryAfter: false",
        "idempotencyKey: 'auto'",
        "idempotencyKey: false",
        "idempotencyKey: '~'.repeat(255)",
        "idempotencyKey: 'order-42', idempotencyKeyFormat: 'sf-string', idempotencyHeader: 'X-Request-Key'",
        "idempotencyKeyFormat: 'plain', retryHeaders: true, maxBufferedBodyBytes: 0",
        "maxBufferedBodyBytes: 2147483647",
        "signal: new AbortController().signal",
        "signal: AbortSignal.abort()",
        "shouldRetry: () => true, onRetry: async () => {}, fetch: (input, init) => fetch(input, init)",
        // null clears what can be "none"
        "timeoutMs: null, deadlineMs: null, maxRetryAfterMs: null, signal: null, shouldRetry: null, onRetry: null, fetch: null, budget: null, throttle: null, breaker: null",
    ] {
        let options = opts(fields);
        if let Err(e) = create_retry_fetch(options.clone()) {
            panic!("{{ {fields} }} was rejected: {}", show(&e));
        }
        backoff_delays(options, n(3.0), n(1.0)).unwrap_or_else(|e| panic!("backoffDelays: {{ {fields} }}: {}", show(&e)));
    }
    // the guards themselves
    let options = with(
        Object::new().into(),
        "budget",
        &new_budget(JsValue::UNDEFINED).unwrap(),
    );
    let options = with(
        options,
        "throttle",
        &new_throttle(JsValue::UNDEFINED).unwrap(),
    );
    let options = with(
        options,
        "breaker",
        &new_breaker(JsValue::UNDEFINED).unwrap(),
    );
    create_retry_fetch(options).unwrap();
}

// ---------------------------------------------------------------------------------------------
// backoffDelays

#[wasm_bindgen_test]
fn backoff_delays_follow_the_policy_and_are_reproducible_with_a_seed() {
    let none = backoff_delays(opts("jitter: 'none'"), n(6.0), JsValue::UNDEFINED).unwrap();
    assert_eq!(
        numbers(&none),
        [500.0, 1000.0, 2000.0, 4000.0, 8000.0, 16000.0]
    );
    let capped = backoff_delays(
        opts("jitter: 'none', baseDelayMs: 1000, factor: 10, maxDelayMs: 5000"),
        n(3.0),
        JsValue::NULL,
    )
    .unwrap();
    assert_eq!(numbers(&capped), [1000.0, 5000.0, 5000.0]);
    let huge = numbers(
        &backoff_delays(
            opts("jitter: 'none', baseDelayMs: 1e308, maxDelayMs: 1e308, factor: 100"),
            n(100.0),
            n(1.0),
        )
        .unwrap(),
    );
    assert!(
        huge.iter().all(|d| *d == 2_147_483_647.0),
        "delays are clamped to setTimeout's maximum: {:?}",
        &huge[..3]
    );

    let a = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(42.0)).unwrap());
    let b = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(42.0)).unwrap());
    let c = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(43.0)).unwrap());
    assert_eq!(a, b, "the same seed gives the same delays");
    assert_ne!(a, c, "another seed gives other delays");
    for (i, d) in a.iter().enumerate() {
        let cap = (500.0 * 2f64.powi(i as i32)).min(30_000.0);
        assert!(
            (0.0..=cap).contains(d) && d.fract() == 0.0,
            "full jitter: delay {i} = {d} outside 0..={cap}"
        );
    }
    // without a seed: Math.random, different from call to call
    let mut seen = HashSet::new();
    for _ in 0..50 {
        seen.insert(
            backoff_delays(JsValue::UNDEFINED, n(1.0), JsValue::UNDEFINED)
                .unwrap()
                .get(0)
                .as_f64()
                .unwrap() as u64,
        );
    }
    assert!(
        seen.len() > 10,
        "full jitter gave only {} distinct first delays in 50 calls",
        seen.len()
    );

    // every jitter mode stays within its bounds
    for (mode, lo, hi) in [
        ("equal", 250.0, 500.0),
        ("additive", 500.0, 1000.0),
        ("decorrelated", 500.0, 1500.0),
    ] {
        let first =
            numbers(&backoff_delays(opts(&format!("jitter: '{mode}'")), n(1.0), n(7.0)).unwrap())
                [0];
        assert!(
            (lo..=hi).contains(&first),
            "{mode}: first delay {first} outside {lo}..={hi}"
        );
    }
    assert_eq!(
        backoff_delays(JsValue::UNDEFINED, n(0.0), n(1.0))
            .unwrap()
            .length(),
        0
    );
    assert_eq!(
        backoff_delays(JsValue::UNDEFINED, n(10_000.0), JsValue::UNDEFINED)
            .unwrap()
            .length(),
        10_000
    );
}

#[wasm_bindgen_test]
fn backoff_delays_check_count_and_seed() {
    let count = |v: JsValue, got: &str| {
        let e = backoff_delays(JsValue::UNDEFINED, v, JsValue::UNDEFINED)
            .err()
            .expect("accepted");
        assert_type_error(
            &e,
            &format!(
                r#"retryFetch: invalid option "count": got {got}; expected an integer from 0 to 10000"#
            ),
        );
    };
    count(n(-1.0), "-1");
    count(n(1.5), "1.5");
    count(n(10_001.0), "10001");
    count(n(f64::NAN), "NaN");
    count(JsValue::from_str("3"), r#""3""#);
    count(JsValue::UNDEFINED, "undefined");
    count(JsValue::NULL, "null");
    for (seed, got) in [
        (n(f64::NAN), "NaN"),
        (n(f64::INFINITY), "Infinity"),
        (JsValue::from_str("x"), r#""x""#),
        (JsValue::TRUE, "true"),
    ] {
        let e = backoff_delays(JsValue::UNDEFINED, n(1.0), seed)
            .err()
            .expect("accepted");
        assert_type_error(
            &e,
            &format!(r#"retryFetch: invalid option "seed": got {got}; expected a finite number"#),
        );
    }
    let e = backoff_delays(opts("jitter: 'x'"), n(1.0), JsValue::UNDEFINED)
        .err()
        .expect("accepted");
    assert_type_error(
        &e,
        r#"retryFetch: invalid option "jitter": got "x"; expected 'none', 'full', 'equal', 'decorrelated' or 'additive'"#,
    );
    let e = backoff_delays(opts("maxAtempts: 2"), n(1.0), JsValue::UNDEFINED)
        .err()
        .expect("accepted");
    assert_type_error(
        &e,
        r#"retryFetch: unknown option "maxAtempts" (did you mean "maxAttempts"?)"#,
    );
}

// ---------------------------------------------------------------------------------------------
// The guard classes: settings, bad settings, unknown settings, method arguments

#[wasm_bindgen_test]
fn guard_constructors_reject_bad_settings_with_type_errors_naming_them() {
    let cases: Vec<(Result<JsValue, JsValue>, &str)> = vec![
        (
            new_budget(opts("maxTokens: 0")),
            r#"RetryBudget: invalid option "maxTokens": got 0; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: 1e7")),
            r#"RetryBudget: invalid option "maxTokens": got 10000000; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: NaN")),
            r#"RetryBudget: invalid option "maxTokens": got NaN; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: '5'")),
            r#"RetryBudget: invalid option "maxTokens": got "5"; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: 2, tokenRatio: 3")),
            r#"RetryBudget: invalid option "tokenRatio": got 3; expected a number > 0 and <= maxTokens"#,
        ),
        (
            new_budget(opts("tokenRatio: 0")),
            r#"RetryBudget: invalid option "tokenRatio": got 0; expected a number > 0 and <= maxTokens"#,
        ),
        (
            new_budget(js("[]")),
            "RetryBudget: invalid options: got an array; expected an object or undefined",
        ),
        (
            new_breaker(opts("failureThreshold: 1.5")),
            r#"CircuitBreaker: invalid option "failureThreshold": got 1.5; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("failureThreshold: 0")),
            r#"CircuitBreaker: invalid option "failureThreshold": got 0; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("failureThreshold: null")),
            r#"CircuitBreaker: invalid option "failureThreshold": got null; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("openMs: -1")),
            r#"CircuitBreaker: invalid option "openMs": got -1; expected a number of milliseconds from 0 to 2147483647"#,
        ),
        (
            new_breaker(opts("halfOpenMaxCalls: 1001")),
            r#"CircuitBreaker: invalid option "halfOpenMaxCalls": got 1001; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("onStateChange: 5")),
            r#"CircuitBreaker: invalid option "onStateChange": got 5; expected a function"#,
        ),
        (
            new_breaker(opts("onStateChange: 'log'")),
            r#"CircuitBreaker: invalid option "onStateChange": got "log"; expected a function"#,
        ),
        (
            new_breaker(js("42")),
            "CircuitBreaker: invalid options: got 42; expected an object or undefined",
        ),
        (
            new_throttle(js("'x'")),
            r#"AdaptiveThrottle: invalid options: got "x"; expected an object or undefined"#,
        ),
        (
            new_throttle(opts("beta: 1")),
            r#"AdaptiveThrottle: invalid option "beta": got 1; expected a number between 0 and 1 (exclusive)"#,
        ),
        (
            new_throttle(opts("initialRate: 0")),
            r#"AdaptiveThrottle: invalid option "initialRate": got 0; expected a number of requests per second > 0"#,
        ),
        (
            new_throttle(opts("initialRate: 1, minRate: 2")),
            r#"AdaptiveThrottle: invalid option "minRate": got 2; expected a number of requests per second > 0 and <= initialRate"#,
        ),
        (
            new_throttle(opts("rampMs: 0")),
            r#"AdaptiveThrottle: invalid option "rampMs": got 0; expected a number of milliseconds > 0"#,
        ),
        (
            new_throttle(opts("scale: -1")),
            r#"AdaptiveThrottle: invalid option "scale": got -1; expected a number > 0"#,
        ),
        (
            new_throttle(opts("maxWaitMs: 'x'")),
            r#"AdaptiveThrottle: invalid option "maxWaitMs": got "x"; expected a number of milliseconds from 0 to 2147483647"#,
        ),
        (
            new_throttle(opts("maxWaitMs: -5")),
            r#"AdaptiveThrottle: invalid option "maxWaitMs": got -5; expected a number of milliseconds from 0 to 2147483647"#,
        ),
    ];
    for (result, expected) in cases {
        match result {
            Ok(_) => panic!("accepted; expected {expected}"),
            Err(e) => assert_type_error(&e, expected),
        }
    }
}

#[wasm_bindgen_test]
fn guard_constructors_name_an_unknown_setting_and_the_closest_one() {
    for (result, expected) in [
        (
            new_budget(opts("maxToken: 5")),
            r#"RetryBudget: unknown option "maxToken" (did you mean "maxTokens"?)"#,
        ),
        (
            new_budget(opts("ratio: 5")),
            r#"RetryBudget: unknown option "ratio"; the options are maxTokens, tokenRatio, refillPerSecond"#,
        ),
        (
            new_breaker(opts("failureTreshold: 2")),
            r#"CircuitBreaker: unknown option "failureTreshold" (did you mean "failureThreshold"?)"#,
        ),
        (
            new_breaker(opts("onstatechange() {}")),
            r#"CircuitBreaker: unknown option "onstatechange" (did you mean "onStateChange"?)"#,
        ),
        (
            new_throttle(opts("initalRate: 5")),
            r#"AdaptiveThrottle: unknown option "initalRate" (did you mean "initialRate"?)"#,
        ),
        (
            new_throttle(opts("maxWait: 5")),
            r#"AdaptiveThrottle: unknown option "maxWait" (did you mean "maxWaitMs"?)"#,
        ),
        // a setting of another guard
        (
            new_budget(opts("failureThreshold: 2")),
            r#"RetryBudget: unknown option "failureThreshold"; the options are maxTokens, tokenRatio, refillPerSecond"#,
        ),
    ] {
        match result {
            Ok(_) => panic!("accepted; expected {expected}"),
            Err(e) => assert_type_error(&e, expected),
        }
    }
    // undefined is no setting, as with retryFetch's options
    new_budget(opts("maxToken: undefined")).unwrap();
}

// The CircuitBreaker refuses `null` for a number setting (see the test above); the budget and
// the throttle take it silently as "the default". Kept ignored until the shell agrees with
// itself: see the report.
#[wasm_bindgen_test]
fn a_null_guard_setting_is_a_type_error_like_the_circuit_breakers() {
    let e = new_budget(opts("maxTokens: null"))
        .err()
        .expect("new RetryBudget({ maxTokens: null }) was accepted");
    assert_type_error(
        &e,
        r#"RetryBudget: invalid option "maxTokens": got null; expected a number > 0 and <= 1000000"#,
    );
    let e = new_throttle(opts("beta: null"))
        .err()
        .expect("new AdaptiveThrottle({ beta: null }) was accepted");
    assert_type_error(
        &e,
        r#"AdaptiveThrottle: invalid option "beta": got null; expected a number between 0 and 1 (exclusive)"#,
    );
}

#[wasm_bindgen_test]
fn guard_settings_and_defaults_are_read() {
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    assert_eq!(get_f64(&budget, "maxTokens"), Some(10.0));
    assert_eq!(get_f64(&budget, "tokenRatio"), Some(0.1));
    let budget = new_budget(opts("maxTokens: 4, tokenRatio: 0.5")).unwrap();
    assert_eq!(get_f64(&budget, "maxTokens"), Some(4.0));
    assert_eq!(get_f64(&budget, "tokenRatio"), Some(0.5));
    assert_eq!(
        call_method(&budget, "tokens", &["https://a.example/".into()])
            .unwrap()
            .as_f64(),
        Some(4.0),
        "full when never seen"
    );
    let budget = new_budget(opts("maxTokens: 1000000, tokenRatio: 1000000")).unwrap();
    assert_eq!(get_f64(&budget, "maxTokens"), Some(1_000_000.0));

    // the class is the exported one
    assert_eq!(
        get_str(&get(&budget, "constructor"), "name").as_deref(),
        Some("RetryBudget")
    );
    let breaker = new_breaker(opts(
        "failureThreshold: 1000, openMs: 0, halfOpenMaxCalls: 1000, onStateChange: null",
    ))
    .unwrap();
    assert_eq!(
        get_str(&get(&breaker, "constructor"), "name").as_deref(),
        Some("CircuitBreaker")
    );
    assert_eq!(
        call_method(&breaker, "state", &["https://a.example/".into()])
            .unwrap()
            .as_string()
            .as_deref(),
        Some("closed")
    );
    let throttle = new_throttle(opts(
        "initialRate: 5, rampMs: 1, beta: 0.5, scale: 1, minRate: 5, maxWaitMs: 0",
    ))
    .unwrap();
    assert_eq!(
        get_str(&get(&throttle, "constructor"), "name").as_deref(),
        Some("AdaptiveThrottle")
    );
    assert!(
        call_method(&throttle, "rate", &["https://a.example/".into()])
            .unwrap()
            .is_undefined(),
        "an origin never seen has no rate"
    );
    new_throttle(Object::new().into()).unwrap();
    new_throttle(JsValue::NULL).unwrap();
}

#[wasm_bindgen_test]
fn guard_methods_check_their_url_argument() {
    let budget = RetryBudgetHandle::new(JsValue::UNDEFINED).unwrap();
    let breaker = CircuitBreakerHandle::new(JsValue::UNDEFINED).unwrap();
    let throttle = AdaptiveThrottleHandle::new(JsValue::UNDEFINED).unwrap();
    // the Rust methods
    assert_eq!(budget.tokens("https://a.example/x".into()).unwrap(), 10.0);
    assert_eq!(
        breaker.state("https://a.example/x".into()).unwrap(),
        "closed"
    );
    assert_eq!(throttle.rate("https://a.example/x".into()).unwrap(), None);
    let url = js("new URL('https://a.example/x?y')");
    assert_eq!(budget.tokens(url.clone()).unwrap(), 10.0, "a URL object");
    assert_eq!(breaker.state(url.clone()).unwrap(), "closed");
    let bad = |label: &str, got: &str, e: JsValue| {
        assert_type_error(
            &e,
            &format!("{label}: the argument url must be a string or a URL; got {got}"),
        );
    };
    bad(
        "RetryBudget.tokens",
        "42",
        budget.tokens(n(42.0)).unwrap_err(),
    );
    bad(
        "RetryBudget.tokens",
        "null",
        budget.tokens(JsValue::NULL).unwrap_err(),
    );
    bad(
        "CircuitBreaker.state",
        "undefined",
        breaker.state(JsValue::UNDEFINED).unwrap_err(),
    );
    bad(
        "CircuitBreaker.state",
        "[object Object]",
        breaker.state(Object::new().into()).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "[object Object]",
        throttle.rate(Object::new().into()).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "an array",
        throttle.rate(js("['https://a.example/']")).unwrap_err(),
    );

    // and the same through the JS methods of the exported classes
    let (budget, breaker, throttle) = (
        JsValue::from(budget),
        JsValue::from(breaker),
        JsValue::from(throttle),
    );
    bad(
        "RetryBudget.tokens",
        "42",
        call_method(&budget, "tokens", &[n(42.0)]).unwrap_err(),
    );
    bad(
        "CircuitBreaker.state",
        "undefined",
        call_method(&breaker, "state", &[]).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "[object Object]",
        call_method(&throttle, "rate", &[Object::new().into()]).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "a function",
        call_method(&throttle, "rate", &[js("() => 1")]).unwrap_err(),
    );
    assert_eq!(
        call_method(&budget, "tokens", &[url]).unwrap().as_f64(),
        Some(10.0)
    );
}

#[wasm_bindgen_test]
async fn guards_are_not_interchangeable_and_freed_or_foreign_guards_are_refused() {
    let s = seq("200");
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    let breaker = new_breaker(JsValue::UNDEFINED).unwrap();
    let throttle = new_throttle(JsValue::UNDEFINED).unwrap();
    let inv = |option: &str, got: &str, expected: &str| {
        format!(r#"retryFetch: invalid option "{option}": got {got}; expected {expected}"#)
    };
    for (option, guard, expected) in [
        (
            "budget",
            &breaker,
            "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
        ),
        (
            "budget",
            &throttle,
            "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
        ),
        ("breaker", &throttle, "a CircuitBreaker"),
        ("breaker", &budget, "a CircuitBreaker"),
        ("throttle", &budget, "an AdaptiveThrottle"),
    ] {
        let options = with(Object::new().into(), option, guard);
        let msg = inv(option, "[object Object]", expected);
        assert_type_error(
            &create_retry_fetch(options.clone()).err().expect("accepted"),
            &msg,
        );
        assert_call_rejected(&s.url, options, &msg).await;
    }

    // a guard of another copy of the package (here: an object that looks like one but is not in
    // this module's registry)
    let foreign = js("(() => { class RetryBudget { get __retryFetchGuard() { return 0.5; } } return new RetryBudget(); })()");
    let msg = inv(
        "budget",
        "a RetryBudget from another copy of retry-fetch (each copy, e.g. the ES module and the CommonJS build, keeps its own guards)",
        "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
    );
    assert_call_rejected(&s.url, with(Object::new().into(), "budget", &foreign), &msg).await;

    // a freed guard is a clear TypeError naming its class, not "null pointer passed to rust"
    for (option, guard, class, expected) in [
        (
            "budget",
            &budget,
            "RetryBudget",
            "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
        ),
        ("breaker", &breaker, "CircuitBreaker", "a CircuitBreaker"),
        (
            "throttle",
            &throttle,
            "AdaptiveThrottle",
            "an AdaptiveThrottle",
        ),
    ] {
        call_method(guard, "free", &[]).unwrap();
        let article = if class.starts_with('A') { "an" } else { "a" };
        let msg = inv(
            option,
            &format!("{article} {class} that was freed (free() was called on it)"),
            expected,
        );
        let options = with(Object::new().into(), option, guard);
        assert_type_error(
            &create_retry_fetch(options.clone())
                .err()
                .expect("a freed guard was accepted"),
            &msg,
        );
        assert_call_rejected(&s.url, options, &msg).await;
    }
    assert_eq!(s.hits().await, 0, "something was sent");
}

// ---------------------------------------------------------------------------------------------
// isRetryError, isCircuitOpenError

#[wasm_bindgen_test]
fn is_retry_error_and_is_circuit_open_error_go_by_name() {
    let named = |name: &str| {
        js_fn(
            "n",
            "const e = new Error('x'); e.name = n; return e;",
            &[name.into()],
        )
    };
    assert!(is_retry_error(named("RetryError")));
    assert!(!is_retry_error(named("CircuitOpenError")));
    assert!(is_circuit_open_error(named("CircuitOpenError")));
    assert!(!is_circuit_open_error(named("RetryError")));
    // by name, across realms and copies: a plain object with the name counts
    assert!(is_retry_error(opts("name: 'RetryError'")));
    assert!(is_circuit_open_error(opts("name: 'CircuitOpenError'")));
    for v in [
        js("new Error('RetryError')"),
        js("new TypeError('x')"),
        js("'RetryError'"),
        JsValue::NULL,
        JsValue::UNDEFINED,
        n(0.0),
        opts("name: 'retryerror'"),
        js("Object.create(null)"),
        js("({ get name() { throw new Error('getter') } })"),
    ] {
        assert!(!is_retry_error(v.clone()), "{}", show(&v));
        assert!(!is_circuit_open_error(v.clone()), "{}", show(&v));
    }
}

// ---------------------------------------------------------------------------------------------
// Real calls: retries

#[wasm_bindgen_test]
async fn a_503_then_200_resolves_with_the_200_after_two_attempts() {
    let s = seq("503,200");
    let res = resolved(
        rf(&s.url, JsValue::UNDEFINED, opts("baseDelayMs: 1")),
        "503,200",
    )
    .await;
    assert_eq!(status(&res), 200);
    let body = body_text(&res).await;
    assert!(body.contains(r#""hit":2"#), "not the second answer: {body}");
    let log = s.log().await;
    assert_eq!(log.len(), 2);
    for r in &log {
        assert_eq!(get_str(r, "method").as_deref(), Some("GET"));
        assert_eq!(header(r, "idempotency-key"), None, "a GET got a key");
        assert_eq!(
            header(r, "x-retry-count"),
            None,
            "retryHeaders is off by default"
        );
    }
}

#[wasm_bindgen_test]
async fn the_default_options_retry_too() {
    // no options: the lean path, whose first attempt hands over to the Rust loop
    let s = seq("503,200");
    let res = resolved(
        rf(&s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
        "no options",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert_eq!(s.hits().await, 2);
    // a success goes straight back: one attempt
    let s = seq("200");
    let res = resolved(
        retry_fetch(s.url_js(), JsValue::UNDEFINED, JsValue::NULL),
        "200",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert!(body_text(&res).await.contains(r#""hit":1"#));
    assert_eq!(s.hits().await, 1);
    // a URL object and a Request work as input
    let s = seq("503,204");
    let url = js_fn("u", "return new URL(u)", &[s.url_js()]);
    let res = resolved(
        retry_fetch(url, JsValue::UNDEFINED, opts("baseDelayMs: 1")),
        "URL input",
    )
    .await;
    assert_eq!(status(&res), 204);
    assert_eq!(s.hits().await, 2);
}

#[wasm_bindgen_test]
async fn final_statuses_are_returned_at_once_and_attempts_run_out() {
    // (a 301 without a Location is not a redirect: fetch returns it)
    for st in ["404", "400", "409", "501", "301"] {
        let s = seq(&format!("{st},200"));
        let res = resolved(rf(&s.url, JsValue::UNDEFINED, opts("baseDelayMs: 1")), st).await;
        assert_eq!(status(&res).to_string(), st);
        assert_eq!(s.hits().await, 1, "{st} was retried");
    }
    // a retryable status after the last attempt is returned, not thrown
    let s = seq("503");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, maxAttempts: 4"),
        ),
        "503 x 4",
    )
    .await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 4);
    // the caller's list is the whole list
    let s = seq("503,200");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, retryOnStatus: [404]"),
        ),
        "[404]",
    )
    .await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 1);
    let s = seq("404,200");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, retryOnStatus: [404]"),
        ),
        "[404]",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert_eq!(s.hits().await, 2);
}

#[wasm_bindgen_test]
async fn a_post_carries_the_same_idempotency_key_on_every_attempt() {
    let s = seq("503,500,200");
    let init = opts("method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{\"amount\":4200}'");
    let res = resolved(rf(&s.url, init, opts("baseDelayMs: 1")), "POST").await;
    assert_eq!(status(&res), 200);
    let log = s.log().await;
    assert_eq!(log.len(), 3);
    let key = header(&log[0], "idempotency-key").expect("the POST had no Idempotency-Key");
    assert!(is_uuid_v4(&key), "not a UUID v4: {key}");
    for r in &log {
        assert_eq!(get_str(r, "method").as_deref(), Some("POST"));
        assert_eq!(
            header(r, "idempotency-key").as_deref(),
            Some(key.as_str()),
            "the key changed"
        );
        assert_eq!(get_str(r, "body").as_deref(), Some(r#"{"amount":4200}"#));
        assert_eq!(
            header(r, "content-type").as_deref(),
            Some("application/json")
        );
    }
    // every call gets its own key
    let mut keys = HashSet::from([key]);
    for _ in 0..3 {
        let s = seq("200");
        resolved(
            rf(
                &s.url,
                opts("method: 'PATCH', body: 'x'"),
                JsValue::UNDEFINED,
            ),
            "PATCH",
        )
        .await;
        keys.insert(header(&s.log().await[0], "idempotency-key").expect("no key on a PATCH"));
    }
    assert_eq!(keys.len(), 4, "keys repeat");
    // a PUT is idempotent: no key
    let s = seq("200");
    resolved(
        rf(&s.url, opts("method: 'PUT', body: 'x'"), JsValue::UNDEFINED),
        "PUT",
    )
    .await;
    assert_eq!(header(&s.log().await[0], "idempotency-key"), None);
}

#[wasm_bindgen_test]
async fn the_callers_key_a_fixed_key_and_the_header_options() {
    // the caller's own header is kept, on every attempt
    let s = seq("503,200");
    let init = opts("method: 'POST', body: 'x', headers: { 'Idempotency-Key': 'mine-1' }");
    assert_eq!(
        status(&resolved(rf(&s.url, init, opts("baseDelayMs: 1")), "own key").await),
        200
    );
    let keys: Vec<_> = s
        .log()
        .await
        .iter()
        .map(|r| header(r, "idempotency-key"))
        .collect();
    assert_eq!(
        keys,
        [Some("mine-1".to_string()), Some("mine-1".to_string())]
    );

    // a fixed key, in Structured Field string form, under another header name; on a POST, and
    // on a GET that has an init (a GET without one: see the ignored test below)
    for init in [opts("method: 'POST', body: 'x'"), opts("method: 'GET'")] {
        let s = seq("503,200");
        let options = opts("baseDelayMs: 1, idempotencyKey: 'order-42', idempotencyKeyFormat: 'sf-string', idempotencyHeader: 'X-Request-Key'");
        assert_eq!(
            status(&resolved(rf(&s.url, init, options), "fixed key").await),
            200
        );
        let log = s.log().await;
        assert_eq!(log.len(), 2);
        for r in log {
            assert_eq!(
                header(&r, "x-request-key").as_deref(),
                Some(r#""order-42""#),
                "{}",
                get_str(&r, "method").unwrap()
            );
            assert_eq!(header(&r, "idempotency-key"), None);
        }
    }
    // the auto key under another header name
    let s = seq("503,200");
    let options = opts("baseDelayMs: 1, idempotencyHeader: 'X-Request-Key'");
    assert_eq!(
        status(
            &resolved(
                rf(&s.url, opts("method: 'POST', body: 'x'"), options),
                "auto key"
            )
            .await
        ),
        200
    );
    let log = s.log().await;
    let key = header(&log[0], "x-request-key").expect("no X-Request-Key");
    assert!(is_uuid_v4(&key));
    assert_eq!(header(&log[1], "x-request-key"), Some(key));
    assert_eq!(header(&log[0], "idempotency-key"), None);

    // no key at all: a POST is retried only after 408 / 429
    let s = seq("429,200");
    let init = opts("method: 'POST', body: 'x'");
    let res = resolved(
        rf(
            &s.url,
            init.clone(),
            opts("baseDelayMs: 1, idempotencyKey: false"),
        ),
        "POST 429",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert!(s
        .log()
        .await
        .iter()
        .all(|r| header(r, "idempotency-key").is_none()));
    let s = seq("503,200");
    let res = resolved(
        rf(
            &s.url,
            init.clone(),
            opts("baseDelayMs: 1, idempotencyKey: false"),
        ),
        "POST 503",
    )
    .await;
    assert_eq!(status(&res), 503, "an unkeyed POST was retried after a 503");
    assert_eq!(s.hits().await, 1);
    let s = seq("reset,200");
    let e = rejected(
        rf(&s.url, init, opts("baseDelayMs: 1, idempotencyKey: false")),
        "POST reset",
    )
    .await;
    assert_retry_error(&e, "unsafe", 1, Some("TypeError"));
    assert_eq!(s.hits().await, 1);
}

// README: a string `idempotencyKey` is sent "on every attempt, whatever the method". A GET
// given as a bare URL with no `init` takes the lean path (`plain_get` in `Client::start` skips
// `lean_request`, which is what refuses the lean path for `KeyMode::Fixed`), so its first
// attempt goes without the key; only the retries (after `Template::new`) carry it. Kept
// ignored until the shell is fixed: see the report.
#[wasm_bindgen_test]
async fn a_fixed_key_is_sent_on_every_attempt_of_a_get_without_init() {
    for client_defaults in [false, true] {
        let s = seq("503,200");
        let options = opts("baseDelayMs: 1, idempotencyKey: 'order-42'");
        let call = if client_defaults {
            let client = create_retry_fetch(options).unwrap();
            call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED)
        } else {
            rf(&s.url, JsValue::UNDEFINED, options)
        };
        assert_eq!(status(&resolved(call, "fixed key, GET").await), 200);
        let keys: Vec<_> = s
            .log()
            .await
            .iter()
            .map(|r| header(r, "idempotency-key"))
            .collect();
        assert_eq!(
            keys,
            [Some("order-42".to_string()), Some("order-42".to_string())],
            "createRetryFetch: {client_defaults}"
        );
    }
}

#[wasm_bindgen_test]
async fn the_request_is_fixed_when_retry_fetch_is_called() {
    let s = seq("503,200");
    let init = opts("method: 'POST', body: 'alice:10'");
    let call = rf(&s.url, init.clone(), opts("baseDelayMs: 30"));
    // changing init afterwards changes nothing
    Reflect::set(&init, &"body".into(), &"bob:20".into()).unwrap();
    Reflect::set(&init, &"method".into(), &"PUT".into()).unwrap();
    assert_eq!(status(&resolved(call, "fixed").await), 200);
    let log = s.log().await;
    assert_eq!(log.len(), 2);
    let key = header(&log[0], "idempotency-key");
    assert!(key.is_some());
    for r in &log {
        assert_eq!(get_str(r, "method").as_deref(), Some("POST"));
        assert_eq!(get_str(r, "body").as_deref(), Some("alice:10"));
        assert_eq!(header(r, "idempotency-key"), key);
    }
}

#[wasm_bindgen_test]
async fn bodies_are_replayed_byte_for_byte() {
    // a typed array, a DataView over part of a buffer, a Request input's own body
    let bytes = js("new Uint8Array([0, 1, 2, 253, 254, 255])");
    let view = js("new DataView(new Uint8Array([0, 1, 2, 253, 254, 255]).buffer, 1, 3)");
    for (body, base64) in [(bytes, "AAEC/f7/"), (view, "AQL9")] {
        let s = seq("503,200");
        let init = with(opts("method: 'POST'"), "body", &body);
        assert_eq!(
            status(&resolved(rf(&s.url, init, opts("baseDelayMs: 1")), base64).await),
            200
        );
        let log = s.log().await;
        assert_eq!(log.len(), 2);
        for r in &log {
            assert_eq!(get_str(r, "bodyBase64").as_deref(), Some(base64));
        }
        assert_eq!(
            header(&log[0], "idempotency-key"),
            header(&log[1], "idempotency-key")
        );
    }
    let s = seq("503,200");
    let request = js_fn(
        "u",
        "return new Request(u, { method: 'POST', body: 'from a Request' })",
        &[s.url_js()],
    );
    let res = resolved(
        retry_fetch(request, JsValue::UNDEFINED, opts("baseDelayMs: 1")),
        "Request",
    )
    .await;
    assert_eq!(status(&res), 200);
    for r in s.log().await {
        assert_eq!(get_str(&r, "body").as_deref(), Some("from a Request"));
        assert!(header(&r, "idempotency-key").is_some());
    }
}

#[wasm_bindgen_test]
async fn a_request_fetch_cannot_send_is_a_type_error_before_anything_is_sent() {
    let s = seq("200");
    for (label, init) in [
        ("a GET with a body", opts("body: 'x'")),
        ("a HEAD with a body", opts("method: 'HEAD', body: 'x'")),
        ("an invalid method", opts("method: 'BAD METHOD'")),
        ("a signal that is not an AbortSignal", opts("signal: {}")),
        (
            "an invalid header name",
            opts("headers: { 'bad header': 'x' }"),
        ),
    ] {
        let e = rejected(rf(&s.url, init.clone(), JsValue::UNDEFINED), label).await;
        assert_any_type_error(&e, label);
        let e = rejected(rf(&s.url, init, opts("baseDelayMs: 1")), label).await;
        assert_any_type_error(&e, label);
    }
    if !in_browser() {
        // Node has no base URL
        let e = rejected(
            rf("/relative", JsValue::UNDEFINED, JsValue::UNDEFINED),
            "a relative URL",
        )
        .await;
        assert_any_type_error(&e, "a relative URL");
    }
    // (a port out of range: invalid for every WHATWG URL parser)
    let e = rejected(
        rf(
            "http://127.0.0.1:99999/",
            JsValue::UNDEFINED,
            JsValue::UNDEFINED,
        ),
        "an invalid URL",
    )
    .await;
    assert_any_type_error(&e, "an invalid URL");
    assert_eq!(s.hits().await, 0, "something was sent");
}

#[wasm_bindgen_test]
async fn network_errors_are_retried_unless_switched_off() {
    let s = seq("reset,200");
    assert_eq!(
        status(
            &resolved(
                rf(&s.url, JsValue::UNDEFINED, opts("baseDelayMs: 1")),
                "reset,200"
            )
            .await
        ),
        200
    );
    assert_eq!(s.hits().await, 2);

    let s = seq("reset");
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, maxAttempts: 2"),
        ),
        "reset x 2",
    )
    .await;
    assert_retry_error(&e, "attempts", 2, Some("TypeError"));
    assert!(
        message(&e).starts_with("retryFetch failed after 2 attempts (attempts): "),
        "{}",
        message(&e)
    );
    let records = attempts_of(&e);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(get_f64(r, "attempt"), Some(i as f64 + 1.0));
        assert!(
            get_f64(r, "startedAt").is_some() && get_f64(r, "durationMs").is_some_and(|d| d >= 0.0)
        );
        assert!(get(r, "status").is_undefined());
        assert!(get(r, "error").is_instance_of::<js_sys::TypeError>());
    }
    assert!(
        get_f64(&records[0], "delayMs").is_some_and(|d| d >= 0.0),
        "the first record has no delayMs"
    );
    assert!(
        get(&records[1], "delayMs").is_undefined(),
        "the last attempt did not wait"
    );
    assert!(
        Object::is(&get(&e, "cause"), &get(&records[1], "error")),
        "cause is the last error"
    );

    let s = seq("reset,200");
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, retryOnNetworkError: false"),
        ),
        "no network retries",
    )
    .await;
    assert_retry_error(&e, "not-retryable", 1, Some("TypeError"));
    assert_eq!(s.hits().await, 1);
}

#[wasm_bindgen_test]
async fn retry_after_is_honoured_within_its_cap() {
    // a 0 s Retry-After: retried at once
    let s = seq("503+ra=0,200");
    assert_eq!(
        status(
            &resolved(
                rf(&s.url, JsValue::UNDEFINED, opts("baseDelayMs: 5000")),
                "ra=0"
            )
            .await
        ),
        200
    );
    assert_eq!(s.hits().await, 2);
    // longer than maxRetryAfterMs: stop with the response
    let s = seq("503+ra=1,200");
    let started = Date::now();
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, maxRetryAfterMs: 500"),
        ),
        "ra=1 over the cap",
    )
    .await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 1);
    assert!(
        Date::now() - started < 900.0,
        "it waited for a Retry-After past the cap"
    );
    // ignored when respectRetryAfter is false: the backoff is used
    let s = seq("429+ra=120,200");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, respectRetryAfter: false"),
        ),
        "deaf",
    )
    .await;
    assert_eq!(status(&res), 200);
    // RateLimit-Reset when there is no Retry-After
    let s = seq("429+rlr=120,200");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, maxRetryAfterMs: 1000"),
        ),
        "RateLimit-Reset",
    )
    .await;
    assert_eq!(
        status(&res),
        429,
        "a RateLimit-Reset past the cap stops the call"
    );
    assert_eq!(s.hits().await, 1);
}

// ---------------------------------------------------------------------------------------------
// Real calls: custom transport and hooks (JS functions made in Rust with Closure)

#[wasm_bindgen_test]
async fn a_custom_fetch_is_called_once_per_attempt() {
    let s = seq("503,503,200");
    let calls = Rc::new(Cell::new(0u32));
    let inputs = Rc::new(RefCell::new(Vec::<JsValue>::new()));
    let (c, seen) = (calls.clone(), inputs.clone());
    let transport = Closure::<dyn FnMut(JsValue, JsValue) -> Promise>::new(
        move |input: JsValue, init: JsValue| {
            c.set(c.get() + 1);
            seen.borrow_mut().push(input.clone());
            plain_fetch(&input, &init)
        },
    );
    let options = with(opts("baseDelayMs: 1"), "fetch", transport.as_ref());
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options), "custom fetch").await;
    assert_eq!(status(&res), 200);
    assert_eq!(calls.get(), 3);
    assert_eq!(s.hits().await, 3);
    for input in inputs.borrow().iter() {
        assert!(
            input.is_instance_of::<web_sys::Request>(),
            "the transport got {}",
            show(input)
        );
        assert_eq!(input.unchecked_ref::<web_sys::Request>().url(), s.url);
    }
    drop(transport);

    // a transport's own responses: no network at all
    let statuses = Rc::new(RefCell::new(vec![200u16, 502, 503]));
    let st = statuses.clone();
    let make = Function::new_with_args(
        "status",
        "return Promise.resolve(new Response(null, { status }))",
    );
    let transport =
        Closure::<dyn FnMut(JsValue, JsValue) -> JsValue>::new(move |_: JsValue, _: JsValue| {
            let status = st.borrow_mut().pop().unwrap_or(500);
            make.call1(&JsValue::UNDEFINED, &n(status as f64)).unwrap()
        });
    let options = with(
        opts("baseDelayMs: 1, maxAttempts: 3"),
        "fetch",
        transport.as_ref(),
    );
    let res = resolved(
        rf("https://example.invalid/pay", JsValue::UNDEFINED, options),
        "fake transport",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert!(statuses.borrow().is_empty());
}

#[wasm_bindgen_test]
async fn a_custom_fetch_that_throws_or_resolves_to_something_else() {
    // throwing synchronously: a failed attempt like a rejection (a network error)
    let calls = Rc::new(Cell::new(0u32));
    let c = calls.clone();
    let throwing = Closure::<dyn FnMut(JsValue, JsValue) -> Result<JsValue, JsValue>>::new(
        move |_: JsValue, _: JsValue| {
            c.set(c.get() + 1);
            Err(js_sys::Error::new("transport down").into())
        },
    );
    let options = with(
        opts("baseDelayMs: 1, maxAttempts: 2"),
        "fetch",
        throwing.as_ref(),
    );
    let e = rejected(
        rf("https://example.invalid/", JsValue::UNDEFINED, options),
        "throwing transport",
    )
    .await;
    assert_retry_error(&e, "attempts", 2, Some("Error"));
    assert_eq!(message(&get(&e, "cause")), "transport down");
    assert_eq!(calls.get(), 2);

    // resolving to something that is not a Response: a TypeError, not retried
    for value in [Object::new().into(), n(42.0), JsValue::UNDEFINED] {
        let calls = Rc::new(Cell::new(0u32));
        let c = calls.clone();
        let v = value.clone();
        let odd = Closure::<dyn FnMut(JsValue, JsValue) -> JsValue>::new(
            move |_: JsValue, _: JsValue| {
                c.set(c.get() + 1);
                Promise::resolve(&v).into()
            },
        );
        let options = with(opts("baseDelayMs: 1"), "fetch", odd.as_ref());
        let e = rejected(
            rf("https://example.invalid/", JsValue::UNDEFINED, options),
            &show(&value),
        )
        .await;
        assert_type_error(
            &e,
            "retryFetch: fetch resolved to something that is not a Response",
        );
        assert_eq!(calls.get(), 1, "{} was retried", show(&value));
    }
}

#[wasm_bindgen_test]
async fn on_retry_is_told_before_each_wait() {
    let s = seq("503,502,200");
    let hook = Recorder::new(|_| JsValue::UNDEFINED);
    let options = with(
        opts("baseDelayMs: 1, jitter: 'none'"),
        "onRetry",
        &hook.js(),
    );
    let res = resolved(
        rf(&s.url, opts("method: 'POST', body: 'x'"), options),
        "onRetry",
    )
    .await;
    assert_eq!(status(&res), 200);
    let key = header(&s.log().await[0], "idempotency-key").unwrap();
    let calls = hook.calls();
    assert_eq!(calls.len(), 2);
    for (i, (ctx, (st, delay))) in calls.iter().zip([(503.0, 1.0), (502.0, 2.0)]).enumerate() {
        assert_eq!(get_f64(ctx, "attempt"), Some(i as f64 + 1.0));
        assert_eq!(get_f64(ctx, "delayMs"), Some(delay));
        assert_eq!(get_str(ctx, "reason").as_deref(), Some("status"));
        assert_eq!(get_f64(ctx, "status"), Some(st));
        assert_eq!(
            get_str(ctx, "idempotencyKey").as_deref(),
            Some(key.as_str())
        );
        assert!(
            !Reflect::has(ctx, &"response".into()).unwrap(),
            "onRetry got the response"
        );
    }
    // network errors: reason 'network' and the error
    let s = seq("reset,200");
    let hook = Recorder::new(|_| JsValue::UNDEFINED);
    let options = with(opts("baseDelayMs: 1"), "onRetry", &hook.js());
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "network").await),
        200
    );
    let ctx = &hook.calls()[0];
    assert_eq!(get_str(ctx, "reason").as_deref(), Some("network"));
    assert!(get(ctx, "error").is_instance_of::<js_sys::TypeError>());
    assert!(get(ctx, "status").is_undefined() && get(ctx, "idempotencyKey").is_undefined());

    // a returned promise is awaited before the wait
    let s = seq("503,200");
    let hook = Recorder::new(|_| later(80.0, JsValue::UNDEFINED).into());
    let options = with(opts("baseDelayMs: 1"), "onRetry", &hook.js());
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "async onRetry").await),
        200
    );
    let log = s.log().await;
    let gap = get_f64(&log[1], "at").unwrap() - get_f64(&log[0], "at").unwrap();
    assert!(
        gap >= 70.0,
        "the second attempt went {gap} ms after the first: onRetry's promise was not awaited"
    );

    // a throw rejects the call with that error, and nothing more is sent
    let s = seq("503,200");
    let boom: JsValue = js_sys::Error::new("hook bug").into();
    let b = boom.clone();
    let throwing =
        Closure::<dyn FnMut(JsValue) -> Result<JsValue, JsValue>>::new(move |_: JsValue| {
            Err(b.clone())
        });
    let options = with(opts("baseDelayMs: 1"), "onRetry", throwing.as_ref());
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options), "throwing onRetry").await;
    assert!(Object::is(&e, &boom), "rejected with {}", show(&e));
    // and a rejection likewise
    let s2 = seq("503,200");
    let rejecting =
        Recorder::new(|_| Promise::reject(&js_sys::Error::new("async hook bug").into()).into());
    let options = with(opts("baseDelayMs: 1"), "onRetry", &rejecting.js());
    let e = rejected(
        rf(&s2.url, JsValue::UNDEFINED, options),
        "rejecting onRetry",
    )
    .await;
    assert_eq!(message(&e), "async hook bug");
    sleep(30.0).await;
    assert_eq!(s.hits().await, 1);
    assert_eq!(s2.hits().await, 1);
}

#[wasm_bindgen_test]
async fn should_retry_can_veto_a_retry() {
    // false: the response is returned
    let s = seq("503,200");
    let hook = Recorder::new(|_| JsValue::FALSE);
    let options = with(opts("baseDelayMs: 1"), "shouldRetry", &hook.js());
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options), "veto").await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 1);
    let ctx = &hook.calls()[0];
    assert_eq!(get_f64(ctx, "attempt"), Some(1.0));
    assert_eq!(get_f64(ctx, "status"), Some(503.0));
    assert_eq!(get_str(ctx, "reason").as_deref(), Some("status"));
    assert_eq!(status(&get(ctx, "response")), 503);
    // a promise of true: retried
    let s = seq("503,200");
    let hook = Recorder::new(|_| Promise::resolve(&JsValue::TRUE).into());
    let options = with(opts("baseDelayMs: 1"), "shouldRetry", &hook.js());
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "promise of true").await),
        200
    );
    assert_eq!(hook.calls().len(), 1);
    // false after a network error: RetryError 'shouldRetry'
    let s = seq("reset,200");
    let hook = Recorder::new(|_| JsValue::FALSE);
    let options = with(opts("baseDelayMs: 1"), "shouldRetry", &hook.js());
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options), "veto after reset").await;
    assert_retry_error(&e, "shouldRetry", 1, Some("TypeError"));
    // anything but a boolean is a TypeError
    let s = seq("503,200");
    let hook = Recorder::new(|_| JsValue::from_str("yes"));
    let options = with(opts("baseDelayMs: 1"), "shouldRetry", &hook.js());
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options), "non-boolean").await;
    assert_type_error(
        &e,
        "retryFetch: shouldRetry must return true or false (or a promise of one)",
    );
    assert_eq!(s.hits().await, 1);
    // it is not asked about what the policy would not retry
    let s = seq("404");
    let hook = Recorder::new(|_| JsValue::TRUE);
    let options = with(opts("baseDelayMs: 1"), "shouldRetry", &hook.js());
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "404").await),
        404
    );
    assert!(hook.calls().is_empty());
}

#[wasm_bindgen_test]
async fn retry_headers_tell_the_server_about_retries() {
    let s = seq("503,503,200");
    let started = Date::now();
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, retryHeaders: true"),
        ),
        "retryHeaders",
    )
    .await;
    assert_eq!(status(&res), 200);
    let log = s.log().await;
    assert_eq!(header(&log[0], "x-retry-count"), None);
    assert_eq!(header(&log[0], "x-original-request-at"), None);
    let first_at = header(&log[1], "x-original-request-at").expect("no X-Original-Request-At");
    let at = Date::parse(&first_at);
    assert!(
        (at - started).abs() < 1000.0,
        "X-Original-Request-At {first_at} is not the call's start"
    );
    assert_eq!(header(&log[1], "x-retry-count").as_deref(), Some("1"));
    assert_eq!(header(&log[2], "x-retry-count").as_deref(), Some("2"));
    assert_eq!(
        header(&log[2], "x-original-request-at").as_deref(),
        Some(first_at.as_str())
    );
}

#[wasm_bindgen_test]
async fn a_redirected_post_is_not_sent_again() {
    let target = seq("503");
    let post = seq(&format!("303+to={}", encode(&target.url)));
    let res = resolved(
        rf(
            &post.url,
            opts("method: 'POST', body: 'x'"),
            opts("baseDelayMs: 1"),
        ),
        "303",
    )
    .await;
    assert_eq!(status(&res), 503);
    assert_eq!(get(&res, "redirected").as_bool(), Some(true));
    assert_eq!(post.hits().await, 1, "the POST was sent again");
    assert_eq!(target.hits().await, 1);
    // a redirected GET is idempotent: retried
    let target = seq("503,200");
    let get_ = seq(&format!("303+to={}", encode(&target.url)));
    let res = resolved(
        rf(&get_.url, JsValue::UNDEFINED, opts("baseDelayMs: 1")),
        "GET 303",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert_eq!(get_.hits().await, 2);
}

// ---------------------------------------------------------------------------------------------
// Real calls: abort, timeouts, the deadline

#[wasm_bindgen_test]
async fn an_abort_rejects_with_the_signals_reason() {
    // options.signal, while the attempt hangs
    let s = seq("hang");
    let controller = web_sys::AbortController::new().unwrap();
    let options = with(opts("baseDelayMs: 1"), "signal", &controller.signal());
    let call = rf(&s.url, JsValue::UNDEFINED, options);
    s.wait_for_hits(1).await;
    let reason: JsValue = js_sys::Error::new("the user closed the tab").into();
    controller.abort_with_reason(&reason);
    let e = rejected(call, "abort").await;
    assert!(
        Object::is(&e, &reason),
        "rejected with {}, not the reason",
        show(&e)
    );

    // init.signal, on the lean path (no options)
    let s = seq("hang");
    let controller = web_sys::AbortController::new().unwrap();
    let init = with(Object::new().into(), "signal", &controller.signal());
    let call = rf(&s.url, init, JsValue::UNDEFINED);
    s.wait_for_hits(1).await;
    let reason = JsValue::from_str("a string reason");
    controller.abort_with_reason(&reason);
    let e = rejected(call, "init.signal").await;
    assert_eq!(e.as_string().as_deref(), Some("a string reason"));

    // no reason: an AbortError DOMException
    let s = seq("hang");
    let controller = web_sys::AbortController::new().unwrap();
    let options = with(opts("timeoutMs: 60000"), "signal", &controller.signal());
    let call = rf(&s.url, JsValue::UNDEFINED, options);
    s.wait_for_hits(1).await;
    controller.abort();
    let e = rejected(call, "abort()").await;
    assert!(
        e.is_instance_of::<web_sys::DomException>(),
        "not a DOMException: {}",
        show(&e)
    );
    assert_eq!(get_str(&e, "name").as_deref(), Some("AbortError"));

    // during a wait: at once, and nothing more is sent
    let s = seq("503,200");
    let controller = web_sys::AbortController::new().unwrap();
    let options = with(
        opts("baseDelayMs: 60000, jitter: 'none'"),
        "signal",
        &controller.signal(),
    );
    let call = rf(&s.url, JsValue::UNDEFINED, options);
    s.wait_for_hits(1).await;
    sleep(20.0).await;
    let started = Date::now();
    let reason: JsValue = js_sys::Error::new("stop waiting").into();
    controller.abort_with_reason(&reason);
    let e = rejected(call, "abort during the wait").await;
    assert!(Object::is(&e, &reason));
    assert!(Date::now() - started < 1000.0);
    assert_eq!(s.hits().await, 1);

    // already aborted: nothing is sent
    let s = seq("200");
    let options = with(
        Object::new().into(),
        "signal",
        &js("AbortSignal.abort(new RangeError('already'))"),
    );
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options), "already aborted").await;
    assert!(e.is_instance_of::<js_sys::RangeError>(), "{}", show(&e));
    let init = with(
        Object::new().into(),
        "signal",
        &js("AbortSignal.abort(new RangeError('already'))"),
    );
    let e = rejected(
        rf(&s.url, init, JsValue::UNDEFINED),
        "already aborted init.signal",
    )
    .await;
    assert!(e.is_instance_of::<js_sys::RangeError>(), "{}", show(&e));
    assert_eq!(s.hits().await, 0);
}

#[wasm_bindgen_test]
async fn timeout_ms_against_a_hang_ends_in_a_retry_error_caused_by_a_timeout_error() {
    let s = seq("hang");
    let started = Date::now();
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("timeoutMs: 100, maxAttempts: 2, baseDelayMs: 1"),
        ),
        "hang",
    )
    .await;
    let elapsed = Date::now() - started;
    assert_retry_error(&e, "attempts", 2, Some("TimeoutError"));
    assert_eq!(
        message(&get(&e, "cause")),
        "retryFetch: the attempt timed out after 100 ms"
    );
    assert!(get(&e, "cause").is_instance_of::<js_sys::Error>());
    assert_eq!(message(&e), "retryFetch failed after 2 attempts (attempts): retryFetch: the attempt timed out after 100 ms");
    for r in attempts_of(&e) {
        assert_eq!(
            get_str(&get(&r, "error"), "name").as_deref(),
            Some("TimeoutError")
        );
        assert!(get_f64(&r, "durationMs").unwrap() >= 90.0);
    }
    assert!(
        elapsed >= 190.0 && elapsed < 3000.0,
        "two 100 ms attempts took {elapsed} ms"
    );
    assert_eq!(s.hits().await, 2);

    // a timeout is ambiguous: an unkeyed POST is not retried
    let s = seq("hang");
    let options = opts("timeoutMs: 100, baseDelayMs: 1, idempotencyKey: false");
    let e = rejected(
        rf(&s.url, opts("method: 'POST', body: 'x'"), options),
        "POST hang",
    )
    .await;
    assert_retry_error(&e, "unsafe", 1, Some("TimeoutError"));
    // retryOnTimeout: false
    let s = seq("hang");
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("timeoutMs: 50, retryOnTimeout: false"),
        ),
        "no timeout retries",
    )
    .await;
    assert_retry_error(&e, "not-retryable", 1, Some("TimeoutError"));
    // a slow answer within the limit is fine
    let s = seq("200+delay=50");
    assert_eq!(
        status(
            &resolved(
                rf(&s.url, JsValue::UNDEFINED, opts("timeoutMs: 2000")),
                "slow"
            )
            .await
        ),
        200
    );
}

#[wasm_bindgen_test]
async fn the_deadline_bounds_the_whole_call() {
    // an attempt in flight is cut at the deadline
    let s = seq("hang");
    let started = Date::now();
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("deadlineMs: 150, baseDelayMs: 1"),
        ),
        "deadline",
    )
    .await;
    assert_retry_error(&e, "deadline", 1, Some("TimeoutError"));
    assert!(Date::now() - started < 2000.0);
    // a wait that would end after the deadline is not started: the last response is returned
    let s = seq("503,200");
    let started = Date::now();
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("deadlineMs: 300, baseDelayMs: 1000, jitter: 'none'"),
        ),
        "long wait",
    )
    .await;
    assert_eq!(status(&res), 503);
    assert!(Date::now() - started < 900.0, "it waited");
    assert_eq!(s.hits().await, 1);
    // the deadline holds across hooks: a hook still running at the deadline ends the call
    // there (with the last response), and nothing is sent after it
    let s = seq("503");
    let hook = Recorder::new(|_| later(350.0, JsValue::UNDEFINED).into());
    let options = with(
        opts("deadlineMs: 300, baseDelayMs: 1, maxAttempts: 5"),
        "onRetry",
        &hook.js(),
    );
    let started = Date::now();
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options), "slow hook").await;
    assert_eq!(status(&res), 503);
    let log = s.log().await;
    assert_eq!(log.len(), 1, "an attempt was sent after the deadline");
    assert!(
        Date::now() - started >= 290.0,
        "it ended before the deadline"
    );
}

// ---------------------------------------------------------------------------------------------
// createRetryFetch

#[wasm_bindgen_test]
async fn create_retry_fetch_merges_per_call_options_over_its_defaults() {
    let client = create_retry_fetch(opts("maxAttempts: 1, baseDelayMs: 1")).unwrap();
    assert!(client.is_function());
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
                "defaults"
            )
            .await
        ),
        503
    );
    assert_eq!(s.hits().await, 1);
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, opts("maxAttempts: 2")),
                "per call"
            )
            .await
        ),
        200
    );
    assert_eq!(s.hits().await, 2);
    // undefined is ignored
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(
                    &client,
                    &s.url,
                    JsValue::UNDEFINED,
                    opts("maxAttempts: undefined")
                ),
                "undefined"
            )
            .await
        ),
        503
    );
    assert_eq!(s.hits().await, 1);
    // the defaults are unchanged by a per-call option
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::NULL),
                "again"
            )
            .await
        ),
        503
    );

    // null clears a default: here the time limit
    let client = create_retry_fetch(opts("timeoutMs: 50, maxAttempts: 1")).unwrap();
    let s = seq("200+delay=150");
    let e = rejected(
        call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
        "default timeout",
    )
    .await;
    assert_retry_error(&e, "attempts", 1, Some("TimeoutError"));
    let s = seq("200+delay=150");
    let res = resolved(
        call_client(&client, &s.url, JsValue::UNDEFINED, opts("timeoutMs: null")),
        "timeoutMs: null",
    )
    .await;
    assert_eq!(status(&res), 200);

    // and a guard: { budget: null } takes the client's budget off this call
    let budget = new_budget(opts("maxTokens: 1, refillPerSecond: 0")).unwrap();
    let client = create_retry_fetch(with(opts("baseDelayMs: 1"), "budget", &budget)).unwrap();
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, opts("budget: null")),
                "budget: null"
            )
            .await
        ),
        200
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(1.0),
        "the budget saw a call made with budget: null"
    );
    assert_eq!(
        status(
            &resolved(
                call_client(
                    &client,
                    &seq("503,200").url,
                    JsValue::UNDEFINED,
                    opts("budget: false")
                ),
                "budget: false"
            )
            .await
        ),
        200
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(1.0),
        "the budget saw a call made with budget: false"
    );
    // with the client's budget: a lone call retries (its own failure does not count against
    // it), 1 - 1 + 0.1; the next call finds the count taken by another: not retried
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
                "with budget"
            )
            .await
        ),
        200
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(0.1)
    );
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
                "budget drained"
            )
            .await
        ),
        503
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(0.0)
    );
}

// ---------------------------------------------------------------------------------------------
// Real calls: the guards

#[wasm_bindgen_test]
async fn the_retry_budget_stops_retries_per_origin() {
    let budget = new_budget(opts("maxTokens: 4, tokenRatio: 1, refillPerSecond: 0")).unwrap();
    let tokens = |url: &str| {
        call_method(&budget, "tokens", &[url.into()])
            .unwrap()
            .as_f64()
            .unwrap()
    };
    let options = with(
        opts("maxAttempts: 3, baseDelayMs: 1, jitter: 'none'"),
        "budget",
        &budget,
    );
    let origin = server();
    assert_eq!(tokens(origin), 4.0);

    // a lone call gets every retry: its own failures do not count against it (4 -> 1)
    let s = seq("503");
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options.clone()), "budget").await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 3);
    assert_eq!(tokens(&s.url), 1.0);
    // the budget is per origin: every path of it, however the URL is spelled
    assert_eq!(tokens(&format!("{origin}/another/path?x=1#y")), 1.0);
    assert_eq!(tokens(&origin.replace("http://", "HTTP://")), 1.0);
    assert_eq!(
        call_method(
            &budget,
            "tokens",
            &[js_fn("u", "return new URL(u)", &[s.url_js()])]
        )
        .unwrap()
        .as_f64(),
        Some(1.0)
    );
    assert_eq!(
        tokens(&origin.replace("127.0.0.1", "localhost")),
        4.0,
        "another origin"
    );
    assert_eq!(tokens("https://example.com/"), 4.0);
    // another call finds the count taken by the first (1 -> 0; 0 + its own 1 is not above
    // 4 / 2): not retried; without a response that is RetryError 'budget'
    let s = seq("reset,200");
    let e = rejected(
        rf(&s.url, JsValue::UNDEFINED, options.clone()),
        "budget, network",
    )
    .await;
    assert_retry_error(&e, "budget", 1, Some("TypeError"));
    assert_eq!(tokens(&s.url), 0.0);
    // a success gives back tokenRatio; a permanent answer neither takes nor gives
    let s = seq("200");
    resolved(rf(&s.url, JsValue::UNDEFINED, options.clone()), "success").await;
    assert_eq!(tokens(&s.url), 1.0);
    let s = seq("404");
    resolved(rf(&s.url, JsValue::UNDEFINED, options), "404").await;
    assert_eq!(tokens(&s.url), 1.0);
}

#[wasm_bindgen_test]
async fn the_circuit_breaker_opens_refuses_and_closes_after_a_probe() {
    let listener = Recorder::new(|_| JsValue::UNDEFINED);
    let breaker = new_breaker(with(
        opts("failureThreshold: 2, openMs: 200"),
        "onStateChange",
        &listener.js(),
    ))
    .unwrap();
    let state = |url: &str| {
        call_method(&breaker, "state", &[url.into()])
            .unwrap()
            .as_string()
            .unwrap()
    };
    let events = || -> Vec<(String, String, String)> {
        listener
            .calls()
            .iter()
            .map(|e| {
                (
                    get_str(e, "origin").unwrap(),
                    get_str(e, "from").unwrap(),
                    get_str(e, "to").unwrap(),
                )
            })
            .collect()
    };
    let ev = |from: &str, to: &str| (server().to_string(), from.to_string(), to.to_string());
    let options = with(
        opts("maxAttempts: 5, baseDelayMs: 1, jitter: 'none'"),
        "breaker",
        &breaker,
    );

    // two transient failures open it; the retry that would start while it is open is not made
    let s = seq("503");
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options.clone()), "opening").await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 2);
    assert_eq!(state(&s.url), "open");
    assert_eq!(state(server()), "open");
    assert_eq!(state("http://127.0.0.1:1/"), "closed", "another origin");
    assert_eq!(events(), [ev("closed", "open")]);
    // the event is a plain object with exactly these fields
    assert_eq!(
        show(&listener.calls()[0]),
        format!(r#"{{"origin":"{}","from":"closed","to":"open"}}"#, server())
    );

    // while open: CircuitOpenError at once, nothing sent
    let s = seq("200");
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options.clone()), "open").await;
    assert!(is_circuit_open_error(e.clone()), "{}", show(&e));
    assert!(!is_retry_error(e.clone()));
    assert!(e.is_instance_of::<js_sys::Error>());
    assert_eq!(get_str(&e, "name").as_deref(), Some("CircuitOpenError"));
    assert_eq!(get_str(&e, "origin").as_deref(), Some(server()));
    let wait = get_f64(&e, "retryAfterMs").unwrap();
    assert!(wait > 0.0 && wait <= 200.0, "retryAfterMs {wait}");
    assert_eq!(
        message(&e),
        format!(
            "retryFetch: the circuit for {} is open; nothing was sent (retry after {wait} ms)",
            server()
        )
    );
    assert_eq!(s.hits().await, 0);

    // after openMs: half-open; one probe's success closes it
    sleep(wait + 30.0).await;
    assert_eq!(state(&s.url), "half-open");
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options), "probe").await;
    assert_eq!(status(&res), 200);
    assert_eq!(state(&s.url), "closed");
    assert_eq!(
        events(),
        [
            ev("closed", "open"),
            ev("open", "half-open"),
            ev("half-open", "closed")
        ]
    );
}

#[wasm_bindgen_test]
async fn an_open_circuit_ends_a_call_without_a_response_with_retry_error_circuit_open() {
    // a throwing listener changes nothing
    let breaker = new_breaker(opts(
        "failureThreshold: 1, openMs: 60000, onStateChange() { throw new Error('listener bug') }",
    ))
    .unwrap();
    let options = with(opts("maxAttempts: 3, baseDelayMs: 1"), "breaker", &breaker);
    let s = seq("reset,200");
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options.clone()), "reset").await;
    assert_retry_error(&e, "circuit-open", 1, Some("TypeError"));
    assert_eq!(s.hits().await, 1);
    assert_eq!(
        call_method(&breaker, "state", &[s.url_js()])
            .unwrap()
            .as_string()
            .as_deref(),
        Some("open")
    );
    // another breaker knows nothing of it
    let other = new_breaker(JsValue::UNDEFINED).unwrap();
    let s = seq("200");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            with(Object::new().into(), "breaker", &other),
        ),
        "another breaker",
    )
    .await;
    assert_eq!(status(&res), 200);
}

#[wasm_bindgen_test]
async fn the_adaptive_throttle_paces_calls_and_stops_at_max_wait_or_the_deadline() {
    // 1 request per second (slow start made negligible): the second call would wait ~1 s
    let throttle = new_throttle(opts("initialRate: 1, rampMs: 1e9, maxWaitMs: 300")).unwrap();
    let rate = |url: &str| call_method(&throttle, "rate", &[url.into()]).unwrap();
    assert!(rate(server()).is_undefined());
    let options = with(opts("baseDelayMs: 1"), "throttle", &throttle);
    let a = seq("200");
    assert_eq!(
        status(&resolved(rf(&a.url, JsValue::UNDEFINED, options.clone()), "first").await),
        200
    );
    let r = rate(&a.url).as_f64().expect("no rate after a send");
    assert!((0.99..1.01).contains(&r), "rate {r}");
    let b = seq("200");
    let e = rejected(rf(&b.url, JsValue::UNDEFINED, options), "second").await;
    assert_retry_error(&e, "throttled", 0, None);
    assert_eq!(b.hits().await, 0);

    // within the deadline or not
    let throttle = new_throttle(opts("initialRate: 1, rampMs: 1e9")).unwrap();
    let a = seq("200");
    resolved(
        rf(
            &a.url,
            JsValue::UNDEFINED,
            with(Object::new().into(), "throttle", &throttle),
        ),
        "first",
    )
    .await;
    let b = seq("200");
    let e = rejected(
        rf(
            &b.url,
            JsValue::UNDEFINED,
            with(opts("deadlineMs: 100"), "throttle", &throttle),
        ),
        "deadline",
    )
    .await;
    assert_retry_error(&e, "deadline", 0, Some("TimeoutError"));
    assert_eq!(b.hits().await, 0);

    // 20 per second: the second of two calls made together goes about 50 ms after the first
    let throttle = new_throttle(opts("initialRate: 20, rampMs: 1e9")).unwrap();
    let options = with(Object::new().into(), "throttle", &throttle);
    let (a, b) = (seq("200"), seq("200"));
    let pa = rf(&a.url, JsValue::UNDEFINED, options.clone());
    let pb = rf(&b.url, JsValue::UNDEFINED, options);
    assert_eq!(status(&resolved(pa, "a").await), 200);
    assert_eq!(status(&resolved(pb, "b").await), 200);
    let at = |log: Vec<JsValue>| get_f64(&log[0], "at").unwrap();
    let gap = at(b.log().await) - at(a.log().await);
    assert!(gap >= 30.0, "the second call went {gap} ms after the first");

    // a 429 cuts the rate (minRate keeps the retry's wait short)
    let throttle = new_throttle(opts("minRate: 50")).unwrap();
    let s = seq("429,200");
    let options = with(opts("baseDelayMs: 1"), "throttle", &throttle);
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "429").await),
        200
    );
    let r = call_method(&throttle, "rate", &[s.url_js()])
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(r < 100.0, "the rate is still {r} after a 429");
}

// ---------------------------------------------------------------------------------------------
// Robustness

#[wasm_bindgen_test]
fn weird_options_are_type_errors_never_panics() {
    let names = [
        "maxAttempts",
        "baseDelayMs",
        "factor",
        "maxDelayMs",
        "jitter",
        "retryOnStatus",
        "retryOnNetworkError",
        "retryOnTimeout",
        "timeoutMs",
        "deadlineMs",
        "respectRetryAfter",
        "maxRetryAfterMs",
        "idempotencyKey",
        "idempotencyHeader",
        "idempotencyKeyFormat",
        "retryHeaders",
        "maxBufferedBodyBytes",
        "signal",
        "shouldRetry",
        "onRetry",
        "fetch",
        "budget",
        "throttle",
        "breaker",
    ];
    let values = Array::from(&js(
        "[0, -0, -1, 0.5, 1, 100, 101, 1e308, -1e308, NaN, Infinity, -Infinity, 2 ** 53, '', 'x', 'auto', 'none', \
         ' ', '\\u0000\\uffff', 'k'.repeat(10000), true, false, [], [1], [503, 'x'], [[503]], new Array(600).fill(503), \
         {}, () => 1, Symbol('s'), 10n, new Date(0), Object.create(null), new Proxy({}, {}), /re/, new Uint8Array(2), \
         new AbortController().signal, Promise.resolve(1)]",
    ));
    for name in names {
        for value in values.iter() {
            let options = with(Object::new().into(), name, &value);
            for result in [
                create_retry_fetch(options.clone()).map(|_| ()),
                backoff_delays(options, n(3.0), n(1.0)).map(|_| ()),
            ] {
                if let Err(e) = result {
                    assert!(
                        e.is_instance_of::<js_sys::TypeError>(),
                        "{name}: {:?} gave {}",
                        value,
                        show(&e)
                    );
                    assert!(
                        message(&e).contains(&format!("\"{name}\"")),
                        "{name}: the message does not name it: {}",
                        message(&e)
                    );
                }
            }
        }
    }
    // the guards' settings too
    for (class, settings) in [
        ("RetryBudget", &["maxTokens", "tokenRatio"][..]),
        (
            "AdaptiveThrottle",
            &[
                "initialRate",
                "rampMs",
                "beta",
                "scale",
                "minRate",
                "maxWaitMs",
            ][..],
        ),
        (
            "CircuitBreaker",
            &[
                "failureThreshold",
                "openMs",
                "halfOpenMaxCalls",
                "onStateChange",
            ][..],
        ),
    ] {
        for name in settings {
            for value in values.iter() {
                let options = with(Object::new().into(), name, &value);
                let result = match class {
                    "RetryBudget" => new_budget(options).map(|_| ()),
                    "AdaptiveThrottle" => new_throttle(options).map(|_| ()),
                    _ => new_breaker(options).map(|_| ()),
                };
                if let Err(e) = result {
                    assert!(
                        e.is_instance_of::<js_sys::TypeError>(),
                        "{class} {name}: {:?} gave {}",
                        value,
                        show(&e)
                    );
                    assert!(
                        message(&e).starts_with(&format!("{class}: invalid option \"{name}\"")),
                        "{}",
                        message(&e)
                    );
                }
            }
        }
    }
}

#[wasm_bindgen_test]
fn guard_methods_take_any_url_string() {
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    let breaker = new_breaker(JsValue::UNDEFINED).unwrap();
    let throttle = new_throttle(JsValue::UNDEFINED).unwrap();
    let long = format!("https://a.example/{}", "9".repeat(10_000));
    for url in [
        "",
        "not a url",
        "http://",
        "javascript:alert(1)",
        "data:text/plain,x",
        "\u{0}\u{ffff}😀",
        "https://bücher.example/",
        &long,
    ] {
        assert_eq!(
            call_method(&budget, "tokens", &[url.into()])
                .unwrap()
                .as_f64(),
            Some(10.0),
            "{url:.40}"
        );
        assert_eq!(
            call_method(&breaker, "state", &[url.into()])
                .unwrap()
                .as_string()
                .as_deref(),
            Some("closed")
        );
        assert!(call_method(&throttle, "rate", &[url.into()])
            .unwrap()
            .is_undefined());
    }
}
