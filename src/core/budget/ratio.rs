//! The default budget (no `budget` option): per origin, retries may not run ahead of the
//! retries the server accepted; a refused retry is skipped, not fatal, and one held back only
//! by retries still in flight waits without being counted.

use super::{Attempt, Budget, OwnUse, Verdict};
use crate::core::origins::OriginMap;

/// The default retry budget: per origin, retries may not run ahead of the retries the server
/// accepted (in the spirit of Google SRE's client-side adaptive throttling and Finagle's
/// `RetryBudget`, which are on by default). A retry is allowed while the retries sent
/// recently by *other* calls, less `ratio` × those accepted (answered with anything but a
/// transient failure), stay below `floor`; the counts decay with a time constant of
/// `window_ms`. A refused retry is skipped, not fatal: the call waits its next backoff and
/// asks again (the shell counts the skipped attempt). When the retries already *answered*
/// would allow it, and only those still in flight (sent, not yet answered: queued behind a
/// browser's six connections per origin, or by a slow server) hold it back, it is deferred
/// instead: the call waits another backoff and asks again, the attempt not counted, so a
/// queue that is slow but answers every retry does not use up a call's attempts.
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

/// One origin's decayed counts: retries sent, and of those answered, accepted and failed.
#[derive(Clone, Copy, Debug)]
struct RatioCount {
    sent: f64,
    accepted: f64,
    failed: f64,
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

    /// `count` decayed to `now_ms`. A time a little before the count's (another call's
    /// reading of the clock) decays nothing; one more than a window before it is the clock
    /// set back, by an unknown time: the count is forgotten (else it would not decay until
    /// the clock is past its time again, and retries would stay refused that long).
    fn decayed(&self, count: RatioCount, now_ms: f64) -> RatioCount {
        if now_ms < count.at_ms - self.config.window_ms {
            return RatioCount {
                sent: 0.0,
                accepted: 0.0,
                failed: 0.0,
                at_ms: now_ms,
            };
        }
        let f = (-((now_ms - count.at_ms).max(0.0)) / self.config.window_ms).exp();
        RatioCount {
            sent: count.sent * f,
            accepted: count.accepted * f,
            failed: count.failed * f,
            at_ms: now_ms.max(count.at_ms),
        }
    }

    fn update(&mut self, origin: &str, now_ms: f64, f: impl FnOnce(&mut RatioCount)) {
        let fresh = RatioCount {
            sent: 0.0,
            accepted: 0.0,
            failed: 0.0,
            at_ms: now_ms,
        };
        let current = self
            .counts
            .get(origin)
            .copied()
            .map_or(fresh, |c| self.decayed(c, now_ms));
        let mut next = current;
        f(&mut next);
        // At rest: the retries it saw are paid for by those accepted, or long decayed.
        let window = self.config.window_ms;
        *self.counts.get_or_insert_with(
            origin,
            || fresh,
            |c| c.sent <= 2.0 * c.accepted || now_ms - c.at_ms > 6.0 * window,
        ) = next;
    }

    /// A retry to `origin` is sent.
    pub fn record_retry_sent(&mut self, origin: &str, now_ms: f64) {
        self.update(origin, now_ms, |c| c.sent += 1.0);
    }

    /// A retry to `origin` was answered with something other than a transient failure.
    pub fn record_retry_accepted(&mut self, origin: &str, now_ms: f64) {
        self.update(origin, now_ms, |c| c.accepted += 1.0);
    }

    /// A retry to `origin` was answered with a transient failure (or failed without one).
    pub fn record_retry_failed(&mut self, origin: &str, now_ms: f64) {
        self.update(origin, now_ms, |c| c.failed += 1.0);
    }

    /// A retry to `origin` counted as sent will never be answered: no longer counted.
    pub fn record_retry_withdrawn(&mut self, origin: &str, now_ms: f64) {
        self.update(origin, now_ms, |c| c.sent = (c.sent - 1.0).max(0.0));
    }

    /// May a call that sent `own_sent` retries itself send another retry to `origin` now?
    pub fn allows_retry(&self, origin: &str, own_sent: f64, now_ms: f64) -> bool {
        self.judge(origin, own_sent, now_ms) == Verdict::Allow
    }

    /// [`Verdict::Allow`] while other calls' retries sent stay below `ratio` × those accepted
    /// plus `floor`; else [`Verdict::Skip`] when the retries answered are enough to refuse it,
    /// [`Verdict::Defer`] when only those still in flight are.
    fn judge(&self, origin: &str, own_sent: f64, now_ms: f64) -> Verdict {
        let Some(c) = self.counts.get(origin).copied() else {
            return Verdict::Allow;
        };
        let c = self.decayed(c, now_ms);
        let limit = self.config.ratio * c.accepted + self.config.floor;
        // The call's own retries are taken off undecayed (the counts are decayed): a call
        // whose retries are old is judged a little more leniently; never below zero. A call
        // asking for its next retry has none in flight: its own are all answered.
        let others_sent = (c.sent - own_sent).max(0.0);
        let others_answered = (c.accepted + c.failed - own_sent).max(0.0);
        if others_sent < limit {
            Verdict::Allow
        } else if others_answered >= limit {
            Verdict::Skip
        } else {
            Verdict::Defer
        }
    }
}

impl Budget for RetryRatio {
    /// Counted (and in `own`: the call's own retries do not count against it).
    fn retry_sent(&mut self, origin: &str, own: &mut OwnUse, now_ms: f64) {
        self.record_retry_sent(origin, now_ms);
        own.retries_sent += 1.0;
    }

    /// A retry answered with anything but a transient failure was accepted; one answered
    /// with a transient failure failed.
    fn attempt_ended(&mut self, origin: &str, attempt: Attempt, _own: &mut OwnUse, now_ms: f64) {
        match (attempt.number > 1, attempt.transient) {
            (true, false) => self.record_retry_accepted(origin, now_ms),
            (true, true) => self.record_retry_failed(origin, now_ms),
            _ => {}
        }
    }

    /// Taken back: neither in flight nor answered (nor the call's own any more).
    fn retry_unanswered(&mut self, origin: &str, own: &mut OwnUse, now_ms: f64) {
        self.record_retry_withdrawn(origin, now_ms);
        own.retries_sent = (own.retries_sent - 1.0).max(0.0);
    }

    /// [`Verdict::Skip`] when other calls' answered retries ran ahead of the accepted ones,
    /// [`Verdict::Defer`] when their retries in flight did: either way the call waits its
    /// next backoff and asks again.
    fn verdict(&self, origin: &str, own: &OwnUse, now_ms: f64) -> Verdict {
        self.judge(origin, own.retries_sent, now_ms)
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
    fn retries_in_flight_defer_and_answered_failures_skip() {
        let mut r = RetryRatio::new(RetryRatioConfig::default());
        for _ in 0..20 {
            r.record_retry_sent(O, 0.0);
        }
        assert_eq!(r.judge(O, 0.0, 0.0), Verdict::Defer, "20 in flight");
        for _ in 0..10 {
            r.record_retry_accepted(O, 0.0);
        }
        assert_eq!(
            r.judge(O, 0.0, 0.0),
            Verdict::Allow,
            "10 accepted: 40 may go"
        );
        for _ in 0..20 {
            r.record_retry_sent(O, 0.0);
        }
        assert_eq!(
            r.judge(O, 0.0, 0.0),
            Verdict::Defer,
            "40 sent, 30 in flight"
        );
        for _ in 0..30 {
            r.record_retry_failed(O, 0.0);
        }
        assert_eq!(
            r.judge(O, 0.0, 0.0),
            Verdict::Skip,
            "40 answered, 30 failed"
        );
        assert_eq!(r.judge(O, 40.0, 0.0), Verdict::Allow, "its own retries");
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

    #[test]
    fn a_clock_set_back_by_more_than_a_window_forgets_the_counts() {
        let mut r = RetryRatio::new(RetryRatioConfig::default());
        for _ in 0..40 {
            r.record_retry_sent(O, 1_000_000.0);
        }
        assert!(!r.allows_retry(O, 0.0, 1_000_000.0));
        // Set back ten minutes: not refused until the clock is past 1_000_000 again.
        assert!(r.allows_retry(O, 0.0, 400_000.0));
        r.record_retry_sent(O, 400_000.0);
        assert!(
            r.allows_retry(O, 0.0, 400_001.0),
            "counted from now: 1 sent"
        );
        for _ in 0..25 {
            r.record_retry_sent(O, 400_001.0);
        }
        assert!(
            !r.allows_retry(O, 0.0, 400_002.0),
            "and refused again past the floor"
        );
    }
}
