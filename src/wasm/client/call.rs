//! One `retryFetch` call, performed by Rust.
//!
//! The success path is lean: when a call needs no key of ours, no body buffering, no signal
//! of its own and no guard, and the policy retries no status below 400, the export
//! sends at once with the global `fetch` and returns `fetch(...).then(onSettled)`, where
//! `onSettled` is one long-lived closure per policy (a client's defaults, its cached per-call
//! options; bound to the request per call). A URL string (or `URL`) with no `init` or a plain one (no
//! body, or a string one) is sent as `fetch(url, copy)`, no `Request` made: a GET or HEAD as
//! it is, any other with its headers, the key of ours and a client's defaults included, on a
//! `Headers` in the copy (and a POST with `redirect: 'manual'` where the loop follows
//! redirects itself: a redirect answer goes to the loop, which follows it). A response below
//! 400 goes straight back: no Rust future, no allocation in Rust. A `timeoutMs` or `deadlineMs`
//! on a URL call adds a signal of ours to what is sent and a timer that aborts it at the first
//! attempt's time limit (`FirstTimer`). Only when
//! the first attempt did not simply succeed does the call become a Rust future
//! (`future_to_promise`) running [`run`], the loop below, which every other call runs from
//! the start.
//!
//! The loop performs (fetch, timers, signals, hooks, errors) and asks the core for every
//! decision: the circuit breaker, the throttle's turn, the attempt's time limit, retry or stop
//! and the wait (`RetryState::decide`), the budget, `Retry-After`, and the deadline again
//! after the hooks. Under `followAccepted` a 202 (also one the lean path got) is followed:
//! `Accepted::next` says where (poll a URL, repeat the keyed request, or stop) and after which
//! wait; the polls are sent without the guards and count as attempts only when they fail.

use std::cell::{OnceCell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::Poll;

use js_sys::{Array, Function, Object, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};
use web_sys::{Headers, Request, Response};

use super::bindings::{global_fetch, redirects_visible, Settle, Thenable};
use super::errors::{circuit_open_error, retry_error, timeout_error};
use super::guards::{origin_of, BreakerShared};
use super::policy::Policy;
use super::records::{to_js, AttemptRecord, Js, RetryContext, SettledInfo};
use super::request::{
    body_value, copy_headers, fix_request, init_signal, unsendable_url, Body, BodyKind, Template,
};
use super::signals::{deadline_cut, CallSignals, FirstTimer};
use crate::core::accepted::poll_dropped_headers;
use crate::core::backoff::Rng;
use crate::core::budget::Budget;
use crate::core::classify::{
    is_response_status, method_can_have_body, redirect_refused, refused_by_browser, BrowserRequest,
    Outcome, RetryReason, CROSS_ORIGIN_DROPPED_HEADERS, REQUEST_BODY_HEADERS, UNSENT_CAUSE_CODES,
};
use crate::core::decide::StopReason;
use crate::core::engine::{CallEngine, CallFacts, CallGuards, Cause, Settled, Step, WaitKind};
use crate::core::guards::{GuardsLent, Held, Pacer};
use crate::wasm::errors::type_error;
use crate::wasm::js;

/// Jitter from `Math.random` (jitter needs spread, not secrecy; keys use the CSPRNG).
pub struct MathRandom;

impl Rng for MathRandom {
    fn next_f64(&mut self) -> f64 {
        js_sys::Math::random()
    }
}

/// A policy and the function its lean calls settle through, `onSettled(request, init,
/// startedAt, fulfilled, signal, timer, value)` bound per call (`signal`: what the first
/// attempt was sent with beside its request, the timed attempt's own (`FirstTimer`, then
/// `timer` its timer) or the caller's `init.signal` a `Request` made of it follows; else
/// `undefined`), and the timers' `fire`: made the first time a lean call needs them, then kept
/// as long as the policy is (a client's defaults, its cached per-call options).
struct Lean {
    policy: Rc<Policy>,
    on_settled: OnceCell<Function>,
    fire: OnceCell<Function>,
}

impl Lean {
    fn new(policy: Rc<Policy>) -> Lean {
        Lean {
            policy,
            on_settled: OnceCell::new(),
            fire: OnceCell::new(),
        }
    }

    /// The timer of a timed first attempt ends when it settles: a rejection after it fired is
    /// its `TimeoutError` (the abort's reason), told to the loop as a timeout.
    fn on_settled(&self) -> &Settle {
        self.on_settled
            .get_or_init(|| {
                let own = self.policy.clone();
                Closure::<
                    dyn Fn(JsValue, JsValue, f64, bool, JsValue, JsValue, JsValue) -> JsValue,
                >::new(
                    move |request, init, started, fulfilled: bool, signal: JsValue, timer: JsValue, value| {
                        let (timeout, caller_signal) = match (timer.is_undefined(), signal.is_undefined()) {
                            (false, _) => (FirstTimer::end(&signal, &timer), None),
                            (true, false) => (None, Some(signal)),
                            (true, true) => (None, None),
                        };
                        let first = match timeout {
                            Some(timeout) if !fulfilled => (false, timeout, true),
                            _ => (fulfilled, value, false),
                        };
                        settled(&own, request, init, started, first, caller_signal)
                    },
                )
                .into_js_value()
                .unchecked_into()
            })
            .unchecked_ref()
    }

    /// What the policy's first-attempt timers run, with its limit `ms`.
    fn fire(&self, ms: f64) -> &Function {
        self.fire
            .get_or_init(|| FirstTimer::fire(ms, &self.policy.retry))
    }
}

/// A `retryFetch`: its defaults, and the newest per-call options it read with the policy they
/// made, reused while a call gives the same options again.
pub struct Client {
    base: Lean,
    cache: RefCell<Option<Rc<Cached>>>,
    hot: js::Hot,
}

/// Per-call options a client has read: each own enumerable name (the JS string, in the order
/// `Object.keys` gave them) and value as given (`Seen`, `undefined` included), and what they
/// made.
struct Cached {
    given: Vec<(JsValue, Seen)>,
    lean: Rc<Lean>,
}

/// One option value a cached policy was read from: a primitive (a number, a string, a
/// boolean, `null`, `undefined`), or a list of numbers (`retryOnStatus`) kept item by item,
/// each compared with `===`, so a list changed in place is read again. Options with any other
/// value (a signal, a hook, a guard, headers) are never cached.
enum Seen {
    Primitive(JsValue),
    Numbers(Vec<JsValue>),
}

impl Seen {
    /// What the cache keeps of `value`, if it can be compared by value.
    fn of(value: &JsValue) -> Option<Seen> {
        if !value.is_object() && !value.is_function() && !value.is_symbol() {
            return Some(Seen::Primitive(value.clone()));
        }
        // An array of numbers only (a throwing proxy or getter: not kept, the options are
        // read, and the read rejects the call).
        js::array_length(value).ok()??;
        let mut items = Vec::new();
        for item in js::array_copy(value).ok()?.iter() {
            item.as_f64()?;
            items.push(item);
        }
        Some(Seen::Numbers(items))
    }

    /// Is `value` what was seen? (A throwing proxy or getter: no, the options are read.)
    fn matches(&self, value: &JsValue, hot: &js::Hot) -> bool {
        match self {
            Seen::Primitive(v) => v == value,
            // Item by item, each read once (a throw: no match), no copy made on a hit.
            Seen::Numbers(items) => {
                matches!(js::array_length_by(value, &hot.length), Ok(Some(n)) if n == items.len() as f64)
                    && (0u32..).zip(items).all(|(i, seen)| {
                        js_sys::Reflect::get_u32(value, i).is_ok_and(|item| *seen == item)
                    })
            }
        }
    }
}

impl Client {
    /// A client with `policy` as its defaults.
    pub fn new(policy: Rc<Policy>) -> Client {
        Client {
            base: Lean::new(policy),
            cache: RefCell::new(None),
            hot: js::Hot::new(),
        }
    }

    /// The client's defaults.
    pub fn policy(&self) -> &Rc<Policy> {
        &self.base.policy
    }

    /// `retryFetch(input, init, options)`: every failure before the first attempt (an invalid
    /// option, a request fetch cannot send) is a rejected promise, never a throw.
    pub fn call(&self, input: &JsValue, init: &JsValue, options: &JsValue) -> Promise {
        let per_call = match options.is_undefined() {
            true => Ok(None),
            false => self.per_call(options),
        };
        let started = per_call.and_then(|own| match own {
            Some(lean) => self.start(&lean, input, init),
            None => self.start(&self.base, input, init),
        });
        started.unwrap_or_else(|e| Promise::reject(&e))
    }

    /// The policy (and lean closures) of a call's own `options` over the client's (`None` for
    /// `null`: the client's own): the cached one when the options given are the ones last
    /// read (every getter still runs once per call), else read now (and cached when every
    /// value compares by value; one that is not lives as long as its call).
    fn per_call(&self, options: &JsValue) -> Result<Option<Rc<Lean>>, JsValue> {
        use super::policy::CALL;
        let Some((keys, n)) = crate::wasm::read_options::own_keys(CALL, options)? else {
            return Ok(None);
        };
        // Not borrowed while comparing: a proxy's trap may run a call of this client.
        let cached = self.cache.borrow().clone();
        // As many names as cached, each cached one in its place in `Object.keys` (found there
        // by `indexOf`, no handle of the list's made): the values are read by the cached
        // names (each getter once) and compared as they come; what was read is kept for a miss.
        let mut values: Vec<(JsValue, JsValue)> = Vec::with_capacity(n as usize);
        if let Some(c) = cached.filter(|c| c.given.len() == n as usize) {
            let mut hit = true;
            for ((key, seen), i) in c.given.iter().zip(0..) {
                hit = keys.index_of(key, i) == i;
                if !hit {
                    break;
                }
                let value = js_sys::Reflect::get(options, key)?; // a throwing getter rejects the call
                hit = seen.matches(&value, &self.hot);
                // Its name is the list's at this place: set below on a miss.
                values.push((JsValue::UNDEFINED, value));
                if !hit {
                    break;
                }
            }
            if hit {
                return Ok(Some(c.lean.clone()));
            }
        }
        crate::wasm::read_options::values_by(options, &keys, n, &mut values)?;
        let given = super::policy::named(CALL, &values)?;
        super::refuse_per_call_own_budget(&given)?;
        let policy = super::policy::apply(CALL, &given, self.policy())?;
        super::refuse_default_header_as_key(&policy, self.policy())?;
        let lean = Rc::new(Lean::new(Rc::new(policy)));
        let mut seen = Some(Vec::with_capacity(values.len()));
        for (key, v) in values {
            // A list is kept as the policy read it, not read again (a getter or a proxy
            // could answer otherwise the second time).
            let kept = match v.is_object() && key == "retryOnStatus" {
                true => Some(Seen::Numbers(
                    lean.policy
                        .retry
                        .retry_on_status
                        .iter()
                        .map(|s| JsValue::from(*s))
                        .collect(),
                )),
                false => Seen::of(&v),
            };
            match (kept, seen.as_mut()) {
                (Some(s), Some(list)) => list.push((key, s)),
                _ => {
                    seen = None;
                    break;
                }
            }
        }
        if let Some(given) = seen {
            *self.cache.borrow_mut() = Some(Rc::new(Cached {
                given,
                lean: lean.clone(),
            }));
        }
        Ok(Some(lean))
    }

    /// The call under `lean`'s policy (its lean closures are made once per policy, and freed
    /// with it and the bound functions that hold them).
    fn start(&self, lean: &Lean, input: &JsValue, init: &JsValue) -> Result<Promise, JsValue> {
        let policy = &lean.policy;
        // `init` is checked for misplaced retry options; a plain one is copied (`init_values`).
        let plain = match init.is_object() {
            true => init_values(init, &self.hot)?,
            false => None,
        };
        let started = crate::wasm::js::now_ms();
        let lean_policy = lean_policy(policy);
        // A URL string with no init, or a plain one: the first attempt is `fetch(url, copy)`,
        // which makes the only `Request` the call needs, and the request is fixed (the copy)
        // should a retry need one (a URL fetch refuses is told apart from a network error
        // then: see `settled`). A GET or HEAD with nothing of ours to add goes as it is;
        // any other gets the headers of `lean_headers` in its copy.
        // A `URL` is taken as its `href` now (what fetch and `new Request` read of it).
        let mut lean_input = lean_policy && input.is_string();
        let href;
        let input = match lean_policy && !lean_input && input.is_instance_of::<web_sys::Url>() {
            true => {
                href = js::get(input, "href");
                lean_input = href.is_string();
                &href
            }
            false => input,
        };
        let plain_get = lean_input
            && policy.headers.is_none()
            && match &plain {
                Some(c) => c.get,
                None => init.is_undefined(),
            }
            && !policy.retry.idempotency_key.may_add_key(true);
        let mut plain = plain;
        if lean_input && !plain_get && plain.is_none() && init.is_undefined() {
            plain = Some(PlainInit {
                copy: None,
                get_held: false,
                get: true,
                keyed: true,
                method: None,
                headers: JsValue::UNDEFINED,
                redirect: JsValue::UNDEFINED,
            });
        }
        // Only a lean GET of a URL sends an init of nothing but `method: 'GET'` as none: any
        // other path keeps it in a copy (a `Request` input's own method is what it overrides).
        if let Some(c) = plain.as_mut().filter(|_| !plain_get) {
            copy_of(&mut c.copy, &mut c.get_held, &self.hot);
        }
        // A time limit on a lean first attempt (`timeoutMs`, shortened to `deadlineMs`): a
        // signal of ours in what is sent, and a timer; a POST whose redirects the loop follows
        // itself takes the loop, which bounds every hop (`lean_headers`).
        let limit = policy.retry.attempt_limit_ms(policy.retry.deadline_ms);
        let keyed = match &plain {
            Some(c) if lean_input && !plain_get && c.keyed => {
                lean_headers(policy, c, limit.is_some())?
            }
            _ => None,
        };
        let copy = plain.and_then(|c| c.copy);
        // What fetch is given: `request` (the `Request` made here, else the URL) and `send`;
        // `init` is what a retry's request is made from.
        let (send, request, init, caller_signal): (JsValue, Option<JsValue>, JsValue, _) =
            if let Some((headers, manual)) = keyed {
                // Its headers in the copy, sent as an object and headers of fetch's own (a wrapper
                // of the global fetch may read them later, or change them: the copy a retry's
                // request is made from stays as the call fixed it); where the runtime lets us see the redirects of
                // a non-idempotent request, with `redirect: 'manual'`, as the loop sends it.
                let copy = copy.unwrap_or_else(Object::new);
                let send = Object::assign(&Object::new(), &copy);
                js::set(
                    &send,
                    "headers",
                    &Headers::new_with_headers(&headers)?.into(),
                );
                if manual {
                    js::set(&send, "redirect", &JsValue::from_str("manual"));
                }
                (send.into(), None, copy.into(), None)
            } else if plain_get {
                let none = copy.is_none();
                let init: JsValue = copy.map_or(JsValue::UNDEFINED, JsValue::from);
                // What is sent is an object of its own (which gets the signal under a time limit):
                // the copy stays as the call fixed it, whatever a wrapper of fetch changes in what
                // it was given (a retry's request is made from the copy). No init, or one that
                // says only `method: 'GET'`, is sent as none: the same request, and fetch skips
                // reading an init's every member.
                let send = match limit.is_none() && none {
                    true => JsValue::UNDEFINED,
                    false => Object::assign(&Object::new(), init.unchecked_ref()).into(),
                };
                (send, None, init, None)
            } else {
                // The request is made from the copy: every member of a plain init is read once,
                // and a string body sent again on a retry is the one the request was made from.
                let copied: Option<JsValue> = copy.map(JsValue::from);
                let init = copied.as_ref().unwrap_or(init);
                let request = fix_request(input, init)?;
                if let Some(defaults) = &policy.headers {
                    add_default_headers(&request, input, init, defaults)?;
                }
                let caller_signal = init_signal(init);
                if !(lean_policy && limit.is_none() && lean_request(policy, &request)) {
                    let (copied, signal) = (copied.is_some(), caller_signal);
                    let template = Template::new(policy, request, input, init, copied, signal)?;
                    return Ok(future_to_promise(run(
                        policy.clone(),
                        template,
                        started,
                        None,
                    )));
                }
                let signal = request.signal();
                if signal.aborted() {
                    return Err(js::get(&signal, "reason"));
                }
                // The input rides where a URL's init would, held until the attempt settles
                // (and then by the loop's `Template`, if it runs). The caller's `init.signal` is
                // sent as itself (the request's own follows it only while the request lives).
                let send = match &caller_signal {
                    // An init with a member resets what the request says of its referrer.
                    Some(s) => {
                        let send = Object::new();
                        keep_referrer(&send, &request);
                        js::set(&send, "signal", s);
                        send.into()
                    }
                    None => JsValue::UNDEFINED,
                };
                (send, Some(request.into()), input.clone(), caller_signal)
            };
        let request = request.as_ref().unwrap_or(input);
        // Under a time limit (a URL sent: a `Request` took the loop), the attempt's own signal
        // and a timer, which `onSettled` ends.
        let timer = match limit {
            Some(ms) => {
                let timer = FirstTimer::start(ms, lean.fire(ms))?;
                js::set(&send, "signal", &timer.signal);
                Some(timer)
            }
            None => None,
        };
        let (s, t) = match (&timer, &caller_signal) {
            (Some(timer), _) => (timer.signal.as_ref(), &timer.handle),
            (None, Some(signal)) => (signal, &JsValue::UNDEFINED),
            (None, None) => (&JsValue::UNDEFINED, &JsValue::UNDEFINED),
        };
        let on_settled = lean.on_settled();
        let bind = |f| on_settled.bind_settled(&JsValue::NULL, request, &init, started, f, s, t);
        let (ok, failed) = (bind(true), bind(false));
        let sent: Thenable = global_fetch(request, &send).unchecked_into();
        // A wrapper's `Promise` subclass whose own `then` throws: that throw is how its fetch
        // failed, as the loop reads it.
        sent.then_with(&ok, &failed).or_else(|e| {
            let failed_fetch: Thenable = Promise::reject(&e).unchecked_into();
            failed_fetch.then_with(&ok, &failed)
        })
    }
}

/// A plain `init`, copied (every own value read once), and which lean path may send it.
struct PlainInit {
    /// The copy; none for an init with no member but `method: 'GET'` (`get_held`), or none
    /// at all: for a URL, what fetch assumes without an init, which a lean GET sends and fixes
    /// as none.
    copy: Option<Object>,
    /// `method: 'GET'` was given and is not in a copy yet.
    get_held: bool,
    /// The lean GET's: every value a primitive, the method GET or HEAD, no body, not
    /// `redirect: 'error'`.
    get: bool,
    /// The lean keyed send's: every value a primitive but `headers`, no body or a string
    /// one, not `redirect: 'error'`.
    keyed: bool,
    /// `init.method` as given (`None`: not a string, or absent).
    method: Option<String>,
    /// `init.headers` and `init.redirect` as given (`undefined` when absent).
    headers: JsValue,
    redirect: JsValue,
}

/// `init` is fetch's `RequestInit`: a retry option found there (ours, or another library's
/// name such as ky's `retry` or `timeout`) would be ignored, so it is a `TypeError` that
/// points at the third argument (`retryFetch(url, options)` is told apart this way too).
/// An `init` whose prototype is `Object.prototype` or `null` (an object literal,
/// `Object.create(null)`) is copied, every own value read once: `Some`; `None` for any other
/// (fetch would read what it inherits too).
fn init_values(init: &JsValue, hot: &js::Hot) -> Result<Option<PlainInit>, JsValue> {
    // Every own name, enumerable or not: fetch reads them all.
    let Ok(keys) = js::own_property_names(init) else {
        return Ok(None);
    };
    // Made for the first member put in it; `method: 'GET'` waits for another (`get_held`): an
    // init of nothing else says only what fetch assumes without one, and needs no copy.
    let (mut copy, mut get_held) = (None, false);
    let plain = js::has_plain_prototype(init);
    let (mut primitive, mut body_none, mut body_ok) = (plain, true, true);
    let mut integrity = false;
    let (mut method, mut headers, mut redirect) = (None, JsValue::UNDEFINED, JsValue::UNDEFINED);
    for key in keys.iter() {
        // `method`, the name most calls give, is told by `===` (no Rust string made of it,
        // and no retry option is called so).
        if key == hot.method {
            if !plain {
                continue;
            }
            let value = js_sys::Reflect::get(init, &key)?; // a throwing getter rejects the call
            let get = value == hot.get;
            method = match get {
                true => Some(String::from("GET")),
                false => value.as_string(),
            };
            primitive &= method.is_some() || value.is_undefined();
            match get && copy.is_none() {
                true => get_held = true,
                false => put(&mut copy, &mut get_held, hot, &key, &value),
            }
            continue;
        }
        let Some(name) = key.as_string() else {
            continue;
        };
        if crate::core::options::misplaced_in_init(&name) {
            let mut msg = String::from("retryFetch: init has \"");
            msg.push_str(&name);
            msg.push_str("\", a retry option: init is fetch's RequestInit (method, headers, body...), and retry options go in the third argument: retryFetch(input, init, options) (e.g. retryFetch(url, undefined, { maxAttempts: 5 }))");
            return Err(type_error(&msg));
        }
        if !plain {
            continue;
        }
        // An own `"__proto__"` member (an init parsed from JSON has one): fetch reads no such
        // member, and set on the copy it would give the copy a prototype to inherit from.
        if name == "__proto__" {
            continue;
        }
        let value = js_sys::Reflect::get(init, &key)?; // a throwing getter rejects the call
        match name.as_str() {
            "body" => {
                body_none = value.is_undefined() || value.is_null();
                body_ok = body_none || value.is_string();
            }
            // Not a string: the platform's TypeError, from `new Request` before anything is
            // sent (the loop's path).
            "redirect" => {
                primitive &=
                    value.is_undefined() || value.as_string().is_some_and(|r| r != "error");
                redirect = value.clone();
            }
            // An `integrity` is checked against the answer fetch ends with: a keyed send whose
            // redirects the loop follows itself ('manual') would have it checked against the
            // redirect's own body, and fail. The loop, which sends such a request as it is.
            "integrity" => integrity = value.as_string().is_some_and(|i| !i.is_empty()),
            "headers" => {
                primitive &= !value.is_function();
                put(&mut copy, &mut get_held, hot, &key, &value);
                headers = value;
                continue;
            }
            _ => {}
        }
        primitive &= !value.is_object() && !value.is_function();
        put(&mut copy, &mut get_held, hot, &key, &value);
    }
    if !plain {
        return Ok(None);
    }
    let get = primitive
        && body_none
        && method.as_deref().is_none_or(|m| !method_can_have_body(m))
        && headers.is_undefined();
    Ok(Some(PlainInit {
        copy,
        get_held,
        get,
        keyed: primitive && body_ok && !integrity,
        method,
        headers,
        redirect,
    }))
}

/// `key: value` put in a plain init's copy ([`copy_of`]).
fn put(
    copy: &mut Option<Object>,
    get_held: &mut bool,
    hot: &js::Hot,
    key: &JsValue,
    value: &JsValue,
) {
    let _ = js_sys::Reflect::set(copy_of(copy, get_held, hot), key, value);
}

/// A plain init's copy, made now if it is not yet, with the `method: 'GET'` held back until
/// now first, in its place.
fn copy_of<'a>(copy: &'a mut Option<Object>, get_held: &mut bool, hot: &js::Hot) -> &'a Object {
    copy.get_or_insert_with(|| {
        let copy = Object::new();
        if core::mem::take(get_held) {
            let _ = js_sys::Reflect::set(&copy, &hot.method, &hot.get);
        }
        copy
    })
}

/// A lean call's headers, set on a `Headers` made from the copy's (now fixed) and put in the
/// copy: the client's default `headers` the call does not set itself, and a key of ours
/// when one is to be added (a POST, or any request under a fixed key) and the call carries
/// none. `Some((headers, manual))`, `manual` when the first attempt is sent with `redirect:
/// 'manual'` (`follows_itself`); `None` when the call takes the loop: a key of the caller's on a
/// non-idempotent request is checked by `Template::new` before anything is sent, and a request
/// sent with 'manual' under a time limit (`limited`) has every redirect hop bounded there.
fn lean_headers(
    policy: &Policy,
    plain: &PlainInit,
    limited: bool,
) -> Result<Option<(Headers, bool)>, JsValue> {
    let idempotent = plain
        .method
        .as_deref()
        .is_none_or(crate::core::classify::is_idempotent_method);
    let manual = follows_itself(idempotent, &plain.redirect);
    if manual && limited {
        return Ok(None);
    }
    // `new Headers(init.headers)`: any `HeadersInit`, and none (`undefined`) makes it empty.
    let headers = Headers::new_with_headers(plain.headers.unchecked_ref())?;
    // The copy (made at the call for every path but the lean GET's) carries the headers as
    // they are now: read once, whichever path sends them.
    if let Some(copy) = &plain.copy {
        js::set(copy, "headers", &headers);
    }
    if let Some(defaults) = &policy.headers {
        // The call's own win. A client's defaults cannot hold the key header (refused with
        // the options); the call's `headers` option can: the caller's key, as in `init`.
        copy_headers(defaults, &headers, Some(&headers))?;
    }
    let p = &policy.retry;
    let (key, add) = super::request::call_key(p, idempotent, &headers)?;
    if !add && !idempotent && key.is_some() {
        return Ok(None);
    }
    Ok(Some((headers, manual)))
}

/// Set each of a client's default `headers` that the call did not set itself (in
/// `init.headers`, or else on a `Request` input): the call's own win. A default replaces what
/// `new Request` derived from the body (a string's `text/plain`), as it would have in
/// `init.headers`, but not a `FormData` body's multipart `Content-Type`, whose boundary the
/// body's bytes carry.
fn add_default_headers(
    request: &Request,
    input: &JsValue,
    init: &JsValue,
    defaults: &Headers,
) -> Result<(), JsValue> {
    // The names to leave alone: a copy of the call's own headers.
    let given = js::get(init, "headers");
    // A `Request` input's own headers (one of another realm, an iframe's, too: its `headers`
    // is read, not its class checked).
    let input_headers = match input.is_string() {
        true => JsValue::UNDEFINED,
        false => js::get(input, "headers"),
    };
    let source: JsValue = if !given.is_undefined() && !given.is_null() {
        given
    } else if input_headers.is_object() {
        input_headers
    } else {
        JsValue::UNDEFINED
    };
    // `new Headers(source)`: any `HeadersInit`; `undefined` makes it empty.
    let own = Headers::new_with_headers(source.unchecked_ref())?;
    let headers = request.headers();
    let multipart = headers.get("content-type")?.is_some_and(|t| {
        crate::core::classify::trim_start(&t)
            .to_ascii_lowercase()
            .starts_with("multipart/form-data")
    });
    if multipart {
        own.set("content-type", "")?;
    }
    copy_headers(defaults, &headers, Some(&own))
}

/// Can a call under `policy` take the lean path (given a lean request)? No guard, no
/// `options.signal`, no custom transport, no status below 400 to retry. A time limit
/// (`timeoutMs`, `deadlineMs`) is lean for a URL sent as `fetch(url, init)` only
/// (`FirstTimer`): the first attempt is all the deadline bounds before the loop runs.
fn lean_policy(policy: &Policy) -> bool {
    let p = &policy.retry;
    !policy.has_guards()
        && policy.signal.is_none()
        && policy.on_settled.is_none()
        && policy.fetch.is_none()
        && p.retries_no_status_below_400()
}

/// Is `request` lean: no body, no key of ours to add, no key of the caller's on a
/// non-idempotent request (checked before anything is sent, by `Template::new`), not
/// `redirect: 'error'` (which the loop sends with 'manual', to tell a redirect from a network
/// error), and not a request whose redirects the loop follows itself (`follows_itself`)?
fn lean_request(policy: &Policy, request: &Request) -> bool {
    let idempotent = crate::core::classify::is_idempotent_method(&request.method());
    let header = policy.retry.idempotency_header.as_str();
    let redirect = js::get(request, "redirect");
    request.body().is_none()
        && !policy.retry.idempotency_key.may_add_key(idempotent)
        && (idempotent || !request.headers().has(header).unwrap_or(true))
        && redirect != js::name("error")
        && !follows_itself(idempotent, &redirect)
}

/// The first attempt of a lean call settled: a response below 400 is the answer (but a
/// redirect it was sent not to follow); anything else continues as a Rust future, with that
/// attempt as the first.
///
/// `first`: whether it fulfilled, with what, and whether it failed because its time limit
/// fired; `caller_signal`: the caller's `init.signal` a `Request` input's attempt was sent with.
fn settled(
    policy: &Rc<Policy>,
    request: JsValue,
    mut init: JsValue,
    started: f64,
    (fulfilled, value, timed_out): (bool, JsValue, bool),
    caller_signal: Option<JsValue>,
) -> JsValue {
    // The global fetch fulfils with a `Response`: its typed `status` getter (no property name
    // to pass, unlike the loop's duck-typed read of a custom transport's answer). Anything else
    // a wrapper or mock of it gave (`undefined`, `{ status: 200 }`, another implementation's
    // response) is the loop's to judge, as its answers are. A 202 under `followAccepted` is
    // followed by the loop (one compare more only for a 202).
    let status = match value.dyn_ref::<Response>() {
        // A getter that throws (no real `Response`): the loop's to judge.
        Some(response) if fulfilled => response
            .unchecked_ref::<super::bindings::ResponseJs>()
            .status()
            .ok(),
        _ => None,
    };
    // Only a lean call with headers (a URL string sent) can have been sent with 'manual'.
    let manual = status.is_some_and(|s| (300..400).contains(&s))
        && request.is_string()
        && follows_itself(
            js::get(&init, "method")
                .as_string()
                .is_none_or(|m| crate::core::classify::is_idempotent_method(&m)),
            &js::get(&init, "redirect"),
        );
    if status.is_some_and(|s| !manual && policy.retry.lean_answer(s)) {
        return value;
    }
    let ended = crate::wasm::js::now_ms();
    // A URL string was sent: the request is made now (from the copy that was sent, or none),
    // and a URL that fetch refuses (nothing was sent) is the platform's TypeError, not a
    // network error to retry.
    // A `Request` input was sent as the copy made from it, and `init` is that input.
    let (request, init_copied, input) = match request.dyn_into::<Request>() {
        Ok(r) => (r, false, core::mem::replace(&mut init, JsValue::UNDEFINED)),
        Err(url) => match fix_request(&url, &init) {
            Ok(r) => (r, true, url),
            Err(e) => return Promise::reject(&e).into(),
        },
    };
    let first = First {
        outcome: if fulfilled { Ok(value) } else { Err(value) },
        ended,
        manual,
        timed_out,
    };
    // One future type for every call the loop runs (this one and `Client::start`'s).
    match Template::new(policy, request, &input, &init, init_copied, caller_signal) {
        Ok(template) => {
            future_to_promise(run(policy.clone(), template, started, Some(first))).into()
        }
        Err(e) => Promise::reject(&e).into(),
    }
}

/// The first attempt of a call, sent by the lean path before the loop ran.
pub struct First {
    outcome: Result<JsValue, JsValue>,
    /// When it settled.
    ended: f64,
    /// It was sent with `redirect: 'manual'` and answered with a redirect, for the loop to
    /// follow (`follows_itself`).
    manual: bool,
    /// It failed because its time limit (`timeoutMs`, shortened to `deadlineMs`) fired.
    timed_out: bool,
}

/// The shared guards of one call and what it holds of them (`core::guards`): lent to the
/// core for each step of the engine. Dropping it gives back a half-open probe slot or a
/// throttle turn the call still holds.
struct Guards {
    origin: LazyOrigin,
    /// The call's budget: a `RetryBudget` it was given, else the default one (unless
    /// `budget: false`).
    budget: Option<Rc<RefCell<dyn Budget>>>,
    /// The call's throttle: an `AdaptiveThrottle` it was given, else the default one (unless
    /// `throttle: false`).
    throttle: Option<Rc<RefCell<dyn Pacer>>>,
    breaker: Option<Rc<BreakerShared>>,
    held: Held,
}

/// The origin of the call's request, parsed (a `URL`, a call into JS) the first time a guard
/// needs it: a call whose only guard is the default budget and that succeeds at once never
/// parses it.
struct LazyOrigin {
    request: Request,
    origin: OnceCell<String>,
}

impl LazyOrigin {
    fn get(&self) -> &str {
        self.origin.get_or_init(|| origin_of(&self.request.url()))
    }
}

impl Guards {
    fn new(policy: &Policy, request: &Request) -> Guards {
        let budget: Option<Rc<RefCell<dyn Budget>>> = match &policy.budget {
            Some(b) => Some(b.clone()),
            None if policy.default_budget => Some(
                policy
                    .own_budget
                    .clone()
                    .unwrap_or_else(super::guards::default_budget),
            ),
            None => None,
        };
        Guards {
            // `Clone::clone`: the handle, not `Request.clone()`, which tees the body.
            origin: LazyOrigin {
                request: <Request as Clone>::clone(request),
                origin: OnceCell::new(),
            },
            budget,
            throttle: match &policy.throttle {
                Some(t) => Some(t.clone()),
                None if policy.default_throttle => Some(super::guards::default_throttle()),
                None => None,
            },
            breaker: policy.breaker.clone(),
            held: Held::default(),
        }
    }

    /// Lend the shared guards (and what the call holds) to `step`, then tell the breaker's
    /// listener about the transitions the step caused, once nothing is borrowed any more (a
    /// listener may call `breaker.state(url)`). The engine's next step, as `step` says (not
    /// generic: one copy for every step of the engine).
    fn lend(&mut self, step: &mut dyn FnMut(&mut dyn CallGuards) -> Step) -> Step {
        let has_guard = self.budget.is_some() || self.throttle.is_some() || self.breaker.is_some();
        // The origin is parsed (a `URL`, a call into JS) only when a guard needs it.
        let origin = if has_guard { self.origin.get() } else { "" };
        let outcome = {
            let mut budget = self.budget.as_ref().map(|b| b.borrow_mut());
            let mut throttle = self.throttle.as_ref().map(|t| t.borrow_mut());
            let mut breaker = self.breaker.as_ref().map(|b| b.state.borrow_mut());
            let mut lent = GuardsLent {
                origin,
                budget: budget.as_deref_mut().map(|b| b as &mut dyn Budget),
                pacer: throttle.as_deref_mut().map(|t| {
                    let t: &mut dyn Pacer = t;
                    t
                }),
                breaker: breaker.as_deref_mut(),
                held: &mut self.held,
            };
            step(&mut lent)
        };
        if let Some(b) = &self.breaker {
            for t in self.held.take_transitions() {
                b.report(origin, Some(t));
            }
        }
        outcome
    }
}

impl Drop for Guards {
    fn drop(&mut self) {
        if self.held.slot.is_some()
            || self.held.ticket.is_some()
            || self.held.joined
            || self.held.retry_in_flight
        {
            self.lend(&mut |g| {
                let now = crate::wasm::js::now_ms();
                g.release(now);
                g.leave(now);
                // No step follows: the call is over.
                Step::WaitTurn(0.0)
            });
        }
    }
}

/// Cancel the body of a response we will not hand out, so its connection is freed. Not
/// awaited: the cancel is under way once asked for, and a body whose cancel never settles (a
/// transport's own stream) cannot hold the call.
fn discard(response: &JsValue) {
    if let Some(cancelled) = cancel_body(response) {
        js::ignore_rejection(&cancelled);
    }
}

/// When `promise` fulfils, discard the response it gives: an answer that comes after the call
/// gave up on it. A rejection is ignored.
fn discard_when_fulfilled(promise: &Promise) {
    thread_local! {
        /// `(response) => discard(response)`, made once.
        static DISCARD_LATE: Closure<dyn FnMut(JsValue) -> Result<(), JsError>> =
            Closure::new(|r: JsValue| {
                discard(&r);
                Ok(())
            });
    }
    DISCARD_LATE.with(|f| js::ignore_rejection(promise.then_map(f).unchecked_ref()));
}

/// Start cancelling `response`'s body: the promise of the cancel, if it has a body.
fn cancel_body(response: &JsValue) -> Option<Promise> {
    let body = js::get(response, "body");
    let cancel = js::get(&body, "cancel").dyn_into::<Function>().ok()?;
    cancel.call0(&body).ok().map(|p| js::promise_of(&p))
}

/// Is `value` a `Response`, or one of another fetch implementation (a number `status`, and
/// `headers` with a `get` method)? `{ status: 200 }` is not.
fn response_like(value: &JsValue) -> bool {
    value.is_instance_of::<Response>()
        || (value.is_object() && js::get(&js::get(value, "headers"), "get").is_function())
}

/// A response header, or `None` (also when the object has no usable `headers`).
fn header(response: &JsValue, name: &str) -> Option<String> {
    let headers = js::get(response, "headers");
    let get = js::get(&headers, "get").dyn_into::<Function>().ok()?;
    get.call1(&headers, &JsValue::from_str(name))
        .ok()?
        .as_string()
}

/// The object given to `shouldRetry` (with `offered`, a clone of the response) and `onRetry`
/// and `beforeRetry` (without it, but with the newest response's `headers`, so a
/// `Retry-After` or a request id can be logged): the retry of `attempt` after `delay` ms.
fn retry_context(
    attempt: u32,
    delay: f64,
    reason: &str,
    offered: Option<&JsValue>,
    newest: &Newest,
    key: Option<&str>,
) -> JsValue {
    to_js(&RetryContext {
        attempt,
        delay_ms: delay,
        reason,
        response: offered.map(|r| Js(r.clone())),
        headers: newest.response.as_ref().map(|h| Js(js::get(h, "headers"))),
        status: newest.status,
        error: newest.status.is_none().then(|| Js(newest.error.clone())),
        idempotency_key: key,
    })
}

/// Call a hook and await what it returns (a promise is awaited; a throw or a rejection is
/// the call's error).
async fn call_hook(hook: &Function, ctx: &JsValue) -> Result<JsValue, JsValue> {
    let v = hook.call1(&JsValue::UNDEFINED, ctx)?;
    JsFuture::from(js::promise_of(&v)).await
}

/// How a step bounded by the call's signals and a time limit ended.
enum Bounded<T> {
    /// The step ended first, with this.
    Done(T),
    /// A signal aborted first, with this reason.
    Aborted(JsValue),
    /// The time was up first.
    TimeUp,
}

/// Run `step` until it ends, a signal of the call aborts, or `limit_ms` (if any) passes,
/// whichever comes first: an abort or the deadline ends the call at once whatever is pending
/// (a hook's promise that never settles, a stream body that never yields, a transport that
/// ignores its signal).
async fn bounded<T>(
    signals: &mut CallSignals,
    limit_ms: Option<f64>,
    mut step: Pin<&mut dyn Future<Output = T>>,
) -> Bounded<T> {
    let stop = signals.stop(limit_ms);
    let stopped = JsFuture::from(stop.promise.clone());
    let mut stopped = pin!(stopped);
    poll_fn(|cx| {
        if let Poll::Ready(v) = step.as_mut().poll(cx) {
            return Poll::Ready(Bounded::Done(v));
        }
        match stopped.as_mut().poll(cx) {
            Poll::Ready(Err(reason)) => Poll::Ready(Bounded::Aborted(reason)),
            Poll::Ready(Ok(_)) => Poll::Ready(Bounded::TimeUp),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// The call from its first attempt (or, with `first`, from the outcome of a first attempt the
/// lean path already made) to its end.
pub async fn run(
    policy: Rc<Policy>,
    t: Template,
    started: f64,
    first: Option<First>,
) -> Result<JsValue, JsValue> {
    let attempts = std::cell::Cell::new(0);
    let key = policy.on_settled.as_ref().and(t.key.clone());
    let outcome = run_loop(policy.clone(), t, started, first, &attempts).await;
    // onSettled: how the call ended and how many attempts it took, whatever the outcome.
    if let Some(hook) = &policy.on_settled {
        let (response, error) = match &outcome {
            Ok(response) => (Some(Js(response.clone())), None),
            Err(error) => (None, Some(Js(error.clone()))),
        };
        let info = to_js(&SettledInfo {
            attempts: attempts.get(),
            duration_ms: crate::wasm::js::now_ms() - started,
            response,
            error,
        });
        // The key its attempts carried: to send again, with it, a call that resolved but
        // whose body could not be read.
        if let Some(k) = key.as_ref().filter(|_| attempts.get() > 0) {
            js::set(&info, "idempotencyKey", &JsValue::from_str(k));
        }
        js::detach(hook.call1(&JsValue::UNDEFINED, &info));
    }
    outcome
}

/// What the loop has in hand: the engine's next step, a wait or a hook to run, or the
/// outcome of an attempt it sent.
enum Next<'a> {
    /// The next attempt ([`CallEngine::next_attempt`]): the first (no step yet), or a retry
    /// after `beforeRetry`.
    Attempt,
    Step(Step),
    /// Wait `ms` keeping the newest response, then the engine's step after it:
    /// [`CallEngine::waited`] after a wait of `kind`, [`CallEngine::turn_waited`] after the
    /// throttle's turn (no kind). One place awaits every wait.
    Wait {
        ms: f64,
        kind: Option<WaitKind>,
    },
    /// Run `hook` (`which` it is) for the retry of [`Step::AskHooks`] or
    /// [`Step::BeforeRetry`]: one place awaits every hook.
    Hook {
        hook: &'a Function,
        which: Hook,
        attempt: u32,
        delay_ms: f64,
        reason: RetryReason,
    },
    Outcome {
        outcome: Result<JsValue, JsValue>,
        timed_out: bool,
        followed: bool,
        /// The URL it went to (a poll's), or `None` for the call's own request.
        url: Option<String>,
        sent_at: f64,
        ended: f64,
    },
}

/// Which hook [`Next::Hook`] runs: `shouldRetry` (then `onRetry`, told of a retry only) for
/// [`Step::AskHooks`], `beforeRetry` for [`Step::BeforeRetry`].
#[derive(Clone, Copy)]
#[allow(clippy::enum_variant_names)] // the hooks' own names
enum Hook {
    ShouldRetry,
    OnRetry,
    BeforeRetry,
}

/// What the loop knows of the newest attempt: its response (kept until the next attempt is
/// sent, or answers if it is a poll the deadline may cut: if the call stops before that, it is
/// the answer), or its error.
#[derive(Default)]
struct Newest {
    response: Option<JsValue>,
    /// The clone of `response` that `shouldRetry` was given: cancelled with `response`, never
    /// alone. (Node's fetch, whose signal aborts after one branch of a cloned body was
    /// cancelled, cancels the other and rethrows the result: an unhandled rejection. A clone
    /// merely dropped when `response` is the answer costs only memory.)
    offered: Option<JsValue>,
    status: Option<u16>,
    error: JsValue,
    record: Option<Object>,
}

/// The `202 Accepted` a call that follows them answers with if it ends before a final answer
/// ([`CallEngine::keeps_this_202`], [`CallEngine::answers_with_kept_202`]): the last one that
/// said where to look. Its body is cancelled when another replaces it, or when the call ends
/// with another answer.
#[derive(Default)]
struct Kept202(Option<JsValue>);

impl Kept202 {
    fn replace(&mut self, response: JsValue) {
        if let Some(before) = self.0.replace(response) {
            discard(&before);
        }
    }

    /// The kept 202 as the call's answer, the newest response (not handed out) cancelled.
    fn answer(&mut self, newest: &mut Newest) -> Option<JsValue> {
        let accepted = self.0.take()?;
        newest.discard();
        Some(accepted)
    }
}

impl Drop for Kept202 {
    fn drop(&mut self) {
        if let Some(response) = self.0.take() {
            discard(&response);
        }
    }
}

impl Newest {
    /// Cancel the kept response's body (and its clone's): the call will not hand it out.
    fn discard(&mut self) {
        for r in [self.response.take(), self.offered.take()].iter().flatten() {
            discard(r);
        }
    }

    /// [`Newest::discard`], and `reason` is the call's error.
    fn abandon(&mut self, reason: JsValue) -> Result<JsValue, JsValue> {
        self.discard();
        Err(reason)
    }
}

/// The loop of [`run`]: performs the steps of the call's engine (`core::engine`), which
/// decides everything; `attempts` counts the attempts sent.
async fn run_loop(
    policy: Rc<Policy>,
    t: Template,
    started: f64,
    mut first: Option<First>,
    attempts: &std::cell::Cell<u32>,
) -> Result<JsValue, JsValue> {
    let p = &policy.retry;
    let mut signals = CallSignals::new(
        t.abort_signal(),
        policy.signal.as_ref(),
        &policy.default_signals,
    );
    if let Some(reason) = signals.aborted() {
        return Err(reason);
    }
    let mut guards = Guards::new(&policy, &t.request);
    let key = t.key.clone();
    let mut engine = CallEngine::new(
        p,
        started,
        CallFacts {
            idempotent: t.idempotent,
            has_key: key.is_some(),
            replayable: t.body_kind != BodyKind::OneShot,
        },
    );
    let deadline = || timeout_error(0.0, Some(p.deadline_ms.unwrap_or(0.0)));
    // A first attempt the lean path sent had no body, or a string one (`Body::Text`).
    let step = pin!(t.body(p.max_buffered_body_bytes));
    let body = match t.body_kind {
        // Buffering a stream body waits on the caller's stream, as part of the first attempt:
        // an abort, the deadline or the first attempt's time limit ends it (the other bodies
        // are in memory). What was read of the stream cannot be sent again.
        BodyKind::Stream | BodyKind::Input => {
            let left = engine.deadline_left_ms(crate::wasm::js::now_ms());
            let limit = p.attempt_limit_ms(left);
            match bounded(&mut signals, limit, step).await {
                Bounded::Done(body) => body?,
                Bounded::Aborted(reason) => return Err(reason),
                Bounded::TimeUp if limit == left => {
                    return Err(retry_error(
                        StopReason::Deadline.as_str(),
                        &Array::new(),
                        &deadline(),
                    ))
                }
                Bounded::TimeUp => {
                    return Err(retry_error(
                        StopReason::BodyNotReplayable.as_str(),
                        &Array::new(),
                        &timeout_error(limit.unwrap_or(0.0), None),
                    ))
                }
            }
        }
        _ => step.await?,
    };
    if matches!(body, Body::Stream(_) | Body::Spare(_)) {
        engine.body_not_replayable();
    }
    let history = Array::new();
    let first_at = if p.retry_headers {
        Some(String::from(
            js_sys::Date::new(&JsValue::from_f64(
                started + crate::wasm::js::wall_offset_ms(),
            ))
            .to_iso_string(),
        ))
    } else {
        None
    };
    let mut newest = Newest::default();
    let mut kept = Kept202::default();
    // Headers `beforeRetry` set, sent on every attempt after it (the key and body stay fixed).
    let mut extra: Option<Headers> = None;
    let mut next = match first.take() {
        Some(First {
            outcome,
            mut ended,
            manual,
            timed_out,
        }) => {
            engine.first_sent(p, started);
            let (outcome, followed) = match manual {
                true => {
                    let followed = follow(outcome, &t, &body, &JsValue::UNDEFINED).await;
                    ended = crate::wasm::js::now_ms();
                    followed
                }
                false => (outcome, false),
            };
            Next::Outcome {
                outcome,
                timed_out,
                followed,
                url: None,
                sent_at: started,
                ended,
            }
        }
        None => Next::Attempt,
    };
    // Before an attempt (and at the start): an abort ends the call, else the engine's checks.
    // An aborted signal ends the call here (the response it kept is discarded).
    macro_rules! stop_if_aborted {
        () => {
            if let Some(reason) = signals.aborted() {
                return newest.abandon(reason);
            }
        };
    }
    loop {
        let step = match next {
            Next::Attempt => {
                stop_if_aborted!();
                guards.lend(&mut |g| engine.next_attempt(p, g, crate::wasm::js::now_ms()))
            }
            Next::Step(step) => step,
            Next::Wait { ms, kind } => {
                // The response is kept through the wait: if the deadline passes meanwhile (a
                // late timer), it is the answer, and nothing more is sent.
                if let Err(reason) = signals.sleep(ms).await {
                    // An abort discards it and is the call's error.
                    return newest.abandon(reason);
                }
                match kind {
                    None => guards.lend(&mut |g| {
                        engine.turn_waited(p, g, crate::wasm::js::now_ms(), &mut MathRandom)
                    }),
                    Some(kind) => {
                        stop_if_aborted!();
                        guards.lend(&mut |g| {
                            engine.waited(p, kind, g, crate::wasm::js::now_ms(), &mut MathRandom)
                        })
                    }
                }
            }
            Next::Hook {
                hook,
                which,
                attempt,
                delay_ms: delay,
                reason,
            } => {
                // A clone for `shouldRetry`, so that a hook that reads the body leaves the
                // response the call may still return readable (one that cannot be cloned is
                // offered as is).
                let offered = match which {
                    Hook::ShouldRetry => newest.response.as_ref().map(clone_response),
                    _ => None,
                };
                let ctx = retry_context(
                    attempt,
                    delay,
                    reason.as_str(),
                    offered.as_ref(),
                    &newest,
                    key.as_deref(),
                );
                // Kept for `shouldRetry` only (with no response there is no clone, and none kept).
                if offered.is_some() {
                    newest.offered =
                        offered.filter(|c| !newest.response.as_ref().is_some_and(|r| c == r));
                }
                // The hook's value, bounded by the call's signals and deadline: a promise that
                // never settles cannot hold the call. A throw, a rejection or an abort ends the
                // call, and the newest response (and the clone `shouldRetry` was given) are
                // cancelled, so their connection is not kept open. When the deadline ends the
                // hook, the newest response is the answer.
                let step = pin!(call_hook(hook, &ctx));
                let limit = engine.deadline_left_ms(crate::wasm::js::now_ms());
                let ended = match bounded(&mut signals, limit, step).await {
                    Bounded::Done(Ok(v)) => Ok(v),
                    Bounded::Done(Err(e)) | Bounded::Aborted(e) => Err(Some(e)),
                    Bounded::TimeUp => Err(None),
                };
                // The call's signal aborted while the hook ran (the hook's own doing, or
                // another's): Node's fetch has cancelled the response's branch of the body the
                // clone shares, and cancelling the clone now would complete that cancel, which
                // it rethrows (an unhandled rejection). The clone is dropped instead, and the
                // call ends with the abort (or the hook's throw): a response whose body was
                // cancelled is no answer.
                let aborted = signals.aborted();
                if aborted.is_some() {
                    newest.offered = None;
                }
                let value = match (ended, aborted) {
                    (Ok(_), Some(reason)) => return newest.abandon(reason),
                    (Ok(v), None) => v,
                    (Err(Some(e)), _) => return newest.abandon(e),
                    (Err(None), _) => {
                        next = Next::Step(engine.hook_timed_out());
                        continue;
                    }
                };
                match which {
                    Hook::ShouldRetry => {
                        let Some(retry) = value.as_bool() else {
                            return newest.abandon(type_error(
                                "retryFetch: shouldRetry must return true or false (or a promise of one)",
                            ));
                        };
                        // onRetry is told of a retry only.
                        if let (true, Some(hook)) = (retry, &policy.on_retry) {
                            next = Next::Hook {
                                hook,
                                which: Hook::OnRetry,
                                attempt,
                                delay_ms: delay,
                                reason,
                            };
                            continue;
                        }
                        engine.hooks_done(retry, crate::wasm::js::now_ms())
                    }
                    Hook::OnRetry => engine.hooks_done(true, crate::wasm::js::now_ms()),
                    // beforeRetry: the retry is about to be sent; it may give headers to set on
                    // it (a refreshed token, a new signature). The key and the body stay as they
                    // are.
                    Hook::BeforeRetry => {
                        if !value.is_undefined() && !value.is_null() {
                            let headers = match extra.take() {
                                Some(h) => h,
                                None => Headers::new()?,
                            };
                            if let Err(e) = set_headers(
                                &headers,
                                &value,
                                &p.idempotency_header,
                                p.retry_headers,
                            ) {
                                return newest.abandon(e);
                            }
                            extra = Some(headers);
                        }
                        next = Next::Attempt;
                        continue;
                    }
                }
            }
            Next::Outcome {
                outcome,
                timed_out,
                followed,
                url,
                sent_at,
                ended,
            } => {
                if let Some(reason) = signals.aborted() {
                    if let Ok(response) = &outcome {
                        discard(response);
                    }
                    // The attempt the abort ended was sent (a poll only counts once it fails).
                    if !engine.in_flight_is_poll() {
                        attempts.set(history.length() + 1);
                    }
                    return Err(reason);
                }
                // The call's first attempt, refused by fetch before anything was sent, as it
                // will be every time: no network error, never retried, counted nowhere. (A
                // poll goes to another URL; after anything was sent, a redirect hop or an
                // earlier attempt, it is a network error as any other, with what it has.)
                let first_unsent = history.length() == 0 && !followed && url.is_none();
                if let (Err(e), false, true) = (&outcome, timed_out, first_unsent) {
                    if let Some(refused) = refused_unsent(&t, &body, e, policy.fetch.is_none()) {
                        return Err(refused);
                    }
                }
                let (outcome_kind, response, error) =
                    match &outcome {
                        Ok(v) => match js::get(v, "status").as_f64() {
                            Some(s) if response_like(v) && is_response_status(s) => (
                                Outcome::Status(s as u16),
                                Some(v.clone()),
                                JsValue::UNDEFINED,
                            ),
                            _ => return Err(type_error(
                                "retryFetch: fetch resolved to something that is not a Response",
                            )),
                        },
                        Err(e) if timed_out => (Outcome::Timeout, None, e.clone()),
                        Err(e) => (Outcome::NetworkError, None, e.clone()),
                    };
                // A redirect means the server took the request: for a non-idempotent one,
                // whatever happened after it is final.
                let redirected = followed
                    || response
                        .as_ref()
                        .is_some_and(|r| js::get(r, "redirected").as_bool() == Some(true));
                let read = |name: &str| response.as_ref().and_then(|r| header(r, name));
                let base = || {
                    response
                        .as_ref()
                        .and_then(|r| js::get(r, "url").as_string())
                        .filter(|u| !u.is_empty())
                        .or_else(|| url.clone())
                        .unwrap_or_else(|| t.request.url())
                };
                // A blank URL header names nothing (resolved, it would be the request's own URL).
                let resolve = |name: &str| {
                    read(name)
                        .filter(|v| !crate::core::classify::trim(v).is_empty())
                        .and_then(|v| web_sys::Url::new_with_base(&v, &base()).ok())
                        .map(|u| u.href())
                };
                // A server's date, and the record's `startedAt`, are the wall clock's.
                let (now, wall_offset) = crate::wasm::js::now_and_wall_offset_ms();
                engine.set_wall_offset_ms(wall_offset);
                let mut counted = false;
                let step = guards.lend(&mut |g| {
                    let settled = Settled {
                        outcome: outcome_kind,
                        redirected,
                        header: &read,
                        url_header: &resolve,
                    };
                    let (c, step) = engine.settled(p, settled, g, now, &mut MathRandom);
                    counted = c;
                    step
                });
                // A URL a 202 named on another origin: its polls are not the guards' (theirs
                // is the request's origin).
                if let Some(target) = engine.poll_url() {
                    let elsewhere = origin_of(target) != guards.origin.get();
                    engine.polls_elsewhere(elsewhere);
                }
                let record: Object = to_js(&AttemptRecord {
                    attempt: engine.attempts(),
                    started_at: sent_at + wall_offset,
                    duration_ms: ended - sent_at,
                    status: match outcome_kind {
                        Outcome::Status(s) => Some(s),
                        _ => None,
                    },
                    error: match outcome_kind {
                        Outcome::Status(_) => None,
                        _ => Some(Js(error.clone())),
                    },
                })
                .unchecked_into();
                if counted {
                    history.push(&record);
                }
                newest = Newest {
                    status: match outcome_kind {
                        Outcome::Status(s) => Some(s),
                        _ => None,
                    },
                    response,
                    offered: None,
                    error,
                    record: Some(record),
                };
                if engine.keeps_this_202() {
                    if let Some(accepted) = newest.response.take() {
                        kept.replace(accepted);
                    }
                }
                step
            }
        };
        // Attempts sent (the records), not the ones a budget's refusal counted as made.
        attempts.set(history.length());
        next = match step {
            Step::Send {
                attempt,
                url,
                limit_ms: limit,
                retry_headers,
            } => {
                let abort = signals.attempt(limit, p)?;
                // A non-idempotent request whose redirects the runtime lets us see is followed
                // here, so that a failure after a redirect is known as one: the platform's fetch
                // of the call's request only, and not with an `integrity`, which fetch would
                // check against a redirect's own body.
                let sees_redirects =
                    url.is_none() && policy.fetch.is_none() && !has_integrity(&t.request);
                let redirect = js::get(&t.request, "redirect");
                // A copy of the request sent once (a long body of a `Request` input) is never
                // sent again: fetch follows its redirects, a 307/308 with its body, as it
                // would the request's own.
                let manual = sees_redirects
                    && follows_itself(t.idempotent, &redirect)
                    && !matches!(body, Body::Spare(_));
                // `redirect: 'error'`: sent with 'manual', so that meeting a redirect is told
                // apart from a network error (it is a TypeError, never retried); with an
                // `integrity`, fetch's own refusal, which reads as a network error.
                let refuses = sees_redirects && redirect == js::name("error");
                let poll_request;
                let (input, init): (&JsValue, JsValue) = match &url {
                    Some(url) => {
                        let init;
                        (poll_request, init) = poll_init(
                            &t,
                            url,
                            abort.signal.as_ref(),
                            extra.as_ref(),
                            &p.idempotency_header,
                        )?;
                        (&poll_request, init)
                    }
                    None => {
                        let init = attempt_init(
                            &t,
                            &body,
                            abort.signal.as_ref().or(t.signal.as_ref()),
                            first_at.as_deref().filter(|_| retry_headers),
                            attempt,
                            manual || refuses,
                            extra.as_ref(),
                        )?;
                        let request = match &body {
                            Body::Spare(spare) => spare,
                            _ => &t.request,
                        };
                        (request.as_ref(), init)
                    }
                };
                // The answer before this attempt is replaced by it: its body is cancelled now,
                // not when this attempt answers, so that its connection is free for this one (a
                // browser opens six per origin: a retried 503 whose body still streams would
                // hold one through the retry, and six such calls would wait on each other).
                if !engine.keeps_previous_answer() {
                    newest.discard();
                }
                let sent_at = crate::wasm::js::now_ms();
                let sent = match &policy.fetch {
                    // As a promise of ours: awaiting a wrapper's `Promise` subclass would call
                    // its own `then`, which may throw through the wasm.
                    None => Ok(js::promise_of(&global_fetch(input, &init))),
                    // A transport that throws synchronously failed like one that rejects.
                    Some(f) => f
                        .call2(&JsValue::UNDEFINED, input, &init)
                        .map(|v| js::promise_of(&v)),
                };
                // The attempt is bounded too, a little after its own time limit: a transport
                // that ignores its signal cannot hold the call past an abort or the deadline.
                let mut gave_up = false;
                let outcome = match sent {
                    // The platform's fetch honours the attempt's signal.
                    Ok(p) if policy.fetch.is_none() => JsFuture::from(p).await,
                    Ok(p) => match bounded(
                        &mut signals,
                        limit.map(|ms| ms + TRANSPORT_GRACE_MS),
                        pin!(JsFuture::from(p.clone())),
                    )
                    .await
                    {
                        Bounded::Done(outcome) => outcome,
                        given_up => {
                            // What it resolves with later is not the call's: its body is
                            // cancelled when it comes, so its connection is freed.
                            discard_when_fulfilled(&p);
                            match given_up {
                                Bounded::Aborted(reason) => Err(reason),
                                _ => {
                                    gave_up = true;
                                    Err(JsValue::UNDEFINED)
                                }
                            }
                        }
                    },
                    Err(e) => Err(e),
                };
                // Only the platform's fetch is sent with 'manual' for the call to follow.
                let (outcome, followed) = match manual {
                    true => follow(outcome, &t, &body, &init).await,
                    false => (outcome, false),
                };
                // The time limit's `TimeoutError`: the reason the attempt's signal aborted with,
                // or (a transport that ignored it past the grace) a new one.
                let timeout = abort.timed_out().or_else(|| {
                    gave_up.then(|| {
                        let ms = limit.unwrap_or(0.0);
                        timeout_error(ms, deadline_cut(p, ms))
                    })
                });
                let timed_out = timeout.is_some();
                // A poll the deadline cut while in flight: the 202 before it is the answer, as
                // a wait the deadline ends keeps the last response.
                if engine.poll_cut(timed_out, outcome.is_err()) && signals.aborted().is_none() {
                    if let Some(accepted) = kept.answer(&mut newest) {
                        return Ok(accepted);
                    }
                    if let Some(before) = &newest.response {
                        return Ok(before.clone());
                    }
                }
                newest.discard();
                if let (true, Ok(r)) = (refuses, &outcome) {
                    let status = js::get(r, "status").as_f64().unwrap_or(0.0);
                    let opaque = js::get(r, "type") == js::name("opaqueredirect");
                    if opaque
                        || (matches!(status as u16, 301 | 302 | 303 | 307 | 308)
                            && header(r, "location").is_some())
                    {
                        discard(r);
                        // The attempt was sent (and answered): `onSettled` counts it.
                        attempts.set(history.length() + 1);
                        let e = type_error("retryFetch: the request has redirect: 'error' and the server answered with a redirect");
                        // It was sent, and may have been processed: its key, to send it again.
                        if let Some(k) = &key {
                            js::set(&e, "idempotencyKey", &JsValue::from_str(k));
                        }
                        return Err(e);
                    }
                }
                drop(abort); // the time limit and the signal links end with the attempt
                let outcome = match (outcome, timeout) {
                    (Err(_), Some(timeout)) => Err(timeout),
                    (other, _) => other,
                };
                Next::Outcome {
                    outcome,
                    timed_out,
                    followed,
                    url,
                    sent_at,
                    ended: crate::wasm::js::now_ms(),
                }
            }
            Step::WaitTurn(ms) => Next::Wait { ms, kind: None },
            Step::AskHooks {
                attempt,
                delay_ms,
                reason,
            } => {
                let hook = match (&policy.should_retry, &policy.on_retry) {
                    (Some(hook), _) => Some((hook, Hook::ShouldRetry)),
                    (None, Some(hook)) => Some((hook, Hook::OnRetry)),
                    (None, None) => None,
                };
                match hook {
                    Some((hook, which)) => Next::Hook {
                        hook,
                        which,
                        attempt,
                        delay_ms,
                        reason,
                    },
                    None => Next::Step(engine.hooks_done(true, crate::wasm::js::now_ms())),
                }
            }
            Step::Wait { ms, kind } => {
                // The wait that followed the attempt: its backoff, and the backoffs of the
                // retries the budget skipped after it.
                if let Some(record) = &newest.record {
                    let before = match kind {
                        WaitKind::Backoff => Some(0.0),
                        WaitKind::Skip => js::get(record, "delayMs").as_f64(),
                        _ => None,
                    };
                    if let Some(before) = before {
                        js::set(record, "delayMs", &JsValue::from_f64(before + ms));
                    }
                }
                Next::Wait {
                    ms,
                    kind: Some(kind),
                }
            }
            Step::BeforeRetry {
                attempt,
                delay_ms,
                reason,
            } => match &policy.before_retry {
                Some(hook) => Next::Hook {
                    hook,
                    which: Hook::BeforeRetry,
                    attempt,
                    delay_ms,
                    reason,
                },
                None => Next::Attempt,
            },
            Step::Finish { reason, cause } => {
                // Aborted as the step ended (by a breaker's `onStateChange`): the call's error.
                if let Some(aborted) = signals.aborted() {
                    return newest.abandon(aborted);
                }
                // Ended before a final answer to a 202 it followed: that 202 (where to look).
                if let Some(accepted) = engine
                    .answers_with_kept_202()
                    .then(|| kept.answer(&mut newest))
                    .flatten()
                {
                    return Ok(accepted);
                }
                return match newest.response {
                    Some(r) => Ok(r),
                    None => {
                        let cause = match cause {
                            Cause::AttemptError => newest.error,
                            Cause::Deadline => deadline(),
                            Cause::CircuitOpen(wait) => {
                                circuit_open_error(guards.origin.get(), wait)
                            }
                            Cause::Nothing => JsValue::UNDEFINED,
                        };
                        let error = retry_error(reason.as_str(), &history, &cause);
                        // The key the attempts carried: a caller who tries again later with
                        // it (`idempotencyKey: error.idempotencyKey`) cannot charge twice.
                        if let Some(k) = &key {
                            js::set(&error, "idempotencyKey", &JsValue::from_str(k));
                        }
                        Err(error)
                    }
                };
            }
            // Before any attempt the call's error is the CircuitOpenError itself.
            Step::CircuitOpen(wait) => return Err(circuit_open_error(guards.origin.get(), wait)),
        };
    }
}

/// Add the headers `beforeRetry` returned (a `Headers`, an object or a list of pairs) to
/// `extra`. What the call fixed cannot be changed: the key header (the key is what makes the
/// retry safe), the request-body headers (`Content-Type`, `Content-Encoding` and the rest of
/// [`REQUEST_BODY_HEADERS`]: the bytes are the call's), and, under `retryHeaders`,
/// the retry headers ours (`X-Retry-Count`, `X-Original-Request-At`).
fn set_headers(
    extra: &Headers,
    given: &JsValue,
    key_header: &str,
    retry_headers: bool,
) -> Result<(), JsValue> {
    let given = super::request::strict_headers(given)?
        .ok_or_else(|| type_error("retryFetch: beforeRetry must return headers (a Headers, an object of strings or [name, value] pairs of strings: valid header names, values of Latin-1 text) or undefined"))?;
    let retry = if retry_headers {
        &crate::core::options::RETRY_HEADERS[..]
    } else {
        &[]
    };
    let refused = core::iter::once(key_header)
        .chain(REQUEST_BODY_HEADERS)
        .chain(retry.iter().copied());
    for name in refused {
        if given.has(name)? {
            let mut msg = String::from("retryFetch: beforeRetry cannot change the ");
            msg.push_str(name);
            msg.push_str(" header: the call fixed it (the same key on every attempt is what makes the retry safe, the body and what it is are the call's, and so are the retry headers)");
            return Err(type_error(&msg));
        }
    }
    copy_headers(&given, extra, None)
}

/// The most redirects one attempt follows (fetch's own limit).
const MAX_REDIRECTS: u32 = 20;

/// Does `request` follow redirects (`redirect: 'follow'`, the default)?
fn follows_redirects(request: &Request) -> bool {
    follows(&js::get(request, "redirect"))
}

/// Does a `redirect` value (`init.redirect`, a request's) follow: 'follow', or absent?
fn follows(redirect: &JsValue) -> bool {
    redirect.as_string().is_none_or(|r| r == "follow")
}

/// Does the call follow the redirects of an attempt itself (sending it with `redirect:
/// 'manual'`)? A non-idempotent request that follows them (`redirect`: 'follow' or absent),
/// where the runtime lets us see them, so that a failure after a redirect is known as one.
fn follows_itself(idempotent: bool, redirect: &JsValue) -> bool {
    !idempotent && follows(redirect) && redirects_visible()
}

/// The `TypeError` for an attempt fetch refused before sending anything, a refusal that
/// would be the same on every attempt (Node's: a cause code of
/// `core::classify::UNSENT_CAUSE_CODES`; a browser's fetch, the platform's (`platform`, not a
/// custom transport): `core::classify::refused_by_browser`), with fetch's error as its
/// `cause`; `None` for any other failure.
#[cold]
#[inline(never)]
fn refused_unsent(t: &Template, body: &Body, error: &JsValue, platform: bool) -> Option<JsValue> {
    let cause = js::get(error, "cause");
    let why = match js::get(&cause, "code").as_string() {
        Some(code) if UNSENT_CAUSE_CODES.contains(&code.as_str()) => {
            js::get(&cause, "message").as_string().unwrap_or(code)
        }
        _ => {
            let page = page_origin().filter(|_| platform)?;
            let r = &t.request;
            let text = |name| js::get(r, name).as_string().unwrap_or_default();
            let (mode, redirect) = (text("mode"), text("redirect"));
            let body_bytes = match body {
                Body::Bytes(b) => Some(b.length() as f64),
                // The UTF-8 bytes fetch sends, not the string's UTF-16 length.
                Body::Text(s) => s.as_string().map(|s| s.len() as f64),
                _ => None,
            };
            refused_by_browser(BrowserRequest {
                mode: &mode,
                redirect: &redirect,
                same_origin: web_sys::Url::new(&r.url()).is_ok_and(|u| u.origin() == page),
                keepalive: js::get(r, "keepalive").as_bool() == Some(true),
                body_bytes,
            })?
            .to_string()
        }
    };
    let mut msg = String::from("retryFetch: fetch refuses to send this request (");
    msg.push_str(&why);
    msg.push_str("); nothing was sent");
    let e = type_error(&msg);
    js::set(&e, "cause", error);
    Some(e)
}

/// The origin of the page (or browser worker) that runs the call, where fetch enforces a
/// request's `mode` (a browser: redirects not visible, a `location` with an origin).
fn page_origin() -> Option<String> {
    if redirects_visible() {
        return None;
    }
    js::get(&js::get(&js_sys::global(), "location"), "origin").as_string()
}

/// Does `request` carry an `integrity` (a non-empty one)?
fn has_integrity(request: &Request) -> bool {
    js::get(request, "integrity")
        .as_string()
        .is_some_and(|i| !i.is_empty())
}

/// Follow the redirects of a non-idempotent request sent with `redirect: 'manual'`, as fetch
/// would (RFC 9110 and the Fetch Standard: a 303, and a 301 or 302 of a POST, become a GET
/// without a body; a 307 or 308 sends the same method and body again; only to an `http:` or
/// `https:` URL; no credentials to another origin), with the attempt's signal. Returns the
/// final outcome and whether a redirect was followed: after one, the server took the request,
/// so the call never sends it again, whatever the target answers or however it fails.
async fn follow(
    mut outcome: Result<JsValue, JsValue>,
    t: &Template,
    body: &Body,
    init: &JsValue,
) -> (Result<JsValue, JsValue>, bool) {
    let mut url = t.request.url();
    let mut method = t.request.method();
    let headers = match Headers::new_with_headers(
        &js::get(init, "headers")
            .dyn_into()
            .unwrap_or_else(|_| t.request.headers()),
    ) {
        Ok(h) => h,
        Err(e) => return (Err(e), false),
    };
    let mut with_body = true;
    for hop in 0..=MAX_REDIRECTS {
        let Ok(response) = &outcome else {
            return (outcome, hop > 0);
        };
        let status = js::get(response, "status").as_f64().unwrap_or(0.0);
        let location = header(response, "location");
        let (true, Some(location)) = (
            matches!(status as u16, 301 | 302 | 303 | 307 | 308),
            location,
        ) else {
            if hop > 0 {
                // What fetch's own following says: `redirected`, and the final `url` (a
                // response's URL has no fragment).
                own_value(response, "redirected", &JsValue::TRUE);
                let bare = crate::core::classify::cut(&url, b'#', false).map_or(&*url, |(u, _)| u);
                own_value(response, "url", &JsValue::from_str(bare));
            }
            return (outcome, hop > 0);
        };
        discard(response);
        if hop == MAX_REDIRECTS {
            return (
                Err(type_error("retryFetch: too many redirects (over 20)")),
                true,
            );
        }
        let next = match web_sys::Url::new_with_base(&location, &url) {
            Ok(next) => next,
            Err(_) => {
                return (
                    Err(type_error("retryFetch: a redirect's Location is not a URL")),
                    true,
                )
            }
        };
        if (status == 303.0 && method != "HEAD")
            || ((status == 301.0 || status == 302.0) && method == "POST")
        {
            method = String::from("GET");
            with_body = false;
            for h in REQUEST_BODY_HEADERS {
                let _ = headers.delete(h);
            }
        }
        let next_url = next.href();
        if let Some(why) = redirect_refused(&next_url) {
            return (Err(unsendable_url(why, &next_url)), true);
        }
        if origin_of(&url) != next.origin() {
            for h in CROSS_ORIGIN_DROPPED_HEADERS {
                let _ = headers.delete(h);
            }
        }
        // `mode: 'same-origin'` never leaves the request's origin: fetch's network error.
        if js::get(&t.request, "mode") == "same-origin"
            && origin_of(&t.request.url()) != next.origin()
        {
            return (
                Err(type_error("retryFetch: the request has mode: 'same-origin' and was redirected to another origin")),
                true,
            );
        }
        url = next_url;
        let hop_init = Object::new();
        js::set(&hop_init, "method", &JsValue::from_str(&method));
        js::set(&hop_init, "headers", &headers);
        js::set(&hop_init, "redirect", &JsValue::from_str("manual"));
        // What else fetch's own hop keeps of the request: its mode, cache mode, credentials,
        // keepalive and referrer (a `cache: 'no-store'` hop is sent with `Pragma: no-cache`).
        for member in ["mode", "cache", "credentials", "keepalive"] {
            js::set(&hop_init, member, &js::get(&t.request, member));
        }
        keep_referrer(&hop_init, &t.request);
        // The attempt's signal: the one of `init`, else the request's own (a hop is a new
        // request, made from its URL, which carries no signal of its own).
        let signal = js::get(init, "signal");
        let signal = if signal.is_undefined() {
            t.abort_signal()
        } else {
            signal
        };
        js::set(&hop_init, "signal", &signal);
        if with_body {
            match body {
                Body::Bytes(bytes) => match body_value(bytes, false) {
                    Ok(value) => js::set(&hop_init, "body", &value),
                    Err(e) => return (Err(e), true),
                },
                Body::Text(text) => js::set(&hop_init, "body", text),
                // A body that cannot be sent again cannot follow a 307 or 308.
                _ if t.request.body().is_some() => {
                    return (Err(type_error("retryFetch: a 307 or 308 redirect needs the body again, and this body can be sent only once")), true)
                }
                _ => {}
            }
        }
        let sent = global_fetch(&JsValue::from_str(&url), &hop_init);
        outcome = JsFuture::from(js::promise_of(&sent)).await;
    }
    (outcome, true)
}

/// `response.clone()`, or the response itself when it cannot be cloned (another fetch
/// implementation's answer without `clone`, a body already used).
fn clone_response(response: &JsValue) -> JsValue {
    js::get(response, "clone")
        .dyn_into::<Function>()
        .ok()
        .and_then(|clone| clone.call0(response).ok())
        .unwrap_or_else(|| response.clone())
}

/// `Object.defineProperty(target, key, { value })`: an own property over a prototype getter.
fn own_value(target: &JsValue, key: &str, value: &JsValue) {
    let descriptor = Object::new();
    js::set(&descriptor, "value", value);
    let _ = js_sys::Reflect::define_property(
        target.unchecked_ref::<Object>(),
        &JsValue::from_str(key),
        &descriptor,
    );
}

/// How much later than its own time limit an attempt is given up on when its transport
/// ignores the attempt's signal (one that honours it has settled by then).
const TRANSPORT_GRACE_MS: f64 = 25.0;

/// A `GET` poll of `url` after a `202 Accepted`, as a transport is called for any attempt,
/// `(request, init)`: a `Request` with the call's headers (and those `beforeRetry` set) but
/// those the core drops (the body's, the key's; `Authorization` and `Cookie` for another
/// origin) and its credentials mode; `init` has the attempt's signal (the call's request's
/// own when the attempt has none: the poll is not that request). Redirects are followed by
/// fetch, so a `303 See Other` to the result gives the result.
fn poll_init(
    t: &Template,
    url: &str,
    signal: Option<&JsValue>,
    extra: Option<&Headers>,
    key_header: &str,
) -> Result<(JsValue, JsValue), JsValue> {
    let headers = attempt_headers(t, extra)?;
    let same_origin = origin_of(&t.request.url()) == origin_of(url);
    for name in poll_dropped_headers(key_header, same_origin) {
        let _ = headers.delete(name);
    }
    let fields = Object::new();
    js::set(&fields, "method", &JsValue::from_str("GET"));
    js::set(&fields, "headers", &headers);
    js::set(&fields, "credentials", &js::get(&t.request, "credentials"));
    keep_referrer(&fields, &t.request);
    let request = fix_request(&JsValue::from_str(url), &fields)?;
    let init = Object::new();
    keep_referrer(&init, &t.request);
    match signal {
        Some(s) => js::set(&init, "signal", s),
        None => js::set(&init, "signal", &t.abort_signal()),
    }
    Ok((request.into(), init.into()))
}

/// `fetch(request, init)` with an `init` of any member resets the request's `referrer` and
/// `referrerPolicy` (the Fetch Standard's `Request` constructor): `init` carries the ones the
/// call fixed, so that no attempt sends a `Referer` the caller's policy withheld.
fn keep_referrer(init: &Object, request: &Request) {
    js::set(init, "referrer", &js::get(request, "referrer"));
    js::set(init, "referrerPolicy", &js::get(request, "referrerPolicy"));
}

/// The `init` of one attempt (`undefined` when the request goes as it is): its signal, the
/// body, and `X-Retry-Count` / `X-Original-Request-At` on attempts after the first.
fn attempt_init(
    t: &Template,
    body: &Body,
    signal: Option<&JsValue>,
    first_at: Option<&str>,
    attempt: u32,
    manual_redirects: bool,
    extra: Option<&Headers>,
) -> Result<JsValue, JsValue> {
    let changed = extra.is_some();
    if signal.is_none()
        && first_at.is_none()
        && matches!(body, Body::AsIs | Body::Spare(_))
        && !manual_redirects
        && !changed
    {
        return Ok(JsValue::UNDEFINED);
    }
    let init = Object::new();
    keep_referrer(&init, &t.request);
    if manual_redirects {
        js::set(&init, "redirect", &JsValue::from_str("manual"));
    }
    if let Some(s) = signal {
        js::set(&init, "signal", s);
    }
    match body {
        Body::AsIs | Body::Spare(_) => {}
        Body::Bytes(bytes) => js::set(
            &init,
            "body",
            &body_value(bytes, !manual_redirects && follows_redirects(&t.request))?,
        ),
        Body::Text(text) => js::set(&init, "body", text),
        Body::Stream(stream) => {
            js::set(&init, "body", stream);
            js::set(&init, "duplex", &JsValue::from_str("half"));
        }
    }
    if first_at.is_some() || changed {
        // `extra` cannot hold the retry headers (`set_headers` refuses them).
        let headers = attempt_headers(t, extra)?;
        if let Some(at) = first_at {
            headers.set("X-Retry-Count", &super::errors::int(f64::from(attempt - 1)))?;
            headers.set("X-Original-Request-At", at)?;
        }
        js::set(&init, "headers", &headers);
    }
    Ok(init.into())
}

/// The headers of an attempt or a poll: a copy of the request's, with those `beforeRetry` set
/// (`extra`).
fn attempt_headers(t: &Template, extra: Option<&Headers>) -> Result<Headers, JsValue> {
    let headers = Headers::new_with_headers(&t.request.headers())?;
    if let Some(extra) = extra {
        copy_headers(extra, &headers, None)?;
    }
    Ok(headers)
}
