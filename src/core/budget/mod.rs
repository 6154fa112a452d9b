//! Retry budgets: what keeps the retries of many callers from outgrowing what a service can
//! take, one origin at a time. Two mechanisms behind one trait, [`Budget`], which the call
//! consumes (as tower's `retry::budget`): the token budget of gRPC's `retryThrottling`
//! ([`RetryBudget`], the `budget` option: refused retries end the call) and the default budget
//! ([`RetryRatio`]: refused retries are skipped, or deferred while retries are in flight). In
//! both, a call's own failures and retries never count against it, so a lone request gets
//! every retry its `maxAttempts` allows.

mod ratio;
mod tokens;

pub use ratio::{RetryRatio, RetryRatioConfig};
pub use tokens::{BudgetConfig, RetryBudget};

/// What a budget says of a call's next retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Send it.
    Allow,
    /// Not now: the attempt counts as made; wait another backoff and ask again (the default
    /// budget, when retries answered ran ahead of those accepted).
    Skip,
    /// Not yet: wait another backoff and ask again, the attempt not counted (the default
    /// budget, when only retries still in flight ran ahead).
    Defer,
    /// No: the call ends with its last answer, reason `'budget'` (a `RetryBudget`).
    Stop,
}

/// What one call has taken from a budget, which does not count against it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OwnUse {
    /// The retries it sent (the default budget).
    pub retries_sent: f64,
    /// The tokens its failures took (a `RetryBudget`).
    pub tokens_taken: f64,
}

/// How an attempt ended, as a budget counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Its number: 1 for the first.
    pub number: u32,
    /// A transient failure (a status or error the policy retries).
    pub transient: bool,
    /// A status below 400.
    pub success: bool,
}

/// A retry budget shared by the calls to an origin.
pub trait Budget {
    /// A retry (an attempt after the first) to `origin` is sent.
    fn retry_sent(&mut self, origin: &str, own: &mut OwnUse, now_ms: f64);
    /// An attempt to `origin` ended so.
    fn attempt_ended(&mut self, origin: &str, attempt: Attempt, own: &mut OwnUse, now_ms: f64);
    /// May the call that took `own` retry to `origin` now?
    fn verdict(&self, origin: &str, own: &OwnUse, now_ms: f64) -> Verdict;
    /// A retry to `origin` that was counted as sent will never be answered (its call ended
    /// first: an abort, fetch refused to send it). Default: nothing.
    fn retry_unanswered(&mut self, _origin: &str, _own: &mut OwnUse, _now_ms: f64) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "https://api.example:443";

    fn failure(number: u32) -> Attempt {
        Attempt {
            number,
            transient: true,
            success: false,
        }
    }

    #[test]
    fn a_token_budget_stops_and_the_default_one_skips() {
        let mut tokens = RetryBudget::new(BudgetConfig {
            refill_per_sec: 0.0,
            ..BudgetConfig::default()
        });
        let mut other = OwnUse::default();
        for _ in 0..5 {
            tokens.attempt_ended(O, failure(1), &mut other, 0.0);
        }
        assert_eq!(other.tokens_taken, 5.0);
        assert_eq!(
            tokens.verdict(O, &other, 0.0),
            Verdict::Allow,
            "its own failures do not count"
        );
        assert_eq!(tokens.verdict(O, &OwnUse::default(), 0.0), Verdict::Stop);

        let mut ratio = RetryRatio::new(RetryRatioConfig::default());
        let mut own = OwnUse::default();
        for _ in 0..20 {
            ratio.retry_sent(O, &mut own, 0.0);
        }
        assert_eq!(own.retries_sent, 20.0);
        assert_eq!(
            ratio.verdict(O, &own, 0.0),
            Verdict::Allow,
            "its own retries do not count"
        );
        assert_eq!(
            ratio.verdict(O, &OwnUse::default(), 0.0),
            Verdict::Defer,
            "in flight"
        );
        for _ in 0..20 {
            ratio.attempt_ended(O, failure(2), &mut own, 0.0);
        }
        assert_eq!(
            ratio.verdict(O, &OwnUse::default(), 0.0),
            Verdict::Skip,
            "answered, failed"
        );
        // An accepted retry lets two more through.
        ratio.attempt_ended(
            O,
            Attempt {
                number: 2,
                transient: false,
                success: true,
            },
            &mut own,
            0.0,
        );
        assert_eq!(ratio.verdict(O, &OwnUse::default(), 0.0), Verdict::Allow);
        // A first attempt is not a retry: not counted as accepted.
        let mut fresh = RetryRatio::new(RetryRatioConfig::default());
        for _ in 0..20 {
            fresh.retry_sent(O, &mut OwnUse::default(), 0.0);
        }
        fresh.attempt_ended(
            O,
            Attempt {
                number: 1,
                transient: false,
                success: true,
            },
            &mut OwnUse::default(),
            0.0,
        );
        assert_eq!(fresh.verdict(O, &OwnUse::default(), 0.0), Verdict::Defer);
    }
}
