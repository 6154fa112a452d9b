//! The retry-storm guards as JavaScript classes: `RetryBudget`, `AdaptiveThrottle` and
//! `CircuitBreaker`. Each wraps the core's per-origin state; one object can be shared by any
//! number of calls (and `createRetryFetch` clients), which all see the same state.
//!
//! A call finds the Rust state behind a guard object through a registry: every instance gets
//! an id, readable from JS as the hidden getter `__retryFetchGuard`, and the registry maps it
//! to the shared state. Ids start at a random base per instance of the module, so a guard made
//! by another copy of the package (the ESM and the CommonJS builds loaded together) is not
//! found and is refused with a `TypeError`, never mistaken for one of ours. The entry is
//! removed when the object is freed (`free()` or garbage collection: the package is built with
//! weak references); calls in flight keep their own reference to the state.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::policy::Refused;
use super::records::{to_js, StateChange};
use crate::core::breaker::{BreakerConfig, BreakerState, CircuitBreaker, Transition};
use crate::core::budget::{BudgetConfig, RetryBudget, RetryRatio, RetryRatioConfig};
use crate::core::options::{
    check_guard_settings, guard_setting_bound, GuardRange, OptionError, BREAKER_RANGES,
    BUDGET_RANGES, THROTTLE_RANGES,
};
use crate::core::throttle::{AdaptiveThrottle, DefaultThrottle, ThrottleConfig};
use crate::wasm::errors::{describe, invalid_option, type_error};
use crate::wasm::js;
use crate::wasm::read_options::given;

/// The shared state of a circuit breaker and its `onStateChange` listener.
pub struct BreakerShared {
    /// The per-origin breakers.
    pub state: RefCell<CircuitBreaker>,
    /// `onStateChange({ origin, from, to })`, if given.
    pub on_state_change: Option<Function>,
}

impl BreakerShared {
    /// Tell the listener about `transition` (a throwing listener, or one whose promise
    /// rejects, is ignored: the breaker's state must not depend on it).
    pub fn report(&self, origin: &str, transition: Option<Transition>) {
        let (Some(t), Some(listener)) = (transition, &self.on_state_change) else {
            return;
        };
        let event = to_js(&StateChange {
            origin,
            from: t.from.as_str(),
            to: t.to.as_str(),
        });
        js::detach(listener.call1(&JsValue::UNDEFINED, &event));
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
    /// The default retry budget (`core::budget::RetryRatio`): every call and client of this
    /// copy of the package that does not choose a budget shares it, per origin.
    static DEFAULT_BUDGET: Rc<RefCell<RetryRatio>> = new_ratio();
}

/// A new default retry budget (`core::budget::RetryRatio`): the one of this module instance,
/// or a `createRetryFetch` client's own (`budget: 'own'`).
#[inline(never)]
pub fn new_ratio() -> Rc<RefCell<RetryRatio>> {
    Rc::new(RefCell::new(RetryRatio::new(RetryRatioConfig::default())))
}

/// The default retry budget of this module instance.
pub fn default_budget() -> Rc<RefCell<RetryRatio>> {
    DEFAULT_BUDGET.with(Rc::clone)
}

thread_local! {
    /// The default throttle (`core::throttle::DefaultThrottle`): every call and client of this
    /// copy of the package that does not choose a throttle shares it, per origin; it paces an
    /// origin only from its first 429 or 503 until it is healthy again.
    static DEFAULT_THROTTLE: Rc<RefCell<DefaultThrottle>> = Rc::new(RefCell::new(DefaultThrottle::default()));
}

/// The default throttle of this module instance.
pub fn default_throttle() -> Rc<RefCell<DefaultThrottle>> {
    DEFAULT_THROTTLE.with(Rc::clone)
}

thread_local! {
    /// The next id: a random base per module instance (below 2^52, so exact as a JS number).
    static NEXT_ID: Cell<f64> = Cell::new(random_base());
    static REGISTRY: RefCell<Vec<(f64, Guard)>> = const { RefCell::new(Vec::new()) };
}

fn random_base() -> f64 {
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes); // on failure the base is 0: still unique per instance in practice
    (u32::from_le_bytes(bytes) as f64) * 1_048_576.0 + 1.0
}

fn register(guard: Guard) -> f64 {
    let id = NEXT_ID.with(|n| {
        let id = n.get();
        n.set(id + 1.0);
        id
    });
    REGISTRY.with(|r| r.borrow_mut().push((id, guard)));
    id
}

fn unregister(id: f64) {
    REGISTRY.with(|r| r.borrow_mut().retain(|(i, _)| *i != id));
}

/// The names of the guard classes (what `lookup` tells apart: freed, of another copy).
const GUARD_CLASSES: [&str; 3] = ["RetryBudget", "AdaptiveThrottle", "CircuitBreaker"];

/// The guard behind `value`, the value of option `option` (`budget`, `throttle`, `breaker`).
/// A freed guard, a guard of another copy of the package, and anything else are refused
/// (the caller's `TypeError` says which).
pub fn lookup(option: &'static str, value: &JsValue) -> Result<Guard, Refused> {
    let bad = |what: &str| {
        let mut msg = String::from("got ");
        msg.push_str(what);
        msg.push_str("; expected ");
        msg.push_str(match option {
            "budget" => super::policy::BUDGET_EXPECTED,
            "throttle" => super::policy::THROTTLE_EXPECTED,
            _ => "a CircuitBreaker",
        });
        Refused::Message(msg)
    };
    if !value.is_object() {
        return Err(Refused::Value);
    }
    let class = js::get(&js::get(value, "constructor"), "name")
        .as_string()
        .unwrap_or_default();
    // Only an object named as one of our classes is told apart further when it is no guard
    // of this copy; anything else is refused as the value it is.
    let ours = GUARD_CLASSES.contains(&class.as_str());
    let id = match js_sys::Reflect::get(value, &JsValue::from_str("__retryFetchGuard")) {
        Ok(id) => id,
        // wasm-bindgen's getter throws on a freed object (its pointer is 0), and on one that
        // has the class's prototype but was not made by its constructor (no pointer at all)
        Err(e) => {
            let mut what = String::new();
            match js::get(value, "__wbg_ptr").as_f64() {
                Some(0.0) => {
                    what.push_str(article(&class));
                    what.push_str(&class);
                    what.push_str(" that was freed (free() was called on it)");
                }
                None if ours => {
                    what.push_str("an object with the prototype of ");
                    what.push_str(&class);
                    what.push_str(", not made by new ");
                    what.push_str(&class);
                    what.push_str("()");
                }
                // a Proxy of a guard, an object made from a guard or a subclass's prototype,
                // a getter of its own that throws: no guard of this copy all the same
                _ => {
                    what.push_str("an object that is no guard made by new ");
                    what.push_str(&class);
                    what.push_str("() of this copy (reading its guard id threw: ");
                    what.push_str(&js::get(&e, "message").as_string().unwrap_or_default());
                    what.push(')');
                }
            }
            return Err(bad(&what));
        }
    };
    let Some(id) = id.as_f64() else {
        return Err(Refused::Value);
    };
    let found = REGISTRY.with(|r| {
        r.borrow()
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, g)| g.clone())
    });
    match found {
        Some(g) => Ok(g),
        None if !ours => Err(Refused::Value),
        None => {
            let mut what = String::from(article(&class));
            what.push_str(&class);
            what.push_str(" from another copy of retry-fetch (each copy, e.g. the ES module and the CommonJS build, keeps its own guards)");
            Err(bad(&what))
        }
    }
}

/// `"an "` before a name that starts with a vowel (`an AdaptiveThrottle`), else `"a "`.
fn article(name: &str) -> &'static str {
    if let Some(b'A' | b'E' | b'I' | b'O' | b'U' | b'a' | b'e' | b'i' | b'o' | b'u') =
        name.as_bytes().first()
    {
        "an "
    } else {
        "a "
    }
}

/// The `TypeError` a freed guard's method throws (`budget.tokens(url)` or a second `free()`
/// after `free()`): the build wraps each guard method's pointer read in the JS glue with a
/// check that throws this, instead of wasm-bindgen's "null pointer passed to rust"
/// (`scripts/guard-glue.mjs`). Not part of the public API.
#[wasm_bindgen(js_name = freedGuardError, skip_typescript)]
pub fn freed_guard_error(class: JsValue, member: JsValue) -> JsValue {
    // Given as JS strings (the glue passes the class's and the member's names).
    let class = class.as_string().unwrap_or_default();
    let mut msg = class.clone();
    msg.push('.');
    msg.push_str(&member.as_string().unwrap_or_default());
    msg.push_str(": this ");
    msg.push_str(&class);
    msg.push_str(" was freed (free() was called on it); make a new one");
    type_error(&msg)
}

/// The origin (`scheme://host:port`) of a URL string, as `URL.origin` gives it; the string
/// itself when it does not parse.
pub fn origin_of(url: &str) -> String {
    match web_sys::Url::new(url) {
        Ok(u) => u.origin(),
        Err(_) => url.to_string(),
    }
}

/// The `url` argument of a guard method (`budget.tokens(url)`): a string or a `URL` (of any
/// realm: its `href` is read), as its origin; a relative URL is resolved against the page's
/// (or worker's) `location`, as `retryFetch` resolves it. A `TypeError` naming the method
/// otherwise, and for a string that is not a URL (whose origin would be no origin's).
fn url_argument(method: &str, url: &JsValue) -> Result<String, JsValue> {
    let text = match url.as_string() {
        Some(s) => Some(s),
        None if url.is_object() => js::get(url, "href").as_string(),
        None => None,
    };
    match text {
        Some(s) => {
            let base = js::get(&js::get(&js_sys::global(), "location"), "href").as_string();
            let parsed = match base {
                Some(b) => web_sys::Url::new_with_base(&s, &b),
                None => web_sys::Url::new(&s),
            };
            // A URL with no origin (`mailto:x`, `localhost:3000` read as a scheme) names none.
            match parsed.map(|u| u.origin()) {
                Ok(origin) if origin != "null" => Ok(origin),
                _ => {
                    let mut msg = String::from(method);
                    msg.push_str(": the argument url is not a URL of an origin; got ");
                    msg.push_str(&describe(url));
                    Err(type_error(&msg))
                }
            }
        }
        None => {
            let mut msg = String::from(method);
            msg.push_str(": the argument url must be a string or a URL; got ");
            msg.push_str(&describe(url));
            Err(type_error(&msg))
        }
    }
}

/// The setting a guard's `TypeError` names for `e`: the one `e` names, or, when the caller
/// left that one at its default (`given`: it was given), the setting whose value bounds it,
/// which the caller gave (two defaults never conflict).
fn blamed(e: OptionError, given: bool) -> OptionError {
    match guard_setting_bound(e.option) {
        Some((bound, expected)) if !given => OptionError::new(bound, expected),
        _ => e,
    }
}

/// The settings a guard's constructor was given (`class` names it in the errors), checked:
/// `values` holds the defaults of the numbers named first in `known` (in that order, the
/// order of `ranges`) and gets each one given; the result is `onStateChange` (the name after
/// the numbers, when in `known`; `null` is none). An unknown name, a value of the wrong type
/// and `null` for a number are `TypeError`s naming the setting (the core's text says what it
/// allows), and so is a number out of its range in `ranges` ([`settings_error`]). Shared by
/// the three constructors.
#[inline(never)]
fn settings(
    class: &str,
    options: &JsValue,
    known: &[&'static str],
    ranges: &[GuardRange],
    values: &mut [f64],
) -> Result<Option<Function>, JsValue> {
    let mut given_bits = 0;
    let mut on_state_change = None;
    for (name, v) in given(class, options, known)? {
        let bad =
            |expected, v: &JsValue| invalid_option(class, OptionError::new(name, expected), v);
        let at = known.iter().position(|n| *n == name).unwrap_or(0);
        match (values.get_mut(at), ranges.get(at)) {
            (Some(slot), Some(range)) => {
                *slot = v.as_f64().ok_or_else(|| bad(range.expected, &v))?;
                given_bits |= 1 << at;
            }
            _ if v.is_null() => on_state_change = None,
            // `onStateChange` (what `guard_setting_expected` says of it)
            _ => {
                let f = v
                    .dyn_into::<Function>()
                    .map_err(|v| bad("a function", &v))?;
                on_state_change = Some(f);
            }
        }
    }
    check_guard_settings(ranges, values)
        .map_err(|e| settings_error(class, e, known, given_bits, values))?;
    Ok(on_state_change)
}

/// The `TypeError` for a guard's invalid setting `e` (out of its range), over the settings of
/// [`settings`]: names them as `known`, `given` which were given, `values` the ones used. When
/// the caller left `e`'s setting at its default, the one bounding it is named ([`blamed`]);
/// the error shows the value of the setting it names.
#[cold]
#[inline(never)]
fn settings_error(
    class: &str,
    e: OptionError,
    known: &[&'static str],
    given: u32,
    values: &[f64],
) -> JsValue {
    let at = |option: &str| known.iter().position(|n| *n == option).unwrap_or(0);
    let e = blamed(e, given & (1 << at(e.option)) != 0);
    let value = values.get(at(e.option)).copied().unwrap_or(f64::NAN);
    invalid_option(class, e, &JsValue::from_f64(value))
}

/// A guard class's handle: its registry id (what an option that names the guard is looked up
/// by, `__retryFetchGuard`), the shared state, and its removal from the registry when freed.
macro_rules! guard_handle {
    ($(#[$doc:meta])* $handle:ident, $class:ident, $inner:ty $(, $(#[$fdoc:meta])* $field:ident: $fty:ty)*) => {
        $(#[$doc])*
        #[wasm_bindgen(js_name = $class, skip_typescript)]
        pub struct $handle {
            id: f64,
            inner: $inner,
            $($(#[$fdoc])* $field: $fty,)*
        }

        #[wasm_bindgen(js_class = $class)]
        impl $handle {
            /// The registry id (internal).
            #[wasm_bindgen(getter, js_name = __retryFetchGuard)]
            pub fn guard_id(&self) -> f64 {
                self.id
            }
        }

        impl Drop for $handle {
            fn drop(&mut self) {
                unregister(self.id);
            }
        }
    };
}

guard_handle!(
    /// `new RetryBudget({ maxTokens = 10, tokenRatio = 0.1, refillPerSecond = 0.5 })`: gRPC
    /// retryThrottling per origin, a call's own failures not counted against it.
    RetryBudgetHandle, RetryBudget, Rc<RefCell<RetryBudget>>,
    /// Its settings (read by its getters without borrowing `inner`).
    config: BudgetConfig
);

#[wasm_bindgen(js_class = RetryBudget)]
impl RetryBudgetHandle {
    /// Validate `options` (a `TypeError` names a bad or unknown one) and create a full budget.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<RetryBudgetHandle, JsValue> {
        const KNOWN: [&str; 3] = ["maxTokens", "tokenRatio", "refillPerSecond"];
        let d = BudgetConfig::default();
        let mut values = [d.max_tokens, d.token_ratio, d.refill_per_sec];
        settings("RetryBudget", &options, &KNOWN, &BUDGET_RANGES, &mut values)?;
        let [max_tokens, token_ratio, refill_per_sec] = values;
        // Checked as `BudgetConfig::validate` checks it.
        let config = BudgetConfig {
            max_tokens,
            token_ratio,
            refill_per_sec,
        };
        let inner = Rc::new(RefCell::new(RetryBudget::new(config)));
        let id = register(Guard::Budget(inner.clone()));
        Ok(RetryBudgetHandle { id, inner, config })
    }

    /// The token count of the origin of `url` (full, `maxTokens`, when never seen).
    pub fn tokens(&self, url: JsValue) -> Result<JsValue, JsValue> {
        let origin = url_argument("RetryBudget.tokens", &url)?;
        let budget = self
            .inner
            .try_borrow()
            .map_err(|_| in_use("RetryBudget.tokens"))?;
        // A number made here (the three guard methods return a value alike).
        Ok(JsValue::from_f64(
            budget.tokens(&origin, crate::wasm::js::now_ms()),
        ))
    }

    /// `refillPerSecond`.
    #[wasm_bindgen(getter, js_name = refillPerSecond)]
    pub fn refill_per_second(&self) -> f64 {
        self.config.refill_per_sec
    }

    /// `maxTokens`.
    #[wasm_bindgen(getter, js_name = maxTokens)]
    pub fn max_tokens(&self) -> f64 {
        self.config.max_tokens
    }

    /// `tokenRatio`.
    #[wasm_bindgen(getter, js_name = tokenRatio)]
    pub fn token_ratio(&self) -> f64 {
        self.config.token_ratio
    }
}

guard_handle!(
    /// `new AdaptiveThrottle({ initialRate = 200, rampMs = 200, beta = 0.7, scale = 0.4,
    /// minRate = 0.5, maxWaitMs = 10000 })`: an adaptive send rate per origin.
    AdaptiveThrottleHandle, AdaptiveThrottle, Rc<RefCell<AdaptiveThrottle>>
);

#[wasm_bindgen(js_class = AdaptiveThrottle)]
impl AdaptiveThrottleHandle {
    /// Validate `options` (a `TypeError` names a bad or unknown one) and create the throttle.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<AdaptiveThrottleHandle, JsValue> {
        const KNOWN: [&str; 6] = [
            "initialRate",
            "rampMs",
            "beta",
            "scale",
            "minRate",
            "maxWaitMs",
        ];
        let d = ThrottleConfig::default();
        let mut values = [
            d.initial_rate,
            d.ramp_ms,
            d.beta,
            d.scale,
            d.min_rate,
            d.max_wait_ms,
        ];
        settings(
            "AdaptiveThrottle",
            &options,
            &KNOWN,
            &THROTTLE_RANGES,
            &mut values,
        )?;
        let [initial_rate, ramp_ms, beta, scale, min_rate, max_wait_ms] = values;
        // Checked as `ThrottleConfig::validate` checks it.
        let config = ThrottleConfig {
            initial_rate,
            ramp_ms,
            beta,
            scale,
            min_rate,
            max_wait_ms,
        };
        let inner = Rc::new(RefCell::new(AdaptiveThrottle::new(config)));
        let id = register(Guard::Throttle(inner.clone()));
        Ok(AdaptiveThrottleHandle { id, inner })
    }

    /// `rate(url)` from JavaScript: [`AdaptiveThrottleHandle::rate`], a number or `undefined`
    /// (returned as a value, as `tokens` and `state` return theirs: one shape of glue).
    #[wasm_bindgen(js_name = rate)]
    pub fn rate_value(&self, url: JsValue) -> Result<JsValue, JsValue> {
        Ok(self
            .rate(url)?
            .map_or(JsValue::UNDEFINED, JsValue::from_f64))
    }
}

impl AdaptiveThrottleHandle {
    /// The current send rate (req/s) for the origin of `url`; `None` (`undefined` in
    /// JavaScript) if never seen.
    pub fn rate(&self, url: JsValue) -> Result<Option<f64>, JsValue> {
        let origin = url_argument("AdaptiveThrottle.rate", &url)?;
        let mut throttle =
            (self.inner.try_borrow_mut()).map_err(|_| in_use("AdaptiveThrottle.rate"))?;
        Ok(throttle.rate(&origin, crate::wasm::js::now_ms()))
    }
}

/// The `TypeError` of a guard's method (`what`) called while a call holds the guard: from
/// JavaScript the call runs while it decides its next step (a `Response` whose `headers.get`
/// reads the guard). Never a panic, which would end the instance.
#[cold]
fn in_use(what: &str) -> JsValue {
    let mut msg = String::from(what);
    msg.push_str(": the guard is in use by a call deciding its next step (this was called from inside that step, e.g. from a response's headers.get)");
    type_error(&msg)
}

guard_handle!(
    /// `new CircuitBreaker({ failureThreshold = 5, openMs = 10000, halfOpenMaxCalls = 1,
    /// onStateChange })`: a circuit breaker per origin.
    CircuitBreakerHandle, CircuitBreaker, Rc<BreakerShared>
);

#[wasm_bindgen(js_class = CircuitBreaker)]
impl CircuitBreakerHandle {
    /// Validate `options` (a `TypeError` names a bad or unknown one) and create the breaker.
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<CircuitBreakerHandle, JsValue> {
        const KNOWN: [&str; 4] = [
            "failureThreshold",
            "openMs",
            "halfOpenMaxCalls",
            "onStateChange",
        ];
        let d = BreakerConfig::default();
        let mut values = [
            f64::from(d.failure_threshold),
            d.open_ms,
            f64::from(d.half_open_max_calls),
        ];
        let on_state_change = settings(
            "CircuitBreaker",
            &options,
            &KNOWN,
            &BREAKER_RANGES,
            &mut values,
        )?;
        let [failure_threshold, open_ms, half_open_max_calls] = values;
        // Checked as `BreakerConfig::validate` checks it: the counts are whole numbers from 1
        // to 1000, exact as `u32`.
        let config = BreakerConfig {
            failure_threshold: failure_threshold as u32,
            open_ms,
            half_open_max_calls: half_open_max_calls as u32,
        };
        let inner = Rc::new(BreakerShared {
            state: RefCell::new(CircuitBreaker::new(config)),
            on_state_change,
        });
        let id = register(Guard::Breaker(inner.clone()));
        Ok(CircuitBreakerHandle { id, inner })
    }

    /// `'closed'`, `'open'` or `'half-open'` for the origin of `url`.
    pub fn state(&self, url: JsValue) -> Result<JsValue, JsValue> {
        let origin = url_argument("CircuitBreaker.state", &url)?;
        let breaker =
            (self.inner.state.try_borrow()).map_err(|_| in_use("CircuitBreaker.state"))?;
        let s: BreakerState = breaker.state(&origin, crate::wasm::js::now_ms());
        // A JS string made from the name (a returned `String` is copied out through a boxed
        // slice of its own).
        Ok(JsValue::from_str(s.as_str()))
    }
}
