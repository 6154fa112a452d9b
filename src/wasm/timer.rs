//! Timers and cancellation: abortable waits and the per-attempt abort controller.
//!
//! Every listener and timer is removed when its owner is dropped, so a finished call leaves
//! nothing behind (no closure is leaked, no timer keeps Node's event loop alive).

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Array, Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::js::{self, AbortController, AbortSignal};
use crate::core::options::MAX_TIMER_MS;

/// The first already-aborted signal's reason.
pub fn abort_reason(signals: &[AbortSignal]) -> Option<JsValue> {
    signals.iter().find(|s| s.aborted()).map(|s| s.reason())
}

/// `abort` listeners on a set of signals, removed on drop. `on_abort` gets the reason.
pub struct AbortListeners {
    installed: Vec<(AbortSignal, Closure<dyn FnMut()>)>,
}

impl AbortListeners {
    /// Listen for `abort` on each of `signals`.
    pub fn new(signals: &[AbortSignal], on_abort: Rc<dyn Fn(JsValue)>) -> Self {
        let mut installed = Vec::with_capacity(signals.len());
        for signal in signals {
            let s = signal.clone();
            let f = on_abort.clone();
            let listener = Closure::<dyn FnMut()>::new(move || f(s.reason()));
            if signal
                .add_event_listener("abort", listener.as_ref().unchecked_ref())
                .is_ok()
            {
                installed.push((signal.clone(), listener));
            }
        }
        AbortListeners { installed }
    }
}

impl Drop for AbortListeners {
    fn drop(&mut self) {
        for (signal, listener) in &self.installed {
            let _ = signal.remove_event_listener("abort", listener.as_ref().unchecked_ref());
        }
    }
}

/// A `setTimeout` whose timer is cleared on drop.
pub struct Timer {
    handle: JsValue,
    _callback: Closure<dyn FnMut()>,
}

impl Timer {
    /// Call `callback` after `ms` (clamped to what `setTimeout` accepts).
    pub fn new(ms: f64, callback: Closure<dyn FnMut()>) -> Self {
        let ms = if ms.is_nan() {
            0.0
        } else {
            ms.clamp(0.0, MAX_TIMER_MS)
        };
        let handle = js::set_timeout(callback.as_ref().unchecked_ref(), ms);
        Timer {
            handle,
            _callback: callback,
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        js::clear_timeout(&self.handle);
    }
}

/// Wait `ms`, or fail at once with the reason of the first of `signals` to abort.
pub async fn sleep(ms: u64, signals: &[AbortSignal]) -> Result<(), JsValue> {
    if let Some(reason) = abort_reason(signals) {
        return Err(reason);
    }
    let mut settle: Option<(Function, Function)> = None;
    let promise = Promise::new(&mut |resolve, reject| settle = Some((resolve, reject)));
    let Some((resolve, reject)) = settle else {
        return Ok(());
    };
    let _timer = Timer::new(
        ms as f64,
        Closure::<dyn FnMut()>::new(move || {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }),
    );
    let _listeners = AbortListeners::new(
        signals,
        Rc::new(move |reason| {
            let _ = reject.call1(&JsValue::UNDEFINED, &reason);
        }),
    );
    JsFuture::from(promise).await.map(|_| ())
}

#[wasm_bindgen]
extern "C" {
    /// `AbortSignal.any(signals)` (Node 20.3+, every current browser).
    #[wasm_bindgen(js_namespace = AbortSignal, js_name = any, catch)]
    fn abort_signal_any(signals: &Array) -> Result<AbortSignal, JsValue>;
}

/// The abort signal of one attempt: it aborts when any caller signal aborts (with that
/// signal's reason) or when the attempt's time limit fires (then [`AttemptAbort::timed_out`]
/// is true). The caller signals are joined with `AbortSignal.any`, so aborting one of them
/// after the `Response` arrived still cancels reading its body, as with plain fetch; where
/// `AbortSignal.any` is missing, abort listeners (removed on drop) do the linking. Dropping
/// it clears the time limit: `timeoutMs` bounds the wait for the response, not the reading of
/// its body.
pub struct AttemptAbort {
    signal: AbortSignal,
    timed_out: Rc<Cell<bool>>,
    _listeners: Option<AbortListeners>,
    _timer: Option<Timer>,
}

impl AttemptAbort {
    /// A signal joined from `signals`, timing out after `limit_ms` when given with
    /// `timeout_reason`.
    pub fn new(
        signals: &[AbortSignal],
        limit_ms: Option<f64>,
        timeout_reason: JsValue,
    ) -> Result<Self, JsValue> {
        if limit_ms.is_none() {
            if let [only] = signals {
                // One caller signal and no time limit: fetch can use it as it is.
                return Ok(AttemptAbort {
                    signal: only.clone(),
                    timed_out: Rc::new(Cell::new(false)),
                    _listeners: None,
                    _timer: None,
                });
            }
        }
        let controller = AbortController::new()?;
        let timed_out = Rc::new(Cell::new(false));
        let timer = limit_ms.map(|ms| {
            let c = controller.clone();
            let flag = timed_out.clone();
            Timer::new(
                ms,
                Closure::<dyn FnMut()>::new(move || {
                    flag.set(true);
                    let _ = c.abort(&timeout_reason);
                }),
            )
        });
        let own = controller.signal();
        if signals.is_empty() {
            return Ok(AttemptAbort {
                signal: own,
                timed_out,
                _listeners: None,
                _timer: timer,
            });
        }
        let all: Array = signals.iter().map(JsValue::from).collect();
        all.push(&own);
        if let Ok(joined) = abort_signal_any(&all) {
            return Ok(AttemptAbort {
                signal: joined,
                timed_out,
                _listeners: None,
                _timer: timer,
            });
        }
        let linked = controller.clone();
        let listeners = AbortListeners::new(
            signals,
            Rc::new(move |reason| {
                let _ = linked.abort(&reason);
            }),
        );
        Ok(AttemptAbort {
            signal: own,
            timed_out,
            _listeners: Some(listeners),
            _timer: timer,
        })
    }

    /// The signal to hand to `fetch`.
    pub fn signal(&self) -> &AbortSignal {
        &self.signal
    }

    /// Did the time limit fire?
    pub fn timed_out(&self) -> bool {
        self.timed_out.get()
    }
}
