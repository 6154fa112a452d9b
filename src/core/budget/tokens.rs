//! The token budget (`new RetryBudget()`): per origin, gRPC's `retryThrottling` token
//! semantics, with two additions that make it safe to have on by default (the AWS SDKs'
//! standard retry mode and Finagle's `RetryBudget` are on by default too).
//!
//! Each origin has a token count that starts full at `max_tokens`. Every failed attempt
//! (a transient failure) takes one token (not below 0); every success gives back
//! `token_ratio` (not above `max_tokens`), and tokens also come back with time,
//! `refill_per_sec` a second. A *retry* is allowed while the count is above `max_tokens / 2`;
//! a first attempt is never blocked.
//!
//! - **A call's own failures do not count against it.** The tokens a call took itself are
//!   added back when its retry is judged, so a lone request (nothing else failing at the
//!   origin) gets every retry its `maxAttempts` allows, however many that is. Only failures of
//!   *other* calls refuse a retry: when a service is down, the first wave's failures drain the
//!   count and every caller sharing it stops retrying, so an outage costs about one request
//!   per call instead of `maxAttempts` (unlimited retries make a flood: a retry budget keeps
//!   them bounded).
//! - **Time refills it**, so an origin recovers after an outage even when successes are not
//!   counted (the default budget does not see the successes of `retryFetch`'s lean success
//!   path, which stays free of any guard).

use super::{Attempt, Budget, OwnUse, Verdict};
use crate::core::options::{check_guard_settings, OptionError, BUDGET_RANGES};
use crate::core::origins::OriginMap;

/// Budget settings.
///
/// # Default
/// `max_tokens` 10, `token_ratio` 0.1 (gRPC's example values), `refill_per_sec` 0.5.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetConfig {
    /// Tokens per origin when full; retries stop at half of it. Default 10.
    pub max_tokens: f64,
    /// Tokens a success gives back. Default 0.1.
    pub token_ratio: f64,
    /// Tokens that come back each second (0: only successes refill). Default 0.5.
    pub refill_per_sec: f64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            max_tokens: 10.0,
            token_ratio: 0.1,
            refill_per_sec: 0.5,
        }
    }
}

impl BudgetConfig {
    /// `maxTokens` must be a finite number in `(0, 1000000]`; `tokenRatio` a finite number in
    /// `(0, maxTokens]`; `refillPerSecond` a finite number in `[0, maxTokens]`.
    pub fn validate(self) -> Result<Self, OptionError> {
        let values = [self.max_tokens, self.token_ratio, self.refill_per_sec];
        check_guard_settings(&BUDGET_RANGES, &values).map(|()| self)
    }
}

/// One origin's count and when it was last brought up to date.
#[derive(Clone, Copy, Debug)]
struct Count {
    tokens: f64,
    at_ms: f64,
}

/// The token counts of every origin seen.
#[derive(Clone, Debug, Default)]
pub struct RetryBudget {
    config: BudgetConfig,
    counts: OriginMap<Count>,
}

impl RetryBudget {
    /// A budget with `config` (already validated).
    pub fn new(config: BudgetConfig) -> Self {
        RetryBudget {
            config,
            counts: OriginMap::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> BudgetConfig {
        self.config
    }

    /// `count` brought to `now_ms` by the time refill.
    fn refilled(&self, count: Count, now_ms: f64) -> f64 {
        let elapsed_s = ((now_ms - count.at_ms) / 1000.0).max(0.0);
        (count.tokens + elapsed_s * self.config.refill_per_sec).min(self.config.max_tokens)
    }

    /// The token count of `origin` at `now_ms` (full when never seen).
    pub fn tokens(&self, origin: &str, now_ms: f64) -> f64 {
        match self.counts.get(origin) {
            Some(c) => self.refilled(*c, now_ms),
            None => self.config.max_tokens,
        }
    }

    /// Change the count of `origin` by `delta` (kept within `0..=max_tokens`); the change made.
    fn update(&mut self, origin: &str, delta: f64, now_ms: f64) -> f64 {
        let (max, now) = (self.config.max_tokens, now_ms);
        let before = self.tokens(origin, now);
        let after = (before + delta).clamp(0.0, max);
        let refill = self.config.refill_per_sec;
        *self.counts.get_or_insert_with(
            origin,
            || Count {
                tokens: max,
                at_ms: now,
            },
            // At rest: full again by now.
            |c| c.tokens + ((now - c.at_ms) / 1000.0).max(0.0) * refill >= max,
        ) = Count {
            tokens: after,
            at_ms: now,
        };
        after - before
    }

    /// A transient failure at `origin`: one token less. Returns the tokens actually taken
    /// (less than one when the count was nearly empty): the call keeps the sum of what it took,
    /// for [`RetryBudget::allows_retry`].
    pub fn record_failure(&mut self, origin: &str, now_ms: f64) -> f64 {
        -self.update(origin, -1.0, now_ms)
    }

    /// A success at `origin`: `token_ratio` tokens more.
    pub fn record_success(&mut self, origin: &str, now_ms: f64) {
        self.update(origin, self.config.token_ratio, now_ms);
    }

    /// May a call to `origin` that took `own_taken` tokens itself retry now? The count plus
    /// what the call took (its own failures do not count against it) must be above half of
    /// `max_tokens`.
    pub fn allows_retry(&self, origin: &str, own_taken: f64, now_ms: f64) -> bool {
        let count = (self.tokens(origin, now_ms) + own_taken.max(0.0)).min(self.config.max_tokens);
        count > self.config.max_tokens / 2.0
    }
}

impl Budget for RetryBudget {
    /// Nothing: the token budget counts failures, not retries.
    fn retry_sent(&mut self, _origin: &str, _own: &mut OwnUse, _now_ms: f64) {}

    /// A transient failure takes a token (kept in `own`: it does not count against the
    /// call); a success gives `token_ratio` back.
    fn attempt_ended(&mut self, origin: &str, attempt: Attempt, own: &mut OwnUse, now_ms: f64) {
        if attempt.transient {
            own.tokens_taken += self.record_failure(origin, now_ms);
        } else if attempt.success {
            self.record_success(origin, now_ms);
        }
    }

    /// [`Verdict::Stop`] when the count (plus what the call took) is at or below half: a
    /// token budget ends the call.
    fn verdict(&self, origin: &str, own: &OwnUse, now_ms: f64) -> Verdict {
        if self.allows_retry(origin, own.tokens_taken, now_ms) {
            Verdict::Allow
        } else {
            Verdict::Stop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "https://api.example:443";

    fn grpc() -> RetryBudget {
        RetryBudget::new(BudgetConfig {
            refill_per_sec: 0.0,
            ..BudgetConfig::default()
        })
    }

    #[test]
    fn other_calls_failures_stop_retries_at_half() {
        let mut b = grpc();
        assert_eq!(b.tokens(O, 0.0), 10.0);
        assert!(b.allows_retry(O, 0.0, 0.0));
        for _ in 0..4 {
            assert_eq!(b.record_failure(O, 0.0), 1.0);
        }
        assert_eq!(b.tokens(O, 0.0), 6.0);
        assert!(b.allows_retry(O, 0.0, 0.0));
        b.record_failure(O, 0.0);
        assert_eq!(b.tokens(O, 0.0), 5.0);
        assert!(!b.allows_retry(O, 0.0, 0.0), "5 is not above 10 / 2");
        // A call that took one of those five itself is judged on 6.
        assert!(b.allows_retry(O, 1.0, 0.0));
    }

    #[test]
    fn a_lone_call_gets_every_retry() {
        let mut b = grpc();
        let mut own = 0.0;
        for attempt in 1..=100 {
            own += b.record_failure(O, 0.0);
            assert!(b.allows_retry(O, own, 0.0), "retry after attempt {attempt}");
        }
        assert_eq!(b.tokens(O, 0.0), 0.0);
        assert_eq!(own, 10.0, "it took what there was, no more");
        // The next call is refused at once: the lone call's failures are others' to it.
        let taken = b.record_failure(O, 0.0);
        assert_eq!(taken, 0.0);
        assert!(!b.allows_retry(O, taken, 0.0));
    }

    #[test]
    fn a_herd_in_an_outage_retries_about_half_the_count() {
        // 200 calls fail their first attempt together; each is judged right after its own
        // failure: only those judged while others had not yet drained the count retry.
        let mut b = grpc();
        let retries = (0..200)
            .filter(|_| {
                let own = b.record_failure(O, 0.0);
                b.allows_retry(O, own, 0.0)
            })
            .count();
        assert_eq!(retries, 5);
    }

    #[test]
    fn successes_refill_by_the_ratio_up_to_max() {
        let mut b = grpc();
        for _ in 0..5 {
            b.record_failure(O, 0.0);
        }
        for _ in 0..10 {
            b.record_success(O, 0.0);
        }
        assert!((b.tokens(O, 0.0) - 6.0).abs() < 1e-9);
        assert!(b.allows_retry(O, 0.0, 0.0));
        for _ in 0..1000 {
            b.record_success(O, 0.0);
        }
        assert_eq!(b.tokens(O, 0.0), 10.0);
    }

    #[test]
    fn time_refills_the_count() {
        let mut b = RetryBudget::new(BudgetConfig::default());
        for _ in 0..20 {
            b.record_failure(O, 1_000.0);
        }
        assert_eq!(b.tokens(O, 1_000.0), 0.0);
        assert!((b.tokens(O, 3_000.0) - 1.0).abs() < 1e-9, "0.5 a second");
        assert!(
            !b.allows_retry(O, 0.0, 11_000.0),
            "5 after 10 s: not above half"
        );
        assert!(b.allows_retry(O, 0.0, 11_100.0));
        assert_eq!(b.tokens(O, 1e12), 10.0, "never above max");
        // A clock that goes back refills nothing.
        assert!((b.tokens(O, 0.0) - 0.0).abs() < 1e-9);
    }

    #[test]
    fn never_below_zero_and_origins_are_separate() {
        let mut b = grpc();
        for _ in 0..100 {
            b.record_failure(O, 0.0);
        }
        assert_eq!(b.tokens(O, 0.0), 0.0);
        assert_eq!(b.tokens("http://other:80", 0.0), 10.0);
        assert!(b.allows_retry("http://other:80", 0.0, 0.0));
    }

    #[test]
    fn validation() {
        let d = BudgetConfig::default();
        assert!(BudgetConfig {
            max_tokens: 0.0,
            ..d
        }
        .validate()
        .is_err());
        assert!(BudgetConfig {
            max_tokens: f64::NAN,
            ..d
        }
        .validate()
        .is_err());
        assert!(BudgetConfig {
            token_ratio: 0.0,
            ..d
        }
        .validate()
        .is_err());
        assert!(BudgetConfig {
            token_ratio: 11.0,
            ..d
        }
        .validate()
        .is_err());
        assert!(BudgetConfig {
            refill_per_sec: -1.0,
            ..d
        }
        .validate()
        .is_err());
        assert!(BudgetConfig {
            refill_per_sec: 11.0,
            ..d
        }
        .validate()
        .is_err());
        assert!(BudgetConfig {
            refill_per_sec: 0.0,
            ..d
        }
        .validate()
        .is_ok());
        assert_eq!(d.validate(), Ok(d));
    }
}
