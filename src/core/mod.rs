//! The pure retry policy: no JavaScript types, no clocks, no global randomness.
//!
//! | module | rule |
//! |---|---|
//! | [`options`] | every option, its default and its validation into [`options::OptionError`] |
//! | [`backoff`] | exponential schedule, cap and the five jitter modes over an injected [`backoff::Rng`] |
//! | [`classify`] | which outcomes are transient, and the safe-to-retry matrix per method and key |
//! | [`retry_after`] | `Retry-After`, `RateLimit-Reset` and `RateLimit` parsing against a given "now" |
//! | [`key`] | idempotency keys: UUID v4 from random bytes, the header forms |
//! | [`decide`] | one decision per attempt: retry after a delay, or stop and why ([`decide::StopReason`]) |
//! | [`engine`] | the call protocol as a state machine: the steps of one call, from its first attempt to its end |
//! | [`guards`] | what one call does with the shared budget, throttle and breaker, and holds of them |
//! | [`budget`] | the retry budgets per origin: the default one, and `RetryBudget` (gRPC retryThrottling) |
//! | [`throttle`] | an adaptive client-side send rate per origin (AWS adaptive mode, CUBIC) |
//! | [`breaker`] | a circuit breaker per origin: closed, open, half-open |
//! | [`origins`] | the small per-origin map the budget, throttle and breaker keep their state in |
//! | [`accepted`] | following a `202 Accepted`: poll its `Operation-Location` / `Location`, repeat a keyed request, or stop; the wait |
//! | `idempotency` | the server side (feature `server`): key parsing, request fingerprint, identity-scoped store key, the per-key state machine |
//! | `runs` | the server side: `202 Accepted` for long work, the run history's outcomes, dead letters |

pub mod accepted;
pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod classify;
pub mod decide;
pub mod engine;
pub mod guards;
// The server-side companion: only with the `server` feature (it pulls in sha2), and in the
// native unit tests (sha2 is also a dev-dependency).
#[cfg(any(feature = "server", test))]
pub mod idempotency;
pub mod key;
pub mod options;
pub mod origins;
pub mod retry_after;
#[cfg(any(feature = "server", test))]
pub mod runs;
pub mod throttle;
#[cfg(test)]
pub mod timeline;
