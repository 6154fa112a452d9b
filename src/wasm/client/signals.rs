//! Abort signals and timers: the caller's signals for a whole call, one abort signal per
//! attempt (the caller's signals joined with the attempt's time limit), and waits that an
//! abort ends at once.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::AbortController;

use super::bindings::{clear_timeout, redirects_visible, set_timeout, AbortSignalStatics};
use super::errors::timeout_error;
use crate::core::options::{RetryPolicy, MAX_TIMER_MS};
use crate::wasm::js;

/// The `deadlineMs` to name when an attempt's time limit, `limit_ms`, fires: `Some` when the
/// limit is what was left of the deadline rather than `timeoutMs` (then the attempt's
/// `TimeoutError` says the deadline passed), `None` when it is `timeoutMs`.
pub fn deadline_cut(p: &RetryPolicy, limit_ms: f64) -> Option<f64> {
    p.deadline_ms.filter(|_| p.timeout_ms != Some(limit_ms))
}

/// A delay as `setTimeout` takes it: `0..=2147483647` ms (longer ones would fire at once).
pub fn timer_ms(ms: f64) -> f64 {
    if ms > 0.0 {
        ms.min(MAX_TIMER_MS)
    } else {
        0.0
    }
}

/// `signal.addEventListener('abort', listener)` / `removeEventListener`, duck-typed (a
/// polyfill's signal works); a throwing method is ignored.
fn listen(signal: &JsValue, method: &'static str, listener: &Function) {
    if let Ok(f) = js::get(signal, method).dyn_into::<Function>() {
        let _ = f.call2(signal, &JsValue::from_str("abort"), listener);
    }
}

/// Is `signal` aborted? Its reason then.
fn reason_if_aborted(signal: &JsValue) -> Option<JsValue> {
    (js::get(signal, "aborted").as_bool() == Some(true)).then(|| reason_of(signal))
}

/// An aborted signal's `reason`, or (a polyfill's signal that has none) the `AbortError`
/// `DOMException` a native signal aborted without a reason carries.
fn reason_of(signal: &JsValue) -> JsValue {
    let reason = js::get(signal, "reason");
    if !reason.is_undefined() {
        return reason;
    }
    // `new DOMException(message, name)`, through `Reflect.construct` (a rare path).
    let class = js::get(&js_sys::global(), "DOMException");
    let args = Array::of2(
        &JsValue::from_str("This operation was aborted"),
        &JsValue::from_str("AbortError"),
    );
    js_sys::Reflect::construct(class.unchecked_ref::<Function>(), &args).unwrap_or(reason)
}

/// A listener added to a signal, removed when dropped.
struct Link {
    signal: JsValue,
    listener: Closure<dyn FnMut()>,
}

/// What a [`Link`] does with the reason when its signal aborts.
enum OnAbort {
    /// Reject a promise: call its `reject` with the reason.
    Reject(Function),
    /// Abort an attempt's own controller with the reason.
    Abort(AbortController),
}

impl Link {
    /// Listen to `signal`'s abort, passing its reason on as `then` says.
    fn new(signal: &JsValue, then: OnAbort) -> Link {
        let s = signal.clone();
        let listener = Closure::<dyn FnMut()>::new(move || {
            let reason = reason_of(&s);
            match &then {
                OnAbort::Reject(reject) => {
                    let _ = reject.call1(&JsValue::UNDEFINED, &reason);
                }
                OnAbort::Abort(controller) => controller.abort_with_reason(&reason),
            }
        });
        listen(
            signal,
            "addEventListener",
            listener.as_ref().unchecked_ref(),
        );
        Link {
            signal: signal.clone(),
            listener,
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        listen(
            &self.signal,
            "removeEventListener",
            self.listener.as_ref().unchecked_ref(),
        );
    }
}

/// The caller's signals for one call: the request's own (`init.signal` or a `Request`
/// input's), `options.signal`, and a client's default signal that a call's own did not
/// replace.
pub struct CallSignals {
    list: Vec<JsValue>,
    /// `options.signal` was given (so every attempt needs its own joined signal).
    pub has_option_signal: bool,
    /// One of them was given to an earlier call too (an application's signal, passed to every
    /// call): the attempts are joined to it so that it keeps nothing of them ([`join`]). Found
    /// for the call's first attempt that needs a joined signal ([`seen_before`]).
    long_lived: std::cell::OnceCell<bool>,
    /// A promise that rejects with the reason of the first signal to abort, made on the first
    /// wait; its listeners go when the call ends.
    aborted: Option<(Promise, Vec<Link>)>,
}

impl CallSignals {
    /// The signals of a call.
    pub fn new(
        request_signal: JsValue,
        option_signal: Option<&JsValue>,
        default_signals: &[JsValue],
    ) -> CallSignals {
        let mut list = vec![request_signal];
        if let Some(s) = option_signal {
            list.push(s.clone());
        }
        list.extend(default_signals.iter().cloned());
        CallSignals {
            has_option_signal: option_signal.is_some(),
            long_lived: std::cell::OnceCell::new(),
            list,
            aborted: None,
        }
    }

    /// The reason of the first aborted signal, if one is.
    pub fn aborted(&self) -> Option<JsValue> {
        self.list.iter().find_map(reason_if_aborted)
    }

    /// The promise that rejects when a signal aborts.
    fn on_abort(&mut self) -> Promise {
        if let Some((p, _)) = &self.aborted {
            return p.clone();
        }
        let mut reject = None;
        let promise = Promise::new(&mut |_, r| reject = Some(r));
        let mut links = Vec::new();
        if let Some(reject) = reject {
            for signal in &self.list {
                links.push(Link::new(signal, OnAbort::Reject(reject.clone())));
            }
        }
        ignore_rejection(&promise);
        self.aborted = Some((promise.clone(), links));
        promise
    }

    /// Wait `ms`, or fail at once with the reason of the first signal to abort.
    pub async fn sleep(&mut self, ms: f64) -> Result<(), JsValue> {
        if let Some(reason) = self.aborted() {
            return Err(reason);
        }
        // The wait is a [`CallSignals::stop`] of its own: its timer is cleared when it ends.
        let stop = self.stop(Some(ms));
        JsFuture::from(stop.promise.clone()).await.map(|_| ())
    }

    /// A promise that resolves (to `undefined`) after `ms`, if given, and rejects with the
    /// reason of the first signal to abort: what a wait awaits ([`CallSignals::sleep`]), and
    /// what bounds a step of the call that cannot be aborted itself (a hook's promise, a stream
    /// body's read, a transport that ignores its signal). Its timer is cleared when the
    /// [`Stop`] is dropped.
    pub fn stop(&mut self, ms: Option<f64>) -> Stop {
        let abort = self.on_abort();
        let mut handle = JsValue::UNDEFINED;
        let mut ended = None;
        // Settled when the Stop is dropped: a promise nobody settles would keep the future
        // awaiting it (and its callbacks) alive for ever.
        let end = Promise::new(&mut |resolve, _| ended = Some(resolve));
        let list = Array::of2(&abort, &end);
        if let Some(ms) = ms {
            list.push(&Promise::new(&mut |resolve, _| {
                handle = set_timeout(&resolve, timer_ms(ms))
            }));
        }
        Stop {
            promise: Promise::race(&list),
            handle,
            end: ended,
        }
    }

    /// The signal of one attempt with time limit `limit_ms` under `policy`: see
    /// [`AttemptAbort`].
    pub fn attempt(
        &self,
        limit_ms: Option<f64>,
        policy: &RetryPolicy,
    ) -> Result<AttemptAbort, JsValue> {
        AttemptAbort::new(self, limit_ms, policy)
    }
}

/// See [`CallSignals::stop`].
pub struct Stop {
    /// Resolves when the time is up, rejects with an abort's reason.
    pub promise: Promise,
    handle: JsValue,
    end: Option<Function>,
}

impl Drop for Stop {
    fn drop(&mut self) {
        clear_timeout(&self.handle);
        if let Some(end) = &self.end {
            let _ = end.call0(&JsValue::UNDEFINED);
        }
    }
}

pub use crate::wasm::js::ignore_rejection;

/// The abort signal of one attempt: it aborts when a caller's signal does (with its reason)
/// or when the time limit fires (then [`AttemptAbort::timed_out`]). `AbortSignal.any` joins
/// them, so aborting after the `Response` arrived still cancels reading its body, as with
/// plain fetch; where it is missing or refuses a signal (a polyfill's), listeners link them
/// for the attempt. The time limit and the listeners end when this is dropped.
pub struct AttemptAbort {
    /// The attempt's signal; `None` when only the request's own signal can abort it (then
    /// the request carries it).
    pub signal: Option<JsValue>,
    limit: Option<TimeLimit>,
    _links: Vec<Link>,
}

impl AttemptAbort {
    fn new(
        call: &CallSignals,
        limit_ms: Option<f64>,
        policy: &RetryPolicy,
    ) -> Result<AttemptAbort, JsValue> {
        if limit_ms.is_none() && !call.has_option_signal {
            return Ok(AttemptAbort {
                signal: None,
                limit: None,
                _links: Vec::new(),
            });
        }
        let controller = AbortController::new()?;
        let limit = limit_ms.map(|ms| TimeLimit::start(&controller, ms, policy));
        let mut links = Vec::new();
        // The platform's signals are joined for as long as fetch holds the attempt's signal
        // (`join`); any other (a polyfill's, another realm's) is followed through a listener
        // for the attempt.
        let native = call
            .list
            .iter()
            .all(|s| s.is_instance_of::<web_sys::AbortSignal>());
        let joined = match native {
            true => {
                let long_lived = *call.long_lived.get_or_init(|| seen_before(&call.list));
                long_lived
                    .then(|| join(&call.list, &controller))
                    .flatten()
                    .or_else(|| any(&call.list, &controller))
            }
            false => None,
        };
        let signal = match joined {
            Some(signal) => signal,
            None => {
                for s in &call.list {
                    links.push(Link::new(s, OnAbort::Abort(controller.clone())));
                }
                controller.signal()
            }
        };
        Ok(AttemptAbort {
            signal: Some(signal.into()),
            limit,
            _links: links,
        })
    }

    /// The attempt's `TimeoutError`, if its time limit fired.
    pub fn timed_out(&self) -> Option<JsValue> {
        self.limit.as_ref().and_then(TimeLimit::fired)
    }
}

/// What joins the caller's signals to the attempts' own ([`join`]).
struct Joins {
    /// Once an attempt's signal is collected, takes it out of each source's attempts (held:
    /// `[attempts, the attempt's WeakRef, the source's WeakRef]`); a source left with none
    /// loses the listener and its entry, so nothing of ours keeps it (Node keeps a signal of
    /// `AbortSignal.any` or `AbortSignal.timeout` alive while it has an abort listener).
    registry: js_sys::FinalizationRegistry,
    /// Each attempt signal's controller, kept as long as the signal is.
    controllers: js_sys::WeakMap,
    /// Each source signal's attempt signals (a `Set` of `WeakRef`s), kept as long as the
    /// source is.
    attempts: js_sys::WeakMap,
    /// The one abort listener of every source: it aborts the source's attempts that live.
    listener: Function,
}

thread_local! {
    static JOINS: Option<Joins> = {
        // `Fn`, not `FnMut`: aborting an attempt may run them again before they return (an
        // attempt's signal that is itself a source: a client used as another's `fetch`), and
        // wasm-bindgen refuses to re-enter an `FnMut` (a throw in a listener ends Node).
        let unlink = Closure::<dyn Fn(JsValue)>::new(|held: JsValue| {
            // Always the array `join` registered.
            let held: &Array = held.unchecked_ref();
            let attempts: js_sys::Set = held.get(0).unchecked_into();
            attempts.delete(&held.get(1));
            let source = held.get(2).unchecked_into::<js_sys::WeakRef>().deref();
            let (Some(source), 0) = (source, attempts.size()) else {
                return;
            };
            JOINS.with(|j| {
                // Unless a later call made the source a new set meanwhile.
                if let Some(j) = j.as_ref().filter(|j| j.attempts.get(&source) == **attempts) {
                    j.attempts.delete(&source);
                    listen(&source, "removeEventListener", &j.listener);
                }
            });
        });
        let listener = Closure::<dyn Fn(JsValue)>::new(|event: JsValue| {
            let source = js::get(&event, "target");
            JOINS.with(|j| {
                let Some(j) = j.as_ref() else { return };
                let Ok(attempts) = j.attempts.get(source.unchecked_ref()).dyn_into::<js_sys::Set>()
                else {
                    return;
                };
                let reason = reason_of(&source);
                for weak in Array::from(&attempts) {
                    let signal = weak.unchecked_into::<js_sys::WeakRef>().deref();
                    if let Some(c) = signal
                        .map(|s| j.controllers.get(&s))
                        .and_then(|c| c.dyn_into::<AbortController>().ok())
                    {
                        c.abort_with_reason(&reason);
                    }
                }
            });
        });
        let global = js_sys::global();
        // Where `WeakRef` or `FinalizationRegistry` is missing, `AbortSignal.any` (or links
        // for the attempt) join them instead.
        (js::get(&global, "WeakRef").is_function()
            && js::get(&global, "FinalizationRegistry").is_function())
        .then(|| Joins {
            registry: js_sys::FinalizationRegistry::new(unlink.into_js_value().unchecked_ref()),
            controllers: js_sys::WeakMap::new(),
            attempts: js_sys::WeakMap::new(),
            listener: listener.into_js_value().unchecked_into(),
        })
    };
}

thread_local! {
    /// The signals calls were given, kept weakly.
    static SEEN: js_sys::WeakSet = js_sys::WeakSet::new();
}

/// Was one of a call's `signals` given to an earlier call? Each is remembered (weakly) for
/// the calls after it. A signal made for one call (a controller per request, the request's
/// own) is joined to its attempts with `AbortSignal.any`, whose entries go with it; one that
/// outlives many calls is joined with [`join`].
fn seen_before(signals: &[JsValue]) -> bool {
    SEEN.with(|seen| {
        let mut before = false;
        for s in signals.iter().filter(|s| s.is_object()) {
            let s = s.unchecked_ref::<js_sys::Object>();
            before |= seen.has(s);
            seen.add(s);
        }
        before
    })
}

/// `controller`'s signal, aborted with the reason of the first of `sources` to abort, for as
/// long as it lives: each source has one listener (the same for all) that aborts the
/// attempts joined to it, reached weakly, and an attempt's entry goes once its signal is
/// collected (when fetch, and the body it reads, no longer hold it), as fetch does with its
/// own listener on `init.signal`; the listener goes with the source's last entry. So aborting after the `Response` resolved still cancels
/// reading its body, and a long-lived signal (an application's, passed to every call) keeps
/// nothing of the calls that ended and gains no listener per call: Node 20's
/// `AbortSignal.any`, which this replaces, keeps an entry in every source for every signal
/// joined to it until the source aborts. `None` in a browser, and where it cannot be done so
/// ([`any`] then).
fn join(sources: &[JsValue], controller: &AbortController) -> Option<web_sys::AbortSignal> {
    let signal = controller.signal();
    JOINS.with(|joins| {
        // Node and Deno only: a browser's `AbortSignal.any` keeps its dependants weakly (no
        // leak), and a browser's fetch may let an attempt's signal be collected while the
        // body is read (the entries would then go, and an abort no longer cancel it).
        let j = joins.as_ref().filter(|_| redirects_visible())?;
        j.controllers.set(signal.unchecked_ref(), controller);
        let weak: JsValue = js_sys::WeakRef::new(signal.unchecked_ref::<js_sys::Object>()).into();
        for source in sources {
            let key = source.unchecked_ref::<js_sys::Object>();
            let held = Array::of3(&JsValue::UNDEFINED, &weak, &js_sys::WeakRef::new(key));
            let attempts = match j.attempts.get(key).dyn_into::<js_sys::Set>() {
                Ok(attempts) => attempts,
                Err(_) => {
                    let attempts = js_sys::Set::new(&JsValue::UNDEFINED);
                    j.attempts.set(key, &attempts);
                    // Added once: the same listener again would not be added twice anyway.
                    listen(source, "addEventListener", &j.listener);
                    attempts
                }
            };
            attempts.add(&weak);
            held.set(0, attempts.into());
            j.registry.register(signal.as_ref(), &held);
        }
        Some(signal)
    })
}

/// `AbortSignal.any` of `sources` and `controller`'s signal: `None` where it is missing or
/// refuses one of them (then links for the attempt).
fn any(sources: &[JsValue], controller: &AbortController) -> Option<web_sys::AbortSignal> {
    let all: Array = sources.iter().collect();
    all.push(&controller.signal());
    AbortSignalStatics::any(&all).ok()
}

/// An attempt's time limit: a timer that aborts `controller` with the attempt's
/// `TimeoutError`, made when it fires (an `Error` costs its stack trace): the deadline's when
/// the limit is what was left of it ([`deadline_cut`]), else `timeoutMs`'s. Cleared when
/// dropped.
struct TimeLimit {
    handle: JsValue,
    fired: Rc<RefCell<Option<JsValue>>>,
    _fire: Closure<dyn FnMut()>,
}

impl TimeLimit {
    fn start(controller: &AbortController, ms: f64, policy: &RetryPolicy) -> TimeLimit {
        let deadline = deadline_cut(policy, ms);
        let fired = Rc::new(RefCell::new(None));
        let (cell, c) = (fired.clone(), controller.clone());
        let fire = Closure::<dyn FnMut()>::new(move || {
            let cause = timeout_error(ms, deadline);
            c.abort_with_reason(&cause);
            *cell.borrow_mut() = Some(cause);
        });
        TimeLimit {
            handle: set_timeout(fire.as_ref().unchecked_ref(), timer_ms(ms)),
            fired,
            _fire: fire,
        }
    }

    /// The `TimeoutError` it aborted with, if it fired.
    fn fired(&self) -> Option<JsValue> {
        self.fired.borrow().clone()
    }
}

impl Drop for TimeLimit {
    fn drop(&mut self) {
        clear_timeout(&self.handle);
    }
}

/// The time limit of a lean first attempt (sent by `fetch(url, init)` before the loop ran): an
/// `AbortController` of its own whose signal the attempt carries, and a timer that aborts it
/// with the attempt's `TimeoutError`. The timer runs the policy's one [`FirstTimer::fire`]
/// function, given the controller (`setTimeout(fire, ms, controller)`), so a call makes no
/// closure of its own. Ends when the attempt settles ([`FirstTimer::end`]): the body may be
/// read past the limit, as in the loop.
pub struct FirstTimer {
    /// The signal of its controller, which the attempt is sent with.
    pub signal: web_sys::AbortSignal,
    /// The timer's handle.
    pub handle: JsValue,
}

impl FirstTimer {
    /// What a policy's first-attempt timers run: abort the controller they are given with the
    /// `TimeoutError` of the limit `ms` under `policy` (the deadline's when `ms` is what was
    /// left of it).
    pub fn fire(ms: f64, policy: &RetryPolicy) -> Function {
        let deadline = deadline_cut(policy, ms);
        // The closure type of `ignore_rejection`'s handler: no glue of its own.
        Closure::<dyn FnMut(JsValue) -> Result<(), JsError>>::new(move |controller: JsValue| {
            let controller = controller.unchecked_into::<AbortController>();
            controller.abort_with_reason(&timeout_error(ms, deadline));
            Ok(())
        })
        .into_js_value()
        .unchecked_into()
    }

    /// Arm the timer: `fire` (from [`FirstTimer::fire`]) after `timer_ms(ms)`.
    pub fn start(ms: f64, fire: &Function) -> Result<FirstTimer, JsValue> {
        let controller = AbortController::new()?;
        let handle = js::set_timeout_with(fire, timer_ms(ms), &controller);
        Ok(FirstTimer {
            signal: controller.signal(),
            handle,
        })
    }

    /// The attempt sent with `signal` settled: the timer `handle` is cleared; the
    /// `TimeoutError` it aborted with, if it fired.
    pub fn end(signal: &JsValue, handle: &JsValue) -> Option<JsValue> {
        clear_timeout(handle);
        let signal = signal.unchecked_ref::<web_sys::AbortSignal>();
        signal.aborted().then(|| signal.reason())
    }
}
