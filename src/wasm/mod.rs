//! The wasm shell: the JavaScript API over the pure core.
//!
//! Exports `retryFetch`, `RetryClient` (behind `createRetryFetch` in the JS entry) and
//! `backoffDelays`. Types for JavaScript are hand-written in `js/index.d.ts`, so every export
//! here skips wasm-bindgen's generated TypeScript.

// The client API is compiled out of the server build (feature `server`), which only needs the
// idempotency exports: each .wasm carries what its entry uses.
#[cfg_attr(feature = "server", allow(dead_code))]
mod errors;
#[cfg(not(feature = "server"))]
mod guards;
#[cfg_attr(feature = "server", allow(dead_code))]
mod js;
#[cfg(not(feature = "server"))]
mod options;
#[cfg(not(feature = "server"))]
mod request;
#[cfg(not(feature = "server"))]
mod run;
#[cfg(feature = "server")]
mod server;
#[cfg(not(feature = "server"))]
mod timer;

#[cfg(not(feature = "server"))]
pub use client::*;

/// The client exports (not in the server build).
#[cfg(not(feature = "server"))]
mod client {
    use js_sys::{Array, Promise};
    use wasm_bindgen::prelude::*;

    use super::{options, run};
    use crate::core::backoff::{delays, Rng, SplitMix64};
    use options::CallOptions;

    /// `retryFetch(input, init?, options?)`: `fetch` with retries. See the README for options.
    #[wasm_bindgen(js_name = retryFetch, skip_typescript)]
    pub async fn retry_fetch(
        input: JsValue,
        init: JsValue,
        options: JsValue,
    ) -> Result<JsValue, JsValue> {
        let options = options::read(&options, &CallOptions::default())?;
        run::run(input, init, options).await
    }

    /// A `retryFetch` with its own defaults, validated once at construction.
    #[wasm_bindgen(skip_typescript)]
    pub struct RetryClient {
        defaults: CallOptions,
    }

    #[wasm_bindgen]
    impl RetryClient {
        /// Validate `defaults` (a `RetryOptions`); an invalid one throws a `TypeError` here.
        #[wasm_bindgen(constructor)]
        pub fn new(defaults: JsValue) -> Result<RetryClient, JsValue> {
            Ok(RetryClient {
                defaults: options::read(&defaults, &CallOptions::default())?,
            })
        }

        /// `retryFetch` with `options` merged over this client's defaults.
        pub fn fetch(&self, input: JsValue, init: JsValue, options: JsValue) -> Promise {
            let defaults = self.defaults.clone();
            wasm_bindgen_futures::future_to_promise(async move {
                let options = options::read(&options, &defaults)?;
                run::run(input, init, options).await
            })
        }
    }

    /// `backoffDelays(options, count, seed?)`: the first `count` delays (ms) the policy would
    /// wait, without any server `Retry-After`. With a `seed` the jitter is reproducible.
    #[wasm_bindgen(js_name = backoffDelays, skip_typescript)]
    pub fn backoff_delays(
        options: JsValue,
        count: JsValue,
        seed: JsValue,
    ) -> Result<Array, JsValue> {
        let policy = options::read(&options, &CallOptions::default())?.policy;
        let count = options::read_count(&count)?;
        let mut rng: Box<dyn Rng> = match options::read_seed(&seed)? {
            Some(seed) => Box::new(SplitMix64::new(seed)),
            None => Box::new(run::MathRandom),
        };
        Ok(delays(&policy, count, rng.as_mut())
            .into_iter()
            .map(|d| JsValue::from_f64(d as f64))
            .collect())
    }
}
