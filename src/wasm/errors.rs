//! Turning failures into JavaScript `Error`s with stable `name`s.
//!
//! | name | when |
//! |---|---|
//! | `TypeError` | an invalid option, `init` or `input` (before anything is sent) |
//! | `RetryError` | the call ended on a network error or timeout; has `attempts`, `cause`, `reason` |
//! | `TimeoutError` | the `cause` of an attempt that hit `timeoutMs` or the deadline |
//! | the signal's reason | the call was aborted (an `AbortError` DOMException when no reason was given) |

use js_sys::{Array, JsString};
use wasm_bindgen::prelude::*;

use super::js;
use crate::core::options::OptionError;

/// `n` in decimal, without `core::fmt` (which would add kilobytes to the wasm).
pub fn decimal(mut n: u64) -> String {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits[i..].iter().map(|&d| d as char).collect()
}

/// A short, readable rendering of a JS value for an error message: strings quoted
/// (`"3"`), everything else as `String(value)` (`NaN`, `[object Object]`, `null`).
pub fn describe(value: &JsValue) -> String {
    if let Some(s) = value.as_string() {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        out.push_str(&s);
        out.push('"');
        return out;
    }
    if value.is_function() {
        return "a function".into();
    }
    if js_sys::Array::is_array(value) {
        return "an array".into();
    }
    match js::to_js_string(value) {
        Ok(s) => String::from(s),
        Err(_) => "an object".into(),
    }
}

/// `new TypeError(message)`.
pub fn type_error(message: &str) -> JsValue {
    js_sys::TypeError::new(message).into()
}

/// The `TypeError` for an invalid option:
/// `retryFetch: invalid option "maxAttempts": got 0; expected an integer from 1 to 100`.
pub fn option_error(err: OptionError, value: &JsValue) -> JsValue {
    invalid_option("retryFetch", err, value)
}

/// The `TypeError` for an invalid option of the API `api` (`retryFetch`, `idempotency`):
/// `<api>: invalid option "<name>": got <value>; expected <what is allowed>`.
pub fn invalid_option(api: &str, err: OptionError, value: &JsValue) -> JsValue {
    let mut msg = String::from(api);
    msg.push_str(": invalid option \"");
    msg.push_str(err.option);
    msg.push_str("\": got ");
    msg.push_str(&describe(value));
    msg.push_str("; expected ");
    msg.push_str(err.expected);
    type_error(&msg)
}

/// An `Error` whose `name` is `name`.
pub fn named_error(name: &str, message: &str) -> js_sys::Error {
    let e = js_sys::Error::new(message);
    e.set_name(name);
    e
}

/// The `TimeoutError` of an attempt that ran out of time after `ms`.
pub fn timeout_error(ms: u64) -> JsValue {
    let mut msg = String::from("retryFetch: the attempt timed out after ");
    msg.push_str(&decimal(ms));
    msg.push_str(" ms");
    named_error("TimeoutError", &msg).into()
}

/// One attempt's record in `RetryError.attempts`.
pub struct AttemptRecord {
    /// 1-based attempt number.
    pub attempt: u32,
    /// `Date.now()` when the attempt started.
    pub started_at: f64,
    /// How long the attempt took, in ms.
    pub duration_ms: f64,
    /// The response status, when there was a response.
    pub status: Option<u16>,
    /// The error, when there was no response.
    pub error: Option<JsValue>,
    /// The wait that followed, when there was one.
    pub delay_ms: Option<u64>,
}

impl AttemptRecord {
    /// `{ attempt, startedAt, durationMs, status?, error?, delayMs? }`.
    pub fn to_js(&self) -> JsValue {
        let o: JsValue = js_sys::Object::new().into();
        js::set(&o, "attempt", &JsValue::from(self.attempt));
        js::set(&o, "startedAt", &JsValue::from_f64(self.started_at));
        js::set(&o, "durationMs", &JsValue::from_f64(self.duration_ms));
        if let Some(s) = self.status {
            js::set(&o, "status", &JsValue::from(s));
        }
        if let Some(e) = &self.error {
            js::set(&o, "error", e);
        }
        if let Some(d) = self.delay_ms {
            js::set(&o, "delayMs", &JsValue::from_f64(d as f64));
        }
        o
    }
}

/// The `RetryError` that ends a call on a network error or timeout:
/// `name: 'RetryError'`, `reason` (why it stopped), `attempts` (one record per attempt),
/// `cause` (the last error).
pub fn retry_error(reason: &str, attempts: &[AttemptRecord], cause: &JsValue) -> JsValue {
    let mut msg = String::from("retryFetch failed after ");
    msg.push_str(&decimal(attempts.len() as u64));
    msg.push_str(if attempts.len() == 1 {
        " attempt ("
    } else {
        " attempts ("
    });
    msg.push_str(reason);
    msg.push(')');
    let cause_message = js::get(cause, "message").as_string();
    if let Some(m) = cause_message {
        msg.push_str(": ");
        msg.push_str(&m);
    }
    let e = named_error("RetryError", &msg);
    let records: Array = attempts.iter().map(AttemptRecord::to_js).collect();
    js::set(&e, "reason", &JsString::from(reason));
    js::set(&e, "attempts", &records);
    js::set(&e, "cause", cause);
    e.into()
}
