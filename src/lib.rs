//! # retry-fetch
//!
//! `fetch` with retries done right, compiled to WebAssembly for browsers, Node and workers:
//! `retryFetch` for the client, and a server companion that honours the idempotency keys it
//! sends.
//!
//! - [`core`] (`src/core/`): the pure policy. No JavaScript types, no clocks, no global
//!   randomness: options and their validation, backoff and jitter, classification,
//!   `Retry-After`, idempotency keys, the per-attempt decision, the retry budget, the adaptive
//!   throttle, the circuit breaker, following `202 Accepted`; with the `server` feature, the
//!   server's rules too (`core::idempotency`: keys, fingerprints, scopes, the per-key state
//!   machine; `core::runs`: long work, the run history, dead letters). Time comes in as
//!   millisecond numbers and randomness through [`core::backoff::Rng`], so every rule is
//!   tested natively and deterministically.
//! - `wasm` (`src/wasm/`, built only for `wasm32`): the shell that performs, asking the core
//!   for every decision. Its client half (feature `client`, the default) exports `retryFetch`,
//!   `createRetryFetch`, `backoffDelays`, `isRetryError`, `isCircuitOpenError` and the guard
//!   classes, and runs each call itself: it fixes the request, calls `fetch`, runs the timers
//!   and abort signals, awaits the hooks and builds the errors. Its server half (feature
//!   `server`, a `.wasm` of its own) exports `idempotency(handler)` and `idempotent(fn)`,
//!   which await the store and the handler the same way.
//! - `js/`: the entries that load the wasm for each environment (Node ESM, CommonJS,
//!   browser, `manual`, server) and re-export it, with the error classes for `instanceof`.
//!   On the server side JavaScript also holds what is JavaScript by nature: `toNodeHandler`,
//!   the stores and the framework adapters. No retry rule lives in JavaScript.
//!
//! The user's manual is `README.md`; how the crate is built and why, `docs/ARCHITECTURE.md`.
#![deny(missing_docs)]

pub mod core;

#[cfg(target_arch = "wasm32")]
pub mod wasm;

/// The .wasm's allocator: `lol_alloc`'s free list (smaller than dlmalloc; wasm is single-threaded
/// here, which `AssumeSingleThreaded` relies on: the crate is never built with wasm threads).
/// The server build keeps std's dlmalloc: its many allocations per request of every size make
/// the free list long, and freeing walks it (some 20 µs a request), while its size matters less.
#[cfg(all(target_arch = "wasm32", not(feature = "server")))]
#[global_allocator]
static ALLOCATOR: lol_alloc::AssumeSingleThreaded<lol_alloc::FreeListAllocator> =
    unsafe { lol_alloc::AssumeSingleThreaded::new(lol_alloc::FreeListAllocator::new()) };
