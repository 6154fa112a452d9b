//! The client exports: `retryFetch`, `createRetryFetch`, `backoffDelays`, `isRetryError`,
//! `isCircuitOpenError` and the guard classes `RetryBudget`, `AdaptiveThrottle`,
//! `CircuitBreaker`.
//!
//! | module | what it does |
//! |---|---|
//! | `policy` | reads `RetryOptions` (only the keys given, one table) into a validated `Policy` |
//! | `request` | fixes the request at the call (`new Request`), the key, the body to replay |
//! | `call` | the lean success path and the retry loop (wasm-bindgen-futures) |
//! | `signals` | caller signals, per-attempt abort signals and time limits, waits |
//! | `guards` | the guard classes and their registry |
//! | `records` | what crosses back to JS (hook contexts, attempt records), with serde-wasm-bindgen |
//! | `errors` | `RetryError`, `TimeoutError`, `CircuitOpenError`, option `TypeError`s |
//! | `bindings` | the globals beyond web-sys (`fetch`, timers, `new Request`, `AbortSignal.any`) |

mod bindings;
mod call;
mod errors;
mod guards;
mod policy;
mod records;
mod request;
mod signals;

use std::rc::Rc;

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;

use crate::core::backoff::{Backoff, Rng, SplitMix64};
use crate::core::options::KeyMode;
use crate::wasm::errors::type_error;
pub use call::Client;
pub use errors::set_error_classes;
pub use guards::{AdaptiveThrottleHandle, CircuitBreakerHandle, RetryBudgetHandle};
pub use policy::Policy;

thread_local! {
    /// The client behind the exported `retryFetch`: the built-in defaults.
    static DEFAULT: Client = Client::new(Rc::new(Policy::default()));
}

/// `retryFetch(input, init?, options?)`: `fetch` with retries. Resolves with the final
/// `Response`; rejects with a `RetryError`, the signal's reason, or a `TypeError` (an invalid
/// option or a request fetch cannot send, before anything is sent). Defaults: see the README
/// (3 attempts, 500 ms base, factor 2, 30 s cap, full jitter, auto idempotency keys).
#[wasm_bindgen(js_name = retryFetch, skip_typescript)]
pub fn retry_fetch(input: JsValue, init: JsValue, options: JsValue) -> Promise {
    DEFAULT.with(|c| c.call(&input, &init, &options))
}

/// `createRetryFetch(defaults?)`: a `retryFetch` whose options default to `defaults`
/// (validated now: a `TypeError` is thrown here); per-call options merge over them. The
/// function has `extend(options)`: a new client whose defaults are these merged with
/// `options` (as ky's `extend`), this one unchanged.
#[wasm_bindgen(js_name = createRetryFetch, skip_typescript)]
pub fn create_retry_fetch(defaults: JsValue) -> Result<JsValue, JsValue> {
    let base = DEFAULT.with(|c| c.policy().clone());
    // Its option errors say `retryFetch:`, as a call's do.
    let policy = policy::read(policy::CALL, &defaults, &base)?;
    client_function("createRetryFetch", Rc::new(policy))
}

/// A key is one operation's: a client's defaults that would send one key with every call
/// (a fixed `idempotencyKey`, or the key's header in `headers`) are a `TypeError`, as every
/// payment made through the client would share it and a server that honours keys would
/// answer them all with the first one's result. The key is given per call instead. `api` is
/// the function called (`createRetryFetch`, `client.extend`).
fn refuse_shared_key(api: &str, policy: &Policy) -> Result<(), JsValue> {
    let header = policy.retry.idempotency_header.as_str();
    let fixed = matches!(policy.retry.idempotency_key, KeyMode::Fixed(_));
    let in_headers = policy
        .headers
        .as_ref()
        .is_some_and(|h| h.has(header).unwrap_or(false));
    if !fixed && !in_headers {
        return Ok(());
    }
    let mut msg = String::from(api);
    msg.push_str(": ");
    if fixed {
        msg.push_str("a fixed \"idempotencyKey\"");
    } else {
        msg.push_str("the \"");
        msg.push_str(header);
        msg.push_str("\" header in \"headers\"");
    }
    msg.push_str(" in a client's defaults would be sent by every call of the client: one key for every payment, which a server that honours keys answers with the first one's result. Give the key per call: client(url, init, { idempotencyKey: key })");
    Err(type_error(&msg))
}

/// A call's `idempotencyHeader` naming one of its client's default headers (`defaults`) is a
/// `TypeError`: that header's value, the same on every call, would be every payment's key.
pub(super) fn refuse_default_header_as_key(
    policy: &Policy,
    defaults: &Policy,
) -> Result<(), JsValue> {
    let header = policy.retry.idempotency_header.as_str();
    if !defaults
        .headers
        .as_ref()
        .is_some_and(|h| h.has(header).unwrap_or(false))
    {
        return Ok(());
    }
    let mut msg = String::from("retryFetch: invalid option \"idempotencyHeader\": \"");
    msg.push_str(header);
    msg.push_str("\" is one of the client's default headers, sent by every call of the client: as the key, one key for every payment, which a server that honours keys answers with the first one's result");
    Err(type_error(&msg))
}

/// `budget: 'own'` given per call is a `TypeError`: a budget of its own is a client's (shared
/// by its calls); one per call would count nothing, and one kept with the per-call options
/// would be shared by whichever calls happen to give equal options.
pub(super) fn refuse_per_call_own_budget(given: &[(&'static str, JsValue)]) -> Result<(), JsValue> {
    match given.iter().find(|(name, v)| *name == "budget" && *v == crate::wasm::js::name("own")) {
        Some((_, v)) => Err(crate::wasm::errors::invalid_value(
            "retryFetch",
            "budget",
            v,
            "false, null or a RetryBudget ('own' is a createRetryFetch client's default: a budget of its own, shared by its calls)",
        )),
        None => Ok(()),
    }
}

/// What a client's `extend(options)` errors start with.
const EXTEND: &str = "client.extend";

/// The function of a client with `policy` as its defaults, and its `extend`; `api` (the
/// function that made it: `createRetryFetch`, `client.extend`) starts its `TypeError`s.
fn client_function(api: &str, policy: Rc<Policy>) -> Result<JsValue, JsValue> {
    refuse_shared_key(api, &policy)?;
    let client = Client::new(policy.clone());
    let f = Closure::<dyn Fn(JsValue, JsValue, JsValue) -> Promise>::new(
        move |input: JsValue, init: JsValue, options: JsValue| client.call(&input, &init, &options),
    )
    .into_js_value();
    let extend =
        Closure::<dyn Fn(JsValue) -> Result<JsValue, JsValue>>::new(move |options: JsValue| {
            client_function(EXTEND, Rc::new(policy::read(EXTEND, &options, &policy)?))
        });
    crate::wasm::js::set(&f, "extend", &extend.into_js_value());
    Ok(f)
}

/// `backoffDelays(options, count, seed?)`: the first `count` delays (ms) the policy would
/// wait, without any server `Retry-After`. With a `seed` the jitter is reproducible.
#[wasm_bindgen(js_name = backoffDelays, skip_typescript)]
pub fn backoff_delays(options: JsValue, count: JsValue, seed: JsValue) -> Result<Array, JsValue> {
    // Its option errors say `retryFetch:`, as a call's do. Read over the built-in defaults
    // (the default client's), kept whole until the end (a part moved out drops the rest
    // field by field).
    let base = DEFAULT.with(|c| c.policy().clone());
    let policy = policy::read(policy::CALL, &options, &base)?;
    let count = policy::read_count(&count)?;
    let mut seeded;
    let mut math = call::MathRandom;
    let rng: &mut dyn Rng = match policy::read_seed(&seed)? {
        Some(seed) => {
            seeded = SplitMix64::new(seed);
            &mut seeded
        }
        None => &mut math,
    };
    // Each delay pushed as it is drawn: no list of ours, nor serde's for it.
    let out = Array::new();
    let mut backoff = Backoff::new(&policy.retry);
    for _ in 0..count {
        out.push(&JsValue::from_f64(backoff.next_delay(rng) as f64));
    }
    Ok(out)
}

/// `isRetryError(error)`: is `error` a `RetryError` (by name, so it works across realms and
/// copies of the package)?
#[wasm_bindgen(js_name = isRetryError, skip_typescript)]
pub fn is_retry_error(error: JsValue) -> bool {
    errors::has_name(&error, "RetryError")
}

/// `isCircuitOpenError(error)`: is `error` a `CircuitOpenError` (by name)?
#[wasm_bindgen(js_name = isCircuitOpenError, skip_typescript)]
pub fn is_circuit_open_error(error: JsValue) -> bool {
    errors::has_name(&error, "CircuitOpenError")
}
