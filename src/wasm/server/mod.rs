//! The server half (cargo feature `server`): the idempotency companion, driven by Rust as the
//! client is. `idempotency(handler, options)` wraps a fetch-style handler and
//! `idempotent(fn, options)` any async function; both await the store's methods and the
//! handler through wasm-bindgen-futures, over web-sys `Request`/`Response`/`Headers`, and ask
//! `crate::core::idempotency` for every decision. `js/server.js` only loads this module and
//! adds what is Node-specific (`toNodeHandler`) and the stores.

mod answers;
mod context;
mod flow;
mod http;
mod job;
mod options;
mod store;

use std::rc::Rc;

use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::wasm::errors::{describe, type_error};

pub use context::set_context_capture;
pub use options::set_default_store;

/// `idempotency(handler, options)`: the handler wrapped so that a request repeated with the
/// same key is answered with the stored response instead of being processed twice. Options
/// and their defaults: `server.d.ts`. An invalid or unknown option is a `TypeError` naming it.
#[wasm_bindgen(js_name = idempotency, skip_typescript)]
pub fn idempotency(handler: JsValue, options: JsValue) -> Result<Function, JsValue> {
    let handler = function(handler, "idempotency: the handler must be a function (request, ctx) => Promise<Response>")?;
    let settings = Rc::new(options::read_http(&options)?);
    let wrapped = Closure::<dyn Fn(JsValue) -> Promise>::new(move |request: JsValue| {
        let caller = context::Caller::capture();
        future_to_promise(http::handle(settings.clone(), handler.clone(), request, caller))
    });
    Ok(wrapped.into_js_value().into())
}

/// `idempotent(fn, options)`: `fn` wrapped so that it has one effect per key however often
/// it is called with the same input (`options.key(input)`). Options and their defaults:
/// `server.d.ts`.
#[wasm_bindgen(js_name = idempotent, skip_typescript)]
pub fn idempotent(f: JsValue, options: JsValue) -> Result<Function, JsValue> {
    let f = function(f, "idempotent: the function must be a function (input, ctx) => Promise<result>")?;
    let settings = Rc::new(options::read_job(&options)?);
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
    crate::wasm::options::unknown_option(api, name, &known)
}

/// `invalidOptionError(api, option, value, expected)`: the `TypeError` for an invalid option of
/// a store's or `toNodeHandler`'s (`RedisStore: invalid option "prefix": got 5; expected a
/// string`), worded as the wasm's own. Not public API: the JS side calls it.
#[wasm_bindgen(js_name = invalidOptionError, skip_typescript)]
pub fn invalid_option_error(api: &str, option: &str, value: &JsValue, expected: &str) -> JsValue {
    crate::wasm::errors::invalid_value(api, option, value, expected)
}

/// `describeValue(value)`: a value as the errors show it (`"3"`, `a function`, `NaN`). Not
/// public API: the JS side calls it for its own messages.
#[wasm_bindgen(js_name = describeValue, skip_typescript)]
pub fn describe_value(value: &JsValue) -> String {
    describe(value)
}

/// `value` as a function, or a `TypeError` (`what`, then the value).
fn function(value: JsValue, what: &str) -> Result<Function, JsValue> {
    use wasm_bindgen::JsCast;
    value.dyn_into::<Function>().map_err(|v| {
        let mut msg = String::from(what);
        msg.push_str("; got ");
        msg.push_str(&describe(&v));
        type_error(&msg)
    })
}
