//! The caller's async context (Node's `AsyncLocalStorage`), carried to the handler.
//!
//! wasm-bindgen-futures runs every task from one shared microtask queue, so code the
//! companion calls after an `await` would run in whichever request's context scheduled that
//! queue: a handler reading an `AsyncLocalStorage` (request ids, tracing, a logger) would see
//! another request's values. Each request therefore captures its context when it arrives
//! (`AsyncLocalStorage.snapshot()`, given by `js/server.js`: it is Node-specific) and every
//! call into the caller's code (`handler`, `required`, `identity`, `key`, the `idempotent`
//! function) goes through that snapshot.

use std::cell::RefCell;

use js_sys::{Array, Function};
use wasm_bindgen::prelude::*;

thread_local! {
    /// `() => AsyncLocalStorage.snapshot()`, or none where there is no such thing.
    static CAPTURE: RefCell<Option<Function>> = const { RefCell::new(None) };
}

/// `setContextCapture(capture)`: how `js/server.js` gives the wasm
/// `() => AsyncLocalStorage.snapshot()`. Not part of the public API.
#[wasm_bindgen(js_name = setContextCapture, skip_typescript)]
pub fn set_context_capture(capture: Function) {
    CAPTURE.with(|c| *c.borrow_mut() = Some(capture));
}

/// Runs the caller's functions in the context of the request or call that captured it.
#[derive(Clone)]
pub struct Caller(Option<Function>);

impl Caller {
    /// The current context: call this synchronously where the request arrives.
    pub fn capture() -> Caller {
        let snapshot = CAPTURE.with(|c| {
            c.borrow()
                .as_ref()
                .and_then(|f| f.call0(&JsValue::UNDEFINED).ok())
        });
        Caller(snapshot.and_then(|s| s.dyn_into::<Function>().ok()))
    }

    /// `f(...args)` in the captured context; a throw is an `Err`.
    pub fn call(&self, f: &Function, args: &[&JsValue]) -> Result<JsValue, JsValue> {
        let this = &JsValue::UNDEFINED;
        // One or two arguments (every caller's): one call, no argument list.
        match (&self.0, args) {
            (Some(run), [a]) => return run.call2(this, f, a),
            (Some(run), [a, b]) => return run.call3(this, f, a, b),
            (None, [a]) => return f.call1(this, a),
            (None, [a, b]) => return f.call2(this, a, b),
            _ => {}
        }
        let list = Array::new();
        match &self.0 {
            Some(run) => {
                list.push(f);
                for a in args {
                    list.push(a);
                }
                run.apply(&JsValue::UNDEFINED, &list)
            }
            None => {
                for a in args {
                    list.push(a);
                }
                f.apply(&JsValue::UNDEFINED, &list)
            }
        }
    }
}
