//! The client's errors, with stable `name`s: `RetryError` (`reason`, `attempts`, `cause`),
//! `TimeoutError`, `CircuitOpenError` (`retryAfterMs`, `origin`), and the `TypeError`s for
//! invalid options.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::core::options::OptionError;
use crate::wasm::errors::invalid_option;
use crate::wasm::js;

/// The `TypeError` for an invalid option of `api`, the function called:
/// `retryFetch: invalid option "maxAttempts": got 0; expected an integer from 1 to 100`.
#[cold]
#[inline(never)]
pub fn option_error(api: &str, err: OptionError, value: &JsValue) -> JsValue {
    invalid_option(api, err, value)
}

/// `n` (a whole, non-negative number of ms or attempts) in decimal.
pub fn int(n: f64) -> String {
    let mut out = String::new();
    push_decimal(
        &mut out,
        if n.is_finite() && n >= 0.0 {
            n as u64
        } else {
            0
        },
    );
    out
}

/// `n` in decimal after `out` (what `to_string` writes, without `core::fmt`'s integer
/// formatting and its `Formatter`).
pub fn push_decimal(out: &mut String, n: u64) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

thread_local! {
    /// The `RetryError` and `CircuitOpenError` classes (`Error` subclasses the entry file
    /// defines and hands over with `setErrorClasses`), so that `instanceof` works.
    static CLASSES: std::cell::RefCell<Option<(js_sys::Function, js_sys::Function)>> = const { std::cell::RefCell::new(None) };
}

/// `setErrorClasses(RetryError, CircuitOpenError)`: how an entry file gives the wasm its two
/// error classes (plain `Error` subclasses: JavaScript can declare a class, the wasm cannot).
/// Not part of the public API.
#[wasm_bindgen(js_name = setErrorClasses, skip_typescript)]
pub fn set_error_classes(retry: js_sys::Function, circuit_open: js_sys::Function) {
    CLASSES.with(|c| *c.borrow_mut() = Some((retry, circuit_open)));
}

/// `new Error(message)` with `name` set (by name, so checks work across realms and copies);
/// a `RetryError` or `CircuitOpenError` is an instance of its exported class when the entry
/// gave it.
fn named_error(name: &str, message: &str) -> js_sys::Error {
    let class = CLASSES.with(|c| {
        c.borrow().as_ref().and_then(|(retry, open)| match name {
            "RetryError" => Some(retry.clone()),
            "CircuitOpenError" => Some(open.clone()),
            _ => None,
        })
    });
    let e = class
        .and_then(|class| {
            js_sys::Reflect::construct(&class, &js_sys::Array::of1(&JsValue::from_str(message)))
                .ok()
        })
        .map(|v| v.unchecked_into::<js_sys::Error>())
        .unwrap_or_else(|| js_sys::Error::new(message));
    e.set_name(name);
    e
}

/// The `TimeoutError` of an attempt whose time limit, `ms`, fired: the deadline's when the
/// limit was what was left of `deadline` (`Some(deadlineMs)`: "the deadline (deadlineMs N)
/// passed", also the cause of a call the deadline ended between attempts), else the
/// attempt's own ("the attempt timed out after N ms").
#[cold]
#[inline(never)]
pub fn timeout_error(ms: f64, deadline: Option<f64>) -> JsValue {
    let (before, ms, after) = match deadline {
        Some(d) => ("retryFetch: the deadline (deadlineMs ", d, ") passed"),
        None => ("retryFetch: the attempt timed out after ", ms, " ms"),
    };
    let mut msg = String::from(before);
    msg.push_str(&int(ms.ceil()));
    msg.push_str(after);
    named_error("TimeoutError", &msg).into()
}

/// `value.message` when it is a string (a throwing getter counts as none).
fn message_of(value: &JsValue) -> Option<String> {
    js::get(value, "message").as_string()
}

/// The `RetryError` that ends a call without a response: `reason`, `attempts` (the history),
/// `cause` (the last error).
#[cold]
#[inline(never)]
pub fn retry_error(reason: &str, attempts: &js_sys::Array, cause: &JsValue) -> JsValue {
    let n = attempts.length();
    let mut msg = if n == 0 {
        String::from("retryFetch sent nothing (")
    } else {
        let mut m = String::from("retryFetch failed after ");
        m.push_str(&int(n as f64));
        m.push_str(if n == 1 { " attempt (" } else { " attempts (" });
        m
    };
    msg.push_str(reason);
    msg.push(')');
    if let Some(m) = message_of(cause) {
        msg.push_str(": ");
        msg.push_str(&m);
    }
    let e: JsValue = named_error("RetryError", &msg).into();
    js::set(&e, "reason", &JsValue::from_str(reason));
    js::set(&e, "attempts", attempts);
    js::set(&e, "cause", cause);
    e
}

/// The `CircuitOpenError` of a call refused by an open circuit: nothing was sent.
#[cold]
#[inline(never)]
pub fn circuit_open_error(origin: &str, retry_after_ms: f64) -> JsValue {
    let wait = retry_after_ms.max(0.0).ceil();
    let mut msg = String::from("retryFetch: the circuit for ");
    msg.push_str(origin);
    msg.push_str(" is open; nothing was sent (retry after ");
    msg.push_str(&int(wait));
    msg.push_str(" ms)");
    let e: JsValue = named_error("CircuitOpenError", &msg).into();
    js::set(&e, "retryAfterMs", &JsValue::from_f64(wait));
    js::set(&e, "origin", &JsValue::from_str(origin));
    e
}

/// `isRetryError(error)`: is `error` a `RetryError` (by `name`, so it works across realms and
/// copies of the package)?
pub fn has_name(error: &JsValue, name: &'static str) -> bool {
    // `===` with the name (made into a JS string once): no copy of the error's.
    error.is_object() && js::get(error, "name") == js::name(name)
}
