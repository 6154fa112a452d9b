//! Reading `RetryOptions` from JavaScript into a [`Policy`], with serde-wasm-bindgen.
//!
//! 1. A snapshot of the own options and serde (`crate::wasm::read_options`, shared with the server
//!    half): unknown names are `TypeError`s naming the closest known one; the snapshot is
//!    deserialized into [`RawOptions`] (a `#[derive(Deserialize)]` struct, camelCase names;
//!    `signal`, `fetch`, the hooks, the guards and `idempotencyKey` (`'auto'`, a key or
//!    `false`) stay JS values through `serde_wasm_bindgen::preserve`).
//! 2. The core validates every value (`crate::core::options`) over the base policy (the
//!    built-in defaults or a `createRetryFetch` client's): an invalid one is a `TypeError`
//!    naming the option, the value and what is allowed, raised before anything is sent.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Function;
use serde::Deserialize;
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
pub use crate::wasm::read_options::deserialize;

/// Everything a call needs besides the request: the validated policy, the shared guards and
/// the caller's JavaScript values. `Policy::default()` is the built-in defaults.
#[derive(Clone)]
pub struct Policy {
    /// The validated retry policy.
    pub retry: RetryPolicy,
    /// `signal`: cancels the call. Default none.
    pub signal: Option<JsValue>,
    /// A `createRetryFetch` client's default `signal` when a call gives its own: both cancel
    /// the call. Default none.
    pub default_signal: Option<JsValue>,
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
    /// `throttle`: a shared `AdaptiveThrottle`. Default none.
    pub throttle: Option<Rc<RefCell<AdaptiveThrottle>>>,
    /// `breaker`: a shared `CircuitBreaker`. Default none.
    pub breaker: Option<Rc<BreakerShared>>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            retry: RetryPolicy::default(),
            signal: None,
            default_signal: None,
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

/// The options as serde reads them: every field optional (absent, `undefined` and a cleared
/// `null` are all `None` here; `null` was noted by the snapshot).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawOptions {
    max_attempts: Option<f64>,
    base_delay_ms: Option<f64>,
    factor: Option<f64>,
    max_delay_ms: Option<f64>,
    jitter: Option<String>,
    retry_on_status: Option<Vec<f64>>,
    retry_on_network_error: Option<bool>,
    retry_on_timeout: Option<bool>,
    timeout_ms: Option<f64>,
    deadline_ms: Option<f64>,
    respect_retry_after: Option<bool>,
    max_retry_after_ms: Option<f64>,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    idempotency_key: JsValue,
    idempotency_header: Option<String>,
    idempotency_key_format: Option<String>,
    retry_headers: Option<bool>,
    max_buffered_body_bytes: Option<f64>,
    follow_accepted: Option<bool>,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    signal: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    should_retry: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    on_retry: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    before_retry: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    on_settled: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    headers: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    fetch: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    budget: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    throttle: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    breaker: JsValue,
}

/// What each option allows, for the `TypeError` of a value of the wrong type: the core's
/// text, and the guards' here (they name a class).
fn expected(option: &str) -> &'static str {
    match option {
        "budget" => BUDGET_EXPECTED,
        "throttle" => "an AdaptiveThrottle",
        "breaker" => "a CircuitBreaker",
        other => validate::expected(other),
    }
}

/// Read `options` over `base`: a new policy, or a `TypeError` naming the bad option.
pub fn read(options: &JsValue, base: &Policy) -> Result<Policy, JsValue> {
    if options.is_undefined() || options.is_null() {
        return Ok(base.clone());
    }
    let (raw, snap, nulls): (RawOptions, _, _) =
        deserialize("retryFetch", options, &RETRY_OPTION_NAMES, expected)?;
    let mut out = base.clone();
    // `null` clears the options that can be "none" (e.g. to override a `createRetryFetch`
    // default); for any other option it is an invalid value.
    for name in &nulls {
        match *name {
            "timeoutMs" => out.retry.timeout_ms = None,
            "deadlineMs" => out.retry.deadline_ms = None,
            "maxRetryAfterMs" => out.retry.max_retry_after_ms = None,
            "signal" => {
                out.signal = None;
                out.default_signal = None;
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
            "throttle" => out.throttle = None,
            "breaker" => out.breaker = None,
            other => {
                return Err(option_error(
                    OptionError::new(other, expected(other)),
                    &JsValue::NULL,
                ))
            }
        }
    }
    let value = |name: &str| js::get(&snap, name);
    let check =
        |r: Result<f64, OptionError>, name: &str| r.map_err(|e| option_error(e, &value(name)));
    let p = &mut out.retry;
    if let Some(n) = raw.max_attempts {
        p.max_attempts =
            validate::max_attempts(n).map_err(|e| option_error(e, &value("maxAttempts")))?;
    }
    if let Some(n) = raw.base_delay_ms {
        p.base_delay_ms = check(validate::non_negative_ms("baseDelayMs", n), "baseDelayMs")?;
    }
    if let Some(n) = raw.factor {
        p.factor = check(validate::factor(n), "factor")?;
    }
    if let Some(n) = raw.max_delay_ms {
        p.max_delay_ms = check(validate::non_negative_ms("maxDelayMs", n), "maxDelayMs")?;
    }
    if let Some(j) = &raw.jitter {
        p.jitter = validate::jitter(j).map_err(|e| option_error(e, &value("jitter")))?;
    }
    if let Some(list) = raw.retry_on_status {
        if list.len() > 500 {
            let mut msg = String::from("retryFetch: invalid option \"retryOnStatus\": ");
            msg.push_str(&list.len().to_string());
            msg.push_str(" items; expected at most 500 (there are 500 HTTP statuses, 100 to 599)");
            return Err(type_error(&msg));
        }
        let mut statuses = Vec::with_capacity(list.len());
        for (i, n) in list.iter().enumerate() {
            let status = validate::status_code(*n).map_err(|_| {
                let mut msg = String::from("retryFetch: invalid option \"retryOnStatus\": item [");
                msg.push_str(&i.to_string());
                msg.push_str("] is ");
                msg.push_str(&describe(&JsValue::from_f64(*n)));
                msg.push_str("; expected ");
                msg.push_str(validate::STATUSES_EXPECTED);
                type_error(&msg)
            })?;
            statuses.push(status);
        }
        p.retry_on_status = statuses;
        p.retry_keyed_conflict = false; // the caller's list is the whole list
    }
    if let Some(b) = raw.retry_on_network_error {
        p.retry_on_network_error = b;
    }
    if let Some(b) = raw.retry_on_timeout {
        p.retry_on_timeout = b;
    }
    if let Some(n) = raw.timeout_ms {
        p.timeout_ms = Some(check(validate::positive_ms("timeoutMs", n), "timeoutMs")?);
    }
    if let Some(n) = raw.deadline_ms {
        p.deadline_ms = Some(check(validate::positive_ms("deadlineMs", n), "deadlineMs")?);
    }
    if let Some(b) = raw.respect_retry_after {
        p.respect_retry_after = b;
    }
    if let Some(n) = raw.max_retry_after_ms {
        p.max_retry_after_ms = Some(check(
            validate::non_negative_ms("maxRetryAfterMs", n),
            "maxRetryAfterMs",
        )?);
    }
    let k = &raw.idempotency_key;
    if !k.is_undefined() {
        p.idempotency_key = match (k.as_bool(), k.as_string()) {
            (Some(false), _) => KeyMode::Off,
            (_, Some(s)) => validate::key_mode(&s).map_err(|e| option_error(e, k))?,
            _ => {
                return Err(option_error(
                    OptionError::new("idempotencyKey", expected("idempotencyKey")),
                    k,
                ))
            }
        };
    }
    if let Some(h) = raw.idempotency_header {
        p.idempotency_header =
            validate::header_name(&h).map_err(|e| option_error(e, &value("idempotencyHeader")))?;
    }
    if let Some(f) = &raw.idempotency_key_format {
        p.idempotency_key_format =
            validate::key_format(f).map_err(|e| option_error(e, &value("idempotencyKeyFormat")))?;
    }
    if let Some(b) = raw.retry_headers {
        p.retry_headers = b;
    }
    if let Some(n) = raw.max_buffered_body_bytes {
        p.max_buffered_body_bytes =
            validate::body_limit(n).map_err(|e| option_error(e, &value("maxBufferedBodyBytes")))?;
    }
    if let Some(b) = raw.follow_accepted {
        p.follow_accepted = b;
    }
    if !raw.signal.is_undefined() {
        if !is_abort_signal(&raw.signal) {
            return Err(option_error(
                OptionError::new("signal", "an AbortSignal"),
                &raw.signal,
            ));
        }
        // A client's default signal still cancels the call (ky, and init.signal, combine too).
        out.default_signal = out.signal.take().or(out.default_signal.take());
        out.signal = Some(raw.signal);
    }
    for (name, v, slot) in [
        ("shouldRetry", raw.should_retry, &mut out.should_retry),
        ("onRetry", raw.on_retry, &mut out.on_retry),
        ("beforeRetry", raw.before_retry, &mut out.before_retry),
        ("onSettled", raw.on_settled, &mut out.on_settled),
        ("fetch", raw.fetch, &mut out.fetch),
    ] {
        if !v.is_undefined() {
            *slot = Some(
                v.dyn_into::<Function>()
                    .map_err(|v| option_error(OptionError::new(name, "a function"), &v))?,
            );
        }
    }
    if !raw.headers.is_undefined() {
        // Over the client's own: the later default wins for a name both set.
        let given =
            web_sys::Headers::new_with_str_sequence_sequence(&raw.headers).map_err(|_| {
                option_error(
                    OptionError::new(
                        "headers",
                        "headers: a Headers, an object of strings or [name, value] pairs",
                    ),
                    &raw.headers,
                )
            })?;
        let merged = match &out.headers {
            Some(h) => web_sys::Headers::new_with_headers(h)?,
            None => web_sys::Headers::new()?,
        };
        super::request::copy_headers(&given, &merged, false)?;
        out.headers = Some(merged);
    }
    if raw.budget.as_bool() == Some(false) {
        out.budget = None;
        out.default_budget = false;
        out.own_budget = None;
    } else if raw.budget.as_string().as_deref() == Some("own") {
        // One noisy poller's failures cannot switch off a critical client's retries.
        out.budget = None;
        out.default_budget = true;
        out.own_budget = Some(Rc::new(RefCell::new(crate::core::budget::RetryRatio::new(
            crate::core::budget::RetryRatioConfig::default(),
        ))));
    } else if !raw.budget.is_undefined() {
        match lookup("budget", &raw.budget)? {
            Guard::Budget(b) => {
                out.budget = Some(b);
                out.default_budget = false;
                out.own_budget = None;
            }
            _ => {
                return Err(option_error(
                    OptionError::new("budget", expected("budget")),
                    &raw.budget,
                ))
            }
        }
    }
    if !raw.throttle.is_undefined() {
        match lookup("throttle", &raw.throttle)? {
            Guard::Throttle(t) => out.throttle = Some(t),
            _ => {
                return Err(option_error(
                    OptionError::new("throttle", "an AdaptiveThrottle"),
                    &raw.throttle,
                ))
            }
        }
    }
    if !raw.breaker.is_undefined() {
        match lookup("breaker", &raw.breaker)? {
            Guard::Breaker(b) => out.breaker = Some(b),
            _ => {
                return Err(option_error(
                    OptionError::new("breaker", "a CircuitBreaker"),
                    &raw.breaker,
                ))
            }
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
