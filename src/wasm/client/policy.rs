//! Reading `RetryOptions` from JavaScript into a [`Policy`].
//!
//! 1. The options given (`crate::wasm::read_options`, shared with the guards and the server
//!    half): only the own enumerable keys, each getter run once; an unknown name is a
//!    `TypeError` naming the closest known one.
//! 2. [`apply`]: each value converted by its name in one table, validated by the core
//!    (`crate::core::options`) over the base policy (the built-in defaults or a
//!    `createRetryFetch` client's): an invalid one is a `TypeError` naming the option, the
//!    value and what is allowed, raised before anything is sent.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::errors::option_error;
use super::guards::{lookup, BreakerShared, Guard};
use crate::core::budget::RetryBudget;
use crate::core::options::{
    self as validate, KeyMode, OptionError, RetryPolicy, RETRY_OPTION_NAMES,
};
use crate::core::throttle::AdaptiveThrottle;
use crate::wasm::errors::{describe, type_error};
use crate::wasm::js;

/// Everything a call needs besides the request: the validated policy, the shared guards and
/// the caller's JavaScript values. `Policy::default()` is the built-in defaults.
#[derive(Clone)]
pub struct Policy {
    /// The validated retry policy.
    pub retry: RetryPolicy,
    /// `signal`: cancels the call. Default none.
    pub signal: Option<JsValue>,
    /// The `signal`s of a `createRetryFetch` client (and of each `extend` over it) that a
    /// later one was given over: every one of them cancels the call too. Default none.
    pub default_signals: Vec<JsValue>,
    /// `shouldRetry(ctx)`: the caller's veto on a retry. Default none.
    pub should_retry: Option<Function>,
    /// `onRetry(info)`: called before each wait. Default none.
    pub on_retry: Option<Function>,
    /// `beforeRetry(info)`: called before each retry is sent; may return headers to set on
    /// it (a refreshed token). Default none.
    pub before_retry: Option<Function>,
    /// `onSettled(info)`: called once when the call ends, with its attempts. Default none.
    pub on_settled: Option<Function>,
    /// `headers`: headers every call of a client sends unless its request has them (ky's
    /// `create({ headers })`). Default none.
    pub headers: Option<web_sys::Headers>,
    /// `fetch`: the transport. Default none (the global `fetch`).
    pub fetch: Option<Function>,
    /// `budget`: a shared `RetryBudget`. `None` with `default_budget`: the default budget.
    pub budget: Option<Rc<RefCell<RetryBudget>>>,
    /// The default budget applies (`budget` not given or `null`; `false` turns it off).
    /// Default true.
    pub default_budget: bool,
    /// `budget: 'own'`: a default budget of this client's own (same rule, its own counts),
    /// instead of the one every call and client of the package shares. Default none.
    pub own_budget: Option<Rc<RefCell<crate::core::budget::RetryRatio>>>,
    /// `throttle`: a shared `AdaptiveThrottle`. `None` with `default_throttle`: the default
    /// throttle. Default none.
    pub throttle: Option<Rc<RefCell<AdaptiveThrottle>>>,
    /// The default throttle applies (`throttle` not given or `null`; `false` turns it off, an
    /// `AdaptiveThrottle` replaces it). Default true.
    pub default_throttle: bool,
    /// `breaker`: a shared `CircuitBreaker`. Default none.
    pub breaker: Option<Rc<BreakerShared>>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            retry: RetryPolicy::default(),
            signal: None,
            default_signals: Vec::new(),
            should_retry: None,
            on_retry: None,
            before_retry: None,
            on_settled: None,
            headers: None,
            fetch: None,
            budget: None,
            default_budget: true,
            own_budget: None,
            throttle: None,
            default_throttle: true,
            breaker: None,
        }
    }
}

impl Policy {
    /// Is any guard set (so the call needs the request's origin)?
    pub fn has_guards(&self) -> bool {
        self.budget.is_some() || self.throttle.is_some() || self.breaker.is_some()
    }
}

/// What `budget` must be.
pub const BUDGET_EXPECTED: &str =
    "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)";

/// What `throttle` must be.
pub const THROTTLE_EXPECTED: &str = "an AdaptiveThrottle, or false (no throttle)";

/// What each option allows, for the `TypeError` of a value of the wrong type: the core's
/// text, and the guards' here (they name a class).
fn expected(option: &str) -> &'static str {
    match option {
        "budget" => BUDGET_EXPECTED,
        "throttle" => THROTTLE_EXPECTED,
        "breaker" => "a CircuitBreaker",
        other => validate::expected(other),
    }
}

/// The `TypeError` for option `name` given `value`, which its type or range does not allow.
#[cold]
#[inline(never)]
fn bad(name: &'static str, value: &JsValue) -> JsValue {
    option_error(OptionError::new(name, expected(name)), value)
}

/// `value` as a number, or the option's `TypeError`.
fn number(name: &'static str, value: &JsValue) -> Result<f64, JsValue> {
    value.as_f64().ok_or_else(|| bad(name, value))
}

/// `value` as `true` or `false`, or the option's `TypeError`.
fn boolean(name: &'static str, value: &JsValue) -> Result<bool, JsValue> {
    value.as_bool().ok_or_else(|| bad(name, value))
}

/// `value` as a string, or the option's `TypeError`.
fn text(name: &'static str, value: &JsValue) -> Result<String, JsValue> {
    value.as_string().ok_or_else(|| bad(name, value))
}

/// `retryOnStatus`: an array of at most 500 statuses; an error names the first bad item.
fn statuses(value: &JsValue) -> Result<Vec<u16>, JsValue> {
    let too_many = |len: u32| {
        let mut msg = String::from("retryFetch: invalid option \"retryOnStatus\": ");
        msg.push_str(&len.to_string());
        msg.push_str(" items; expected at most 500 (there are 500 HTTP statuses, 100 to 599)");
        type_error(&msg)
    };
    let Some(len) = js::array_length(value)? else {
        return Err(bad("retryOnStatus", value));
    };
    if len > 500.0 {
        return Err(too_many(len.min(f64::from(u32::MAX)) as u32));
    }
    // A copy of ours: a proxy's traps and the items' getters run once, here.
    let list = js::array_copy(value)?;
    let len = list.length();
    if len > 500 {
        return Err(too_many(len));
    }
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let item = list.get(i);
        match item.as_f64().map(validate::status_code) {
            Some(Ok(status)) => out.push(status),
            _ => {
                let mut msg = String::from("retryFetch: invalid option \"retryOnStatus\": item [");
                msg.push_str(&i.to_string());
                msg.push_str("] is ");
                msg.push_str(&describe(&item));
                msg.push_str("; expected ");
                msg.push_str(validate::STATUSES_EXPECTED);
                return Err(type_error(&msg));
            }
        }
    }
    Ok(out)
}

/// Read `options` over `base`: a new policy, or a `TypeError` naming the bad option.
pub fn read(options: &JsValue, base: &Policy) -> Result<Policy, JsValue> {
    apply(&named(&own_values(options)?)?, base)
}

/// The own values of `options` (`crate::wasm::read_options::own_values`), names not checked.
pub fn own_values(options: &JsValue) -> Result<Vec<(JsValue, JsValue)>, JsValue> {
    crate::wasm::read_options::own_values("retryFetch", options)
}

/// [`own_values`] by their names: an unknown name is a `TypeError`.
pub fn named(values: &[(JsValue, JsValue)]) -> Result<Vec<(&'static str, JsValue)>, JsValue> {
    crate::wasm::read_options::named("retryFetch", values, &RETRY_OPTION_NAMES)
}

/// The options `given` over `base`: a new policy, or a `TypeError` naming the bad option.
/// Each value is converted by its name (the one table of the client's options).
pub fn apply(given: &[(&'static str, JsValue)], base: &Policy) -> Result<Policy, JsValue> {
    let mut out = base.clone();
    for (name, v) in given {
        let (name, v) = (*name, v.clone());
        let p = &mut out.retry;
        let invalid = |e: OptionError| option_error(e, &v);
        if v.is_null() {
            // `null` clears the options that can be "none" (e.g. to override a
            // `createRetryFetch` default); for any other option it is an invalid value.
            match name {
                "timeoutMs" => p.timeout_ms = None,
                "deadlineMs" => p.deadline_ms = None,
                "maxRetryAfterMs" => p.max_retry_after_ms = None,
                "signal" => {
                    out.signal = None;
                    out.default_signals.clear();
                }
                "shouldRetry" => out.should_retry = None,
                "onRetry" => out.on_retry = None,
                "beforeRetry" => out.before_retry = None,
                "onSettled" => out.on_settled = None,
                "headers" => out.headers = None,
                "fetch" => out.fetch = None,
                "budget" => {
                    out.budget = None;
                    out.default_budget = true;
                    out.own_budget = None;
                }
                "throttle" => {
                    out.throttle = None;
                    out.default_throttle = true;
                }
                "breaker" => out.breaker = None,
                _ => return Err(bad(name, &v)),
            }
            continue;
        }
        match name {
            "maxAttempts" => {
                p.max_attempts = validate::max_attempts(number(name, &v)?).map_err(invalid)?
            }
            "baseDelayMs" | "maxDelayMs" | "maxRetryAfterMs" => {
                let ms = validate::non_negative_ms(name, number(name, &v)?).map_err(invalid)?;
                match name {
                    "baseDelayMs" => p.base_delay_ms = ms,
                    "maxDelayMs" => p.max_delay_ms = ms,
                    _ => p.max_retry_after_ms = Some(ms),
                }
            }
            "timeoutMs" | "deadlineMs" => {
                let ms = validate::positive_ms(name, number(name, &v)?).map_err(invalid)?;
                match name {
                    "timeoutMs" => p.timeout_ms = Some(ms),
                    _ => p.deadline_ms = Some(ms),
                }
            }
            "factor" => p.factor = validate::factor(number(name, &v)?).map_err(invalid)?,
            "jitter" => p.jitter = validate::jitter(&text(name, &v)?).map_err(invalid)?,
            "retryOnStatus" => {
                p.retry_on_status = statuses(&v)?;
                p.retry_keyed_conflict = false; // the caller's list is the whole list
            }
            "retryOnNetworkError" => p.retry_on_network_error = boolean(name, &v)?,
            "retryOnTimeout" => p.retry_on_timeout = boolean(name, &v)?,
            "respectRetryAfter" => p.respect_retry_after = boolean(name, &v)?,
            "retryHeaders" => p.retry_headers = boolean(name, &v)?,
            "followAccepted" => p.follow_accepted = boolean(name, &v)?,
            "idempotencyKey" => {
                p.idempotency_key = match (v.as_bool(), v.as_string()) {
                    (Some(false), _) => KeyMode::Off,
                    (_, Some(s)) => validate::key_mode(&s).map_err(invalid)?,
                    _ => return Err(bad(name, &v)),
                }
            }
            "idempotencyHeader" => {
                p.idempotency_header = validate::header_name(&text(name, &v)?).map_err(invalid)?
            }
            "idempotencyKeyFormat" => {
                p.idempotency_key_format =
                    validate::key_format(&text(name, &v)?).map_err(invalid)?
            }
            "maxBufferedBodyBytes" => {
                p.max_buffered_body_bytes =
                    validate::body_limit(number(name, &v)?).map_err(invalid)?
            }
            "signal" => {
                if !is_abort_signal(&v) {
                    return Err(bad(name, &v));
                }
                // A client's default signal still cancels the call (ky, and init.signal,
                // combine too).
                out.default_signals.extend(out.signal.take());
                out.signal = Some(v);
            }
            "shouldRetry" | "onRetry" | "beforeRetry" | "onSettled" | "fetch" => {
                let f = Some(v.dyn_into::<Function>().map_err(|v| bad(name, &v))?);
                match name {
                    "shouldRetry" => out.should_retry = f,
                    "onRetry" => out.on_retry = f,
                    "beforeRetry" => out.before_retry = f,
                    "onSettled" => out.on_settled = f,
                    _ => out.fetch = f,
                }
            }
            "headers" => {
                // Over the client's own: the later default wins for a name both set.
                let given = web_sys::Headers::new_with_str_sequence_sequence(&v)
                    .map_err(|_| bad(name, &v))?;
                let merged = match &out.headers {
                    Some(h) => web_sys::Headers::new_with_headers(h)?,
                    None => web_sys::Headers::new()?,
                };
                super::request::copy_headers(&given, &merged, None)?;
                out.headers = Some(merged);
            }
            "budget" => {
                if v.as_bool() == Some(false) {
                    out.budget = None;
                    out.default_budget = false;
                    out.own_budget = None;
                } else if v.as_string().as_deref() == Some("own") {
                    // One noisy poller's failures cannot switch off a critical client's retries.
                    out.budget = None;
                    out.default_budget = true;
                    out.own_budget =
                        Some(Rc::new(RefCell::new(crate::core::budget::RetryRatio::new(
                            crate::core::budget::RetryRatioConfig::default(),
                        ))));
                } else if let Guard::Budget(b) = lookup(name, &v)? {
                    out.budget = Some(b);
                    out.default_budget = false;
                    out.own_budget = None;
                } else {
                    return Err(bad(name, &v));
                }
            }
            "throttle" if v.as_bool() == Some(false) => {
                out.throttle = None;
                out.default_throttle = false;
            }
            "throttle" => match lookup(name, &v)? {
                Guard::Throttle(t) => {
                    out.throttle = Some(t);
                    out.default_throttle = false;
                }
                _ => return Err(bad(name, &v)),
            },
            _ => match lookup(name, &v)? {
                Guard::Breaker(b) => out.breaker = Some(b),
                _ => return Err(bad(name, &v)),
            },
        }
    }
    Ok(out)
}

/// Is `v` an AbortSignal (duck-typed, so signals from another realm or a polyfill work)?
pub fn is_abort_signal(v: &JsValue) -> bool {
    v.is_object()
        && js::get(v, "addEventListener").is_function()
        && js::get(v, "aborted").as_bool().is_some()
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
