//! Reading `RetryOptions` from JavaScript into a [`Policy`].
//!
//! 1. The options given (`crate::wasm::read_options`, shared with the guards and the server
//!    half): only the own enumerable keys, each getter run once; an unknown name is a
//!    `TypeError` naming the closest known one.
//! 2. [`apply`]: each value converted by its option (an [`Opt`], found once by its name) in
//!    one table, validated by the core (`crate::core::options`) over the base policy (the
//!    built-in defaults or a `createRetryFetch` client's): an invalid one is a `TypeError`
//!    naming the option, the value and what is allowed ([`expected`]), raised before anything
//!    is sent.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::errors::{option_error, push_decimal};
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
fn expected(opt: Opt) -> &'static str {
    use Opt::*;
    match opt {
        MaxAttempts => validate::MAX_ATTEMPTS_EXPECTED,
        BaseDelayMs | MaxDelayMs | MaxRetryAfterMs => validate::NON_NEGATIVE_MS_EXPECTED,
        Factor => validate::FACTOR_EXPECTED,
        Jitter => validate::JITTER_EXPECTED,
        RetryOnStatus => validate::STATUSES_EXPECTED,
        TimeoutMs | DeadlineMs => validate::POSITIVE_MS_EXPECTED,
        IdempotencyKey => validate::KEY_MODE_EXPECTED,
        IdempotencyHeader => validate::HEADER_NAME_EXPECTED,
        IdempotencyKeyFormat => validate::KEY_FORMAT_EXPECTED,
        MaxBufferedBodyBytes => validate::BUFFERED_BYTES_EXPECTED,
        Signal => "an AbortSignal",
        ShouldRetry | OnRetry | BeforeRetry | OnSettled | Fetch => "a function",
        Headers => "headers: a Headers, an object of strings or [name, value] pairs (valid header names, values of Latin-1 text)",
        RetryOnNetworkError | RetryOnTimeout | RespectRetryAfter | RetryHeaders
        | FollowAccepted => "true or false",
        Budget => BUDGET_EXPECTED,
        Throttle => THROTTLE_EXPECTED,
        Breaker => "a CircuitBreaker",
    }
}

/// Why [`set`] refused a value; [`apply`] makes it the `TypeError` of the function called.
pub enum Refused {
    /// Its type or range (the core's check too): "invalid option "<name>": got <value>;
    /// expected <what the option allows>".
    Value,
    /// A message of its own, after "<function>: invalid option "<name>": ".
    Message(String),
    /// An error passed on as it is (a throwing getter's or iterator's).
    Js(JsValue),
}

impl From<JsValue> for Refused {
    fn from(e: JsValue) -> Refused {
        Refused::Js(e)
    }
}

/// The core's check refused the value: its error names the option given and says what
/// [`expected`] says of it, which the `TypeError` is made of (carrying it costs code at each
/// check).
impl From<OptionError> for Refused {
    fn from(_: OptionError) -> Refused {
        Refused::Value
    }
}

impl Refused {
    /// The `TypeError` of `api` (the function called) for option `name` given `value`.
    #[cold]
    #[inline(never)]
    fn error(self, api: &str, opt: Opt, name: &'static str, value: &JsValue) -> JsValue {
        match self {
            Refused::Value => option_error(api, OptionError::new(name, expected(opt)), value),
            Refused::Message(m) => {
                let mut msg = String::from(api);
                msg.push_str(": invalid option \"");
                msg.push_str(name);
                msg.push_str("\": ");
                msg.push_str(&m);
                type_error(&msg)
            }
            Refused::Js(e) => e,
        }
    }
}

/// `value` as a number for the core's check, which refuses anything else as it refuses `NaN`
/// (every number option's check does: the same `TypeError`, naming the value given).
fn number(value: &JsValue) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

/// `value` as `true` or `false`, or refused.
#[inline(always)]
fn boolean(value: &JsValue) -> Result<bool, Refused> {
    value.as_bool().ok_or(Refused::Value)
}

/// `value` as a string for the core's check, which refuses anything else as it refuses `""`
/// (every string option's check does: the same `TypeError`, naming the value given).
fn text(value: &JsValue) -> String {
    value.as_string().unwrap_or_default()
}

/// `retryOnStatus`: an array of at most 500 statuses; an error names the first bad item.
fn statuses(value: &JsValue) -> Result<Vec<u16>, Refused> {
    let too_many = |len: f64| {
        let mut msg = String::new();
        // An exact count up to 2^53 (only a proxy says more than 2^32 - 1).
        push_decimal(&mut msg, len.min(9_007_199_254_740_992.0) as u64);
        msg.push_str(" items; expected at most 500 (there are 500 HTTP statuses, 100 to 599)");
        Refused::Message(msg)
    };
    let Some(len) = js::array_length(value)? else {
        return Err(Refused::Value);
    };
    if len > 500.0 {
        return Err(too_many(len));
    }
    // By index, each item once (a proxy's traps, the items' getters), as a client's cache
    // compares a later call's list: what the policy is made of is what the cache keeps.
    let len = len as u32;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let item = js_sys::Reflect::get_u32(value, i)?;
        match item.as_f64().map(validate::status_code) {
            Some(Ok(status)) => out.push(status),
            _ => {
                let mut msg = String::from("item [");
                push_decimal(&mut msg, i.into());
                msg.push_str("] is ");
                msg.push_str(&describe(&item));
                msg.push_str("; expected ");
                msg.push_str(validate::STATUSES_EXPECTED);
                return Err(Refused::Message(msg));
            }
        }
    }
    Ok(out)
}

/// What a call's option errors start with (`retryFetch: invalid option ...`), and those of
/// `createRetryFetch` and `backoffDelays`, which read options as a call does.
pub const CALL: &str = "retryFetch";

/// Read `options` over `base`: a new policy, or a `TypeError` of `api` (the function called:
/// [`CALL`], `client.extend`) naming the bad option.
pub fn read(api: &str, options: &JsValue, base: &Policy) -> Result<Policy, JsValue> {
    apply(api, &named(api, &own_values(api, options)?)?, base)
}

/// The own values of `options` (`crate::wasm::read_options::own_values`), names not checked;
/// `api` (the function called) starts its errors.
pub fn own_values(api: &str, options: &JsValue) -> Result<Vec<(JsValue, JsValue)>, JsValue> {
    crate::wasm::read_options::own_values(api, options)
}

/// [`own_values`] by their names: an unknown name is a `TypeError` of `api`.
pub fn named(
    api: &str,
    values: &[(JsValue, JsValue)],
) -> Result<Vec<(&'static str, JsValue)>, JsValue> {
    crate::wasm::read_options::named(api, values, &RETRY_OPTION_NAMES)
}

/// The options `given` over `base`: a new policy, or a `TypeError` of `api` (the function
/// called) naming the bad option.
pub fn apply(
    api: &str,
    given: &[(&'static str, JsValue)],
    base: &Policy,
) -> Result<Policy, JsValue> {
    let mut out = base.clone();
    for (name, v) in given {
        // `name` is one of `RETRY_OPTION_NAMES` (read by `named`): never the fallback.
        let opt = RETRY_OPTION_NAMES
            .iter()
            .position(|n| n == name)
            .and_then(|i| OPTIONS.get(i))
            .map_or(Opt::Breaker, |o| *o);
        set(&mut out, opt, name, v.clone()).map_err(|r| r.error(api, opt, name, v))?;
    }
    Ok(out)
}

/// The client's options, in the order of `RETRY_OPTION_NAMES` ([`OPTIONS`]): [`set`] converts
/// each value by this, found once by its name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opt {
    MaxAttempts,
    BaseDelayMs,
    Factor,
    MaxDelayMs,
    Jitter,
    RetryOnStatus,
    RetryOnNetworkError,
    RetryOnTimeout,
    TimeoutMs,
    DeadlineMs,
    RespectRetryAfter,
    MaxRetryAfterMs,
    IdempotencyKey,
    IdempotencyHeader,
    IdempotencyKeyFormat,
    RetryHeaders,
    MaxBufferedBodyBytes,
    FollowAccepted,
    Signal,
    ShouldRetry,
    OnRetry,
    BeforeRetry,
    OnSettled,
    Headers,
    Fetch,
    Budget,
    Throttle,
    Breaker,
}

/// Each option of `RETRY_OPTION_NAMES`, at its index there (checked when compiled: a list in
/// another order does not build).
const OPTIONS: [Opt; RETRY_OPTION_NAMES.len()] = {
    use Opt::*;
    let named = [
        ("maxAttempts", MaxAttempts),
        ("baseDelayMs", BaseDelayMs),
        ("factor", Factor),
        ("maxDelayMs", MaxDelayMs),
        ("jitter", Jitter),
        ("retryOnStatus", RetryOnStatus),
        ("retryOnNetworkError", RetryOnNetworkError),
        ("retryOnTimeout", RetryOnTimeout),
        ("timeoutMs", TimeoutMs),
        ("deadlineMs", DeadlineMs),
        ("respectRetryAfter", RespectRetryAfter),
        ("maxRetryAfterMs", MaxRetryAfterMs),
        ("idempotencyKey", IdempotencyKey),
        ("idempotencyHeader", IdempotencyHeader),
        ("idempotencyKeyFormat", IdempotencyKeyFormat),
        ("retryHeaders", RetryHeaders),
        ("maxBufferedBodyBytes", MaxBufferedBodyBytes),
        ("followAccepted", FollowAccepted),
        ("signal", Signal),
        ("shouldRetry", ShouldRetry),
        ("onRetry", OnRetry),
        ("beforeRetry", BeforeRetry),
        ("onSettled", OnSettled),
        ("headers", Headers),
        ("fetch", Fetch),
        ("budget", Budget),
        ("throttle", Throttle),
        ("breaker", Breaker),
    ];
    let mut out = [MaxAttempts; RETRY_OPTION_NAMES.len()];
    let mut i = 0;
    while i < out.len() {
        assert!(same(named[i].0, RETRY_OPTION_NAMES[i]));
        out[i] = named[i].1;
        i += 1;
    }
    out
};

/// `a == b`, when compiled ([`OPTIONS`]).
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut i = 0;
    while i < a.len() && i < b.len() && a[i] == b[i] {
        i += 1;
    }
    i == a.len() && i == b.len()
}

/// Option `opt` (named `name`) set to `v` in `out`: each value is converted by its option
/// (the one table of the client's options), or refused.
fn set(out: &mut Policy, opt: Opt, name: &'static str, v: JsValue) -> Result<(), Refused> {
    use Opt::*;
    let p = &mut out.retry;
    if v.is_null() {
        // `null` clears the options that can be "none" (e.g. to override a
        // `createRetryFetch` default); for any other option it is an invalid value.
        match opt {
            TimeoutMs => p.timeout_ms = None,
            DeadlineMs => p.deadline_ms = None,
            MaxRetryAfterMs => p.max_retry_after_ms = None,
            Signal => {
                out.signal = None;
                out.default_signals.clear();
            }
            ShouldRetry | OnRetry | BeforeRetry | OnSettled | Fetch => *hook(out, opt) = None,
            Headers => out.headers = None,
            Budget => {
                out.budget = None;
                out.default_budget = true;
                out.own_budget = None;
            }
            Throttle => {
                out.throttle = None;
                out.default_throttle = true;
            }
            Breaker => out.breaker = None,
            _ => return Err(Refused::Value),
        }
        return Ok(());
    }
    match opt {
        MaxAttempts | BaseDelayMs | Factor | MaxDelayMs | TimeoutMs | DeadlineMs
        | MaxRetryAfterMs | MaxBufferedBodyBytes => {
            let n = number(&v);
            match opt {
                MaxAttempts => p.max_attempts = validate::max_attempts(n)?,
                BaseDelayMs => p.base_delay_ms = validate::non_negative_ms(name, n)?,
                MaxDelayMs => p.max_delay_ms = validate::non_negative_ms(name, n)?,
                MaxRetryAfterMs => p.max_retry_after_ms = Some(validate::non_negative_ms(name, n)?),
                TimeoutMs => p.timeout_ms = Some(validate::positive_ms(name, n)?),
                DeadlineMs => p.deadline_ms = Some(validate::positive_ms(name, n)?),
                Factor => p.factor = validate::factor(n)?,
                _ => p.max_buffered_body_bytes = validate::body_limit(n)?,
            }
        }
        RetryOnNetworkError | RetryOnTimeout | RespectRetryAfter | RetryHeaders
        | FollowAccepted => {
            let b = boolean(&v)?;
            *match opt {
                RetryOnNetworkError => &mut p.retry_on_network_error,
                RetryOnTimeout => &mut p.retry_on_timeout,
                RespectRetryAfter => &mut p.respect_retry_after,
                RetryHeaders => &mut p.retry_headers,
                _ => &mut p.follow_accepted,
            } = b;
        }
        Jitter | IdempotencyHeader | IdempotencyKeyFormat => {
            let s = text(&v);
            match opt {
                Jitter => p.jitter = validate::jitter(&s)?,
                IdempotencyHeader => p.idempotency_header = validate::header_name(&s)?,
                _ => p.idempotency_key_format = validate::key_format(&s)?,
            }
        }
        RetryOnStatus => {
            p.retry_on_status = statuses(&v)?;
            p.retry_keyed_conflict = false; // the caller's list is the whole list
        }
        IdempotencyKey => {
            p.idempotency_key = match (v.as_bool(), v.as_string()) {
                (Some(false), _) => KeyMode::Off,
                (_, Some(s)) => validate::key_mode(&s)?,
                _ => return Err(Refused::Value),
            }
        }
        Signal => {
            if !is_abort_signal(&v) {
                return Err(Refused::Value);
            }
            // A client's default signal still cancels the call (ky, and init.signal,
            // combine too).
            out.default_signals.extend(out.signal.take());
            out.signal = Some(v);
        }
        ShouldRetry | OnRetry | BeforeRetry | OnSettled | Fetch => {
            let f = v.dyn_into::<Function>().map_err(|_| Refused::Value)?;
            *hook(out, opt) = Some(f);
        }
        Headers => {
            // Over the client's own: the later default wins for a name both set.
            let given = super::request::strict_headers(&v)?.ok_or(Refused::Value)?;
            let merged = match &out.headers {
                Some(h) => web_sys::Headers::new_with_headers(h)?,
                None => web_sys::Headers::new()?,
            };
            super::request::copy_headers(&given, &merged, None)?;
            out.headers = Some(merged);
        }
        // `false`: none, not even the default one.
        Budget | Throttle if v.as_bool() == Some(false) => match opt {
            Budget => {
                out.budget = None;
                out.default_budget = false;
                out.own_budget = None;
            }
            _ => {
                out.throttle = None;
                out.default_throttle = false;
            }
        },
        Budget if v.as_string().as_deref() == Some("own") => {
            // One noisy poller's failures cannot switch off a critical client's retries.
            out.budget = None;
            out.default_budget = true;
            out.own_budget = Some(super::guards::new_ratio());
        }
        Budget | Throttle | Breaker => match (opt, lookup(name, &v)?) {
            (Budget, Guard::Budget(b)) => {
                out.budget = Some(b);
                out.default_budget = false;
                out.own_budget = None;
            }
            (Throttle, Guard::Throttle(t)) => {
                out.throttle = Some(t);
                out.default_throttle = false;
            }
            (Breaker, Guard::Breaker(b)) => out.breaker = Some(b),
            _ => return Err(Refused::Value),
        },
    }
    Ok(())
}

/// The hook of `out` that `opt` (one of the function options) sets.
fn hook(out: &mut Policy, opt: Opt) -> &mut Option<Function> {
    match opt {
        Opt::ShouldRetry => &mut out.should_retry,
        Opt::OnRetry => &mut out.on_retry,
        Opt::BeforeRetry => &mut out.before_retry,
        Opt::OnSettled => &mut out.on_settled,
        _ => &mut out.fetch,
    }
}

/// Is `v` an AbortSignal (duck-typed, so signals from another realm or a polyfill work)?
pub fn is_abort_signal(v: &JsValue) -> bool {
    v.is_object()
        && js::get(v, "addEventListener").is_function()
        && js::get(v, "aborted").as_bool().is_some()
}

/// The `count` argument of `backoffDelays`.
pub fn read_count(v: &JsValue) -> Result<u32, JsValue> {
    // Not a number: refused as `NaN` is, with the same text.
    validate::delay_count(v.as_f64().unwrap_or(f64::NAN)).map_err(|e| option_error(CALL, e, v))
}

/// The optional `seed` argument of `backoffDelays`: a finite number, or `undefined`.
pub fn read_seed(v: &JsValue) -> Result<Option<u64>, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    match v.as_f64() {
        Some(n) if n.is_finite() => Ok(Some(n.to_bits())),
        _ => Err(option_error(
            CALL,
            OptionError::new("seed", "a finite number"),
            v,
        )),
    }
}
