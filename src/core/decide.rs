//! One decision per attempt: retry after a delay, or stop and say why.
//!
//! [`RetryState`] is the whole policy of one call; the wasm shell's retry loop
//! (`src/wasm/client/call.rs`) only performs what it decides (send, wait, return, reject).
//! Time comes in as plain ms numbers, randomness as an [`Rng`], so every rule is tested
//! natively.

use super::backoff::{Backoff, Rng};
use super::classify::{classify, Outcome, RetryReason, Verdict};
use super::options::RetryPolicy;

/// Why a call stops after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A success or a permanent failure: hand the outcome to the caller as it is.
    Final,
    /// Transient, but not safe to retry (a non-idempotent request without a key whose effect
    /// is unknown).
    UnsafeToRetry(RetryReason),
    /// `maxAttempts` attempts were made.
    AttemptsExhausted(RetryReason),
    /// The wait and another attempt would not fit in `deadlineMs`.
    DeadlineExhausted(RetryReason),
    /// The server asked to wait longer than `maxRetryAfterMs`.
    RetryAfterTooLong(RetryReason),
    /// The request body cannot be sent again (a stream above the buffering limit).
    BodyNotReplayable(RetryReason),
    /// The shared retry budget refused the retry.
    BudgetExhausted(RetryReason),
}

impl Stop {
    /// Why the call ends, as `RetryError.reason` says it.
    pub fn reason(self) -> StopReason {
        match self {
            Stop::Final => StopReason::NotRetryable,
            Stop::UnsafeToRetry(_) => StopReason::Unsafe,
            Stop::AttemptsExhausted(_) => StopReason::Attempts,
            Stop::DeadlineExhausted(_) => StopReason::Deadline,
            Stop::RetryAfterTooLong(_) => StopReason::RetryAfter,
            Stop::BodyNotReplayable(_) => StopReason::BodyNotReplayable,
            Stop::BudgetExhausted(_) => StopReason::Budget,
        }
    }

    /// [`Stop::reason`]'s JavaScript name.
    pub fn as_str(self) -> &'static str {
        self.reason().as_str()
    }
}

/// Every reason a call can end without the answer it wanted: `RetryError.reason` (the
/// `StopReason` type of `index.d.ts`, which a test keeps equal to [`StopReason::ALL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `'attempts'`: `maxAttempts` attempts were made.
    Attempts,
    /// `'deadline'`: `deadlineMs` passed, or the next wait would not end before it.
    Deadline,
    /// `'unsafe'`: transient, but not safe to retry (a POST without a key).
    Unsafe,
    /// `'not-retryable'`: a failure the policy does not retry.
    NotRetryable,
    /// `'retry-after'`: the server asked for a wait longer than `maxRetryAfterMs`.
    RetryAfter,
    /// `'body-not-replayable'`: the body cannot be sent again.
    BodyNotReplayable,
    /// `'shouldRetry'`: the `shouldRetry` hook said no.
    ShouldRetry,
    /// `'budget'`: the retry budget refused the retry.
    Budget,
    /// `'circuit-open'`: the circuit breaker is open.
    CircuitOpen,
    /// `'throttled'`: the adaptive throttle would not give a turn within `maxWaitMs`.
    Throttled,
}

impl StopReason {
    /// Every reason, in the order `index.d.ts` lists them.
    pub const ALL: [StopReason; 10] = [
        StopReason::Attempts,
        StopReason::Deadline,
        StopReason::Unsafe,
        StopReason::NotRetryable,
        StopReason::RetryAfter,
        StopReason::BodyNotReplayable,
        StopReason::ShouldRetry,
        StopReason::Budget,
        StopReason::CircuitOpen,
        StopReason::Throttled,
    ];

    /// The JavaScript name (`RetryError.reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Attempts => "attempts",
            StopReason::Deadline => "deadline",
            StopReason::Unsafe => "unsafe",
            StopReason::NotRetryable => "not-retryable",
            StopReason::RetryAfter => "retry-after",
            StopReason::BodyNotReplayable => "body-not-replayable",
            StopReason::ShouldRetry => "shouldRetry",
            StopReason::Budget => "budget",
            StopReason::CircuitOpen => "circuit-open",
            StopReason::Throttled => "throttled",
        }
    }
}

/// What to do after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Wait `delay_ms`, then send the next attempt.
    Retry {
        /// The wait, in whole ms within `0..=2147483647`.
        delay_ms: u64,
        /// Why the attempt failed.
        reason: RetryReason,
        /// True when the delay came from the server (`Retry-After` or `RateLimit`).
        from_server: bool,
    },
    /// Stop here.
    Stop(Stop),
}

/// The retry state of one call: attempts made, the backoff schedule, the deadline.
#[derive(Clone, Debug)]
pub struct RetryState {
    backoff: Backoff,
    attempts: u32,
    deadline_at_ms: Option<f64>,
}

/// What is known about one attempt's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttemptOutcome {
    /// The outcome.
    pub outcome: Outcome,
    /// The request's method is idempotent (RFC 9110).
    pub idempotent: bool,
    /// The request carries an idempotency key.
    pub has_key: bool,
    /// The wait the server asked for (see [`super::retry_after::server_delay_ms`]), if any.
    pub server_delay_ms: Option<f64>,
    /// The request can be sent again (false for a stream body above the buffering limit).
    pub replayable: bool,
    /// The shared retry budget, if any, allows a retry now (true when there is none).
    pub budget_allows_retry: bool,
    /// The response is the end of a redirect the transport followed. For a non-idempotent
    /// request it is final: the redirect says the server processed the request (a POST
    /// answered 303 and followed to a GET), so the request is never sent again.
    pub redirected: bool,
    /// The server said not to retry (`X-Should-Retry: false`, see
    /// [`super::classify::server_refuses_retry`]): the response is final.
    pub server_refuses: bool,
}

impl RetryState {
    /// A call that starts at `now_ms`.
    pub fn new(policy: &RetryPolicy, now_ms: f64) -> Self {
        RetryState {
            backoff: Backoff::new(policy),
            attempts: 0,
            deadline_at_ms: policy.deadline_ms.map(|d| now_ms + d),
        }
    }

    /// Attempts started so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Record that an attempt starts now; returns its 1-based number.
    pub fn start_attempt(&mut self) -> u32 {
        self.attempts = self.attempts.saturating_add(1);
        self.attempts
    }

    /// The time limit of an attempt starting at `now_ms`: `timeoutMs`, shortened to what is
    /// left of `deadlineMs`. `None`: no limit.
    pub fn attempt_time_limit_ms(&self, policy: &RetryPolicy, now_ms: f64) -> Option<f64> {
        policy.attempt_limit_ms(self.deadline_left_ms(now_ms))
    }

    /// What is left of the deadline at `now_ms`, in ms (`None`: no deadline).
    pub fn deadline_left_ms(&self, now_ms: f64) -> Option<f64> {
        self.deadline_at_ms.map(|end| (end - now_ms).max(0.0))
    }

    /// Is the deadline already spent at `now_ms`?
    pub fn deadline_passed(&self, now_ms: f64) -> bool {
        self.deadline_at_ms.is_some_and(|end| now_ms >= end)
    }

    /// Does a wait of `delay_ms` starting at `now_ms` still end before the deadline? Asked
    /// again after the hooks (`shouldRetry`, `onRetry`) ran, since they take time too: a wait
    /// that no longer fits is not started, so nothing is sent once the deadline has passed.
    pub fn wait_fits(&self, now_ms: f64, delay_ms: f64) -> bool {
        self.deadline_at_ms
            .is_none_or(|end| now_ms + delay_ms < end)
    }

    /// The next backoff step (one more than the last wait's), for a retry the budget deferred:
    /// no attempt is counted, so nothing else of the decision changes.
    pub fn next_backoff<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        self.backoff.next_delay(rng)
    }

    /// Decide what follows an attempt that ended at `now_ms` with `report`.
    pub fn decide<R: Rng + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        report: AttemptOutcome,
        now_ms: f64,
        rng: &mut R,
    ) -> Decision {
        if (report.redirected && !report.idempotent) || report.server_refuses {
            return Decision::Stop(Stop::Final);
        }
        let reason = match classify(policy, report.outcome, report.idempotent, report.has_key) {
            Verdict::Final => return Decision::Stop(Stop::Final),
            Verdict::UnsafeToRetry(reason) => return Decision::Stop(Stop::UnsafeToRetry(reason)),
            Verdict::Retryable(reason) => reason,
        };
        if !report.replayable {
            return Decision::Stop(Stop::BodyNotReplayable(reason));
        }
        if self.attempts >= policy.max_attempts {
            return Decision::Stop(Stop::AttemptsExhausted(reason));
        }
        if !report.budget_allows_retry {
            return Decision::Stop(Stop::BudgetExhausted(reason));
        }
        let server_delay = if policy.respect_retry_after {
            report.server_delay_ms
        } else {
            None
        };
        let (delay_ms, from_server) = match server_delay {
            Some(asked) if asked.is_nan() || asked > policy.retry_after_cap_ms() => {
                return Decision::Stop(Stop::RetryAfterTooLong(reason));
            }
            // Spread within what is left of the deadline, when the wait asked fits in it.
            Some(asked) => (
                self.backoff.above_floor(
                    asked,
                    policy.retry_after_cap_ms(),
                    self.deadline_left_ms(now_ms),
                    false,
                    rng,
                ),
                true,
            ),
            None => (self.backoff.next_delay(rng), false),
        };
        if let Some(end) = self.deadline_at_ms {
            // Never start a wait, or an attempt, that cannot finish inside the deadline.
            if now_ms + delay_ms as f64 >= end {
                return Decision::Stop(Stop::DeadlineExhausted(reason));
            }
        }
        Decision::Retry {
            delay_ms,
            reason,
            from_server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::backoff::SplitMix64;
    use crate::core::options::Jitter;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            jitter: Jitter::None,
            ..RetryPolicy::default()
        }
    }

    fn status(s: u16) -> AttemptOutcome {
        AttemptOutcome {
            outcome: Outcome::Status(s),
            idempotent: true,
            has_key: false,
            server_delay_ms: None,
            replayable: true,
            budget_allows_retry: true,
            redirected: false,
            server_refuses: false,
        }
    }

    fn run(policy: &RetryPolicy, outcomes: &[AttemptOutcome]) -> Vec<Decision> {
        let mut state = RetryState::new(policy, 0.0);
        let mut rng = SplitMix64::new(7);
        let mut now = 0.0;
        let mut out = Vec::new();
        for o in outcomes {
            state.start_attempt();
            let d = state.decide(policy, *o, now, &mut rng);
            if let Decision::Retry { delay_ms, .. } = d {
                now += delay_ms as f64;
            }
            out.push(d);
        }
        out
    }

    fn retry(delay_ms: u64) -> Decision {
        Decision::Retry {
            delay_ms,
            reason: RetryReason::Status,
            from_server: false,
        }
    }

    #[test]
    fn three_attempts_by_default_then_stop() {
        let d = run(&policy(), &[status(503), status(503), status(503)]);
        assert_eq!(
            d,
            [
                retry(500),
                retry(1000),
                Decision::Stop(Stop::AttemptsExhausted(RetryReason::Status))
            ]
        );
    }

    #[test]
    fn success_and_permanent_failures_are_final() {
        assert_eq!(
            run(&policy(), &[status(200)]),
            [Decision::Stop(Stop::Final)]
        );
        assert_eq!(
            run(&policy(), &[status(404)]),
            [Decision::Stop(Stop::Final)]
        );
    }

    #[test]
    fn post_without_key_is_not_retried_after_network_error() {
        let o = AttemptOutcome {
            outcome: Outcome::NetworkError,
            idempotent: false,
            has_key: false,
            server_delay_ms: None,
            replayable: true,
            budget_allows_retry: true,
            redirected: false,
            server_refuses: false,
        };
        assert_eq!(
            run(&policy(), &[o]),
            [Decision::Stop(Stop::UnsafeToRetry(RetryReason::Network))]
        );
        let keyed = AttemptOutcome { has_key: true, ..o };
        assert_eq!(
            run(&policy(), &[keyed]),
            [Decision::Retry {
                delay_ms: 500,
                reason: RetryReason::Network,
                from_server: false
            }]
        );
    }

    /// The waits of the retries after `n` answers that each asked for `asked` ms, over many
    /// seeds: one list per seed.
    fn server_waits(p: &RetryPolicy, asked: f64, n: usize) -> Vec<Vec<u64>> {
        (0..2000)
            .map(|seed| {
                let mut state = RetryState::new(p, 0.0);
                let mut rng = SplitMix64::new(seed);
                let o = AttemptOutcome {
                    server_delay_ms: Some(asked),
                    ..status(429)
                };
                (0..n)
                    .map(|_| {
                        state.start_attempt();
                        match state.decide(p, o, 0.0, &mut rng) {
                            Decision::Retry {
                                delay_ms,
                                from_server: true,
                                ..
                            } => delay_ms,
                            other => panic!("{other:?}"),
                        }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn retry_after_is_a_floor_with_a_jittered_window_above_it_that_grows_with_the_attempt() {
        let p = RetryPolicy {
            jitter: Jitter::Full,
            max_attempts: 4,
            ..policy()
        };
        // base 500, factor 2, 2501 ms asked: windows of half the wait asked (its backoff
        // delays of 500, 1000, 2000 ms are narrower), doubling per retry
        let waits = server_waits(&p, 2500.4, 3);
        for (retry, window) in [(0, 1250u64), (1, 2501), (2, 5002)] {
            let w: Vec<u64> = waits.iter().map(|w| w[retry]).collect();
            let (min, max) = (*w.iter().min().unwrap(), *w.iter().max().unwrap());
            assert!(min >= 2501, "retry {retry}: {min} is earlier than asked");
            assert!(
                max <= 2501 + window,
                "retry {retry}: {max} is past the window"
            );
            // uniform over the window: the mean in the middle, both ends reached
            let mean = w.iter().sum::<u64>() as f64 / w.len() as f64;
            let middle = 2501.0 + window as f64 / 2.0;
            assert!(
                (mean - middle).abs() < window as f64 * 0.03,
                "retry {retry}: mean {mean}"
            );
            assert!(min < 2501 + window / 20 && max > 2501 + window * 19 / 20);
        }
    }

    #[test]
    fn the_window_above_a_short_retry_after_is_the_backoff_delay() {
        let p = RetryPolicy {
            jitter: Jitter::Full,
            ..policy()
        };
        // 100 ms asked, backoff 500 ms: a window of 500 ms (half the wait would be 50)
        let w: Vec<u64> = server_waits(&p, 100.0, 1)
            .into_iter()
            .map(|w| w[0])
            .collect();
        assert!(w.iter().all(|&d| (100..=600).contains(&d)));
        assert!(w.iter().any(|&d| d > 550));
    }

    #[test]
    fn retry_after_with_jitter_none_is_the_wait_asked_exactly() {
        let waits = server_waits(&policy(), 2500.4, 2);
        assert!(waits.iter().all(|w| w == &[2501, 2501]));
    }

    #[test]
    fn the_window_above_retry_after_is_narrowed_to_end_before_the_deadline() {
        // 1300 ms of deadline, 1000 asked: a full window (500 ms above) would pass the
        // deadline about half the time; narrowed, every retry is made, spread over what fits.
        let p = RetryPolicy {
            jitter: Jitter::Full,
            deadline_ms: Some(1300.0),
            ..policy()
        };
        let o = AttemptOutcome {
            server_delay_ms: Some(1000.0),
            ..status(503)
        };
        let mut waits = Vec::new();
        for seed in 0..2000 {
            let mut s = RetryState::new(&p, 0.0);
            s.start_attempt();
            match s.decide(&p, o, 10.0, &mut SplitMix64::new(seed)) {
                Decision::Retry { delay_ms, .. } => waits.push(delay_ms),
                other => panic!("seed {seed}: {other:?}"),
            }
        }
        assert!(
            waits.iter().all(|&d| (1000..1290).contains(&d)),
            "{waits:?}"
        );
        assert!(waits.iter().any(|&d| d < 1100) && waits.iter().any(|&d| d > 1200));
        // A wait asked that does not fit still stops the call.
        let late = AttemptOutcome {
            server_delay_ms: Some(1290.0),
            ..status(503)
        };
        let mut s = RetryState::new(&p, 0.0);
        s.start_attempt();
        assert_eq!(
            s.decide(&p, late, 10.0, &mut SplitMix64::new(1)),
            Decision::Stop(Stop::DeadlineExhausted(RetryReason::Status))
        );
    }

    #[test]
    fn the_window_above_retry_after_stops_at_the_cap() {
        let p = RetryPolicy {
            jitter: Jitter::Full,
            max_retry_after_ms: Some(2600.0),
            ..policy()
        };
        let w: Vec<u64> = server_waits(&p, 2500.0, 1)
            .into_iter()
            .map(|w| w[0])
            .collect();
        assert!(w.iter().all(|&d| (2500..=2600).contains(&d)), "{w:?}");
        assert!(
            w.iter().filter(|&&d| d == 2600).count() > 1000,
            "most land on the cap"
        );
        // asked exactly the cap: the cap
        let w = server_waits(&p, 2600.0, 1);
        assert!(w.iter().all(|w| w == &[2600]));
    }

    #[test]
    fn retry_after_above_the_cap_stops_at_once() {
        let o = AttemptOutcome {
            server_delay_ms: Some(30_001.0),
            ..status(503)
        };
        assert_eq!(
            run(&policy(), &[o]),
            [Decision::Stop(Stop::RetryAfterTooLong(RetryReason::Status))]
        );
        let p = RetryPolicy {
            max_retry_after_ms: Some(60_000.0),
            ..policy()
        };
        assert!(matches!(
            run(&p, &[o])[0],
            Decision::Retry {
                delay_ms: 30_001,
                ..
            }
        ));
    }

    #[test]
    fn retry_after_can_be_ignored() {
        let p = RetryPolicy {
            respect_retry_after: false,
            ..policy()
        };
        let o = AttemptOutcome {
            server_delay_ms: Some(90_000.0),
            ..status(503)
        };
        assert_eq!(run(&p, &[o]), [retry(500)]);
    }

    #[test]
    fn deadline_stops_a_wait_that_would_not_fit() {
        let p = RetryPolicy {
            deadline_ms: Some(1200.0),
            ..policy()
        };
        // wait 500 (ends at 500 < 1200), then wait 1000 would end at 1500 >= 1200
        let d = run(&p, &[status(503), status(503)]);
        assert_eq!(
            d,
            [
                retry(500),
                Decision::Stop(Stop::DeadlineExhausted(RetryReason::Status))
            ]
        );
    }

    #[test]
    fn attempt_time_limit_is_the_smaller_of_timeout_and_deadline_left() {
        let p = RetryPolicy {
            timeout_ms: Some(1000.0),
            deadline_ms: Some(1500.0),
            ..policy()
        };
        let s = RetryState::new(&p, 100.0);
        assert_eq!(s.attempt_time_limit_ms(&p, 100.0), Some(1000.0));
        assert_eq!(s.attempt_time_limit_ms(&p, 1000.0), Some(600.0));
        assert_eq!(s.attempt_time_limit_ms(&p, 5000.0), Some(0.0));
        assert!(s.deadline_passed(1600.0));
        assert_eq!(
            RetryState::new(&policy(), 0.0).attempt_time_limit_ms(&policy(), 0.0),
            None
        );
    }

    #[test]
    fn a_body_that_cannot_be_replayed_is_sent_once() {
        let o = AttemptOutcome {
            replayable: false,
            ..status(503)
        };
        assert_eq!(
            run(&policy(), &[o]),
            [Decision::Stop(Stop::BodyNotReplayable(RetryReason::Status))]
        );
        let ok = AttemptOutcome {
            replayable: false,
            ..status(200)
        };
        assert_eq!(run(&policy(), &[ok]), [Decision::Stop(Stop::Final)]);
    }

    #[test]
    fn an_empty_budget_stops_retries() {
        let o = AttemptOutcome {
            budget_allows_retry: false,
            ..status(503)
        };
        assert_eq!(
            run(&policy(), &[o]),
            [Decision::Stop(Stop::BudgetExhausted(RetryReason::Status))]
        );
        let ok = AttemptOutcome {
            budget_allows_retry: false,
            ..status(200)
        };
        assert_eq!(run(&policy(), &[ok]), [Decision::Stop(Stop::Final)]);
    }

    #[test]
    fn a_redirected_non_idempotent_request_is_never_sent_again() {
        let post = AttemptOutcome {
            idempotent: false,
            has_key: true,
            redirected: true,
            ..status(503)
        };
        assert_eq!(run(&policy(), &[post]), [Decision::Stop(Stop::Final)]);
        let get = AttemptOutcome {
            redirected: true,
            ..status(503)
        };
        assert_eq!(run(&policy(), &[get]), [retry(500)]);
    }

    #[test]
    fn the_deadline_is_checked_again_after_the_hooks() {
        let p = RetryPolicy {
            deadline_ms: Some(300.0),
            ..policy()
        };
        let s = RetryState::new(&p, 0.0);
        assert!(s.wait_fits(0.0, 1.0));
        assert!(!s.wait_fits(350.0, 1.0));
        assert!(!s.wait_fits(299.0, 1.0));
        assert!(RetryState::new(&policy(), 0.0).wait_fits(1e12, 1e9));
    }

    #[test]
    fn one_attempt_means_no_retry() {
        let p = RetryPolicy {
            max_attempts: 1,
            ..policy()
        };
        assert_eq!(
            run(&p, &[status(503)]),
            [Decision::Stop(Stop::AttemptsExhausted(RetryReason::Status))]
        );
    }

    #[test]
    fn stop_reasons_are_the_typescript_union() {
        let dts = include_str!("../../js/index.d.ts");
        let start = dts
            .find("export type StopReason =")
            .expect("StopReason in index.d.ts");
        let union = &dts[start..dts[start..].find(';').map_or(dts.len(), |e| start + e)];
        let names: Vec<&str> = union.split('\'').skip(1).step_by(2).collect();
        let ours: Vec<&str> = StopReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, ours);
    }
}
