//! wasm-bindgen tests of the Rust-driven client exports (`retry_fetch::wasm`) for what only
//! Rust sees, or what the end-to-end scenario table does not assert yet. The table
//! (tests/e2e/scenarios.mjs and tests/e2e/contract.mjs, the built package against the
//! fault-injecting server in Node and in headless Chromium) owns what a call does: retries,
//! keys, bodies, hooks, aborts, timeouts, the deadline, redirects, transports, the guards'
//! effect. The loop's decisions are the core's, tested natively (`core::engine`,
//! `core::decide`, `core::classify`, tests/core_properties.rs). What either asserts is not
//! repeated here.
//!
//! | module | what |
//! |---|---|
//! | `options` | the options snapshot: exact `TypeError`s, unknown names, getters and proxies, limits, no value panics; per-call options over a client's defaults |
//! | `backoff` | `backoffDelays`: seeds, `Math.random`, jitter bounds, `count` and `seed` checks |
//! | `guards` | the guard classes: settings, defaults, method arguments, the registry (freed, foreign, mixed-up guards) |
//! | `guard_calls` | the guards' per-origin state seen from calls, the breaker's events and error, the throttle's pacing |
//! | `errors` | the error objects: `isRetryError`, `RetryError` messages and causes, `TimeoutError`s |
//! | `calls` | call behaviours the e2e table does not assert yet (each says what it lacks) |
//! | `support` | the helpers |
//!
//! Everything is called by its Rust name: `retry_fetch(input, init, options)` is
//! `retryFetch(input, init, options)` and returns the same promise; `create_retry_fetch` returns
//! the JS function; the guards are made with their Rust constructors
//! (`RetryBudgetHandle::new(options)` is `new RetryBudget(options)`) and turned into the JS
//! objects users hold with `JsValue::from` (wasm-bindgen wraps the Rust value in its exported
//! class, so `free()`, `tokens()`, `state()` and `rate()` are the real methods), which go into
//! the options. Promises are awaited with `JsFuture`.
//!
//! The modules are one test binary (`cargo test --test wasm`), which runs in Node (the
//! default) and in headless Chromium (`WASM_BINDGEN_USE_BROWSER=1`), so nothing here uses
//! `window`. `scripts/test.sh wasm` starts the fault server and passes its URL in
//! `RF_TEST_SERVER`, read at compile time; a test that needs the server fails with a clear
//! message when it is not set. Each scenario on the server has a unique id
//! (`/seq/<id>?steps=...`), so the Node and the Chromium runs, which share one server, never
//! see each other's requests; `GET /log/<id>` says what the server received. The whole browser
//! run must stay well inside the runner's 20 s limit: waits are kept to a few hundred ms.
#![cfg(target_arch = "wasm32")]

// The crate root's modules live in tests/wasm/ (a folder cargo does not take for a test
// target of its own, as it has no main.rs).
#[path = "wasm/support.rs"]
mod support;

#[path = "wasm/backoff.rs"]
mod backoff;
#[path = "wasm/calls.rs"]
mod calls;
#[path = "wasm/errors.rs"]
mod errors;
#[path = "wasm/guard_calls.rs"]
mod guard_calls;
#[path = "wasm/guards.rs"]
mod guards;
#[path = "wasm/options.rs"]
mod options;
