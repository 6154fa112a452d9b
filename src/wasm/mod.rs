//! The wasm shell: the JavaScript API over the pure core.
//!
//! Rust drives. The client half (`client/`, Cargo feature `client`, on by default) exports
//! `retryFetch`, `createRetryFetch`, `backoffDelays`, `isRetryError`, `isCircuitOpenError` and
//! the guard classes, and *performs* each call: it builds the request once (web-sys
//! `Request`), calls `fetch`, runs the timers and abort signals, awaits the hooks
//! (wasm-bindgen-futures) and builds the errors, asking the core (`crate::core`) for every
//! decision. The server half (`server.rs`, feature `server`) exports the idempotency
//! companion's core. Types for JavaScript are hand-written in `js/*.d.ts`, so every export
//! skips wasm-bindgen's TypeScript.

#[cfg(feature = "client")]
mod client;
mod errors;
mod js;
#[cfg(feature = "server")]
mod server;

#[cfg(feature = "client")]
pub use client::*;
#[cfg(feature = "server")]
pub use server::*;
