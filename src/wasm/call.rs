//! One `retryFetch` call's decisions, for the JavaScript driver in `js/client.js`.
//!
//! The driver performs (it sends, waits, calls hooks, builds errors); a [`Call`] decides,
//! between those steps, everything the policy and the shared guards say: may the attempt be
//! sent (circuit breaker), when (adaptive throttle), within what time (`timeoutMs`,
//! `deadlineMs`), and after its outcome whether to retry and how long to wait (the core's
//! [`RetryState::decide`], the retry budget, `Retry-After`). Every argument is a number or a
//! string, so a call costs a few cheap crossings and no JavaScript objects.
//!
//! Outcome codes: an HTTP status `0..=999` as is, [`NETWORK_ERROR`] or [`TIMEOUT`].

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::guards::{origin_of, BreakerShared};
use super::options::Policy;
use crate::core::backoff::Rng;
use crate::core::breaker::{Admission, BreakerState};
use crate::core::budget::RetryBudget;
use crate::core::classify::{is_transient, Outcome};
use crate::core::decide::{AttemptOutcome, Decision, RetryState};
use crate::core::retry_after::server_delay_ms;
use crate::core::throttle::AdaptiveThrottle;

/// Outcome code of an attempt that failed without a response (a network error).
pub const NETWORK_ERROR: u32 = 1000;
/// Outcome code of an attempt that hit its time limit.
pub const TIMEOUT: u32 = 1001;

/// Jitter from `Math.random` (jitter needs spread, not secrecy; keys use the CSPRNG).
pub struct MathRandom;

impl Rng for MathRandom {
    fn next_f64(&mut self) -> f64 {
        js_sys::Math::random()
    }
}

fn outcome_of(code: u32) -> Outcome {
    match code {
        NETWORK_ERROR => Outcome::NetworkError,
        TIMEOUT => Outcome::Timeout,
        s => Outcome::Status(s.min(999) as u16),
    }
}

/// The decisions of one call. Created per call, freed when the call ends: dropping it gives
/// back a half-open probe slot or a throttle turn the call still holds.
#[wasm_bindgen(skip_typescript)]
pub struct Call {
    state: RetryState,
    origin: String,
    budget: Option<Rc<RefCell<RetryBudget>>>,
    throttle: Option<Rc<RefCell<AdaptiveThrottle>>>,
    breaker: Option<Rc<BreakerShared>>,
    /// The breaker slot this attempt holds (`Some(probe)`), until its outcome is recorded.
    slot: Option<bool>,
    /// The throttle ticket this call waits with, and since when.
    ticket: Option<(u64, f64)>,
    /// When the attempt in flight was sent.
    sent_at: f64,
    /// Why the call stopped, or why the attempt is being retried.
    reason: &'static str,
}

#[wasm_bindgen]
impl Call {
    /// Start a call under `policy` at `now` (ms since the epoch). `url` is the request URL,
    /// needed only when a guard is set (guards keep their state per origin).
    #[wasm_bindgen(constructor)]
    pub fn new(policy: &Policy, url: Option<String>, now: f64) -> Call {
        Call {
            state: RetryState::new(&policy.policy, now),
            origin: url.map(|u| origin_of(&u)).unwrap_or_default(),
            budget: policy.budget.clone(),
            throttle: policy.throttle.clone(),
            breaker: policy.breaker.clone(),
            slot: None,
            ticket: None,
            sent_at: now,
            reason: "",
        }
    }

    /// The origin the guards keep this call's state under (`''` without guards).
    #[wasm_bindgen(getter)]
    pub fn origin(&self) -> String {
        self.origin.clone()
    }

    /// Why the call stopped (`RetryError.reason`), or why the last attempt is retried
    /// (`'status'`, `'network'`, `'timeout'`).
    #[wasm_bindgen(getter)]
    pub fn reason(&self) -> String {
        self.reason.to_string()
    }

    /// Ask the circuit breaker to let the next attempt through: `-1` when it may be sent,
    /// otherwise the ms until the circuit may let a probe through (nothing may be sent).
    pub fn admit(&mut self, now: f64) -> f64 {
        let Some(b) = &self.breaker else {
            return -1.0;
        };
        let (admission, transition) = b.state.borrow_mut().admit(&self.origin, now);
        b.report(&self.origin, transition);
        match admission {
            Admission::Allowed { probe } => {
                self.slot = Some(probe);
                -1.0
            }
            Admission::Rejected { retry_after_ms } => retry_after_ms.max(0.0),
        }
    }

    /// Ask the adaptive throttle for this attempt's turn: `-1` to send now, a wait in ms to
    /// ask again after, or `-2` when the call must stop (then `reason` is `'throttled'` or
    /// `'deadline'`): the turn would come after `maxWaitMs` or after the deadline.
    pub fn turn(&mut self, now: f64) -> f64 {
        let Some(t) = &self.throttle else {
            return -1.0;
        };
        let mut t = t.borrow_mut();
        let (ticket, queued_at) = *self
            .ticket
            .get_or_insert_with(|| (t.enqueue(&self.origin, now), now));
        let wait = match t.poll(&self.origin, ticket, now) {
            Ok(()) => {
                self.ticket = None;
                return -1.0;
            }
            Err(wait) => wait,
        };
        if now - queued_at + wait > t.config().max_wait_ms {
            self.reason = "throttled";
        } else if self.state.deadline_left_ms(now).is_some_and(|left| wait >= left) {
            self.reason = "deadline";
        } else {
            return wait.ceil().max(0.0);
        }
        t.abandon(&self.origin, ticket, now);
        self.ticket = None;
        -2.0
    }

    /// An attempt is sent at `now`: its number (1-based) is counted, the throttle told, and
    /// the attempt's time limit in ms returned (`timeoutMs`, or what is left of `deadlineMs`);
    /// `-1` for none.
    pub fn send(&mut self, policy: &Policy, now: f64) -> f64 {
        self.state.start_attempt();
        self.sent_at = now;
        if let Some(t) = &self.throttle {
            t.borrow_mut().on_send(&self.origin, now);
        }
        self.state
            .attempt_time_limit_ms(&policy.policy, now)
            .map_or(-1.0, |ms| ms.max(0.0))
    }

    /// The attempt sent last ended at `now` with outcome `code`; tell the shared guards.
    pub fn settle(&mut self, policy: &Policy, code: u32, now: f64) {
        let outcome = outcome_of(code);
        let transient = is_transient(&policy.policy, outcome);
        let status = match outcome {
            Outcome::Status(s) => Some(s),
            _ => None,
        };
        let success = status.is_some_and(|s| s < 400);
        if let (Some(b), Some(probe)) = (&self.breaker, self.slot.take()) {
            let t = b.state.borrow_mut().record(&self.origin, probe, transient, now);
            b.report(&self.origin, t);
        }
        if let Some(b) = &self.budget {
            let mut b = b.borrow_mut();
            if transient {
                b.record_failure(&self.origin);
            } else if success {
                b.record_success(&self.origin);
            }
        }
        if let Some(t) = &self.throttle {
            let throttled = matches!(status, Some(429) | Some(503));
            if throttled || success {
                t.borrow_mut().on_answer(&self.origin, self.sent_at, throttled, now);
            }
        }
    }

    /// After the attempt's outcome `code`: the wait in ms before the next attempt, or `-1` to
    /// stop (the response or error goes to the caller as it is; `reason` says why). The three
    /// header values are the response's `Retry-After`, `RateLimit-Reset` and `RateLimit`.
    #[allow(clippy::too_many_arguments)]
    pub fn decide(
        &mut self,
        policy: &Policy,
        code: u32,
        idempotent: bool,
        has_key: bool,
        replayable: bool,
        retry_after: Option<String>,
        ratelimit_reset: Option<String>,
        ratelimit: Option<String>,
        now: f64,
    ) -> f64 {
        let p = &policy.policy;
        let outcome = outcome_of(code);
        let server_delay = match outcome {
            Outcome::Status(s) if s >= 400 && p.respect_retry_after => server_delay_ms(
                retry_after.as_deref(),
                ratelimit_reset.as_deref(),
                ratelimit.as_deref(),
                now,
            ),
            _ => None,
        };
        let report = AttemptOutcome {
            outcome,
            idempotent,
            has_key,
            server_delay_ms: server_delay,
            replayable,
            budget_allows_retry: self
                .budget
                .as_ref()
                .map_or(true, |b| b.borrow().allows_retry(&self.origin)),
        };
        match self.state.decide(p, report, now, &mut MathRandom) {
            Decision::Stop(stop) => {
                self.reason = stop.as_str();
                -1.0
            }
            Decision::Retry {
                delay_ms, reason, ..
            } => {
                // A breaker still open when the wait ends: stop now, with this outcome.
                if let Some(b) = &self.breaker {
                    if b.state.borrow().state(&self.origin, now + delay_ms as f64) == BreakerState::Open {
                        self.reason = "circuit-open";
                        return -1.0;
                    }
                }
                self.reason = reason.as_str();
                delay_ms as f64
            }
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if let (Some(b), Some(probe)) = (&self.breaker, self.slot) {
            b.state.borrow_mut().release(&self.origin, probe);
        }
        if let (Some(t), Some((ticket, _))) = (&self.throttle, self.ticket) {
            t.borrow_mut().abandon(&self.origin, ticket, js_sys::Date::now());
        }
    }
}
