//! The `TypeError`s both halves raise for invalid options and arguments (before anything is
//! sent). The client's own errors (`RetryError`, `TimeoutError`, `CircuitOpenError`) are in
//! `client/errors.rs`.

use wasm_bindgen::prelude::*;

use super::js;
use crate::core::options::OptionError;

/// A short, readable rendering of a JS value for an error message: strings quoted as JSON
/// quotes them (`"3"`, `"a\"b"`), a BigInt with its `n` (`3n`: `3` would read as the number
/// refused for being a BigInt), everything else as `String(value)` (`NaN`, `[object Object]`,
/// `null`).
#[cold]
#[inline(never)]
pub fn describe(value: &JsValue) -> String {
    if value.is_string() {
        // JSON's quoting: a quote, a backslash or a control character inside stays readable.
        if let Some(s) = js_sys::JSON::stringify(value)
            .ok()
            .and_then(|s| s.as_string())
        {
            return s;
        }
    }
    if value.is_function() {
        return "a function".into();
    }
    if js::is_array(value).unwrap_or(false) {
        return "an array".into();
    }
    match js::to_js_string(value) {
        Ok(s) if value.is_bigint() => String::from(s) + "n",
        Ok(s) => String::from(s),
        Err(_) => "an object".into(),
    }
}

/// `new TypeError(message)`.
#[cold]
#[inline(never)]
pub fn type_error(message: &str) -> JsValue {
    js_sys::TypeError::new(message).into()
}

/// The `TypeError` for an invalid option of the API `api` (`retryFetch`, `idempotency`):
/// `<api>: invalid option "<name>": got <value>; expected <what is allowed>`.
#[cold]
#[inline(never)]
pub fn invalid_option(api: &str, err: OptionError, value: &JsValue) -> JsValue {
    invalid_value(api, err.option, value, err.expected)
}

/// `<api>: invalid option "<option>": got <value>; expected <expected>`, a `TypeError`.
#[cold]
#[inline(never)]
pub fn invalid_value(api: &str, option: &str, value: &JsValue, expected: &str) -> JsValue {
    let mut msg = String::from(api);
    msg.push_str(": invalid option \"");
    msg.push_str(option);
    msg.push_str("\": got ");
    msg.push_str(&describe(value));
    msg.push_str("; expected ");
    msg.push_str(expected);
    type_error(&msg)
}
