//! What one call does with the shared guards of its origin — the retry budget, the adaptive
//! throttle and the circuit breaker, each shared by every call that holds it — and what it
//! holds of them meanwhile (its own use of the budget, a breaker probe slot, a throttle
//! ticket). The one implementation of [`CallGuards`]: the wasm shell lends it its shared
//! guards for each engine step, and the simulations lend it theirs.

use super::breaker::{Admission, BreakerState, CircuitBreaker, Transition};
use super::budget::{Attempt, Budget, OwnUse, Verdict};
use super::classify::Outcome;
use super::engine::{is_pushback, throttle_turn, CallGuards, Turn};
use super::throttle::{AdaptiveThrottle, Answer};

/// A send-rate pacer: the adaptive throttle, or another the simulations compare it with.
pub trait Pacer {
    /// Queue a caller for a turn; its ticket.
    fn enqueue(&mut self, origin: &str, now_ms: f64) -> u64;
    /// `Ok` when the ticket's turn has come, else the ms to wait.
    fn poll(&mut self, origin: &str, ticket: u64, now_ms: f64) -> Result<(), f64>;
    /// The caller gives its turn up.
    fn abandon(&mut self, origin: &str, ticket: u64, now_ms: f64);
    /// Was a turn of `origin` given up by a caller waiting for it after `since_ms`? Default:
    /// no (a caller then waits as it was told).
    fn given_back_since(&self, _origin: &str, _since_ms: f64) -> bool {
        false
    }
    /// A request was sent.
    fn on_send(&mut self, origin: &str, now_ms: f64);
    /// A request sent at `sent_ms` was answered: served, or pushed back (429, 503).
    fn on_answer(&mut self, origin: &str, sent_ms: f64, answer: Answer, now_ms: f64);
    /// The longest a caller waits in the queue (`maxWaitMs`).
    fn max_wait_ms(&self) -> f64;
    /// Does it pace first attempts too (or only retries)? Default true.
    fn paces_first_attempts(&self) -> bool {
        true
    }
    /// A call to `origin` started retrying (entered its loop). Default: nothing.
    fn joined(&mut self, _origin: &str, _now_ms: f64) {}
    /// A call that [`Pacer::joined`] ended. Default: nothing.
    fn left(&mut self, _origin: &str, _now_ms: f64) {}
}

impl Pacer for AdaptiveThrottle {
    fn enqueue(&mut self, origin: &str, now_ms: f64) -> u64 {
        AdaptiveThrottle::enqueue(self, origin, now_ms)
    }
    fn poll(&mut self, origin: &str, ticket: u64, now_ms: f64) -> Result<(), f64> {
        AdaptiveThrottle::poll(self, origin, ticket, now_ms)
    }
    fn abandon(&mut self, origin: &str, ticket: u64, now_ms: f64) {
        AdaptiveThrottle::abandon(self, origin, ticket, now_ms)
    }
    fn given_back_since(&self, origin: &str, since_ms: f64) -> bool {
        AdaptiveThrottle::given_back_since(self, origin, since_ms)
    }
    fn on_send(&mut self, origin: &str, now_ms: f64) {
        AdaptiveThrottle::on_send(self, origin, now_ms)
    }
    fn on_answer(&mut self, origin: &str, sent_ms: f64, answer: Answer, now_ms: f64) {
        AdaptiveThrottle::on_answer(self, origin, sent_ms, answer, now_ms)
    }
    fn max_wait_ms(&self) -> f64 {
        self.config().max_wait_ms
    }
}

/// What one call holds of the shared guards between steps.
#[derive(Clone, Debug, Default)]
pub struct Held {
    /// What it took from the budget (which does not count against it).
    pub own: OwnUse,
    /// The breaker slot its attempt holds (`Some(probe)`: the half-open round it probes, if
    /// it is a probe), until the outcome is recorded.
    pub slot: Option<Option<u32>>,
    /// The throttle ticket it waits with, and since when.
    pub ticket: Option<(u64, f64)>,
    /// It is counted among the calls to its origin that are retrying ([`Pacer::joined`]),
    /// until it ends ([`CallGuards::leave`]).
    pub joined: bool,
    /// A retry it sent is counted by the budget and not yet answered: if the call ends first
    /// (an abort, fetch's refusal), it is taken back ([`Budget::retry_unanswered`]).
    pub retry_in_flight: bool,
    /// The breaker's transitions its steps caused, for the listener (`onStateChange`), told
    /// once the step is over ([`Held::take_transitions`]).
    transitions: Vec<Transition>,
}

impl Held {
    /// The breaker transitions since the last call.
    pub fn take_transitions(&mut self) -> Vec<Transition> {
        std::mem::take(&mut self.transitions)
    }
}

/// The shared guards of one origin, lent to one call for one step.
pub struct GuardsLent<'a> {
    /// The origin (`scheme://host:port`).
    pub origin: &'a str,
    /// The budget, if any.
    pub budget: Option<&'a mut dyn Budget>,
    /// The pacer, if any.
    pub pacer: Option<&'a mut dyn Pacer>,
    /// The circuit breaker, if any.
    pub breaker: Option<&'a mut CircuitBreaker>,
    /// What the call holds.
    pub held: &'a mut Held,
}

impl CallGuards for GuardsLent<'_> {
    fn admit(&mut self, now_ms: f64) -> Result<(), f64> {
        let Some(b) = self.breaker.as_deref_mut() else {
            return Ok(());
        };
        let (admission, transition) = b.admit(self.origin, now_ms);
        self.held.transitions.extend(transition);
        match admission {
            Admission::Allowed { probe } => {
                self.held.slot = Some(probe);
                Ok(())
            }
            Admission::Rejected { retry_after_ms } => Err(retry_after_ms.max(0.0)),
        }
    }

    fn readmit(&mut self, now_ms: f64) -> Result<(), f64> {
        self.give_back_slot();
        self.admit(now_ms)
    }

    fn turn(&mut self, attempt: u32, deadline_left_ms: Option<f64>, now_ms: f64) -> Turn {
        let Some(t) = self.pacer.as_deref_mut() else {
            return Turn::Now;
        };
        if attempt <= 1 && !t.paces_first_attempts() {
            return Turn::Now;
        }
        let origin = self.origin;
        let (ticket, queued_at) = *self
            .held
            .ticket
            .get_or_insert_with(|| (t.enqueue(origin, now_ms), now_ms));
        let wait = match t.poll(origin, ticket, now_ms) {
            Ok(()) => {
                self.held.ticket = None;
                return Turn::Now;
            }
            Err(wait) => wait,
        };
        let turn = throttle_turn(wait, now_ms - queued_at, t.max_wait_ms(), deadline_left_ms);
        if let Turn::Stop(_) = turn {
            t.abandon(origin, ticket, now_ms);
            self.held.ticket = None;
        }
        turn
    }

    fn turns_given_back_since(&self, since_ms: f64) -> bool {
        self.pacer
            .as_deref()
            .is_some_and(|t| t.given_back_since(self.origin, since_ms))
    }

    fn sent(&mut self, attempt: u32, now_ms: f64) {
        if let Some(t) = self.pacer.as_deref_mut() {
            t.on_send(self.origin, now_ms);
        }
        if let (Some(b), true) = (self.budget.as_deref_mut(), attempt > 1) {
            b.retry_sent(self.origin, &mut self.held.own, now_ms);
            self.held.retry_in_flight = true;
        }
    }

    fn settled(
        &mut self,
        outcome: Outcome,
        transient: bool,
        attempt: u32,
        sent_at_ms: f64,
        wait_asked_ms: f64,
        now_ms: f64,
    ) {
        let status = match outcome {
            Outcome::Status(s) => Some(s),
            _ => None,
        };
        let success = status.is_some_and(|s| s < 400);
        if let (Some(b), Some(probe)) = (self.breaker.as_deref_mut(), self.held.slot.take()) {
            let transition = b.record(self.origin, probe, transient, now_ms);
            self.held.transitions.extend(transition);
        }
        if let Some(b) = self.budget.as_deref_mut() {
            let ended = Attempt {
                number: attempt,
                transient,
                success,
            };
            b.attempt_ended(self.origin, ended, &mut self.held.own, now_ms);
            self.held.retry_in_flight = false;
        }
        if let Some(t) = self.pacer.as_deref_mut() {
            let answer = if success {
                Some(Answer::Served)
            } else if status.is_some_and(is_pushback) {
                Some(Answer::refused(wait_asked_ms))
            } else {
                None
            };
            if let Some(answer) = answer {
                t.on_answer(self.origin, sent_at_ms, answer, now_ms);
            }
        }
    }

    fn budget(&self, now_ms: f64) -> Verdict {
        self.budget.as_deref().map_or(Verdict::Allow, |b| {
            b.verdict(self.origin, &self.held.own, now_ms)
        })
    }

    fn open_at(&self, at_ms: f64) -> bool {
        self.breaker
            .as_deref()
            .is_some_and(|b| b.state(self.origin, at_ms) == BreakerState::Open)
    }

    fn join(&mut self, now_ms: f64) {
        if let (Some(t), false) = (self.pacer.as_deref_mut(), self.held.joined) {
            t.joined(self.origin, now_ms);
            self.held.joined = true;
        }
    }

    fn leave(&mut self, now_ms: f64) {
        if let (Some(t), true) = (self.pacer.as_deref_mut(), self.held.joined) {
            t.left(self.origin, now_ms);
            self.held.joined = false;
        }
    }

    fn release(&mut self, now_ms: f64) {
        self.give_back_slot();
        if let (Some(b), true) = (self.budget.as_deref_mut(), self.held.retry_in_flight) {
            b.retry_unanswered(self.origin, &mut self.held.own, now_ms);
            self.held.retry_in_flight = false;
        }
        if let (Some(t), Some((ticket, _))) = (self.pacer.as_deref_mut(), self.held.ticket.take()) {
            t.abandon(self.origin, ticket, now_ms);
        }
    }
}

impl GuardsLent<'_> {
    /// Give back the breaker slot the call was admitted with (a half-open probe's is counted
    /// free again), if it holds one.
    fn give_back_slot(&mut self) {
        if let (Some(b), Some(probe)) = (self.breaker.as_deref_mut(), self.held.slot.take()) {
            b.release(self.origin, probe);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::breaker::BreakerConfig;
    use crate::core::budget::{RetryRatio, RetryRatioConfig};
    use crate::core::throttle::ThrottleConfig;

    const O: &str = "https://api.example:443";

    #[test]
    fn a_call_is_counted_retrying_once_from_its_join_and_only_then_leaves() {
        use crate::core::throttle::DefaultThrottle;
        fn lend<'a>(throttle: &'a mut DefaultThrottle, held: &'a mut Held) -> GuardsLent<'a> {
            GuardsLent {
                origin: O,
                budget: None,
                pacer: Some(throttle),
                breaker: None,
                held,
            }
        }
        let mut throttle = DefaultThrottle::default();
        let (mut joined, mut never) = (Held::default(), Held::default());
        lend(&mut throttle, &mut joined).join(0.0);
        lend(&mut throttle, &mut joined).join(1.0);
        // A call that never failed ends: it was not counted, so it takes nothing away.
        lend(&mut throttle, &mut never).leave(2.0);
        assert!(joined.joined && !never.joined);
        assert_eq!(throttle.retrying(O), 1, "joined twice, counted once");
        lend(&mut throttle, &mut joined).leave(3.0);
        lend(&mut throttle, &mut joined).leave(4.0);
        assert_eq!(throttle.retrying(O), 0);
        assert!(!joined.joined);
    }

    #[test]
    fn the_pacer_is_told_what_each_answer_says_of_the_load() {
        /// Records what it is told.
        #[derive(Default)]
        struct Told(Vec<Answer>);
        impl Pacer for Told {
            fn enqueue(&mut self, _: &str, _: f64) -> u64 {
                0
            }
            fn poll(&mut self, _: &str, _: u64, _: f64) -> Result<(), f64> {
                Ok(())
            }
            fn abandon(&mut self, _: &str, _: u64, _: f64) {}
            fn on_send(&mut self, _: &str, _: f64) {}
            fn on_answer(&mut self, _: &str, _: f64, answer: Answer, _: f64) {
                self.0.push(answer);
            }
            fn max_wait_ms(&self) -> f64 {
                0.0
            }
        }
        let cases = [
            (
                Outcome::Status(503),
                1000.0,
                Some(Answer::RefusedWithWait(1000.0)),
            ),
            (Outcome::Status(429), 0.0, Some(Answer::Refused)),
            (Outcome::Status(200), 1000.0, Some(Answer::Served)),
            // a failure that is no pushback, and no answer at all, say nothing of the load
            (Outcome::Status(500), 1000.0, None),
            (Outcome::NetworkError, 0.0, None),
        ];
        for (outcome, wait_ms, want) in cases {
            let mut told = Told::default();
            let mut held = Held::default();
            let mut lent = GuardsLent {
                origin: O,
                budget: None,
                pacer: Some(&mut told),
                breaker: None,
                held: &mut held,
            };
            lent.settled(outcome, true, 1, 0.0, wait_ms, 1.0);
            assert_eq!(told.0, want.into_iter().collect::<Vec<_>>(), "{outcome:?}");
        }
    }

    #[test]
    fn a_probe_slot_and_a_ticket_are_given_back_on_release() {
        let mut breaker = CircuitBreaker::new(BreakerConfig {
            failure_threshold: 1,
            ..BreakerConfig::default()
        });
        let mut held = Held::default();
        let mut lent = GuardsLent {
            origin: O,
            budget: None,
            pacer: None,
            breaker: Some(&mut breaker),
            held: &mut held,
        };
        assert_eq!(lent.admit(0.0), Ok(()));
        lent.settled(Outcome::Status(503), true, 1, 0.0, 0.0, 1.0);
        assert!(lent.open_at(2.0), "one failure opens it");
        assert_eq!(
            held.take_transitions().len(),
            1,
            "closed -> open, for the listener"
        );
        // Half-open after openMs: one probe, given back if the call ends without an outcome.
        let later = BreakerConfig::default().open_ms + 10.0;
        let mut lent = GuardsLent {
            origin: O,
            budget: None,
            pacer: None,
            breaker: Some(&mut breaker),
            held: &mut held,
        };
        assert_eq!(lent.admit(later), Ok(()));
        lent.release(later);
        assert_eq!(held.slot, None);
        let mut lent = GuardsLent {
            origin: O,
            budget: None,
            pacer: None,
            breaker: Some(&mut breaker),
            held: &mut held,
        };
        assert_eq!(lent.admit(later), Ok(()), "the probe slot came back");

        let mut throttle = AdaptiveThrottle::new(ThrottleConfig::default());
        let mut first = Held::default();
        let mut tickets = Vec::new();
        // Many callers at once: some must wait; the waiting one's ticket is abandoned.
        for _ in 0..400 {
            let mut held = Held::default();
            let mut lent = GuardsLent {
                origin: O,
                budget: None,
                pacer: Some(&mut throttle),
                breaker: None,
                held: &mut held,
            };
            if let Turn::Wait(_) = lent.turn(2, None, 0.0) {
                tickets.push(held.ticket);
                first = held;
                break;
            }
            lent.sent(1, 0.0);
        }
        assert!(first.ticket.is_some(), "a caller had to wait");
        let mut lent = GuardsLent {
            origin: O,
            budget: None,
            pacer: Some(&mut throttle),
            breaker: None,
            held: &mut first,
        };
        lent.release(0.0);
        assert_eq!(first.ticket, None);
    }

    /// What a call holds, lent with `budget` alone.
    fn with_budget<'a>(budget: &'a mut RetryRatio, held: &'a mut Held) -> GuardsLent<'a> {
        GuardsLent {
            origin: O,
            budget: Some(budget),
            pacer: None,
            breaker: None,
            held,
        }
    }

    #[test]
    fn the_budget_counts_the_calls_own_retries_apart() {
        let mut ratio = RetryRatio::new(RetryRatioConfig::default());
        let mut held = Held::default();
        let mut lent = with_budget(&mut ratio, &mut held);
        for attempt in 2..=30 {
            lent.sent(attempt, 0.0);
        }
        assert_eq!(lent.budget(0.0), Verdict::Allow, "its own retries");
        assert_eq!(held.own.retries_sent, 29.0);
        let mut other = Held::default();
        assert_eq!(
            with_budget(&mut ratio, &mut other).budget(0.0),
            Verdict::Defer,
            "another call's view, while they are in flight"
        );
    }

    #[test]
    fn a_retry_never_answered_is_taken_back_when_the_call_ends() {
        let mut ratio = RetryRatio::new(RetryRatioConfig::default());
        // 20 calls each send a retry, then end without its answer (aborted).
        for _ in 0..20 {
            let mut held = Held::default();
            let mut lent = with_budget(&mut ratio, &mut held);
            lent.sent(2, 0.0);
            assert!(lent.held.retry_in_flight);
            lent.release(0.0);
            assert!(!held.retry_in_flight);
        }
        let mut held = Held::default();
        assert_eq!(
            with_budget(&mut ratio, &mut held).budget(0.0),
            Verdict::Allow,
            "nothing in flight, nothing failed"
        );
    }
}
