//! A circuit breaker per origin: closed → open → half-open → closed (when the service
//! is down completely, retrying is the wrong strategy: stop sending for a while).
//!
//! - **closed**: every attempt goes through. `failure_threshold` consecutive transient
//!   failures open it; a success resets the count.
//! - **open**: nothing is sent; calls are rejected at once with the time left until
//!   `open_ms` has passed since it opened.
//! - **half-open** (after `open_ms`): up to `half_open_max_calls` probes go through at a time;
//!   others are rejected. A probe's success closes the breaker, its failure opens it again
//!   for another `open_ms`. Results of calls admitted before the breaker opened do not move
//!   it out of open or half-open; only probes do.

use super::options::{check_guard_settings, OptionError, BREAKER_RANGES};
use super::origins::OriginMap;

/// The state of one origin's breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// `'closed'`: requests flow.
    Closed,
    /// `'open'`: requests are rejected without being sent.
    Open,
    /// `'half-open'`: a limited number of probes go through.
    HalfOpen,
}

impl BreakerState {
    /// The JavaScript name: `'closed'`, `'open'` or `'half-open'`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
}

/// A change of state, reported to `onStateChange`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: BreakerState,
    /// The state after.
    pub to: BreakerState,
}

/// Breaker settings.
///
/// # Default
/// `failure_threshold` 5, `open_ms` 10000, `half_open_max_calls` 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerConfig {
    /// Consecutive transient failures that open the breaker, `1..=1000`. Default 5.
    pub failure_threshold: u32,
    /// How long it stays open before probing, in ms. Default 10000.
    pub open_ms: f64,
    /// Probes allowed at a time while half-open, `1..=1000`. Default 1.
    pub half_open_max_calls: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 5,
            open_ms: 10_000.0,
            half_open_max_calls: 1,
        }
    }
}

impl BreakerConfig {
    /// Check the ranges documented on each field.
    pub fn validate(self) -> Result<Self, OptionError> {
        let values = [
            f64::from(self.failure_threshold),
            self.open_ms,
            f64::from(self.half_open_max_calls),
        ];
        check_guard_settings(&BREAKER_RANGES, &values).map(|()| self)
    }
}

/// Whether an attempt may be sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// Send it. `probe`: it is a probe of the half-open round `Some(n)`, whose result decides
    /// the state (while that round lasts).
    Allowed {
        /// The half-open round the attempt probes, or `None` for an attempt of a closed circuit.
        probe: Option<u32>,
    },
    /// Do not send it; the breaker may let calls through after `retry_after_ms`.
    Rejected {
        /// Time until the breaker half-opens (while open), or `open_ms` while half-open
        /// probes are in flight.
        retry_after_ms: f64,
    },
}

#[derive(Clone, Copy, Debug)]
struct OriginBreaker {
    state: BreakerState,
    consecutive_failures: u32,
    opened_at_ms: f64,
    /// The probes of the current half-open round not settled yet.
    probes_in_flight: u32,
    /// How many half-open rounds began: a probe counts only in the round that admitted it (a
    /// probe still in flight when its round ended has no say, and holds no slot).
    round: u32,
}

impl Default for OriginBreaker {
    fn default() -> Self {
        OriginBreaker {
            state: BreakerState::Closed,
            consecutive_failures: 0,
            opened_at_ms: 0.0,
            probes_in_flight: 0,
            round: 0,
        }
    }
}

/// The breakers of every origin seen.
#[derive(Clone, Debug, Default)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    origins: OriginMap<OriginBreaker>,
}

impl CircuitBreaker {
    /// A breaker with `config` (already validated).
    pub fn new(config: BreakerConfig) -> Self {
        CircuitBreaker {
            config,
            origins: OriginMap::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> BreakerConfig {
        self.config
    }

    fn origin(&mut self, origin: &str) -> &mut OriginBreaker {
        // At rest: closed, with no failure counted.
        self.origins
            .get_or_insert_with(origin, OriginBreaker::default, |b| {
                b.state == BreakerState::Closed && b.consecutive_failures == 0
            })
    }

    /// The state of `origin` at `now_ms` (open becomes half-open once `open_ms` passed).
    pub fn state(&self, origin: &str, now_ms: f64) -> BreakerState {
        match self.origins.get(origin) {
            None => BreakerState::Closed,
            Some(b)
                if b.state == BreakerState::Open
                    && now_ms >= b.opened_at_ms + self.config.open_ms =>
            {
                BreakerState::HalfOpen
            }
            Some(b) => b.state,
        }
    }

    /// May an attempt to `origin` be sent at `now_ms`? An allowed probe must later be
    /// settled with [`CircuitBreaker::record`] or [`CircuitBreaker::release`].
    pub fn admit(&mut self, origin: &str, now_ms: f64) -> (Admission, Option<Transition>) {
        let config = self.config;
        let b = self.origin(origin);
        let mut transition = None;
        if b.state == BreakerState::Open {
            // The clock went back since the circuit opened (the wall clock was set back): the
            // open period counts from now, not from a time that is again hours ahead.
            if now_ms < b.opened_at_ms {
                b.opened_at_ms = now_ms;
            }
            let reopen_at = b.opened_at_ms + config.open_ms;
            if now_ms < reopen_at {
                return (
                    Admission::Rejected {
                        retry_after_ms: reopen_at - now_ms,
                    },
                    None,
                );
            }
            b.state = BreakerState::HalfOpen;
            b.probes_in_flight = 0;
            b.round = b.round.wrapping_add(1);
            transition = Some(Transition {
                from: BreakerState::Open,
                to: BreakerState::HalfOpen,
            });
        }
        match b.state {
            BreakerState::Closed => (Admission::Allowed { probe: None }, transition),
            _ if b.probes_in_flight < config.half_open_max_calls => {
                b.probes_in_flight += 1;
                (
                    Admission::Allowed {
                        probe: Some(b.round),
                    },
                    transition,
                )
            }
            _ => (
                Admission::Rejected {
                    retry_after_ms: config.open_ms,
                },
                transition,
            ),
        }
    }

    /// The result of an admitted attempt: `transient_failure` or not (a success, or a
    /// permanent answer such as 404, which shows the service is up).
    pub fn record(
        &mut self,
        origin: &str,
        probe: Option<u32>,
        transient_failure: bool,
        now_ms: f64,
    ) -> Option<Transition> {
        let threshold = self.config.failure_threshold;
        let b = self.origin(origin);
        let probe = probe == Some(b.round) && b.state == BreakerState::HalfOpen;
        if probe {
            b.probes_in_flight = b.probes_in_flight.saturating_sub(1);
        }
        let from = b.state;
        match (b.state, probe, transient_failure) {
            (BreakerState::Closed, _, false) => b.consecutive_failures = 0,
            (BreakerState::Closed, _, true) => {
                b.consecutive_failures = b.consecutive_failures.saturating_add(1);
                if b.consecutive_failures >= threshold {
                    b.state = BreakerState::Open;
                    b.opened_at_ms = now_ms;
                }
            }
            (BreakerState::HalfOpen, true, false) => {
                b.state = BreakerState::Closed;
                b.consecutive_failures = 0;
                b.probes_in_flight = 0;
            }
            (BreakerState::HalfOpen, true, true) => {
                b.state = BreakerState::Open;
                b.opened_at_ms = now_ms;
                b.probes_in_flight = 0;
            }
            // A straggler admitted before the breaker opened, or a probe of a round that
            // ended: no say.
            _ => {}
        }
        (b.state != from).then_some(Transition { from, to: b.state })
    }

    /// An admitted attempt ended with no result (aborted): free its probe slot.
    pub fn release(&mut self, origin: &str, probe: Option<u32>) {
        let b = self.origin(origin);
        if probe == Some(b.round) && b.state == BreakerState::HalfOpen {
            b.probes_in_flight = b.probes_in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BreakerState::*;

    const O: &str = "http://127.0.0.1:8080";

    fn breaker() -> CircuitBreaker {
        CircuitBreaker::new(BreakerConfig::default())
    }

    fn fail(b: &mut CircuitBreaker, n: u32, now: f64) -> Vec<Transition> {
        (0..n)
            .filter_map(|_| b.record(O, None, true, now))
            .collect()
    }

    #[test]
    fn opens_after_threshold_consecutive_failures() {
        let mut b = breaker();
        assert!(fail(&mut b, 4, 0.0).is_empty());
        assert_eq!(b.state(O, 0.0), Closed);
        assert_eq!(
            fail(&mut b, 1, 100.0),
            [Transition {
                from: Closed,
                to: Open
            }]
        );
        assert_eq!(
            b.admit(O, 150.0).0,
            Admission::Rejected {
                retry_after_ms: 9_950.0
            }
        );
    }

    #[test]
    fn a_clock_set_back_keeps_the_circuit_open_for_open_ms_from_then_only() {
        let mut b = breaker();
        fail(&mut b, 5, 1_000_000.0);
        // Set back ten minutes: open for `open_ms` (10 s) from now, not for ten minutes more.
        assert_eq!(
            b.admit(O, 400_000.0).0,
            Admission::Rejected {
                retry_after_ms: 10_000.0
            }
        );
        assert!(matches!(
            b.admit(O, 410_000.0).0,
            Admission::Allowed { probe: Some(_) }
        ));
        assert_eq!(b.state(O, 410_000.0), HalfOpen);
    }

    #[test]
    fn a_success_resets_the_count() {
        let mut b = breaker();
        fail(&mut b, 4, 0.0);
        assert_eq!(b.record(O, None, false, 0.0), None);
        fail(&mut b, 4, 0.0);
        assert_eq!(b.state(O, 0.0), Closed);
    }

    #[test]
    fn half_opens_after_open_ms_and_allows_limited_probes() {
        let mut b = breaker();
        fail(&mut b, 5, 1_000.0);
        assert!(matches!(b.admit(O, 10_999.0).0, Admission::Rejected { .. }));
        assert_eq!(b.state(O, 11_000.0), HalfOpen);
        let (first, t) = b.admit(O, 11_000.0);
        assert_eq!(first, Admission::Allowed { probe: Some(1) });
        assert_eq!(
            t,
            Some(Transition {
                from: Open,
                to: HalfOpen
            })
        );
        assert_eq!(
            b.admit(O, 11_001.0).0,
            Admission::Rejected {
                retry_after_ms: 10_000.0
            }
        );
    }

    #[test]
    fn a_probe_success_closes_a_probe_failure_reopens() {
        let mut b = breaker();
        fail(&mut b, 5, 0.0);
        b.admit(O, 10_000.0);
        assert_eq!(
            b.record(O, Some(1), false, 10_010.0),
            Some(Transition {
                from: HalfOpen,
                to: Closed
            })
        );
        assert_eq!(b.admit(O, 10_020.0).0, Admission::Allowed { probe: None });

        fail(&mut b, 5, 20_000.0);
        b.admit(O, 30_000.0);
        assert_eq!(
            b.record(O, Some(2), true, 30_005.0),
            Some(Transition {
                from: HalfOpen,
                to: Open
            })
        );
        assert_eq!(
            b.admit(O, 30_006.0).0,
            Admission::Rejected {
                retry_after_ms: 9_999.0
            }
        );
    }

    #[test]
    fn stragglers_do_not_close_an_open_breaker() {
        let mut b = breaker();
        fail(&mut b, 5, 0.0);
        assert_eq!(b.record(O, None, false, 1.0), None);
        assert_eq!(b.state(O, 1.0), Open);
    }

    /// A breaker of `halfOpenMaxCalls: 2`, opened at 0 and half-open at 10 s, with both
    /// probes of its first round in flight.
    fn two_probes_in_flight() -> CircuitBreaker {
        let mut b = CircuitBreaker::new(BreakerConfig {
            half_open_max_calls: 2,
            ..BreakerConfig::default()
        });
        fail(&mut b, 5, 0.0);
        for _ in 0..2 {
            assert_eq!(
                b.admit(O, 10_000.0).0,
                Admission::Allowed { probe: Some(1) }
            );
        }
        b
    }

    #[test]
    fn released_probes_free_their_slot() {
        let mut b = two_probes_in_flight();
        assert!(matches!(b.admit(O, 10_000.0).0, Admission::Rejected { .. }));
        b.release(O, Some(1));
        assert_eq!(
            b.admit(O, 10_001.0).0,
            Admission::Allowed { probe: Some(1) }
        );
    }

    #[test]
    fn a_probe_of_an_ended_round_has_no_say_and_holds_no_slot() {
        let mut b = two_probes_in_flight();
        // One probe fails: open again; the other is still in flight.
        b.record(O, Some(1), true, 10_005.0);
        // The next round admits two probes: the old one holds none of their slots.
        assert_eq!(
            b.admit(O, 20_005.0).0,
            Admission::Allowed { probe: Some(2) }
        );
        assert_eq!(
            b.admit(O, 20_005.0).0,
            Admission::Allowed { probe: Some(2) }
        );
        assert!(matches!(b.admit(O, 20_005.0).0, Admission::Rejected { .. }));
        // The old probe succeeds late: it does not close the circuit, nor free a slot.
        assert_eq!(b.record(O, Some(1), false, 20_010.0), None);
        assert_eq!(b.state(O, 20_010.0), HalfOpen);
        b.release(O, Some(1));
        assert!(matches!(b.admit(O, 20_011.0).0, Admission::Rejected { .. }));
        // A probe of this round decides.
        assert_eq!(
            b.record(O, Some(2), false, 20_020.0),
            Some(Transition {
                from: HalfOpen,
                to: Closed
            })
        );
    }

    #[test]
    fn an_open_circuit_outlives_calls_to_many_other_origins() {
        let mut b = breaker();
        fail(&mut b, 5, 0.0);
        for i in 0..2 * crate::core::origins::MAX_ORIGINS {
            b.admit(&format!("http://host-{i}:80"), 1.0);
        }
        assert_eq!(b.state(O, 2.0), Open);
        assert!(matches!(b.admit(O, 2.0).0, Admission::Rejected { .. }));
    }

    #[test]
    fn origins_are_independent() {
        let mut b = breaker();
        fail(&mut b, 5, 0.0);
        assert_eq!(
            b.admit("http://other:1", 1.0).0,
            Admission::Allowed { probe: None }
        );
    }

    #[test]
    fn validation() {
        let d = BreakerConfig::default();
        assert!(BreakerConfig {
            failure_threshold: 0,
            ..d
        }
        .validate()
        .is_err());
        assert!(BreakerConfig { open_ms: -1.0, ..d }.validate().is_err());
        assert!(BreakerConfig {
            open_ms: f64::INFINITY,
            ..d
        }
        .validate()
        .is_err());
        assert!(BreakerConfig {
            half_open_max_calls: 0,
            ..d
        }
        .validate()
        .is_err());
        assert!(d.validate().is_ok());
    }
}
