//! Bindings to the JavaScript globals the shell uses.
//!
//! Everything is bound as a global (`fetch`, `setTimeout`, `Headers`, `AbortController`, ...),
//! never through `window`, so the same module runs in browsers, Node and workers. Calls that
//! can throw on foreign input are bound with `catch`, so a throw becomes an `Err` instead of a
//! trap. Methods are structural: a Response-like object from a custom `fetch` works too.

use js_sys::{Function, JsString, Promise};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// `setTimeout(handler, ms)`; Node returns an object, browsers a number.
    #[wasm_bindgen(js_name = setTimeout)]
    pub fn set_timeout(handler: &Function, ms: f64) -> JsValue;

    /// `clearTimeout(handle)`.
    #[wasm_bindgen(js_name = clearTimeout)]
    pub fn clear_timeout(handle: &JsValue);

    /// The global `fetch`, looked up at call time (so a later polyfill or mock is seen).
    #[wasm_bindgen(js_name = fetch, catch)]
    pub fn global_fetch(input: &JsValue, init: &JsValue) -> Result<JsValue, JsValue>;

    /// `Function.prototype`: a function that does nothing, for ignoring a rejection.
    #[wasm_bindgen(thread_local_v2, js_namespace = Function, js_name = prototype)]
    static NOOP: Function;

    /// `String(value)`; throws for e.g. a null-prototype object.
    #[wasm_bindgen(js_name = String, catch)]
    pub fn to_js_string(value: &JsValue) -> Result<JsString, JsValue>;

    /// The URL Standard's `URL`.
    pub type Url;
    /// `new URL(url, base)`.
    #[wasm_bindgen(constructor, catch, js_class = URL, js_name = URL)]
    pub fn new(url: &str, base: &JsValue) -> Result<Url, JsValue>;
    /// `url.origin`.
    #[wasm_bindgen(method, getter)]
    pub fn origin(this: &Url) -> String;

    /// The Fetch API's `Headers`.
    #[derive(Clone)]
    pub type Headers;
    /// `new Headers(init)`.
    #[wasm_bindgen(constructor, catch)]
    pub fn new(init: &JsValue) -> Result<Headers, JsValue>;
    /// `headers.has(name)`.
    #[wasm_bindgen(method, catch)]
    pub fn has(this: &Headers, name: &str) -> Result<bool, JsValue>;
    /// `headers.get(name)`.
    #[wasm_bindgen(method, catch)]
    pub fn get(this: &Headers, name: &str) -> Result<Option<String>, JsValue>;
    /// `headers.set(name, value)`.
    #[wasm_bindgen(method, catch)]
    pub fn set(this: &Headers, name: &str, value: &str) -> Result<(), JsValue>;

    /// The Fetch API's `Request`.
    #[derive(Clone)]
    pub type Request;
    /// `request.clone()`.
    #[wasm_bindgen(method, catch, js_name = clone)]
    pub fn clone_request(this: &Request) -> Result<Request, JsValue>;
    /// `request.url`.
    #[wasm_bindgen(method, getter)]
    pub fn url(this: &Request) -> JsValue;
    /// `request.method`.
    #[wasm_bindgen(method, getter)]
    pub fn method(this: &Request) -> JsValue;
    /// `request.headers`.
    #[wasm_bindgen(method, getter)]
    pub fn headers(this: &Request) -> JsValue;
    /// `request.signal`.
    #[wasm_bindgen(method, getter)]
    pub fn signal(this: &Request) -> JsValue;
    /// `request.bodyUsed`.
    #[wasm_bindgen(method, getter, js_name = bodyUsed)]
    pub fn body_used(this: &Request) -> JsValue;

    /// A `Response` (or any object shaped like one).
    #[derive(Clone)]
    pub type Response;
    /// `response.status`.
    #[wasm_bindgen(method, getter)]
    pub fn status(this: &Response) -> JsValue;
    /// `response.headers`.
    #[wasm_bindgen(method, getter)]
    pub fn headers(this: &Response) -> JsValue;
    /// `response.body`.
    #[wasm_bindgen(method, getter)]
    pub fn body(this: &Response) -> JsValue;

    /// The DOM's `AbortController`.
    #[derive(Clone)]
    pub type AbortController;
    /// `new AbortController()`.
    #[wasm_bindgen(constructor, catch)]
    pub fn new() -> Result<AbortController, JsValue>;
    /// `controller.signal`.
    #[wasm_bindgen(method, getter)]
    pub fn signal(this: &AbortController) -> AbortSignal;
    /// `controller.abort(reason)`.
    #[wasm_bindgen(method, catch)]
    pub fn abort(this: &AbortController, reason: &JsValue) -> Result<(), JsValue>;

    /// The DOM's `AbortSignal`.
    #[derive(Clone)]
    pub type AbortSignal;
    /// `signal.aborted`.
    #[wasm_bindgen(method, getter)]
    pub fn aborted(this: &AbortSignal) -> bool;
    /// `signal.reason`.
    #[wasm_bindgen(method, getter)]
    pub fn reason(this: &AbortSignal) -> JsValue;
    /// `signal.addEventListener(type, listener)`.
    #[wasm_bindgen(method, catch, js_name = addEventListener)]
    pub fn add_event_listener(
        this: &AbortSignal,
        kind: &str,
        listener: &Function,
    ) -> Result<(), JsValue>;
    /// `signal.removeEventListener(type, listener)`.
    #[wasm_bindgen(method, catch, js_name = removeEventListener)]
    pub fn remove_event_listener(
        this: &AbortSignal,
        kind: &str,
        listener: &Function,
    ) -> Result<(), JsValue>;

    /// The Streams API's `ReadableStream`.
    pub type ReadableStream;
    /// `stream.tee()`.
    #[wasm_bindgen(method, catch)]
    pub fn tee(this: &ReadableStream) -> Result<js_sys::Array, JsValue>;
    /// `stream.getReader()`.
    #[wasm_bindgen(method, catch, js_name = getReader)]
    pub fn get_reader(this: &ReadableStream) -> Result<StreamReader, JsValue>;
    /// `stream.cancel()`.
    #[wasm_bindgen(method, catch)]
    pub fn cancel(this: &ReadableStream) -> Result<Promise, JsValue>;

    /// A `ReadableStreamDefaultReader`.
    pub type StreamReader;
    /// `reader.read()`.
    #[wasm_bindgen(method, catch)]
    pub fn read(this: &StreamReader) -> Result<Promise, JsValue>;
    /// `reader.cancel()`.
    #[wasm_bindgen(method, catch)]
    pub fn cancel(this: &StreamReader) -> Result<Promise, JsValue>;
}

/// `Reflect.get(target, key)`, with `undefined` for anything that is not an object or throws.
pub fn get(target: &JsValue, key: &str) -> JsValue {
    if !target.is_object() && !target.is_function() {
        return JsValue::UNDEFINED;
    }
    js_sys::Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// `Reflect.get(target, key)`, passing on a throwing getter's error.
pub fn get_or_throw(target: &JsValue, key: &str) -> Result<JsValue, JsValue> {
    if !target.is_object() && !target.is_function() {
        return Ok(JsValue::UNDEFINED);
    }
    js_sys::Reflect::get(target, &JsValue::from_str(key))
}

/// `target[key] = value` on an object we created; failures are ignored (they cannot happen
/// on a plain extensible object).
pub fn set(target: &JsValue, key: &str, value: &JsValue) {
    let _ = js_sys::Reflect::set(target, &JsValue::from_str(key), value);
}

/// A response's header value, `None` when absent or when the object has no usable headers.
pub fn response_header(response: &Response, name: &str) -> Option<String> {
    let headers: Headers = response.headers().unchecked_into();
    headers.get(name).ok().flatten()
}

/// A response's status as an integer HTTP status (0 when it is not a number in 0..=999).
pub fn response_status(response: &Response) -> u16 {
    match response.status().as_f64() {
        Some(s) if (0.0..=999.0).contains(&s) => s as u16,
        _ => 0,
    }
}

/// Mark `promise` as handled without waiting for it (no unhandled-rejection report).
pub fn ignore_rejection(promise: &Promise) {
    if let Ok(catch) = get(promise, "catch").dyn_into::<Function>() {
        NOOP.with(|noop| {
            let _ = catch.call1(promise, noop);
        });
    }
}
