//! wasm-bindgen tests of the wasm shell (`retry_fetch::wasm`), against the real
//! fault-injecting server (`tests/support/fault-server.mjs`).
//!
//! The same binary runs in Node (the default) and in headless Chromium
//! (`WASM_BINDGEN_USE_BROWSER=1`), so nothing here uses `window`: `fetch` and `setTimeout` are
//! bound as globals. `scripts/test.sh wasm` starts the server and passes its URL in at compile
//! time as `RF_TEST_SERVER`.
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Date, Function, Object, Promise, Reflect, RegExp, JSON};
use retry_fetch::wasm::{backoff_delays, retry_fetch, RetryClient};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

#[wasm_bindgen]
extern "C" {
    /// The global `fetch` (Node 18+ and browsers alike).
    #[wasm_bindgen(js_name = fetch)]
    fn global_fetch(url: &str) -> Promise;

    /// The global `setTimeout`; Node returns an object, browsers a number.
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &JsValue, ms: f64) -> JsValue;

    /// The global `AbortController`.
    type AbortController;
    #[wasm_bindgen(constructor)]
    fn new() -> AbortController;
    #[wasm_bindgen(method, getter)]
    fn signal(this: &AbortController) -> JsValue;
    #[wasm_bindgen(method)]
    fn abort(this: &AbortController);
    #[wasm_bindgen(method, js_name = abort)]
    fn abort_with(this: &AbortController, reason: &JsValue);
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// The fault server's base URL, e.g. `http://127.0.0.1:12345`.
fn server() -> &'static str {
    option_env!("RF_TEST_SERVER")
        .expect("RF_TEST_SERVER was not set at compile time: run `bash scripts/test.sh wasm`")
        .trim_end_matches('/')
}

/// A scenario id no other test (or earlier run against the same server) uses.
fn scenario(name: &str) -> String {
    let r = (js_sys::Math::random() * 1e12) as u64;
    format!("{name}-{r}-{}", Date::now() as u64)
}

/// `/seq/<id>?steps=<steps>`.
fn seq_url(id: &str, steps: &str) -> String {
    format!("{}/seq/{}?steps={}", server(), id, steps)
}

/// A plain object from `(key, value)` pairs.
fn obj(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in pairs {
        Reflect::set(&o, &JsValue::from_str(k), v).unwrap();
    }
    o.into()
}

fn get(target: &JsValue, key: &str) -> JsValue {
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn num(v: f64) -> JsValue {
    JsValue::from_f64(v)
}

fn s(v: &str) -> JsValue {
    JsValue::from_str(v)
}

/// `JSON.stringify(v)`, for assertion messages.
fn show(v: &JsValue) -> String {
    JSON::stringify(v).map(String::from).unwrap_or_else(|_| format!("{v:?}"))
}

/// Call a zero-argument method (`response.json()`, `response.text()`) and await its promise.
async fn call_async(target: &JsValue, method: &str) -> JsValue {
    let f: Function = get(target, method).dyn_into().expect("not a method");
    let p: Promise = f.call0(target).expect("method threw").dyn_into().expect("not a promise");
    JsFuture::from(p).await.expect("promise rejected")
}

/// Every request the server saw for scenario `id` (read with the global fetch).
async fn server_log(id: &str) -> Array {
    let url = format!("{}/log/{}", server(), id);
    let response = JsFuture::from(global_fetch(&url)).await.expect("fetching the server log failed");
    assert_eq!(get(&response, "status").as_f64(), Some(200.0), "GET /log answered {}", show(&get(&response, "status")));
    call_async(&response, "json").await.dyn_into().expect("the log is not an array")
}

async fn hits(id: &str) -> u32 {
    server_log(id).await.length()
}

/// The status of a settled `retryFetch` result, after reading (and so releasing) its body.
async fn status_of(response: &JsValue) -> f64 {
    assert!(response.is_object(), "retryFetch resolved to {}", show(response));
    let status = get(response, "status").as_f64().expect("the response has no numeric status");
    let _ = call_async(response, "text").await;
    status
}

/// A promise that resolves after `ms`.
async fn sleep_ms(ms: f64) {
    let p = Promise::new(&mut |resolve, _| {
        set_timeout(&resolve, ms);
    });
    JsFuture::from(p).await.unwrap();
}

/// The error's `name` and `message` (empty strings when absent).
fn name_and_message(err: &JsValue) -> (String, String) {
    (
        get(err, "name").as_string().unwrap_or_default(),
        get(err, "message").as_string().unwrap_or_default(),
    )
}

/// Fast options: small delays, no jitter, plus `extra`.
fn fast(extra: &[(&str, JsValue)]) -> JsValue {
    let o = obj(&[("baseDelayMs", num(5.0)), ("jitter", s("none"))]);
    for (k, v) in extra {
        Reflect::set(&o, &s(k), v).unwrap();
    }
    o
}

/// An `onRetry` hook that records each `info` object it is given.
fn recorder() -> (JsValue, Rc<RefCell<Vec<JsValue>>>) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let sink = seen.clone();
    let hook = Closure::<dyn FnMut(JsValue)>::new(move |info: JsValue| sink.borrow_mut().push(info));
    // The closure must outlive the call; tests are short-lived, so it is leaked on purpose.
    (hook.into_js_value(), seen)
}

// ---------------------------------------------------------------------------------------------
// Retries against the real server

#[wasm_bindgen_test]
async fn retries_503_503_then_succeeds_with_200_after_three_hits() {
    let id = scenario("503-503-200");
    let (on_retry, seen) = recorder();
    let response = retry_fetch(s(&seq_url(&id, "503,503,200")), JsValue::UNDEFINED, fast(&[("onRetry", on_retry)]))
        .await
        .unwrap_or_else(|e| panic!("retryFetch rejected: {}", show(&e)));
    assert_eq!(status_of(&response).await, 200.0);
    assert_eq!(hits(&id).await, 3, "the server should have seen 3 requests");

    let seen = seen.borrow();
    assert_eq!(seen.len(), 2, "onRetry should run before each of the 2 retries");
    let statuses: Vec<f64> = seen.iter().map(|i| get(i, "status").as_f64().unwrap_or(-1.0)).collect();
    let delays: Vec<f64> = seen.iter().map(|i| get(i, "delayMs").as_f64().unwrap_or(-1.0)).collect();
    assert_eq!(statuses, [503.0, 503.0]);
    assert_eq!(delays, [5.0, 10.0], "jitter 'none', base 5, factor 2");
}

#[wasm_bindgen_test]
async fn gives_up_after_max_attempts_and_returns_the_last_response() {
    let id = scenario("503-exhausted");
    let response = retry_fetch(s(&seq_url(&id, "503")), JsValue::UNDEFINED, fast(&[("maxAttempts", num(3.0))]))
        .await
        .unwrap_or_else(|e| panic!("retryFetch rejected: {}", show(&e)));
    assert_eq!(status_of(&response).await, 503.0);
    assert_eq!(hits(&id).await, 3);
}

#[wasm_bindgen_test]
async fn does_not_retry_400() {
    let id = scenario("400");
    let response = retry_fetch(s(&seq_url(&id, "400,200")), JsValue::UNDEFINED, fast(&[]))
        .await
        .unwrap_or_else(|e| panic!("retryFetch rejected: {}", show(&e)));
    assert_eq!(status_of(&response).await, 400.0);
    assert_eq!(hits(&id).await, 1, "a 400 must not be retried");
}

#[wasm_bindgen_test]
async fn retries_a_connection_reset_then_succeeds() {
    // The server destroys the socket without answering: a network error (a TypeError from
    // fetch) in Node and in the browser alike.
    let id = scenario("reset-200");
    let (on_retry, seen) = recorder();
    let response = retry_fetch(s(&seq_url(&id, "reset,200")), JsValue::UNDEFINED, fast(&[("onRetry", on_retry)]))
        .await
        .unwrap_or_else(|e| panic!("retryFetch rejected: {}", show(&e)));
    assert_eq!(status_of(&response).await, 200.0);
    assert_eq!(hits(&id).await, 2, "the reset attempt and the successful one");
    // Chromium may itself resend a request whose reused keep-alive socket closed without an
    // answer, in which case retryFetch saw a 200 on its first attempt; so allow 0 or 1 retries,
    // but a retry we did make must be for a network error.
    let seen = seen.borrow();
    assert!(seen.len() <= 1, "at most one retry, got {}", seen.len());
    if let Some(info) = seen.first() {
        assert_eq!(get(info, "reason").as_string().as_deref(), Some("network"), "{}", show(info));
        assert!(get(info, "error").is_object(), "the retry info carries the network error");
    }
}

#[wasm_bindgen_test]
async fn a_network_error_on_every_attempt_rejects_with_retry_error() {
    let id = scenario("reset-always");
    let err = retry_fetch(s(&seq_url(&id, "reset")), JsValue::UNDEFINED, fast(&[("maxAttempts", num(2.0))]))
        .await
        .expect_err("every attempt failed, so the call must reject");
    let (name, message) = name_and_message(&err);
    assert_eq!(name, "RetryError", "{message}");
    let attempts: Array = get(&err, "attempts").dyn_into().expect("RetryError.attempts is not an array");
    // Chromium may add its own resend on a reused socket, so the server can see more hits than
    // attempts; never fewer.
    assert_eq!(attempts.length(), 2, "{}", show(&attempts));
    assert!(hits(&id).await >= 2);
}

// ---------------------------------------------------------------------------------------------
// Idempotency keys

const UUID_V4: &str = "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$";

#[wasm_bindgen_test]
async fn post_gets_the_same_auto_uuid_v4_idempotency_key_on_every_attempt() {
    let id = scenario("post-key");
    let init = obj(&[("method", s("POST")), ("body", s("{\"order\":42}"))]);
    let response = retry_fetch(s(&seq_url(&id, "503,200")), init, fast(&[]))
        .await
        .unwrap_or_else(|e| panic!("retryFetch rejected: {}", show(&e)));
    assert_eq!(status_of(&response).await, 200.0);

    let log = server_log(&id).await;
    assert_eq!(log.length(), 2, "a POST with a key is retried on 503: {}", show(&log));
    let mut keys = Vec::new();
    for entry in log.iter() {
        assert_eq!(get(&entry, "method").as_string().as_deref(), Some("POST"));
        assert_eq!(get(&entry, "body").as_string().as_deref(), Some("{\"order\":42}"), "the body is replayed");
        let key = get(&get(&entry, "headers"), "idempotency-key")
            .as_string()
            .unwrap_or_else(|| panic!("no idempotency-key header: {}", show(&entry)));
        keys.push(key);
    }
    assert_eq!(keys[0], keys[1], "both attempts must carry the same key");
    assert!(RegExp::new(UUID_V4, "").test(&keys[0]), "not a lowercase UUID v4: {}", keys[0]);
}

#[wasm_bindgen_test]
async fn each_call_gets_a_fresh_key_and_get_gets_none() {
    let a = scenario("post-key-a");
    let b = scenario("get-no-key");
    let post = || obj(&[("method", s("POST")), ("body", s("x"))]);
    for (id, init) in [(&a, post()), (&a, post())] {
        let r = retry_fetch(s(&seq_url(id, "200")), init, fast(&[])).await.unwrap();
        assert_eq!(status_of(&r).await, 200.0);
    }
    let r = retry_fetch(s(&seq_url(&b, "200")), JsValue::UNDEFINED, fast(&[])).await.unwrap();
    assert_eq!(status_of(&r).await, 200.0);

    let log = server_log(&a).await;
    let key = |i: u32| get(&get(&log.get(i), "headers"), "idempotency-key").as_string();
    assert!(key(0).is_some() && key(1).is_some(), "{}", show(&log));
    assert_ne!(key(0), key(1), "two calls must not share a key");
    let get_log = server_log(&b).await;
    assert!(get(&get(&get_log.get(0), "headers"), "idempotency-key").is_undefined(), "GET must not get a key");
}

// ---------------------------------------------------------------------------------------------
// Option validation

/// `retryFetch(url, undefined, options)` must reject with a TypeError naming `option`, and
/// send nothing.
async fn assert_rejects_option(options: JsValue, option: &str) {
    let id = scenario("invalid-option");
    let err = retry_fetch(s(&seq_url(&id, "200")), JsValue::UNDEFINED, options.clone())
        .await
        .expect_err(&format!("{} must be rejected", show(&options)));
    assert!(err.is_instance_of::<js_sys::TypeError>(), "not a TypeError: {err:?}");
    let (name, message) = name_and_message(&err);
    assert_eq!(name, "TypeError");
    assert!(message.contains(&format!("\"{option}\"")), "message does not name {option}: {message}");
    assert_eq!(hits(&id).await, 0, "nothing may be sent when an option is invalid");
}

#[wasm_bindgen_test]
async fn invalid_max_attempts_is_a_type_error() {
    assert_rejects_option(obj(&[("maxAttempts", num(0.0))]), "maxAttempts").await;
}

#[wasm_bindgen_test]
async fn invalid_jitter_is_a_type_error() {
    assert_rejects_option(obj(&[("jitter", s("x"))]), "jitter").await;
}

#[wasm_bindgen_test]
async fn nan_base_delay_is_a_type_error() {
    assert_rejects_option(obj(&[("baseDelayMs", num(f64::NAN))]), "baseDelayMs").await;
}

#[wasm_bindgen_test]
async fn out_of_range_retry_status_is_a_type_error() {
    let list: JsValue = Array::of1(&num(99.0)).into();
    assert_rejects_option(obj(&[("retryOnStatus", list)]), "retryOnStatus").await;
}

#[wasm_bindgen_test]
fn invalid_client_defaults_throw_at_construction() {
    let err = RetryClient::new(obj(&[("maxAttempts", num(2.5))])).err().expect("maxAttempts 2.5 must throw");
    assert!(err.is_instance_of::<js_sys::TypeError>());
    assert!(name_and_message(&err).1.contains("\"maxAttempts\""));
}

// ---------------------------------------------------------------------------------------------
// backoffDelays

fn delays(options: JsValue, count: f64, seed: JsValue) -> Vec<f64> {
    backoff_delays(options, num(count), seed)
        .unwrap_or_else(|e| panic!("backoffDelays threw: {}", show(&e)))
        .iter()
        .map(|v| v.as_f64().expect("a delay is not a number"))
        .collect()
}

#[wasm_bindgen_test]
fn backoff_delays_without_jitter_are_exponential() {
    assert_eq!(delays(obj(&[("jitter", s("none"))]), 3.0, JsValue::UNDEFINED), [500.0, 1000.0, 2000.0]);
    let capped = obj(&[("jitter", s("none")), ("baseDelayMs", num(100.0)), ("maxDelayMs", num(350.0))]);
    assert_eq!(delays(capped, 4.0, JsValue::UNDEFINED), [100.0, 200.0, 350.0, 350.0]);
    assert!(delays(JsValue::UNDEFINED, 0.0, JsValue::UNDEFINED).is_empty());
}

#[wasm_bindgen_test]
fn seeded_backoff_delays_are_deterministic_and_within_bounds() {
    let opts = || obj(&[("baseDelayMs", num(100.0)), ("maxDelayMs", num(1000.0)), ("jitter", s("full"))]);
    let a = delays(opts(), 8.0, num(42.0));
    let b = delays(opts(), 8.0, num(42.0));
    let c = delays(opts(), 8.0, num(43.0));
    assert_eq!(a.len(), 8);
    assert_eq!(a, b, "the same seed must give the same schedule");
    assert_ne!(a, c, "another seed should give another schedule");
    for (i, d) in a.iter().enumerate() {
        let ceiling = (100.0 * 2f64.powi(i as i32)).min(1000.0);
        assert!(d.fract() == 0.0 && *d >= 0.0 && *d <= ceiling, "delay {i} = {d} not in 0..={ceiling}");
    }

    let equal = delays(obj(&[("baseDelayMs", num(100.0)), ("jitter", s("equal"))]), 5.0, num(7.0));
    for (i, d) in equal.iter().enumerate() {
        let full = 100.0 * 2f64.powi(i as i32);
        assert!(*d >= (full / 2.0).floor() && *d <= full, "equal-jitter delay {i} = {d} not in {}..={full}", full / 2.0);
    }
}

#[wasm_bindgen_test]
fn backoff_delays_rejects_bad_arguments() {
    let bad_count = backoff_delays(JsValue::UNDEFINED, num(-1.0), JsValue::UNDEFINED).err().expect("count -1");
    assert!(name_and_message(&bad_count).1.contains("\"count\""));
    let bad_seed = backoff_delays(JsValue::UNDEFINED, num(3.0), num(f64::INFINITY)).err().expect("seed Infinity");
    assert!(name_and_message(&bad_seed).1.contains("\"seed\""));
    let bad_option = backoff_delays(obj(&[("factor", num(0.5))]), num(3.0), JsValue::UNDEFINED).err().expect("factor 0.5");
    assert!(bad_option.is_instance_of::<js_sys::TypeError>());
    assert!(name_and_message(&bad_option).1.contains("\"factor\""));
}

// ---------------------------------------------------------------------------------------------
// Cancellation

#[wasm_bindgen_test]
async fn abort_during_a_long_wait_rejects_quickly_with_abort_error() {
    let id = scenario("abort-wait");
    let controller = AbortController::new();
    // First attempt: 503 at once; then a 10 s wait (jitter 'none'), which the abort must cut.
    let options = obj(&[
        ("baseDelayMs", num(10_000.0)),
        ("jitter", s("none")),
        ("signal", controller.signal()),
    ]);
    let abort = Closure::once_into_js(move || controller.abort());
    let started = Date::now();
    set_timeout(&abort, 200.0);
    let result = retry_fetch(s(&seq_url(&id, "503,200")), JsValue::UNDEFINED, options).await;
    let elapsed = Date::now() - started;
    let err = match result {
        Ok(r) => panic!("an aborted call resolved (status {}) after {elapsed} ms", show(&get(&r, "status"))),
        Err(e) => e,
    };
    let (name, message) = name_and_message(&err);
    assert_eq!(name, "AbortError", "rejected with {name}: {message}");
    assert!(elapsed < 1000.0, "the abort took {elapsed} ms to take effect");
    assert_eq!(hits(&id).await, 1, "no attempt may be sent after the abort");
}

#[wasm_bindgen_test]
async fn abort_rejects_with_the_signals_reason() {
    let id = scenario("abort-reason");
    let controller = AbortController::new();
    let options = obj(&[("baseDelayMs", num(10_000.0)), ("jitter", s("none")), ("signal", controller.signal())]);
    let reason = obj(&[("why", s("user left"))]);
    let r = reason.clone();
    set_timeout(&Closure::once_into_js(move || controller.abort_with(&r)), 100.0);
    let err = retry_fetch(s(&seq_url(&id, "503,200")), JsValue::UNDEFINED, options)
        .await
        .expect_err("an aborted call must reject");
    assert!(Object::is(&err, &reason), "rejected with {} instead of the abort reason", show(&err));
}

#[wasm_bindgen_test]
async fn an_already_aborted_signal_sends_nothing() {
    let id = scenario("abort-before");
    let controller = AbortController::new();
    controller.abort();
    let err = retry_fetch(s(&seq_url(&id, "200")), JsValue::UNDEFINED, obj(&[("signal", controller.signal())]))
        .await
        .expect_err("an aborted call must reject");
    assert_eq!(name_and_message(&err).0, "AbortError");
    sleep_ms(50.0).await;
    assert_eq!(hits(&id).await, 0);
}

// ---------------------------------------------------------------------------------------------
// RetryClient

async fn client_call(client: &RetryClient, url: &str, options: JsValue) -> JsValue {
    JsFuture::from(client.fetch(s(url), JsValue::UNDEFINED, options))
        .await
        .unwrap_or_else(|e| panic!("client.fetch rejected: {}", show(&e)))
}

#[wasm_bindgen_test]
async fn retry_client_defaults_merge_with_per_call_options() {
    let client = RetryClient::new(obj(&[
        ("maxAttempts", num(2.0)),
        ("baseDelayMs", num(5.0)),
        ("jitter", s("none")),
    ]))
    .unwrap_or_else(|e| panic!("RetryClient threw: {}", show(&e)));

    // Defaults alone: 2 attempts.
    let a = scenario("client-defaults");
    let r = client_call(&client, &seq_url(&a, "503,503,503,200"), JsValue::UNDEFINED).await;
    assert_eq!(status_of(&r).await, 503.0);
    assert_eq!(hits(&a).await, 2, "the client's maxAttempts 2 applies");

    // A per-call maxAttempts overrides the default; the client's baseDelayMs/jitter still apply.
    let b = scenario("client-override");
    let (on_retry, seen) = recorder();
    let r = client_call(&client, &seq_url(&b, "503,503,503,200"), obj(&[("maxAttempts", num(4.0)), ("onRetry", on_retry)])).await;
    assert_eq!(status_of(&r).await, 200.0);
    assert_eq!(hits(&b).await, 4, "the per-call maxAttempts 4 applies");
    let delays: Vec<f64> = seen.borrow().iter().map(|i| get(i, "delayMs").as_f64().unwrap_or(-1.0)).collect();
    assert_eq!(delays, [5.0, 10.0, 20.0], "the client's baseDelayMs 5 and jitter 'none' still apply");

    // A per-call retryOnStatus: [] turns retries on status off for that call only.
    let c = scenario("client-no-status");
    let r = client_call(&client, &seq_url(&c, "503,200"), obj(&[("retryOnStatus", Array::new().into())])).await;
    assert_eq!(status_of(&r).await, 503.0);
    assert_eq!(hits(&c).await, 1);

    // The defaults are unchanged by the earlier per-call options.
    let d = scenario("client-after");
    let r = client_call(&client, &seq_url(&d, "503,200"), JsValue::UNDEFINED).await;
    assert_eq!(status_of(&r).await, 200.0);
    assert_eq!(hits(&d).await, 2);

    // An invalid per-call option rejects that call with a TypeError.
    let err = JsFuture::from(client.fetch(s(&seq_url(&scenario("client-bad"), "200")), JsValue::UNDEFINED, obj(&[("jitter", s("x"))])))
        .await
        .expect_err("jitter 'x' must be rejected");
    assert!(err.is_instance_of::<js_sys::TypeError>());
    assert!(name_and_message(&err).1.contains("\"jitter\""));
}
