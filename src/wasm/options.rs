//! Reading `RetryOptions` from JavaScript into a [`Policy`], once per call.
//!
//! Each present option replaces the value in the base policy (the built-in defaults, or a
//! `createRetryFetch` client's defaults); `undefined` is ignored, so per-call options merge
//! over defaults. An invalid value is a `TypeError` naming the option, the value and what is
//! allowed, raised before any request is sent. Every option is validated here, including the
//! ones only the JavaScript driver uses (`signal`, the hooks, `fetch`): the driver reads those
//! back through the getters.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::errors::{option_error, type_error};
use super::guards::{lookup, BreakerShared, Guard};
use super::js;
use crate::core::budget::RetryBudget;
use crate::core::key::{header_value, uuid_v4};
use crate::core::options::{self as validate, KeyMode, OptionError, RetryPolicy};
use crate::core::throttle::AdaptiveThrottle;

/// Everything one call needs: the validated policy, the shared guards, and the JavaScript
/// parts (`undefined` when not given). `new Policy()` is the built-in defaults.
#[wasm_bindgen(skip_typescript)]
#[derive(Clone, Default)]
pub struct Policy {
    /// The validated retry policy.
    pub(crate) policy: RetryPolicy,
    /// `signal`: cancels the call.
    signal: JsValue,
    /// `shouldRetry(ctx)`: the caller's veto on a retry.
    should_retry: JsValue,
    /// `onRetry(info)`: called before each wait.
    on_retry: JsValue,
    /// `fetch`: the transport; `undefined` means the global `fetch`.
    fetch: JsValue,
    /// `budget`: a shared `RetryBudget`.
    pub(crate) budget: Option<Rc<RefCell<RetryBudget>>>,
    /// `throttle`: a shared `AdaptiveThrottle`.
    pub(crate) throttle: Option<Rc<RefCell<AdaptiveThrottle>>>,
    /// `breaker`: a shared `CircuitBreaker`.
    pub(crate) breaker: Option<Rc<BreakerShared>>,
}

/// `Policy.flags` bit: a `RetryBudget`, `AdaptiveThrottle` or `CircuitBreaker` is set, so
/// the call needs its origin.
pub const FLAG_GUARDS: u32 = 1;
/// `Policy.flags` bit: an `AdaptiveThrottle` is set.
pub const FLAG_THROTTLE: u32 = 2;
/// `Policy.flags` bit: a `CircuitBreaker` is set.
pub const FLAG_BREAKER: u32 = 4;
/// `Policy.flags` bit: `retryHeaders` is on.
pub const FLAG_RETRY_HEADERS: u32 = 8;
/// `Policy.flags` bit: `idempotencyKey` is a fixed key (so every request needs [`Policy::key`]).
pub const FLAG_FIXED_KEY: u32 = 16;
/// `Policy.flags` bit: `idempotencyKey` is `'auto'` (non-idempotent requests need a key).
pub const FLAG_AUTO_KEY: u32 = 32;
/// `Policy.flags` bit: `timeoutMs` or `deadlineMs` is set (every attempt has a time limit).
pub const FLAG_TIME_LIMIT: u32 = 64;
/// `Policy.flags` bit: `retryOnStatus` has a status below 400. Without it, a response below
/// 400 is final, and the driver needs no [`super::call::Call`] for a call that gets one at once.
pub const FLAG_RETRY_SUCCESS: u32 = 128;
/// `Policy.flags` bit: `respectRetryAfter` is on (the driver reads `Retry-After`,
/// `RateLimit-Reset` and `RateLimit` of responses >= 400 for the `Call`).
pub const FLAG_RETRY_AFTER: u32 = 256;

#[wasm_bindgen]
impl Policy {
    /// The built-in defaults.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Policy {
        Policy::default()
    }

    /// A new policy: `options` read over this one. Throws a `TypeError` for an invalid option.
    pub fn read(&self, options: JsValue) -> Result<Policy, JsValue> {
        read(&options, self)
    }

    /// What the driver must do for this policy: the `FLAG_*` bits.
    #[wasm_bindgen(getter)]
    pub fn flags(&self) -> u32 {
        let mut f = 0;
        if self.budget.is_some() || self.throttle.is_some() || self.breaker.is_some() {
            f |= FLAG_GUARDS;
        }
        if self.throttle.is_some() {
            f |= FLAG_THROTTLE;
        }
        if self.breaker.is_some() {
            f |= FLAG_BREAKER;
        }
        if self.policy.retry_headers {
            f |= FLAG_RETRY_HEADERS;
        }
        if self.policy.timeout_ms.is_some() || self.policy.deadline_ms.is_some() {
            f |= FLAG_TIME_LIMIT;
        }
        if self.policy.retry_on_status.iter().any(|&s| s < 400) {
            f |= FLAG_RETRY_SUCCESS;
        }
        if self.policy.respect_retry_after {
            f |= FLAG_RETRY_AFTER;
        }
        f | match self.policy.idempotency_key {
            KeyMode::Fixed(_) => FLAG_FIXED_KEY,
            KeyMode::Auto => FLAG_AUTO_KEY,
            KeyMode::Off => 0,
        }
    }

    /// `signal` (`undefined` when not given).
    #[wasm_bindgen(getter)]
    pub fn signal(&self) -> JsValue {
        self.signal.clone()
    }

    /// `shouldRetry` (`undefined` when not given).
    #[wasm_bindgen(getter, js_name = shouldRetry)]
    pub fn should_retry(&self) -> JsValue {
        self.should_retry.clone()
    }

    /// `onRetry` (`undefined` when not given).
    #[wasm_bindgen(getter, js_name = onRetry)]
    pub fn on_retry(&self) -> JsValue {
        self.on_retry.clone()
    }

    /// `fetch` (`undefined` when not given: the global `fetch`).
    #[wasm_bindgen(getter)]
    pub fn fetch(&self) -> JsValue {
        self.fetch.clone()
    }

    /// `maxBufferedBodyBytes`.
    #[wasm_bindgen(getter, js_name = maxBody)]
    pub fn max_body(&self) -> u32 {
        self.policy.max_buffered_body_bytes
    }

    /// `deadlineMs`, or `-1` when there is none.
    #[wasm_bindgen(getter, js_name = deadlineMs)]
    pub fn deadline_ms(&self) -> f64 {
        self.policy.deadline_ms.unwrap_or(-1.0)
    }

    /// `idempotencyHeader`.
    #[wasm_bindgen(getter)]
    pub fn header(&self) -> String {
        self.policy.idempotency_header.clone()
    }

    /// The idempotency key to add to a request, unquoted; `undefined` for none. `existing`
    /// is the key the caller's headers already carry. A fixed `idempotencyKey` always wins;
    /// otherwise the caller's key is kept (nothing to add), and `'auto'` makes a UUID v4 for a
    /// non-idempotent method from `crypto.getRandomValues`.
    pub fn key(&self, idempotent: bool, has_existing: bool) -> Result<Option<String>, JsValue> {
        match &self.policy.idempotency_key {
            KeyMode::Fixed(k) => Ok(Some(k.clone())),
            KeyMode::Auto if !idempotent && !has_existing => {
                let mut bytes = [0u8; 16];
                getrandom::fill(&mut bytes).map_err(|_| {
                    type_error(
                        "retryFetch: crypto.getRandomValues is unavailable, so no idempotency key can be made",
                    )
                })?;
                Ok(Some(uuid_v4(bytes)))
            }
            _ => Ok(None),
        }
    }

    /// The header value carrying `key` in the `idempotencyKeyFormat`.
    pub fn wire(&self, key: &str) -> String {
        header_value(key, self.policy.idempotency_key_format)
    }
}

fn expect_number(
    option: &'static str,
    v: &JsValue,
    expected: &'static str,
) -> Result<f64, JsValue> {
    v.as_f64()
        .ok_or_else(|| option_error(OptionError::new(option, expected), v))
}

fn expect_bool(option: &'static str, v: &JsValue) -> Result<bool, JsValue> {
    v.as_bool()
        .ok_or_else(|| option_error(OptionError::new(option, "true or false"), v))
}

fn expect_string(
    option: &'static str,
    v: &JsValue,
    expected: &'static str,
) -> Result<String, JsValue> {
    v.as_string()
        .ok_or_else(|| option_error(OptionError::new(option, expected), v))
}

/// A function option: the function, or `undefined` for `null`.
fn expect_function(option: &'static str, v: &JsValue) -> Result<JsValue, JsValue> {
    if v.is_null() {
        return Ok(JsValue::UNDEFINED);
    }
    if v.is_function() {
        Ok(v.clone())
    } else {
        Err(option_error(OptionError::new(option, "a function"), v))
    }
}

/// Is `v` an AbortSignal (duck-typed, so signals from another realm or a polyfill work)?
pub fn is_abort_signal(v: &JsValue) -> bool {
    v.is_object()
        && js::get(v, "addEventListener").is_function()
        && js::get(v, "aborted").as_bool().is_some()
}

/// Read `options` over `base`.
pub fn read(options: &JsValue, base: &Policy) -> Result<Policy, JsValue> {
    let mut out = base.clone();
    if options.is_undefined() || options.is_null() {
        return Ok(out);
    }
    if !options.is_object() {
        return Err(option_error(
            OptionError::new("options", "an object"),
            options,
        ));
    }

    const INT_1_100: &str = "an integer from 1 to 100";
    const MS: &str = "a finite number of milliseconds >= 0";
    const POSITIVE_MS: &str = "a number of milliseconds > 0 and <= 2147483647";

    // Only the options that are there: typically a few own keys, not every name.
    let keys = js_sys::Object::keys(options.unchecked_ref::<js_sys::Object>());
    for key in keys.iter() {
        let Some(name) = key.as_string() else {
            continue;
        };
        // a throwing getter rejects the call with its error
        let v = js_sys::Reflect::get(options, &key)?;
        if v.is_undefined() {
            continue;
        }
        let p = &mut out.policy;
        match name.as_str() {
            "maxAttempts" => {
                let n = expect_number("maxAttempts", &v, INT_1_100)?;
                p.max_attempts = validate::max_attempts(n).map_err(|e| option_error(e, &v))?;
            }
            "baseDelayMs" => {
                let n = expect_number("baseDelayMs", &v, MS)?;
                p.base_delay_ms =
                    validate::non_negative_ms("baseDelayMs", n).map_err(|e| option_error(e, &v))?;
            }
            "factor" => {
                let n = expect_number("factor", &v, "a finite number from 1 to 100")?;
                p.factor = validate::factor(n).map_err(|e| option_error(e, &v))?;
            }
            "maxDelayMs" => {
                let n = expect_number("maxDelayMs", &v, MS)?;
                p.max_delay_ms =
                    validate::non_negative_ms("maxDelayMs", n).map_err(|e| option_error(e, &v))?;
            }
            "jitter" => {
                let expected = "'none', 'full', 'equal', 'decorrelated' or 'additive'";
                let s = expect_string("jitter", &v, expected)?;
                p.jitter = validate::jitter(&s).map_err(|e| option_error(e, &v))?;
            }
            "retryOnStatus" => {
                let bad = || {
                    option_error(
                        OptionError::new(
                            "retryOnStatus",
                            "an array of integer HTTP statuses from 100 to 599",
                        ),
                        &v,
                    )
                };
                let arr = v
                    .dyn_ref::<Array>()
                    .filter(|_| Array::is_array(&v))
                    .ok_or_else(bad)?;
                if arr.length() > 500 {
                    return Err(bad());
                }
                let mut statuses = Vec::with_capacity(arr.length() as usize);
                for item in arr.iter() {
                    let n = item.as_f64().ok_or_else(bad)?;
                    statuses.push(validate::status_code(n).map_err(|e| option_error(e, &item))?);
                }
                p.retry_on_status = statuses;
            }
            "retryOnNetworkError" => {
                p.retry_on_network_error = expect_bool("retryOnNetworkError", &v)?;
            }
            "retryOnTimeout" => {
                p.retry_on_timeout = expect_bool("retryOnTimeout", &v)?;
            }
            "timeoutMs" => {
                p.timeout_ms = optional_ms("timeoutMs", &v, POSITIVE_MS, validate::positive_ms)?;
            }
            "deadlineMs" => {
                p.deadline_ms = optional_ms("deadlineMs", &v, POSITIVE_MS, validate::positive_ms)?;
            }
            "respectRetryAfter" => {
                p.respect_retry_after = expect_bool("respectRetryAfter", &v)?;
            }
            "maxRetryAfterMs" => {
                p.max_retry_after_ms =
                    optional_ms("maxRetryAfterMs", &v, MS, validate::non_negative_ms)?;
            }
            "idempotencyKey" => {
                let expected = "'auto', false, or a key of 1 to 255 visible ASCII characters";
                p.idempotency_key = if v.as_bool() == Some(false) {
                    KeyMode::Off
                } else {
                    let s = expect_string("idempotencyKey", &v, expected)?;
                    validate::key_mode(&s).map_err(|e| option_error(e, &v))?
                };
            }
            "idempotencyHeader" => {
                let s = expect_string("idempotencyHeader", &v, "an HTTP header name")?;
                p.idempotency_header =
                    validate::header_name(&s).map_err(|e| option_error(e, &v))?;
            }
            "idempotencyKeyFormat" => {
                let s = expect_string("idempotencyKeyFormat", &v, "'plain' or 'sf-string'")?;
                p.idempotency_key_format =
                    validate::key_format(&s).map_err(|e| option_error(e, &v))?;
            }
            "retryHeaders" => {
                p.retry_headers = expect_bool("retryHeaders", &v)?;
            }
            "maxBufferedBodyBytes" => {
                let n = expect_number(
                    "maxBufferedBodyBytes",
                    &v,
                    "an integer number of bytes from 0 to 2147483647",
                )?;
                p.max_buffered_body_bytes =
                    validate::body_limit(n).map_err(|e| option_error(e, &v))?;
            }
            "signal" => {
                out.signal = if v.is_null() {
                    JsValue::UNDEFINED
                } else if is_abort_signal(&v) {
                    v
                } else {
                    return Err(option_error(
                        OptionError::new("signal", "an AbortSignal"),
                        &v,
                    ));
                };
            }
            "shouldRetry" => {
                out.should_retry = expect_function("shouldRetry", &v)?;
            }
            "onRetry" => {
                out.on_retry = expect_function("onRetry", &v)?;
            }
            "fetch" => {
                out.fetch = expect_function("fetch", &v)?;
            }
            "budget" => {
                out.budget = match (v.is_null(), lookup(&v)) {
                    (true, _) => None,
                    (false, Some(Guard::Budget(b))) => Some(b),
                    _ => {
                        return Err(option_error(
                            OptionError::new("budget", "a RetryBudget"),
                            &v,
                        ))
                    }
                };
            }
            "throttle" => {
                out.throttle = match (v.is_null(), lookup(&v)) {
                    (true, _) => None,
                    (false, Some(Guard::Throttle(t))) => Some(t),
                    _ => {
                        return Err(option_error(
                            OptionError::new("throttle", "an AdaptiveThrottle"),
                            &v,
                        ))
                    }
                };
            }
            "breaker" => {
                out.breaker = match (v.is_null(), lookup(&v)) {
                    (true, _) => None,
                    (false, Some(Guard::Breaker(b))) => Some(b),
                    _ => {
                        return Err(option_error(
                            OptionError::new("breaker", "a CircuitBreaker"),
                            &v,
                        ))
                    }
                };
            }
            _ => {} // unknown names are ignored (TypeScript flags them)
        }
    }
    Ok(out)
}

/// An optional duration: `null` clears it, a number is validated by `check`.
fn optional_ms(
    option: &'static str,
    v: &JsValue,
    expected: &'static str,
    check: fn(&'static str, f64) -> Result<f64, OptionError>,
) -> Result<Option<f64>, JsValue> {
    if v.is_null() {
        return Ok(None);
    }
    let n = expect_number(option, v, expected)?;
    check(option, n).map(Some).map_err(|e| option_error(e, v))
}

/// The `count` argument of `backoffDelays`.
pub fn read_count(v: &JsValue) -> Result<u32, JsValue> {
    let expected = "an integer from 0 to 10000";
    let n = v
        .as_f64()
        .ok_or_else(|| option_error(OptionError::new("count", expected), v))?;
    validate::delay_count(n).map_err(|e| option_error(e, v))
}

/// The optional `seed` argument of `backoffDelays`: a finite number, or `undefined`.
pub fn read_seed(v: &JsValue) -> Result<Option<u64>, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    match v.as_f64() {
        Some(n) if n.is_finite() => Ok(Some(n.to_bits())),
        _ => Err(option_error(OptionError::new("seed", "a finite number"), v)),
    }
}
