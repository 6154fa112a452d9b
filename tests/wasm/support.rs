//! What every module of the wasm tests shares: JavaScript values made and read from Rust, the
//! fault server's scenarios (`seq`), the exports under their JavaScript names, and the
//! assertions on the errors the exports make.
#![allow(dead_code)] // not every module uses every helper

pub use std::cell::{Cell, RefCell};
pub use std::collections::HashSet;
pub use std::rc::Rc;

pub use js_sys::{Array, Date, Function, Object, Promise, Reflect, RegExp, JSON};
pub use retry_fetch::wasm::{
    backoff_delays, create_retry_fetch, is_circuit_open_error, is_retry_error, retry_fetch,
    AdaptiveThrottleHandle, CircuitBreakerHandle, RetryBudgetHandle,
};
pub use wasm_bindgen::prelude::*;
pub use wasm_bindgen::JsCast;
pub use wasm_bindgen_futures::JsFuture;
pub use wasm_bindgen_test::*;

#[wasm_bindgen]
extern "C" {
    /// The global `fetch`, for the server's `/log` and as the custom transports' delegate.
    #[wasm_bindgen(js_name = fetch)]
    pub fn plain_fetch(input: &JsValue, init: &JsValue) -> Promise;

    /// `globalThis.setTimeout` (a name of its own: the shell binds the global `setTimeout` with
    /// the same signature, and two identical imports would clash at link time).
    #[wasm_bindgen(js_namespace = globalThis, js_name = setTimeout)]
    pub fn set_timeout(callback: &Function, ms: f64) -> JsValue;
}

// ---------------------------------------------------------------------------------------------
// Helpers: JavaScript values

/// Evaluate a JavaScript expression: `js("({ maxAttempts: 0 })")`.
pub fn js(src: &str) -> JsValue {
    Function::new_no_args(&format!("return ({src});"))
        .call0(&JsValue::UNDEFINED)
        .unwrap_or_else(|e| panic!("evaluating {src} threw {}", show(&e)))
}

/// Call a JavaScript function made from `params` and `body` with `args`:
/// `js_fn("url", "return new Request(url)", &[url])`.
pub fn js_fn(params: &str, body: &str, args: &[JsValue]) -> JsValue {
    Function::new_with_args(params, body)
        .apply(&JsValue::UNDEFINED, &args.iter().collect::<Array>())
        .unwrap_or_else(|e| panic!("({params}) => {{ {body} }} threw {}", show(&e)))
}

/// An options object from JS source without braces: `opts("maxAttempts: 2")`.
pub fn opts(fields: &str) -> JsValue {
    js(&format!("({{ {fields} }})"))
}

/// `target[key] = value`, returning `target` (to add Rust-made values to options).
pub fn with(target: JsValue, key: &str, value: &JsValue) -> JsValue {
    Reflect::set(&target, &JsValue::from_str(key), value).unwrap();
    target
}

pub fn get(target: &JsValue, key: &str) -> JsValue {
    if !target.is_object() && !target.is_function() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

pub fn get_str(target: &JsValue, key: &str) -> Option<String> {
    get(target, key).as_string()
}

pub fn get_f64(target: &JsValue, key: &str) -> Option<f64> {
    get(target, key).as_f64()
}

/// `target[name](...args)`.
pub fn call_method(target: &JsValue, name: &str, args: &[JsValue]) -> Result<JsValue, JsValue> {
    let f: Function = get(target, name)
        .dyn_into()
        .unwrap_or_else(|_| panic!("{name} is not a method"));
    f.apply(target, &args.iter().collect::<Array>())
}

/// For assertion messages: `name: message` for errors, else `JSON.stringify(v)` or `String(v)`.
pub fn show(v: &JsValue) -> String {
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

pub fn message(e: &JsValue) -> String {
    get_str(e, "message").unwrap_or_else(|| show(e))
}

/// A real JS `TypeError` (by `instanceof` and by `name`) with exactly this message.
#[track_caller]
pub fn assert_type_error(err: &JsValue, expected: &str) {
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
pub fn assert_any_type_error(err: &JsValue, what: &str) {
    assert!(
        err.is_instance_of::<js_sys::TypeError>(),
        "{what}: not a TypeError: {}",
        show(err)
    );
    assert!(!is_retry_error(err.clone()), "{what}: a RetryError");
}

pub fn is_uuid_v4(s: &str) -> bool {
    RegExp::new(
        "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
        "",
    )
    .test(s)
}

pub fn numbers(a: &Array) -> Vec<f64> {
    a.iter()
        .map(|v| v.as_f64().expect("not a number"))
        .collect()
}

pub fn n(v: f64) -> JsValue {
    JsValue::from_f64(v)
}

/// Running in a browser (no `process`)?
pub fn in_browser() -> bool {
    js("typeof process === 'undefined' || !process.versions || !process.versions.node").as_bool()
        == Some(true)
}

/// A JS function that records every argument it gets (and returns `ret` for it).
pub struct Recorder {
    calls: Rc<RefCell<Vec<JsValue>>>,
    function: Closure<dyn FnMut(JsValue) -> JsValue>,
}

impl Recorder {
    pub fn new(mut ret: impl FnMut(&JsValue) -> JsValue + 'static) -> Recorder {
        let calls = Rc::new(RefCell::new(Vec::new()));
        let seen = calls.clone();
        let function = Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |arg: JsValue| {
            let out = ret(&arg);
            seen.borrow_mut().push(arg);
            out
        });
        Recorder { calls, function }
    }

    pub fn js(&self) -> JsValue {
        self.function.as_ref().clone()
    }

    pub fn calls(&self) -> Vec<JsValue> {
        self.calls.borrow().clone()
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers: promises, time and the server

pub async fn sleep(ms: f64) {
    let p = Promise::new(&mut |resolve, _| {
        set_timeout(&resolve, ms);
    });
    JsFuture::from(p).await.unwrap();
}

/// A promise that resolves to `value` after `ms`.
pub fn later(ms: f64, value: JsValue) -> Promise {
    Promise::new(&mut |resolve, _| {
        let f: Function = resolve.bind1(&JsValue::UNDEFINED, &value).unchecked_into();
        set_timeout(&f, ms);
    })
}

/// Await `p`, which must resolve.
pub async fn resolved(p: Promise, what: &str) -> JsValue {
    match JsFuture::from(p).await {
        Ok(v) => v,
        Err(e) => panic!("{what}: rejected with {}", show(&e)),
    }
}

/// Await `p`, which must reject; its reason.
pub async fn rejected(p: Promise, what: &str) -> JsValue {
    match JsFuture::from(p).await {
        Ok(v) => panic!("{what}: resolved with {}", show(&v)),
        Err(e) => e,
    }
}

pub fn status(response: &JsValue) -> u16 {
    assert!(
        response.is_instance_of::<web_sys::Response>(),
        "not a Response: {}",
        show(response)
    );
    get_f64(response, "status").expect("no status") as u16
}

pub async fn body_text(response: &JsValue) -> String {
    let r: &web_sys::Response = response.unchecked_ref();
    JsFuture::from(r.text().unwrap())
        .await
        .unwrap()
        .as_string()
        .unwrap()
}

/// The fault server's URL (its origin), from `RF_TEST_SERVER` at compile time.
pub fn server() -> &'static str {
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

pub fn encode(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}

/// One scripted scenario on the fault server: `url` answers its n-th request with the n-th
/// step (the last repeats); `log()` is what the server received.
pub struct Seq {
    pub id: String,
    pub url: String,
}

/// A new scenario with `steps` (`"503,200"`, `"hang"`, `"reset"`, `"503+ra=1,200"` ...).
pub fn seq(steps: &str) -> Seq {
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
    pub async fn log(&self) -> Vec<JsValue> {
        let url = JsValue::from_str(&format!("{}/log/{}", server(), encode(&self.id)));
        let res = resolved(plain_fetch(&url, &JsValue::UNDEFINED), "GET /log").await;
        let res: web_sys::Response = res.dyn_into().unwrap();
        let json = JsFuture::from(res.json().unwrap()).await.unwrap();
        Array::from(&json).iter().collect()
    }

    pub async fn hits(&self) -> usize {
        self.log().await.len()
    }

    /// Wait until the server has seen `n` requests (at most about 4 s).
    pub async fn wait_for_hits(&self, n: usize) {
        for _ in 0..400 {
            if self.hits().await >= n {
                return;
            }
            sleep(10.0).await;
        }
        panic!("the server never saw {n} requests for {}", self.id);
    }

    pub fn url_js(&self) -> JsValue {
        JsValue::from_str(&self.url)
    }
}

pub fn header(record: &JsValue, name: &str) -> Option<String> {
    get_str(&get(record, "headers"), name)
}

/// `retryFetch(url, init, options)`.
pub fn rf(url: &str, init: JsValue, options: JsValue) -> Promise {
    retry_fetch(JsValue::from_str(url), init, options)
}

/// `client(url, init, options)` for a function made by `createRetryFetch`.
pub fn call_client(client: &JsValue, url: &str, init: JsValue, options: JsValue) -> Promise {
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
pub fn new_budget(options: JsValue) -> Result<JsValue, JsValue> {
    RetryBudgetHandle::new(options).map(JsValue::from)
}

/// `new CircuitBreaker(options)`, as a JS object.
pub fn new_breaker(options: JsValue) -> Result<JsValue, JsValue> {
    CircuitBreakerHandle::new(options).map(JsValue::from)
}

/// `new AdaptiveThrottle(options)`, as a JS object.
pub fn new_throttle(options: JsValue) -> Result<JsValue, JsValue> {
    AdaptiveThrottleHandle::new(options).map(JsValue::from)
}

/// The records of `RetryError.attempts`.
pub fn attempts_of(err: &JsValue) -> Vec<JsValue> {
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
pub fn assert_retry_error(err: &JsValue, reason: &str, attempts: usize, cause_name: Option<&str>) {
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

/// Invalid options: `createRetryFetch` throws and `backoffDelays` throws this `TypeError`, and
/// `retryFetch` rejects with it (tested separately, against the server).
#[track_caller]
pub fn assert_options_rejected(src: &str, expected: &str) {
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
pub async fn assert_call_rejected(url: &str, options: JsValue, expected: &str) {
    let e = rejected(
        rf(url, JsValue::UNDEFINED, options.clone()),
        &show(&options),
    )
    .await;
    assert_type_error(&e, expected);
}
