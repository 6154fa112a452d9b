//! The wasm shell: the JavaScript API over the pure core.
//!
//! Rust drives. The client half (`client/`, Cargo feature `client`, on by default) exports
//! `retryFetch`, `createRetryFetch`, `backoffDelays`, `isRetryError`, `isCircuitOpenError` and
//! the guard classes, and *performs* each call: it builds the request once (web-sys
//! `Request`), calls `fetch`, runs the timers and abort signals, awaits the hooks
//! (wasm-bindgen-futures) and builds the errors, asking the core (`crate::core`) for every
//! decision. The server half (`server/`, feature `server`) drives the idempotency companion
//! the same way: `idempotency(handler)` and `idempotent(fn)` await the store and the handler
//! (wasm-bindgen-futures) over web-sys `Request`/`Response`/`Headers`, asking
//! `crate::core::idempotency` for every decision. Types for JavaScript are hand-written in
//! `js/*.d.ts`, so every export skips wasm-bindgen's TypeScript.

#[cfg(feature = "client")]
mod client;
// The helpers both halves share: without either half there is nothing to use them (and no
// web-sys or wasm-bindgen-futures, which they need).
#[cfg(any(feature = "client", feature = "server"))]
mod errors;
#[cfg(any(feature = "client", feature = "server"))]
mod js;
#[cfg(any(feature = "client", feature = "server"))]
mod read_options;
#[cfg(feature = "server")]
mod server;

#[cfg(feature = "client")]
pub use client::*;
#[cfg(feature = "server")]
pub use server::*;
