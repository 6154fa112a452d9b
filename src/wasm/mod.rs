//! The wasm shell: the JavaScript API over the pure core.
//!
//! The split: Rust decides, JavaScript performs. The client exports are [`options::Policy`]
//! (options read and validated once), [`call::Call`] (one call's decisions: breaker, throttle,
//! time limits, retry or stop and the wait), the guard classes and `backoffDelays`; the driver
//! in `js/client.js` sends, waits, calls hooks and builds the errors, asking a `Call` at each
//! step. Every crossing carries numbers or short strings. Types for JavaScript are
//! hand-written in `js/index.d.ts`, so every export here skips wasm-bindgen's TypeScript.

// The client API is compiled out of the server build (feature `server`), which only needs the
// idempotency exports: each .wasm carries what its entry uses.
#[cfg(not(feature = "server"))]
mod call;
#[cfg_attr(feature = "server", allow(dead_code))]
mod errors;
#[cfg(not(feature = "server"))]
mod guards;
#[cfg_attr(feature = "server", allow(dead_code))]
mod js;
#[cfg(not(feature = "server"))]
mod options;
#[cfg(feature = "server")]
mod server;

#[cfg(not(feature = "server"))]
pub use client::*;

/// The client exports (not in the server build).
#[cfg(not(feature = "server"))]
mod client {
    use js_sys::Array;
    use wasm_bindgen::prelude::*;

    use super::call::MathRandom;
    use super::options;
    use crate::core::backoff::{delays, Rng, SplitMix64};

    pub use super::call::{Call, NETWORK_ERROR, TIMEOUT};
    pub use super::guards::{AdaptiveThrottleHandle, CircuitBreakerHandle, RetryBudgetHandle};
    pub use super::options::{
        Policy, FLAG_AUTO_KEY, FLAG_BREAKER, FLAG_FIXED_KEY, FLAG_GUARDS, FLAG_RETRY_HEADERS,
        FLAG_RETRY_AFTER, FLAG_RETRY_SUCCESS, FLAG_THROTTLE, FLAG_TIME_LIMIT,
    };

    /// Is `method` idempotent per RFC 9110 (so a retry cannot repeat an effect)?
    #[wasm_bindgen(js_name = isIdempotent, skip_typescript)]
    pub fn is_idempotent(method: &str) -> bool {
        crate::core::classify::is_idempotent_method(method)
    }

    /// `backoffDelays(options, count, seed?)`: the first `count` delays (ms) the policy would
    /// wait, without any server `Retry-After`. With a `seed` the jitter is reproducible.
    #[wasm_bindgen(js_name = backoffDelays, skip_typescript)]
    pub fn backoff_delays(
        options: JsValue,
        count: JsValue,
        seed: JsValue,
    ) -> Result<Array, JsValue> {
        let policy = options::read(&options, &options::Policy::default())?.policy;
        let count = options::read_count(&count)?;
        let mut seeded;
        let mut math = MathRandom;
        let rng: &mut dyn Rng = match options::read_seed(&seed)? {
            Some(seed) => {
                seeded = SplitMix64::new(seed);
                &mut seeded
            }
            None => &mut math,
        };
        Ok(delays(&policy, count, rng)
            .into_iter()
            .map(|d| JsValue::from_f64(d as f64))
            .collect())
    }
}
