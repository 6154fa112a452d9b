//! # retry-fetch
//!
//! `fetch` with retries done right, compiled to WebAssembly for browsers, Node and workers.
//!
//! The crate has two halves:
//!
//! - [`core`] (in `src/core/`): the pure retry policy. It knows nothing of JavaScript; time and
//!   randomness come in through the small [`core::backoff::Rng`] trait and plain millisecond
//!   numbers, so every rule is tested natively and deterministically.
//! - the wasm shell (in `src/wasm/`, compiled only for `wasm32`): reads the JS options once,
//!   binds `fetch`, `setTimeout` and `crypto` as globals, runs the retry loop and turns
//!   failures into JS `Error`s with stable `name`s.
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
