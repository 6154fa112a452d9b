//! # retry-fetch
//!
//! `fetch` with retries done right, compiled to WebAssembly for browsers, Node and workers.
//!
//! The crate has two halves:
//!
//! - [`core`] (in `src/core/`): the pure retry policy. It knows nothing of JavaScript; time and
//!   randomness come in through the small [`core::backoff::Rng`] trait and plain millisecond
//!   numbers, so every rule is tested natively and deterministically.
//! - the wasm shell (in `src/wasm/`, compiled only for `wasm32`), which performs each call:
//!   (`Policy`, invalid ones are `TypeError`s naming the option and the value) and makes each
//!   call's decisions (`Call`: breaker, throttle turn, time limits, retry or stop and the
//!   wait) for the JavaScript driver in `js/client.js`, which performs them: it calls
//!   `fetch`, runs the timers and abort signals, calls the hooks and builds the `Error`s with
//!   stable `name`s. Rust decides, JavaScript performs.
#![deny(missing_docs)]

pub mod core;

#[cfg(target_arch = "wasm32")]
pub mod wasm;

/// The .wasm's allocator: `lol_alloc`'s free list (smaller than dlmalloc; wasm is single-threaded
/// here, which `AssumeSingleThreaded` relies on: the crate is never built with wasm threads).
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: lol_alloc::AssumeSingleThreaded<lol_alloc::FreeListAllocator> =
    unsafe { lol_alloc::AssumeSingleThreaded::new(lol_alloc::FreeListAllocator::new()) };
