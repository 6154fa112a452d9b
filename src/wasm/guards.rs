//! The retry-storm guards as JavaScript classes: `RetryBudget`, `AdaptiveThrottle` and
//! `CircuitBreaker`. Each wraps the core's per-origin state; one object can be shared by any
//! number of calls (and `createRetryFetch` clients), which all see the same state.
//!
//! A call finds the Rust state behind a guard object through a registry: every instance gets
//! an id, readable from JS as the hidden getter `__retryFetchGuard`, and the registry maps it
//! to the shared state. The entry is removed when the object is freed (`free()` or garbage
//! collection, the package is built with weak references); calls in flight keep their own
//! reference to the state.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::errors::option_error;
use super::js;
use crate::core::breaker::{BreakerConfig, BreakerState, CircuitBreaker, Transition};
use crate::core::budget::{BudgetConfig, RetryBudget};
use crate::core::options::OptionError;
use crate::core::throttle::{AdaptiveThrottle, ThrottleConfig};

/// The shared state of a circuit breaker and its `onStateChange` listener.
pub struct BreakerShared {
    /// The per-origin breakers.
    pub state: RefCell<CircuitBreaker>,
    /// `onStateChange({ origin, from, to })`, if given.
    pub on_state_change: Option<Function>,
}

impl BreakerShared {
    /// Tell the listener about `transition` (a throwing listener is ignored: the breaker's
    /// state must not depend on it).
    pub fn report(&self, origin: &str, transition: Option<Transition>) {
        let (Some(t), Some(listener)) = (transition, &self.on_state_change) else {
            return;
        };
        let event: JsValue = js_sys::Object::new().into();
        js::set(&event, "origin", &JsValue::from_str(origin));
        js::set(&event, "from", &JsValue::from_str(t.from.as_str()));
        js::set(&event, "to", &JsValue::from_str(t.to.as_str()));
        let _ = listener.call1(&JsValue::UNDEFINED, &event);
    }
}

/// One registered guard.
#[derive(Clone)]
pub enum Guard {
    /// A `RetryBudget`.
    Budget(Rc<RefCell<RetryBudget>>),
    /// An `AdaptiveThrottle`.
    Throttle(Rc<RefCell<AdaptiveThrottle>>),
    /// A `CircuitBreaker`.
    Breaker(Rc<BreakerShared>),
}

thread_local! {
    static NEXT_ID: Cell<u32> = const { Cell::new(1) };
    static REGISTRY: RefCell<Vec<(u32, Guard)>> = const { RefCell::new(Vec::new()) };
}

fn register(guard: Guard) -> u32 {
    let id = NEXT_ID.with(|n| {
        let id = n.get();
        n.set(id.wrapping_add(1).max(1));
        id
    });
    REGISTRY.with(|r| r.borrow_mut().push((id, guard)));
    id
}

fn unregister(id: u32) {
    REGISTRY.with(|r| r.borrow_mut().retain(|(i, _)| *i != id));
}

/// The guard behind a JS value that should be one of our guard objects.
pub fn lookup(value: &JsValue) -> Option<Guard> {
    let id = js::get(value, "__retryFetchGuard").as_f64()?;
    if !(id >= 1.0 && id <= u32::MAX as f64) {
        return None;
    }
    let id = id as u32;
    REGISTRY.with(|r| {
        r.borrow()
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, g)| g.clone())
    })
}

/// The origin (`scheme://host:port`) of a URL string, as `URL.origin` gives it; the string
/// itself when it does not parse.
pub fn origin_of(url: &str) -> String {
    let base = js::get(&js_sys::global(), "location");
    let base = js::get(&base, "href");
    match js::Url::new(url, &base) {
        Ok(u) => u.origin(),
        Err(_) => url.to_string(),
    }
}

/// Read a numeric setting of a guard's options object; `None` when absent.
fn number(
    options: &JsValue,
    name: &'static str,
    expected: &'static str,
) -> Result<Option<f64>, JsValue> {
    let v = js::get_or_throw(options, name)?;
    if v.is_undefined() {
        return Ok(None);
    }
    v.as_f64()
        .map(Some)
        .ok_or_else(|| option_error(OptionError::new(name, expected), &v))
}

fn check_options_object(options: &JsValue, class: &'static str) -> Result<(), JsValue> {
    if options.is_undefined() || options.is_null() || options.is_object() {
        Ok(())
    } else {
        Err(option_error(
            OptionError::new(class, "an options object or undefined"),
            options,
        ))
    }
}

fn integer_u32(v: f64) -> u32 {
    if v.is_finite() && v.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&v) {
        v as u32
    } else {
        0 // rejected by validation (every u32 setting must be >= 1)
    }
}

/// `new RetryBudget({ maxTokens = 10, tokenRatio = 0.1 })`: gRPC retryThrottling per origin.
#[wasm_bindgen(js_name = RetryBudget, skip_typescript)]
pub struct RetryBudgetHandle {
    id: u32,
    inner: Rc<RefCell<RetryBudget>>,
}

#[wasm_bindgen(js_class = RetryBudget)]
impl RetryBudgetHandle {
    /// Validate `options` (a `TypeError` names a bad one) and create an empty budget.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<RetryBudgetHandle, JsValue> {
        check_options_object(&options, "RetryBudget")?;
        let d = BudgetConfig::default();
        let config = BudgetConfig {
            max_tokens: number(&options, "maxTokens", "a number > 0 and <= 1000000")?
                .unwrap_or(d.max_tokens),
            token_ratio: number(&options, "tokenRatio", "a number > 0 and <= maxTokens")?
                .unwrap_or(d.token_ratio),
        };
        let config = config.validate().map_err(|e| {
            let v = if e.option == "maxTokens" {
                config.max_tokens
            } else {
                config.token_ratio
            };
            option_error(e, &JsValue::from_f64(v))
        })?;
        let inner = Rc::new(RefCell::new(RetryBudget::new(config)));
        let id = register(Guard::Budget(inner.clone()));
        Ok(RetryBudgetHandle { id, inner })
    }

    /// The token count of the origin of `url` (full, `maxTokens`, when never seen).
    pub fn tokens(&self, url: &str) -> f64 {
        self.inner.borrow().tokens(&origin_of(url))
    }

    /// `maxTokens`.
    #[wasm_bindgen(getter, js_name = maxTokens)]
    pub fn max_tokens(&self) -> f64 {
        self.inner.borrow().config().max_tokens
    }

    /// `tokenRatio`.
    #[wasm_bindgen(getter, js_name = tokenRatio)]
    pub fn token_ratio(&self) -> f64 {
        self.inner.borrow().config().token_ratio
    }

    /// The registry id (internal).
    #[wasm_bindgen(getter, js_name = __retryFetchGuard)]
    pub fn guard_id(&self) -> u32 {
        self.id
    }
}

impl Drop for RetryBudgetHandle {
    fn drop(&mut self) {
        unregister(self.id);
    }
}

/// `new AdaptiveThrottle({ initialRate = 100, rampMs = 100, beta = 0.7, scale = 0.4,
/// minRate = 0.5, maxWaitMs = 10000 })`: an adaptive send rate per origin.
#[wasm_bindgen(js_name = AdaptiveThrottle, skip_typescript)]
pub struct AdaptiveThrottleHandle {
    id: u32,
    inner: Rc<RefCell<AdaptiveThrottle>>,
}

#[wasm_bindgen(js_class = AdaptiveThrottle)]
impl AdaptiveThrottleHandle {
    /// Validate `options` (a `TypeError` names a bad one) and create the throttle.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<AdaptiveThrottleHandle, JsValue> {
        check_options_object(&options, "AdaptiveThrottle")?;
        let d = ThrottleConfig::default();
        let config = ThrottleConfig {
            initial_rate: number(
                &options,
                "initialRate",
                "a number of requests per second > 0",
            )?
            .unwrap_or(d.initial_rate),
            ramp_ms: number(&options, "rampMs", "a number of milliseconds > 0")?
                .unwrap_or(d.ramp_ms),
            beta: number(&options, "beta", "a number between 0 and 1 (exclusive)")?
                .unwrap_or(d.beta),
            scale: number(&options, "scale", "a number > 0")?.unwrap_or(d.scale),
            min_rate: number(
                &options,
                "minRate",
                "a number of requests per second > 0 and <= initialRate",
            )?
            .unwrap_or(d.min_rate),
            max_wait_ms: number(
                &options,
                "maxWaitMs",
                "a number of milliseconds from 0 to 2147483647",
            )?
            .unwrap_or(d.max_wait_ms),
        };
        let config = config.validate().map_err(|e| {
            let v = match e.option {
                "initialRate" => config.initial_rate,
                "rampMs" => config.ramp_ms,
                "beta" => config.beta,
                "scale" => config.scale,
                "maxWaitMs" => config.max_wait_ms,
                _ => config.min_rate,
            };
            option_error(e, &JsValue::from_f64(v))
        })?;
        let inner = Rc::new(RefCell::new(AdaptiveThrottle::new(config)));
        let id = register(Guard::Throttle(inner.clone()));
        Ok(AdaptiveThrottleHandle { id, inner })
    }

    /// The current send rate (req/s) for the origin of `url`; `undefined` if never seen.
    pub fn rate(&self, url: &str) -> Option<f64> {
        self.inner
            .borrow_mut()
            .rate(&origin_of(url), js_sys::Date::now())
    }

    /// The registry id (internal).
    #[wasm_bindgen(getter, js_name = __retryFetchGuard)]
    pub fn guard_id(&self) -> u32 {
        self.id
    }
}

impl Drop for AdaptiveThrottleHandle {
    fn drop(&mut self) {
        unregister(self.id);
    }
}

/// `new CircuitBreaker({ failureThreshold = 5, openMs = 10000, halfOpenMaxCalls = 1,
/// onStateChange })`: a circuit breaker per origin.
#[wasm_bindgen(js_name = CircuitBreaker, skip_typescript)]
pub struct CircuitBreakerHandle {
    id: u32,
    inner: Rc<BreakerShared>,
}

#[wasm_bindgen(js_class = CircuitBreaker)]
impl CircuitBreakerHandle {
    /// Validate `options` (a `TypeError` names a bad one) and create the breaker.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<CircuitBreakerHandle, JsValue> {
        check_options_object(&options, "CircuitBreaker")?;
        let d = BreakerConfig::default();
        let int = "an integer from 1 to 1000";
        let threshold = number(&options, "failureThreshold", int)?;
        let open_ms = number(
            &options,
            "openMs",
            "a number of milliseconds from 0 to 2147483647",
        )?;
        let probes = number(&options, "halfOpenMaxCalls", int)?;
        let config = BreakerConfig {
            failure_threshold: threshold.map_or(d.failure_threshold, integer_u32),
            open_ms: open_ms.unwrap_or(d.open_ms),
            half_open_max_calls: probes.map_or(d.half_open_max_calls, integer_u32),
        };
        let config = config.validate().map_err(|e| {
            let v = match e.option {
                "failureThreshold" => threshold,
                "openMs" => open_ms,
                _ => probes,
            };
            option_error(e, &JsValue::from_f64(v.unwrap_or(f64::NAN)))
        })?;
        let listener = js::get_or_throw(&options, "onStateChange")?;
        let on_state_change =
            if listener.is_undefined() || listener.is_null() {
                None
            } else {
                Some(listener.dyn_into::<Function>().map_err(|v| {
                    option_error(OptionError::new("onStateChange", "a function"), &v)
                })?)
            };
        let inner = Rc::new(BreakerShared {
            state: RefCell::new(CircuitBreaker::new(config)),
            on_state_change,
        });
        let id = register(Guard::Breaker(inner.clone()));
        Ok(CircuitBreakerHandle { id, inner })
    }

    /// `'closed'`, `'open'` or `'half-open'` for the origin of `url`.
    pub fn state(&self, url: &str) -> String {
        let s: BreakerState = self
            .inner
            .state
            .borrow()
            .state(&origin_of(url), js_sys::Date::now());
        s.as_str().to_string()
    }

    /// The registry id (internal).
    #[wasm_bindgen(getter, js_name = __retryFetchGuard)]
    pub fn guard_id(&self) -> u32 {
        self.id
    }
}

impl Drop for CircuitBreakerHandle {
    fn drop(&mut self) {
        unregister(self.id);
    }
}
