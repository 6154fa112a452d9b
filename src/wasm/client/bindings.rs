//! The globals the client binds beyond web-sys: `fetch`, `setTimeout`/`clearTimeout`, the
//! `Request` call that may throw on foreign input, `AbortSignal.any`, a two-handler `then`,
//! `Response.status` and `ReadableStream.tee` bound with `catch`,
//! `bind` for a lean call's settling closure, the `Headers` methods given JS strings as
//! they are (`set`, `append`, `has`), and what the globals say of the runtime
//! ([`redirects_visible`]: Node or Deno, not a browser).
//!
//! All are globals, never reached through `window`, so Node, browsers and workers work alike.
//! Whatever can throw on foreign input is bound with `catch`: a throw becomes an `Err`, never
//! an exception unwinding through the wasm.

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;

use crate::wasm::js;

pub use crate::wasm::js::{clear_timeout, set_timeout};

#[wasm_bindgen]
extern "C" {
    /// The global `fetch(input, init)`. The platform's never throws (a promise-returning Web
    /// IDL operation: a bad call rejects), but a wrapper of it may: bound with `catch`.
    #[wasm_bindgen(js_name = fetch, catch)]
    fn global_fetch_or_throw(input: &JsValue, init: &JsValue) -> Result<Promise, JsValue>;

    /// The `Request` constructor, bound with `catch` so that the platform's own `TypeError`
    /// for a request fetch can never accept (a relative URL in Node, a GET with a body, an
    /// invalid method, an `init.signal` that is not an `AbortSignal`) is an `Err`.
    #[wasm_bindgen(js_name = Request)]
    pub type RequestConstructor;
    /// `new Request(input, init)`.
    #[wasm_bindgen(constructor, catch, js_class = "Request")]
    pub fn new(input: &JsValue, init: &JsValue) -> Result<RequestConstructor, JsValue>;

    /// The `AbortSignal` statics.
    #[wasm_bindgen(js_name = AbortSignal)]
    pub type AbortSignalStatics;
    /// `AbortSignal.any(signals)`: throws where it is missing or for a signal it does not take
    /// (a polyfill's).
    #[wasm_bindgen(static_method_of = AbortSignalStatics, js_class = "AbortSignal", js_name = any, catch)]
    pub fn any(signals: &Array) -> Result<web_sys::AbortSignal, JsValue>;

    /// A promise, for `then` with two plain functions.
    #[wasm_bindgen(js_name = Promise)]
    pub type Thenable;
    /// `promise.then(onFulfilled, onRejected)`; a `Promise` subclass's own `then` (a wrapper of
    /// fetch may return one) may throw: bound with `catch`.
    #[wasm_bindgen(method, catch, js_name = then)]
    pub fn then_with(
        this: &Thenable,
        on_fulfilled: &JsValue,
        on_rejected: &JsValue,
    ) -> Result<Promise, JsValue>;

    /// A `Response`, for its `status` bound with `catch`.
    #[wasm_bindgen(js_name = Response)]
    pub type ResponseJs;
    /// `response.status`: what passes `instanceof Response` without being one
    /// (`Object.create(Response.prototype)`, a proxy of one) throws there.
    #[wasm_bindgen(method, getter, catch, js_class = "Response", js_name = status)]
    pub fn status(this: &ResponseJs) -> Result<u16, JsValue>;

    /// A `ReadableStream`, for its `tee` bound with `catch`.
    #[wasm_bindgen(js_name = ReadableStream)]
    pub type StreamJs;
    /// `stream.tee()`: a stream the caller locked after the call started (it holds the
    /// `ReadableStream` it gave as the body) throws there.
    #[wasm_bindgen(method, catch, js_class = "ReadableStream", js_name = tee)]
    pub fn tee(this: &StreamJs) -> Result<Array, JsValue>;

    /// A lean call's `onSettled(request, init, startedAt, fulfilled, controller, timer, value)`.
    #[wasm_bindgen(js_name = Function)]
    pub type Settle;
    /// `onSettled.bind(this, request, init, startedAt, fulfilled, controller, timer)`: the
    /// number and the boolean passed as they are (no handles made for them); the controller
    /// and timer of a timed first attempt, else `undefined`.
    #[wasm_bindgen(method, js_name = bind)]
    #[allow(clippy::too_many_arguments)]
    pub fn bind_settled(
        this: &Settle,
        this_arg: &JsValue,
        request: &JsValue,
        init: &JsValue,
        started: f64,
        fulfilled: bool,
        controller: &JsValue,
        timer: &JsValue,
    ) -> js_sys::Function;

    /// A `Headers`, for methods given JS strings as they are (not copied through Rust).
    #[wasm_bindgen(js_name = Headers)]
    pub type HeadersJs;
    /// `headers.set(name, value)`.
    #[wasm_bindgen(method, catch, js_class = "Headers", js_name = set)]
    pub fn set(this: &HeadersJs, name: &JsValue, value: &JsValue) -> Result<(), JsValue>;
    /// `headers.append(name, value)`.
    #[wasm_bindgen(method, catch, js_class = "Headers", js_name = append)]
    pub fn append(this: &HeadersJs, name: &JsValue, value: &JsValue) -> Result<(), JsValue>;
    /// `headers.has(name)`.
    #[wasm_bindgen(method, catch, js_class = "Headers", js_name = has)]
    pub fn has(this: &HeadersJs, name: &JsValue) -> Result<bool, JsValue>;
}

/// The global `fetch(input, init)`, as a promise of ours to await: a wrapper or mock of it
/// that throws synchronously failed like one that rejects (as a custom `fetch` option that
/// throws), and one that returns a value or a thenable rather than a promise settles as
/// [`crate::wasm::js::promise_of`] makes it.
pub fn global_fetch(input: &JsValue, init: &JsValue) -> Promise {
    match global_fetch_or_throw(input, init) {
        Ok(sent) if sent.is_instance_of::<Promise>() => sent,
        Ok(other) => crate::wasm::js::promise_of(&other),
        Err(e) => Promise::reject(&e),
    }
}

/// Does the runtime show a `redirect: 'manual'` answer as the redirect it is (Node, Deno,
/// Bun, workers)? Browsers hand back an opaque redirect instead, with no `Location` to
/// follow: there the platform follows, and a failure after a redirect cannot be told apart.
pub fn redirects_visible() -> bool {
    thread_local! {
        /// Found once: the runtime does not change. Never where there is a `document` (a
        /// page, an Electron renderer: the browser's fetch), whatever else the global has (an
        /// element `id="Deno"` is a global `Deno` there).
        static VISIBLE: bool = {
            let global = js_sys::global();
            js::get(&global, "document").is_undefined()
                && (js::get(&js::get(&js::get(&global, "process"), "versions"), "node").is_string()
                    || js::get(&js::get(&global, "Deno"), "version").is_object())
        };
    }
    VISIBLE.with(|v| *v)
}
