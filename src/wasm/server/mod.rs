//! The server half (cargo feature `server`): the idempotency companion, driven by Rust as the
//! client is. `idempotency(handler, options)` wraps a fetch-style handler and
//! `idempotent(fn, options)` any async function; both await the store's methods and the
//! handler through wasm-bindgen-futures, over web-sys `Request`/`Response`/`Headers`, and ask
//! `crate::core::idempotency` for every decision. `js/server.js` only loads this module and
//! adds what is Node-specific (`toNodeHandler`) and the stores.

mod answers;
mod canonical;
mod context;
mod flow;
mod http;
mod incoming;
mod job;
mod runs;
mod settings;
mod store;

use std::rc::Rc;

use js_sys::{Function, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::future_to_promise;

use crate::wasm::errors::{describe, type_error};

pub use context::set_context_capture;
pub use runs::set_instance;
pub use settings::set_default_store;

/// `idempotency(handler, options)`: the handler wrapped so that a request repeated with the
/// same key is answered with the stored response instead of being processed twice. The
/// wrapped function takes `(request, route?)`: `route`'s fields (Next.js's `{ params }`) are
/// passed on in `ctx`. Options and their defaults: `server.d.ts`. An invalid or unknown
/// option is a `TypeError` naming it.
#[wasm_bindgen(js_name = idempotency, skip_typescript)]
pub fn idempotency(handler: JsValue, options: JsValue) -> Result<Function, JsValue> {
    let handler = function(
        handler,
        "idempotency: the handler must be a function (request, ctx) => Promise<Response>",
    )?;
    let settings = Rc::new(settings::read_http(&options)?);
    let (s, h) = (settings.clone(), handler.clone());
    let wrapped = Closure::<dyn Fn(JsValue, JsValue) -> Promise>::new(
        move |request: JsValue, route: JsValue| {
            let caller = context::Caller::capture();
            future_to_promise(http::handle(s.clone(), h.clone(), request, route, caller))
        },
    );
    let wrapped: JsValue = wrapped.into_js_value();
    // What `toNodeHandler` calls instead, with its `NodeSource`: no `Request` built before the
    // handler's own.
    let node = Closure::<dyn Fn(JsValue) -> Promise>::new(move |source: JsValue| {
        let caller = context::Caller::capture();
        future_to_promise(http::handle_node(
            settings.clone(),
            handler.clone(),
            source,
            caller,
        ))
    });
    let descriptor: JsValue = js_sys::Object::new().into();
    crate::wasm::js::set(&descriptor, "value", &node.into_js_value());
    NODE_ENTRY.with(|key| {
        js_sys::Reflect::define_property(
            wrapped.unchecked_ref::<js_sys::Object>(),
            key,
            descriptor.unchecked_ref::<js_sys::Object>(),
        )
    })?;
    Ok(wrapped.into())
}

thread_local! {
    /// `Symbol.for('retry-fetch.nodeEntry')`: where the function `idempotency` returns keeps
    /// the entry `toNodeHandler` calls with a node:http request (`js/server.js`).
    static NODE_ENTRY: JsValue = js_sys::Symbol::for_("retry-fetch.nodeEntry").into();
}

/// `idempotent(fn, options)`: `fn` wrapped so that it has one effect per key however often
/// it is called with the same input (`options.key(input)`). Options and their defaults:
/// `server.d.ts`.
#[wasm_bindgen(js_name = idempotent, skip_typescript)]
pub fn idempotent(f: JsValue, options: JsValue) -> Result<Function, JsValue> {
    let f = function(
        f,
        "idempotent: the function must be a function (input, ctx) => Promise<result>",
    )?;
    let settings = Rc::new(settings::read_job(&options)?);
    let wrapped = Closure::<dyn Fn(JsValue) -> Promise>::new(move |input: JsValue| {
        let caller = context::Caller::capture();
        future_to_promise(job::run(settings.clone(), f.clone(), input, caller))
    });
    Ok(wrapped.into_js_value().into())
}

/// `unknownOptionError(api, name, known)`: the `TypeError` for an unknown option of a store's
/// constructor (`PostgresStore: unknown option "tabel" (did you mean "table"?)`), worded and
/// matched as the wasm's own options are (`core::options::closest_name`). Not public API: the
/// JS stores call it.
#[wasm_bindgen(js_name = unknownOptionError, skip_typescript)]
pub fn unknown_option_error(api: &str, name: &str, known: Vec<String>) -> JsValue {
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    crate::wasm::read_options::unknown_option(api, name, &known)
}

/// `invalidOptionError(api, option, value, expected)`: the `TypeError` for an invalid option of
/// a store's or `toNodeHandler`'s (`RedisStore: invalid option "prefix": got 5; expected a
/// string`), worded as the wasm's own. Not public API: the JS side calls it.
#[wasm_bindgen(js_name = invalidOptionError, skip_typescript)]
pub fn invalid_option_error(api: &str, option: &str, value: &JsValue, expected: &str) -> JsValue {
    crate::wasm::errors::invalid_value(api, option, value, expected)
}

/// `canonicalBody(value)`: the bytes a framework adapter fingerprints when a body parser has
/// already read the request (`req.body`): a string as its UTF-8, bytes (`Uint8Array`,
/// `ArrayBuffer`) as they are, anything else as canonical JSON (object keys sorted at every
/// level, so the same value parsed from differently ordered JSON is the same request; at any
/// depth: the module `canonical`); `undefined` and `null` as no bytes. Not public API: the
/// adapters call it.
#[wasm_bindgen(js_name = canonicalBody, skip_typescript)]
pub fn canonical_body(value: JsValue) -> Result<Uint8Array, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(Uint8Array::new_with_length(0));
    }
    if let Some(s) = value.as_string() {
        return Ok(Uint8Array::from(s.as_bytes()));
    }
    if value.is_instance_of::<Uint8Array>() || value.is_instance_of::<js_sys::ArrayBuffer>() {
        return Ok(Uint8Array::new(&value));
    }
    let text = canonical::canonical_json(&value)?.unwrap_or_default();
    Ok(Uint8Array::from(text.as_bytes()))
}

/// `fingerprintsJson(contentType)`: whether a body of this type is fingerprinted as its JSON
/// value (`application/json`, a `+json` type: `core::idempotency::fingerprints_json`). Not
/// public API: the Express adapter calls it.
#[wasm_bindgen(js_name = fingerprintsJson, skip_typescript)]
pub fn fingerprints_json(content_type: &str) -> bool {
    crate::core::idempotency::fingerprints_json(content_type)
}

/// `methodCanHaveBody(method)`: whether the adapters pass a request of `method` on with its
/// body (not a GET nor a HEAD, without case: `core::classify::method_can_have_body`, the rule
/// the companion applies to the requests it reads). Not public API: the adapters call it.
#[wasm_bindgen(js_name = methodCanHaveBody, skip_typescript)]
pub fn method_can_have_body(method: &str) -> bool {
    crate::core::classify::method_can_have_body(method)
}

/// `describeValue(value)`: a value as the errors show it (`"3"`, `a function`, `NaN`). Not
/// public API: the JS side calls it for its own messages.
#[wasm_bindgen(js_name = describeValue, skip_typescript)]
pub fn describe_value(value: &JsValue) -> String {
    describe(value)
}

/// `value` as a function, or a `TypeError` (`what`, then the value).
fn function(value: JsValue, what: &str) -> Result<Function, JsValue> {
    value.dyn_into::<Function>().map_err(|v| {
        let mut msg = String::from(what);
        msg.push_str("; got ");
        msg.push_str(&describe(&v));
        type_error(&msg)
    })
}
