//! A shared retry budget per origin: gRPC's `retryThrottling` token semantics, with two
//! additions that make it safe to have on by default (the AWS SDKs' standard retry mode and
//! Finagle's `RetryBudget` are on by default too).
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

use super::options::OptionError;
use super::origins::OriginMap;

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
        if !(self.max_tokens.is_finite() && self.max_tokens > 0.0 && self.max_tokens <= 1_000_000.0)
        {
            return Err(OptionError::new("maxTokens", "a number > 0 and <= 1000000"));
        }
        if !(self.token_ratio.is_finite()
            && self.token_ratio > 0.0
            && self.token_ratio <= self.max_tokens)
        {
            return Err(OptionError::new(
                "tokenRatio",
                "a number > 0 and <= maxTokens",
            ));
        }
        if !(self.refill_per_sec.is_finite()
            && self.refill_per_sec >= 0.0
            && self.refill_per_sec <= self.max_tokens)
        {
            return Err(OptionError::new(
                "refillPerSecond",
                "a number >= 0 and <= maxTokens",
            ));
        }
        Ok(self)
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
        *self.counts.get_or_insert_with(origin, || Count {
            tokens: max,
            at_ms: now,
        }) = Count {
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

/// The default retry budget: per origin, retries may not run ahead of the retries the server
/// accepted (in the spirit of Google SRE's client-side adaptive throttling and Finagle's
/// `RetryBudget`, which are on by default). A retry is allowed while the retries sent
/// recently by *other* calls, less `ratio` × those accepted (answered with anything but a
/// transient failure), stay below `floor`; the counts decay with a time constant of
/// `window_ms`. A refused retry is skipped, not fatal: the call waits its next backoff and
/// asks again (the shell counts the skipped attempt).
///
/// - A lone request is never refused: its own retries are not counted against it.
/// - A total outage accepts nothing, so after `floor` unaccepted retries from all callers
///   every retry is refused: 200 calls of 9 attempts cost about `1 + floor / 200` requests per
///   call instead of 9.
/// - An overload accepts some retries, and each accepted one lets `ratio` more through: the
///   herd's retries go at about `ratio` × the rate the server serves them, so every call still
///   gets through (`bench/storm_simulation.rs`: amplification about 2.4, where no budget is 3.8).
///
/// First attempts are not counted (the success path does not report to it).
///
/// # Default
/// `ratio` 2, `floor` 20, `window_ms` 10000.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryRatioConfig {
    /// Retries allowed per accepted retry. Default 2.
    pub ratio: f64,
    /// Unaccepted retries allowed beyond that. Default 20.
    pub floor: f64,
    /// The counts' decay time constant, ms. Default 10000.
    pub window_ms: f64,
}

impl Default for RetryRatioConfig {
    fn default() -> Self {
        RetryRatioConfig {
            ratio: 2.0,
            floor: 20.0,
            window_ms: 10_000.0,
        }
    }
}

/// One origin's decayed counts.
#[derive(Clone, Copy, Debug)]
struct RatioCount {
    sent: f64,
    accepted: f64,
    at_ms: f64,
}

/// The default retry budget's counts for every origin seen (see [`RetryRatioConfig`]).
#[derive(Clone, Debug, Default)]
pub struct RetryRatio {
    config: RetryRatioConfig,
    counts: OriginMap<RatioCount>,
}

impl RetryRatio {
    /// A budget with `config`.
    pub fn new(config: RetryRatioConfig) -> Self {
        RetryRatio {
            config,
            counts: OriginMap::default(),
        }
    }

    /// `count` decayed to `now_ms`.
    fn decayed(&self, count: RatioCount, now_ms: f64) -> RatioCount {
        let f = (-((now_ms - count.at_ms).max(0.0)) / self.config.window_ms).exp();
        RatioCount {
            sent: count.sent * f,
            accepted: count.accepted * f,
            at_ms: now_ms.max(count.at_ms),
        }
    }

    fn update(&mut self, origin: &str, now_ms: f64, f: impl FnOnce(&mut RatioCount)) {
        let fresh = RatioCount {
            sent: 0.0,
            accepted: 0.0,
            at_ms: now_ms,
        };
        let current = self
            .counts
            .get(origin)
            .copied()
            .map_or(fresh, |c| self.decayed(c, now_ms));
        let mut next = current;
        f(&mut next);
        *self.counts.get_or_insert_with(origin, || fresh) = next;
    }

    /// A retry to `origin` is sent.
    pub fn record_retry_sent(&mut self, origin: &str, now_ms: f64) {
        self.update(origin, now_ms, |c| c.sent += 1.0);
    }

    /// A retry to `origin` was answered with something other than a transient failure.
    pub fn record_retry_accepted(&mut self, origin: &str, now_ms: f64) {
        self.update(origin, now_ms, |c| c.accepted += 1.0);
    }

    /// May a call that sent `own_sent` retries itself send another retry to `origin` now?
    pub fn allows_retry(&self, origin: &str, own_sent: f64, now_ms: f64) -> bool {
        let Some(c) = self.counts.get(origin).copied() else {
            return true;
        };
        let c = self.decayed(c, now_ms);
        // Own retries decay too; at most what is counted is taken off.
        let others = (c.sent - own_sent).max(0.0);
        others < self.config.ratio * c.accepted + self.config.floor
    }
}

#[cfg(test)]
mod ratio_tests {
    use super::*;

    const O: &str = "https://api.example:443";

    #[test]
    fn a_lone_call_is_never_refused() {
        let mut r = RetryRatio::new(RetryRatioConfig::default());
        for own in 0..100 {
            assert!(r.allows_retry(O, own as f64, 0.0), "retry {own}");
            r.record_retry_sent(O, 0.0);
        }
    }

    #[test]
    fn an_outage_stops_retries_after_the_floor() {
        let mut r = RetryRatio::new(RetryRatioConfig::default());
        // 200 calls, each asking for a retry in turn; nothing is ever accepted.
        let mut sent = 0;
        for _round in 0..8 {
            for _call in 0..200 {
                if r.allows_retry(O, 0.0, 0.0) {
                    r.record_retry_sent(O, 0.0);
                    sent += 1;
                }
            }
        }
        assert_eq!(sent, 20, "the floor, then nothing");
        // Another origin is not affected.
        assert!(r.allows_retry("http://other:80", 0.0, 0.0));
    }

    #[test]
    fn accepted_retries_let_more_through() {
        let mut r = RetryRatio::new(RetryRatioConfig::default());
        for _ in 0..20 {
            r.record_retry_sent(O, 0.0);
        }
        assert!(!r.allows_retry(O, 0.0, 0.0));
        r.record_retry_accepted(O, 0.0);
        assert!(
            r.allows_retry(O, 0.0, 0.0),
            "one accepted retry: two more may go"
        );
        r.record_retry_sent(O, 0.0);
        r.record_retry_sent(O, 0.0);
        assert!(!r.allows_retry(O, 0.0, 0.0));
    }

    #[test]
    fn the_counts_decay() {
        let mut r = RetryRatio::new(RetryRatioConfig::default());
        for _ in 0..40 {
            r.record_retry_sent(O, 0.0);
        }
        assert!(!r.allows_retry(O, 0.0, 0.0));
        assert!(
            !r.allows_retry(O, 0.0, 5_000.0),
            "40 · e^-0.5 = 24 still above 20"
        );
        assert!(r.allows_retry(O, 0.0, 10_000.0), "40 · e^-1 = 14.7");
        // A clock that goes back does not grow the counts.
        assert!(!r.allows_retry(O, 0.0, -1_000.0));
    }
}
