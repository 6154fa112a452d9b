//! The call protocol as a pure state machine: what one `retryFetch` call does from its first
//! attempt to its end. The engine says what to do next (a [`Step`]: send, wait for the
//! throttle's turn, ask the hooks, wait, run `beforeRetry`, finish) and is told what
//! happened; the shell (`src/wasm/client/call.rs`) only performs the steps (fetch, timers,
//! signals, hooks, JavaScript errors). Time comes in as ms numbers, randomness as an [`Rng`]
//! and the shared guards through [`CallGuards`], so every rule of the loop is tested
//! natively: the deadline re-checked before each send and after every wait and hook, a
//! circuit still open when the wait would end, `Retry-After` read only for failures, the
//! default budget's skips, the polls of `followAccepted`.
//!
//! Aborts are not the engine's: a signal ends the call at once whatever the engine says, and
//! the shell checks them around every step.

use super::accepted::{poll_failed, Accepted, AcceptedAnswer, Follow};
use super::backoff::Rng;
use super::budget::Verdict;
use super::classify::{
    answer_is_replayed, is_transient, server_refuses_retry, Outcome, RetryReason, REPLAYED_HEADER,
    SHOULD_RETRY_HEADERS,
};
use super::decide::{AttemptOutcome, Decision, RetryState, Stop, StopReason};
use super::options::RetryPolicy;
use super::retry_after::{server_clock_ms, server_delay_ms};

/// What the adaptive throttle says of an attempt's turn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Turn {
    /// Send now.
    Now,
    /// Wait this many ms, then ask again.
    Wait(f64),
    /// No turn: `'throttled'` (not within `maxWaitMs`) or `'deadline'`.
    Stop(StopReason),
}

/// The throttle's turn for a caller queued `queued_for_ms` that must wait `wait_ms` more:
/// given up (`'throttled'`) past `max_wait_ms` in the queue, or (`'deadline'`) when the turn
/// would come no sooner than the deadline; else wait.
pub fn throttle_turn(
    wait_ms: f64,
    queued_for_ms: f64,
    max_wait_ms: f64,
    deadline_left_ms: Option<f64>,
) -> Turn {
    if queued_for_ms + wait_ms > max_wait_ms {
        Turn::Stop(StopReason::Throttled)
    } else if deadline_left_ms.is_some_and(|left| wait_ms >= left) {
        Turn::Stop(StopReason::Deadline)
    } else {
        Turn::Wait(wait_ms.ceil().max(0.0))
    }
}

/// The longest a call sleeps waiting for the throttle's turn before it looks again, a second:
/// a turn given up ahead of it meanwhile (a caller aborted, or stopped by the deadline or the
/// budget) moves it up within that, rather than at the end of the wait it was told when it
/// asked. Nothing given up: it sleeps on to the time it was told, and nothing was asked. (A
/// look costs a timer and a step: 5000 callers queued looking 4 times a second took half a
/// core.)
pub const TURN_REPOLL_MS: f64 = 1000.0;

/// Is an answer with `status` the server pushing back (`429`, `503`): what cuts the adaptive
/// throttle's rate?
pub fn is_pushback(status: u16) -> bool {
    matches!(status, 429 | 503)
}

/// The shared guards of one call (breaker, throttle, budget), as the engine uses them. The
/// shell implements it over the guards it holds.
pub trait CallGuards {
    /// May the next attempt go? `Err(ms until a probe may)` when the circuit is open.
    fn admit(&mut self, now_ms: f64) -> Result<(), f64>;
    /// [`CallGuards::admit`] again after a wait, giving back first what the call was admitted
    /// with: the circuit may have opened, or gone half-open (a new round whose probes are
    /// counted), since. Default: `admit`.
    fn readmit(&mut self, now_ms: f64) -> Result<(), f64> {
        self.admit(now_ms)
    }
    /// The throttle's answer for the next attempt's turn (`attempt`: its number, 1 for the
    /// first).
    fn turn(&mut self, attempt: u32, deadline_left_ms: Option<f64>, now_ms: f64) -> Turn;
    /// Was a turn of the throttle given up, by a caller waiting for it, after `since_ms`?
    /// Default: no.
    fn turns_given_back_since(&self, _since_ms: f64) -> bool {
        false
    }
    /// Attempt `attempt` is sent.
    fn sent(&mut self, attempt: u32, now_ms: f64);
    /// The attempt sent at `sent_at_ms` (number `attempt`) ended with `outcome`, whose answer
    /// asked for a wait of `wait_asked_ms` before the next request (`Retry-After`, or a
    /// `RateLimit` reset; 0 when it asked none).
    fn settled(
        &mut self,
        outcome: Outcome,
        transient: bool,
        attempt: u32,
        sent_at_ms: f64,
        wait_asked_ms: f64,
        now_ms: f64,
    );
    /// What the budget says of a retry now.
    fn budget(&self, now_ms: f64) -> Verdict;
    /// Will the circuit still be open at `at_ms`?
    fn open_at(&self, at_ms: f64) -> bool;
    /// The call ended (however): give back what it holds (a half-open probe slot, a turn it
    /// still waits for).
    fn release(&mut self, now_ms: f64);
    /// The call is retrying: an attempt of it failed (a pacer may count the calls retrying
    /// together). Joined once; default: nothing.
    fn join(&mut self, _now_ms: f64) {}
    /// The call that [`CallGuards::join`]ed ended. Default: nothing.
    fn leave(&mut self, _now_ms: f64) {}
}

/// What is known of the call's own request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallFacts {
    /// Its method is idempotent (RFC 9110).
    pub idempotent: bool,
    /// It carries an idempotency key.
    pub has_key: bool,
    /// Its body can be sent again.
    pub replayable: bool,
}

/// What a `RetryError` carries as its `cause` when the call ends without a response.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cause {
    /// The last attempt's error.
    AttemptError,
    /// A `TimeoutError` for `deadlineMs`.
    Deadline,
    /// A `CircuitOpenError` (a probe may go in this many ms).
    CircuitOpen(f64),
    /// Nothing.
    Nothing,
}

/// The least wait of a retry the budget deferred ([`Verdict::Defer`]), in ms: a zero backoff
/// (`baseDelayMs: 0`) would ask again on every turn of the event loop until the retries in
/// flight are answered.
pub const DEFER_MIN_MS: f64 = 10.0;

/// What a wait is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// The backoff before a retry (recorded as the attempt's `delayMs`).
    Backoff,
    /// Another backoff because the default budget skipped the retry.
    Skip,
    /// The wait before a poll after a `202 Accepted`.
    Poll,
}

/// What the shell does next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Send attempt `attempt`: the call's request, or a `GET` of `url` (a poll URL a 202
    /// named), within `limit_ms` (none: no limit). `retry_headers`: it is a retry of the
    /// call's own request (the retry headers go on it, if asked for).
    Send {
        /// The attempt's number (a poll that is not an attempt keeps the last one's).
        attempt: u32,
        /// The poll URL, once a 202 named one.
        url: Option<String>,
        /// The attempt's time limit, ms.
        limit_ms: Option<f64>,
        /// A retry of the call's own request.
        retry_headers: bool,
    },
    /// Wait `ms` for the throttle's turn, then [`CallEngine::turn_waited`].
    WaitTurn(f64),
    /// Ask `shouldRetry` and tell `onRetry` about retry `attempt` + 1 after `delay_ms`, then
    /// [`CallEngine::hooks_done`] (or [`CallEngine::hook_timed_out`]).
    AskHooks {
        /// The attempt that failed.
        attempt: u32,
        /// The wait before the retry.
        delay_ms: f64,
        /// Why it failed.
        reason: RetryReason,
    },
    /// Wait `ms` keeping the newest response, then [`CallEngine::waited`].
    Wait {
        /// How long.
        ms: f64,
        /// What for.
        kind: WaitKind,
    },
    /// Run `beforeRetry` for attempt `attempt`, then [`CallEngine::next_attempt`].
    BeforeRetry {
        /// The retry's number.
        attempt: u32,
        /// The wait it followed.
        delay_ms: f64,
        /// Why the attempt before failed.
        reason: RetryReason,
    },
    /// The call ends: with the newest response if there is one, else with a `RetryError` of
    /// `reason` whose cause is `cause`.
    Finish {
        /// Why.
        reason: StopReason,
        /// The `RetryError`'s cause.
        cause: Cause,
    },
    /// Before any attempt the circuit is open: the call's error is the `CircuitOpenError`
    /// itself (a probe may go in this many ms).
    CircuitOpen(f64),
}

/// The attempt in flight.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    poll: bool,
    sent_at: f64,
    deadline_limited: bool,
}

/// The retry being prepared after a failed attempt.
#[derive(Clone, Copy, Debug)]
struct Pending {
    report: AttemptOutcome,
    delay_ms: f64,
    reason: RetryReason,
    attempt: u32,
}

/// How an attempt settled, as the shell read it.
pub struct Settled<'a> {
    /// The outcome.
    pub outcome: Outcome,
    /// The response ends a redirect the transport (or the shell) followed.
    pub redirected: bool,
    /// A response header by lower-case name (read only when a rule needs it).
    pub header: &'a dyn Fn(&str) -> Option<String>,
    /// A response header holding a URL, resolved against the response's URL.
    pub url_header: &'a dyn Fn(&str) -> Option<String>,
}

/// One call's protocol.
#[derive(Clone, Debug)]
pub struct CallEngine {
    state: RetryState,
    facts: CallFacts,
    accepted: Option<Accepted>,
    next_is_poll: bool,
    /// The URL a 202 named is on another origin than the call's request
    /// ([`CallEngine::polls_elsewhere`]).
    polls_elsewhere: bool,
    in_flight: InFlight,
    recorded: u32,
    pending: Option<Pending>,
    /// The last outcome settled was a 202 the call keeps as its answer
    /// ([`CallEngine::keeps_this_202`]).
    keep_202: bool,
    /// Following a 202, the last outcome was no final answer (another 202, or a poll's
    /// failure): a call that ends now answers with the 202 kept
    /// ([`CallEngine::answers_with_kept_202`]).
    kept_202_answers: bool,
    /// The wait for the throttle's turn in progress is a shortened one ([`TURN_REPOLL_MS`]):
    /// the time the turn is due, and when the throttle was asked.
    repoll: Option<(f64, f64)>,
    /// How far the wall clock is ahead of the time the engine is given (0, the default,
    /// unless a shell keeps time on a monotonic clock after a step of the wall clock): an
    /// HTTP-date `Retry-After` or an epoch `RateLimit` reset is read against the wall clock.
    wall_offset_ms: f64,
}

impl CallEngine {
    /// A call under `policy` that starts at `started_ms`.
    pub fn new(policy: &RetryPolicy, started_ms: f64, facts: CallFacts) -> Self {
        CallEngine {
            state: RetryState::new(policy, started_ms),
            facts,
            accepted: None,
            next_is_poll: false,
            polls_elsewhere: false,
            in_flight: InFlight {
                poll: false,
                sent_at: started_ms,
                deadline_limited: false,
            },
            recorded: 0,
            pending: None,
            keep_202: false,
            kept_202_answers: false,
            repoll: None,
            wall_offset_ms: 0.0,
        }
    }

    /// The wall clock is `ms` ahead of the time the engine is given from now on (a shell whose
    /// time left the wall clock at a step): read before [`CallEngine::settled`] reads a
    /// server's date.
    pub fn set_wall_offset_ms(&mut self, ms: f64) {
        self.wall_offset_ms = if ms.is_finite() { ms } else { 0.0 };
    }

    /// The time a server's dates are read against: its own clock, the response's `Date` (and
    /// `Age`), when
    /// `dated` (the response carries a wait that may be a date: `Date` is read only then) and
    /// it has one; the wall clock otherwise.
    fn server_now_ms(
        &self,
        header: &dyn Fn(&str) -> Option<String>,
        dated: bool,
        now_ms: f64,
    ) -> f64 {
        dated
            .then(|| server_clock_ms(header("date").as_deref(), header("age").as_deref()))
            .flatten()
            .unwrap_or(now_ms + self.wall_offset_ms)
    }

    /// Attempts sent so far (a poll that did not fail is not one).
    pub fn attempts(&self) -> u32 {
        self.state.attempts()
    }

    /// What is left of `deadlineMs` at `now_ms` (`None`: no deadline): the bound of the hooks
    /// and of buffering a stream body.
    pub fn deadline_left_ms(&self, now_ms: f64) -> Option<f64> {
        self.state.deadline_left_ms(now_ms)
    }

    /// The request's body turned out not to be replayable (a stream above the buffering
    /// limit is sent once, whole).
    pub fn body_not_replayable(&mut self) {
        self.facts.replayable = false;
    }

    /// The lean path already sent the first attempt at `sent_at_ms` (no guard to ask), with
    /// the first attempt's time limit ([`RetryPolicy::attempt_limit_ms`] of the whole deadline).
    pub fn first_sent(&mut self, policy: &RetryPolicy, sent_at_ms: f64) {
        self.state.start_attempt();
        self.sent_now(policy, false, sent_at_ms);
    }

    /// An attempt (or a poll) is sent at `now_ms`: it is the one in flight. Its time limit
    /// (`None`: none): `timeoutMs`, shortened to what is left of the deadline.
    fn sent_now(&mut self, policy: &RetryPolicy, poll: bool, now_ms: f64) -> Option<f64> {
        let limit_ms = self
            .state
            .attempt_time_limit_ms(policy, now_ms)
            .map(|ms| ms.max(0.0));
        self.in_flight = InFlight {
            poll,
            sent_at: now_ms,
            // The limit is what is left of the deadline (not `timeoutMs`).
            deadline_limited: limit_ms.is_some() && limit_ms == self.state.deadline_left_ms(now_ms),
        };
        limit_ms
    }

    /// Before the next attempt: nothing is sent once the deadline has passed (counted from
    /// the call); an open circuit sends nothing; then the throttle's turn. A poll asks no
    /// guard.
    pub fn next_attempt(
        &mut self,
        policy: &RetryPolicy,
        guards: &mut dyn CallGuards,
        now_ms: f64,
    ) -> Step {
        if self.state.deadline_passed(now_ms) {
            return Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline,
            };
        }
        if !self.next_is_poll {
            if let Some(Err(wait)) = self.guards_of(guards).map(|g| g.admit(now_ms)) {
                return self.circuit_open(wait);
            }
        }
        self.turn(policy, guards, now_ms)
    }

    /// The step for a circuit that is open (a probe may go in `wait_ms`): before any attempt
    /// the call's error is the `CircuitOpenError`, after one the call stops with its outcome.
    fn circuit_open(&self, wait_ms: f64) -> Step {
        if self.recorded == 0 {
            Step::CircuitOpen(wait_ms)
        } else {
            Step::Finish {
                reason: StopReason::CircuitOpen,
                cause: Cause::CircuitOpen(wait_ms),
            }
        }
    }

    /// After [`Step::WaitTurn`]: the breaker is asked again (a circuit that opened during the
    /// wait sends nothing; one that went half-open sends only its probes), and the budget
    /// again for a retry (the retries queued for turns were all allowed before any of them
    /// was sent and counted: each asks again when it may go, and one the budget no longer
    /// allows gives its turn back and is skipped or stopped as after a backoff), then the
    /// throttle's turn again, then the send. A turn whose wait ended at or after the deadline
    /// (its timer late: a blocked event loop) sends nothing: the turn is given back and the
    /// call ends there, as after any wait.
    pub fn turn_waited(
        &mut self,
        policy: &RetryPolicy,
        guards: &mut dyn CallGuards,
        now_ms: f64,
        rng: &mut dyn Rng,
    ) -> Step {
        if self.state.deadline_passed(now_ms) {
            if let Some(g) = self.guards_of(guards) {
                g.release(now_ms);
            }
            return Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline,
            };
        }
        // A shortened wait: unless a turn ahead was given up since the throttle was asked, it
        // goes on to the time the turn is due, asking nothing.
        if let Some((due, asked)) = self.repoll.take() {
            let given_back = self
                .guards_of(guards)
                .is_some_and(|g| g.turns_given_back_since(asked));
            if !given_back && due > now_ms {
                return self.wait_turn(due - now_ms, asked, now_ms);
            }
        }
        if let Some(g) = self.guards_of(guards).filter(|_| !self.next_is_poll) {
            if let Err(wait) = g.readmit(now_ms) {
                return self.circuit_open(wait);
            }
            if let Some(step) = self.budget_refuses(policy, g, now_ms, rng) {
                g.release(now_ms);
                return step;
            }
        }
        self.turn(policy, guards, now_ms)
    }

    /// Wait `ms` from `now_ms` for the throttle's turn (the throttle asked at `asked_ms`), at
    /// most [`TURN_REPOLL_MS`] before looking again.
    fn wait_turn(&mut self, ms: f64, asked_ms: f64, now_ms: f64) -> Step {
        self.repoll = (ms > TURN_REPOLL_MS).then_some((now_ms + ms, asked_ms));
        Step::WaitTurn(ms.min(TURN_REPOLL_MS))
    }

    /// The throttle refused the turn: a retry's failure is the cause, as when attempts run
    /// out; the first attempt's, nothing failed.
    fn turn_refused(&self, reason: StopReason) -> Step {
        let cause = if reason == StopReason::Deadline {
            Cause::Deadline
        } else if self.state.attempts() > 0 {
            Cause::AttemptError
        } else {
            Cause::Nothing
        };
        Step::Finish { reason, cause }
    }

    /// The throttle's turn, then the send.
    fn turn(&mut self, policy: &RetryPolicy, guards: &mut dyn CallGuards, now_ms: f64) -> Step {
        let poll = self.next_is_poll;
        let mut guards = self.guards_of(guards).filter(|_| !poll);
        if let Some(g) = guards.as_deref_mut() {
            let attempt = self.state.attempts() + 1;
            match g.turn(attempt, self.state.deadline_left_ms(now_ms), now_ms) {
                Turn::Now => {}
                Turn::Wait(ms) => return self.wait_turn(ms, now_ms, now_ms),
                Turn::Stop(reason) => return self.turn_refused(reason),
            }
        }
        self.next_is_poll = false;
        let attempt = if poll {
            self.state.attempts()
        } else {
            self.state.start_attempt()
        };
        if let Some(g) = guards {
            g.sent(attempt, now_ms);
        }
        let limit_ms = self.sent_now(policy, poll, now_ms);
        let url = self.poll_url().map(String::from);
        Step::Send {
            attempt,
            retry_headers: attempt > 1 && !poll && url.is_none(),
            url,
            limit_ms,
        }
    }

    /// The URL the sends go to once a 202 named one (`None`: the call's own request).
    pub fn poll_url(&self) -> Option<&str> {
        self.accepted.as_ref().and_then(Accepted::poll_url)
    }

    /// Whether [`CallEngine::poll_url`] is on another origin than the call's request (the
    /// shell knows origins). Each guard keeps its state per origin, and the call's guards are
    /// its request's origin's: a poll there, and its retries, ask and tell them nothing.
    pub fn polls_elsewhere(&mut self, elsewhere: bool) {
        self.polls_elsewhere = elsewhere;
    }

    /// The guards the send to come (or just settled) deals with: none for another origin's
    /// poll URL.
    fn guards_of<'g>(&self, guards: &'g mut dyn CallGuards) -> Option<&'g mut dyn CallGuards> {
        (!(self.polls_elsewhere && self.poll_url().is_some())).then_some(guards)
    }

    /// Did the deadline cut a poll in flight (it `timed_out` and `failed`)? Then the 202
    /// before it is the call's answer.
    pub fn poll_cut(&self, timed_out: bool, failed: bool) -> bool {
        self.keeps_previous_answer() && timed_out && failed
    }

    /// Is the outcome just settled a `202` the call keeps, to answer with if it ends before a
    /// final answer (the shell holds it, and lets the previous one go)? The first 202, one
    /// that names a URL to poll, or a 202 of a repeated request; not a poll's 202 that names
    /// no URL (the one before it says where to look).
    pub fn keeps_this_202(&self) -> bool {
        self.keep_202
    }

    /// Does the call, ending now, answer with the 202 it keeps ([`CallEngine::keeps_this_202`])?
    /// Once a 202 was followed, yes unless the last outcome is a final answer: ended by the
    /// deadline, or by a poll's failure that ran out of retries (attempts, the budget, the
    /// breaker, `shouldRetry`), the call was still accepted and the kept 202 says so (where
    /// to look), not the status URL's 503 or a `RetryError` a caller might take for "not
    /// done" and pay again.
    pub fn answers_with_kept_202(&self) -> bool {
        self.kept_202_answers
    }

    /// Is the attempt in flight a poll (after a `202`: of the URL it named, or a repeat of the
    /// request)? A poll is no attempt unless it fails.
    pub fn in_flight_is_poll(&self) -> bool {
        self.in_flight.poll
    }

    /// May the answer before the attempt in flight still be the call's answer? Only for a
    /// poll the deadline may cut ([`CallEngine::poll_cut`]); any other attempt replaces it,
    /// so the shell frees it (cancels its body) as the attempt is sent.
    pub fn keeps_previous_answer(&self) -> bool {
        self.in_flight.poll && self.in_flight.deadline_limited
    }

    /// The attempt settled at `now_ms`: count it (`true`: it goes in the attempt history),
    /// tell the guards, and decide what follows.
    pub fn settled(
        &mut self,
        policy: &RetryPolicy,
        settled: Settled<'_>,
        guards: &mut dyn CallGuards,
        now_ms: f64,
        rng: &mut dyn Rng,
    ) -> (bool, Step) {
        let outcome = settled.outcome;
        let mut guards = self.guards_of(guards);
        // What was sent: a `GET` of the poll URL (idempotent, no key) or the call's request.
        let target = self.poll_url().is_some();
        let idempotent = target || self.facts.idempotent;
        let has_key = !target && self.facts.has_key;
        let replayable = target || self.facts.replayable;
        let poll = self.in_flight.poll;
        // What the server says of a retry (its wait, its veto) is read for failures only (a
        // 3xx's `Retry-After` is not a request to wait before a retry).
        let failed = matches!(outcome, Outcome::Status(s) if s >= 400);
        // A failed answer is final when the server says not to send the request again, or
        // that it is the answer it stored for the key (sent again, the key gets it again). A
        // status URL's failure is the monitor's, not the operation's: it is neither.
        let final_failure = failed
            && (SHOULD_RETRY_HEADERS
                .iter()
                .any(|name| server_refuses_retry((settled.header)(name).as_deref()))
                || (has_key && answer_is_replayed((settled.header)(REPLAYED_HEADER).as_deref())));
        // A poll's failure, retried as an attempt is; a repeat's final failure is the call's
        // answer instead, as any final answer to a poll is.
        let failed_poll = poll_failed(policy, outcome, idempotent, has_key)
            && !(poll && !target && final_failure);
        // A poll is not an attempt, unless it failed: then it is one, retried as any is.
        let counted = !poll || failed_poll;
        if poll && counted {
            self.state.start_attempt();
        }
        if counted {
            self.recorded += 1;
        }
        let server_delay_ms = if failed && policy.respect_retry_after {
            let (retry_after, reset) = (
                (settled.header)("retry-after"),
                (settled.header)("ratelimit-reset"),
            );
            server_delay_ms(
                retry_after.as_deref(),
                reset.as_deref(),
                (settled.header)("ratelimit").as_deref(),
                self.server_now_ms(
                    settled.header,
                    retry_after.is_some() || reset.is_some(),
                    now_ms,
                ),
            )
        } else {
            None
        };
        if let (true, Some(g)) = (counted, guards.as_deref_mut()) {
            // A call counts as retrying from its first failed attempt (before that answer is
            // told to the pacer, which may be what starts its pacing), wherever it was sent
            // from: the lean path or the loop.
            if !matches!(outcome, Outcome::Status(s) if s < 400) {
                g.join(now_ms);
            }
            g.settled(
                outcome,
                is_transient(policy, outcome),
                // A failed poll was not sent as a retry: not an accepted retry either.
                if poll { 1 } else { self.state.attempts() },
                self.in_flight.sent_at,
                server_delay_ms.unwrap_or(0.0),
                now_ms,
            );
        }
        self.keep_202 = false;
        let accepted_202 = policy.follow_accepted && outcome == Outcome::Status(202);
        // A 202 followed (this one, or one before it and a failure since, judged as a poll's
        // is: `poll_failed`, anything but a final answer, a keyed 409 under
        // `retryKeyedConflict` included).
        self.kept_202_answers = accepted_202 || (self.accepted.is_some() && failed_poll);
        // `followAccepted`: a 202 is followed, not returned.
        if accepted_202 {
            let (operation_location, location, retry_after) = (
                (settled.url_header)("operation-location"),
                (settled.url_header)("location"),
                (settled.header)("retry-after"),
            );
            let server_now_ms = self.server_now_ms(settled.header, retry_after.is_some(), now_ms);
            let answer = AcceptedAnswer {
                operation_location: operation_location.as_deref(),
                location: location.as_deref(),
                retry_after: retry_after.as_deref(),
                server_now_ms: Some(server_now_ms),
                has_key,
                replayable,
                idempotent,
                redirected: settled.redirected,
                refuses_repeat: SHOULD_RETRY_HEADERS
                    .iter()
                    .any(|name| server_refuses_retry((settled.header)(name).as_deref())),
            };
            let accepted = self.accepted.get_or_insert_with(|| Accepted::new(policy));
            accepted.set_wall_offset_ms(self.wall_offset_ms);
            let follow = accepted.next(policy, &self.state, &answer, now_ms, rng);
            self.keep_202 = accepted.keeps_last_202();
            return match follow {
                Follow::Poll { delay_ms, .. } | Follow::Repeat { delay_ms, .. } => {
                    self.next_is_poll = true;
                    (
                        counted,
                        Step::Wait {
                            ms: delay_ms as f64,
                            kind: WaitKind::Poll,
                        },
                    )
                }
                // Nothing to poll, or no time left: the 202 is the answer.
                Follow::Stop(_) => (
                    counted,
                    Step::Finish {
                        reason: StopReason::NotRetryable,
                        cause: Cause::AttemptError,
                    },
                ),
            };
        }
        let report = AttemptOutcome {
            outcome,
            idempotent,
            has_key,
            server_delay_ms,
            replayable,
            budget_allows_retry: guards
                .as_deref()
                .is_none_or(|g| g.budget(now_ms) != Verdict::Stop),
            redirected: settled.redirected,
            server_refuses: final_failure,
        };
        let step = match self.state.decide(policy, report, now_ms, rng) {
            // The deadline, not `maxAttempts`, ended an attempt its time limit cut.
            Decision::Stop(Stop::AttemptsExhausted(_))
                if outcome == Outcome::Timeout && self.in_flight.deadline_limited =>
            {
                Step::Finish {
                    reason: StopReason::Deadline,
                    cause: Cause::AttemptError,
                }
            }
            Decision::Stop(stop) => Step::Finish {
                reason: stop.reason(),
                cause: Cause::AttemptError,
            },
            // A breaker still open when the wait ends: stop now, with this outcome.
            Decision::Retry { delay_ms, .. }
                if guards
                    .as_deref()
                    .is_some_and(|g| g.open_at(now_ms + delay_ms as f64)) =>
            {
                Step::Finish {
                    reason: StopReason::CircuitOpen,
                    cause: Cause::AttemptError,
                }
            }
            Decision::Retry {
                delay_ms, reason, ..
            } => {
                let attempt = self.state.attempts();
                let delay_ms = delay_ms as f64;
                self.pending = Some(Pending {
                    report,
                    delay_ms,
                    reason,
                    attempt,
                });
                Step::AskHooks {
                    attempt,
                    delay_ms,
                    reason,
                }
            }
        };
        (counted, step)
    }

    /// `shouldRetry` said `retry` (true when there is none); `onRetry` ran. The hooks took
    /// time: a wait that no longer ends before the deadline is not started.
    pub fn hooks_done(&mut self, retry: bool, now_ms: f64) -> Step {
        let Some(p) = self.pending else {
            return Step::Finish {
                reason: StopReason::NotRetryable,
                cause: Cause::AttemptError,
            };
        };
        if !retry {
            return Step::Finish {
                reason: StopReason::ShouldRetry,
                cause: Cause::AttemptError,
            };
        }
        if !self.state.wait_fits(now_ms, p.delay_ms) {
            return Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::AttemptError,
            };
        }
        Step::Wait {
            ms: p.delay_ms,
            kind: WaitKind::Backoff,
        }
    }

    /// A hook outlived the deadline: the call ends there, the deadline's `TimeoutError` its
    /// cause (the deadline passed before the next attempt could be sent).
    pub fn hook_timed_out(&self) -> Step {
        Step::Finish {
            reason: StopReason::Deadline,
            cause: Cause::Deadline,
        }
    }

    /// A wait of `kind` ended at `now_ms`. After a poll's wait, the poll; after a backoff, the
    /// deadline again, then the budget again (others' retries during the wait may have spent
    /// it): a `RetryBudget` that no longer allows the retry ends the call (`'budget'`, with
    /// the last answer); the default budget skips it (nothing is sent, the attempt counts as
    /// made, the call waits another backoff and asks again; when the policy stops meanwhile,
    /// `maxAttempts` made among them, the last answer is the result, `'budget'`).
    pub fn waited(
        &mut self,
        policy: &RetryPolicy,
        kind: WaitKind,
        guards: &mut dyn CallGuards,
        now_ms: f64,
        rng: &mut dyn Rng,
    ) -> Step {
        if kind == WaitKind::Poll {
            return self.next_attempt(policy, guards, now_ms);
        }
        // A wait that ended past the deadline (a timer that fired late): the deadline passed
        // before the next attempt could be sent.
        if self.state.deadline_passed(now_ms) {
            return Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline,
            };
        }
        let Some(p) = self.pending else {
            return self.next_attempt(policy, guards, now_ms);
        };
        if let Some(step) = self
            .guards_of(guards)
            .and_then(|g| self.budget_refuses(policy, g, now_ms, rng))
        {
            return step;
        }
        Step::BeforeRetry {
            attempt: p.attempt + 1,
            delay_ms: p.delay_ms,
            reason: p.reason,
        }
    }

    /// The budget asked again before the pending retry goes (after its backoff, and after a
    /// wait for a throttle turn): `None` when it allows it (or no retry is pending: a first
    /// attempt asks no budget), else the step of a refusal, as [`CallEngine::waited`] says.
    fn budget_refuses(
        &mut self,
        policy: &RetryPolicy,
        guards: &mut dyn CallGuards,
        now_ms: f64,
        rng: &mut dyn Rng,
    ) -> Option<Step> {
        let p = self.pending?;
        let finish = |reason| Step::Finish {
            reason,
            cause: Cause::AttemptError,
        };
        // The wait before the retry asks again, and the attempt the retry is then: after a
        // skip, the one after the skipped attempt (counted as made); after a defer, the same.
        let (attempt, delay_ms) = match guards.budget(now_ms) {
            Verdict::Allow => return None,
            Verdict::Stop => return Some(finish(StopReason::Budget)),
            Verdict::Skip => {
                let skipped = self.state.start_attempt();
                match self.state.decide(policy, p.report, now_ms, rng) {
                    Decision::Retry { delay_ms, .. } => (skipped, delay_ms as f64),
                    Decision::Stop(_) => return Some(finish(StopReason::Budget)),
                }
            }
            // Only retries still in flight ran ahead: the next backoff step (at least
            // DEFER_MIN_MS), this attempt not counted.
            Verdict::Defer => (
                p.attempt,
                (self.state.next_backoff(rng) as f64).max(DEFER_MIN_MS),
            ),
        };
        if !self.state.wait_fits(now_ms, delay_ms) {
            return Some(finish(StopReason::Deadline));
        }
        // The wait before the retry counts every backoff since the failure.
        self.pending = Some(Pending {
            attempt,
            delay_ms: p.delay_ms + delay_ms,
            ..p
        });
        Some(Step::Wait {
            ms: delay_ms,
            kind: WaitKind::Skip,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::backoff::Rng;
    use crate::core::options::Jitter;

    /// Always the middle of the range.
    struct Half;
    impl Rng for Half {
        fn next_f64(&mut self) -> f64 {
            0.5
        }
    }

    /// Guards that record what they were told; each answer set by the test.
    #[derive(Default)]
    struct Fake {
        open_for: Option<f64>,
        turns: Vec<Turn>,
        budget: Vec<Verdict>,
        open_at: bool,
        sent: Vec<u32>,
        settled: Vec<(Outcome, bool, u32)>,
        /// The wait each settled answer asked for, as told to the guards.
        waits: Vec<f64>,
        /// How many attempts had settled when the call joined, each time it did.
        joins: Vec<usize>,
        /// How many times what the call holds was given back.
        released: u32,
        /// When a turn was given up ahead of the call, if one was.
        given_back_at: Option<f64>,
    }

    impl CallGuards for Fake {
        fn admit(&mut self, _now: f64) -> Result<(), f64> {
            self.open_for.map_or(Ok(()), Err)
        }
        fn turn(&mut self, _attempt: u32, _left: Option<f64>, _now: f64) -> Turn {
            if self.turns.is_empty() {
                Turn::Now
            } else {
                self.turns.remove(0)
            }
        }
        fn turns_given_back_since(&self, since: f64) -> bool {
            self.given_back_at.is_some_and(|at| at > since)
        }
        fn sent(&mut self, attempt: u32, _now: f64) {
            self.sent.push(attempt);
        }
        fn settled(
            &mut self,
            outcome: Outcome,
            transient: bool,
            attempt: u32,
            _s: f64,
            wait_asked_ms: f64,
            _n: f64,
        ) {
            self.settled.push((outcome, transient, attempt));
            self.waits.push(wait_asked_ms);
        }
        fn budget(&self, _now: f64) -> Verdict {
            self.budget.first().copied().unwrap_or(Verdict::Allow)
        }
        fn open_at(&self, _at: f64) -> bool {
            self.open_at
        }
        fn release(&mut self, _now: f64) {
            self.released += 1;
        }
        fn join(&mut self, _now: f64) {
            self.joins.push(self.settled.len());
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            jitter: Jitter::None,
            base_delay_ms: 100.0,
            ..RetryPolicy::default()
        }
    }

    const GET: CallFacts = CallFacts {
        idempotent: true,
        has_key: false,
        replayable: true,
    };

    fn none(_: &str) -> Option<String> {
        None
    }

    fn status(s: u16) -> Settled<'static> {
        Settled {
            outcome: Outcome::Status(s),
            redirected: false,
            header: &none,
            url_header: &none,
        }
    }

    #[test]
    fn a_503_is_retried_after_the_hooks_and_the_backoff() {
        let p = policy();
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        assert!(matches!(
            e.next_attempt(&p, &mut g, 0.0),
            Step::Send {
                attempt: 1,
                retry_headers: false,
                ..
            }
        ));
        let (counted, step) = e.settled(&p, status(503), &mut g, 10.0, &mut Half);
        assert!(counted);
        assert_eq!(
            step,
            Step::AskHooks {
                attempt: 1,
                delay_ms: 100.0,
                reason: RetryReason::Status
            }
        );
        assert_eq!(
            e.hooks_done(true, 10.0),
            Step::Wait {
                ms: 100.0,
                kind: WaitKind::Backoff
            }
        );
        assert!(matches!(
            e.waited(&p, WaitKind::Backoff, &mut g, 110.0, &mut Half),
            Step::BeforeRetry { attempt: 2, .. }
        ));
        assert!(matches!(
            e.next_attempt(&p, &mut g, 110.0),
            Step::Send {
                attempt: 2,
                retry_headers: true,
                ..
            }
        ));
        let (_, step) = e.settled(&p, status(200), &mut g, 120.0, &mut Half);
        assert_eq!(
            step,
            Step::Finish {
                reason: StopReason::NotRetryable,
                cause: Cause::AttemptError
            }
        );
        assert_eq!(g.sent, vec![1, 2]);
        assert_eq!(g.settled.len(), 2);
        assert!(g.settled[0].1 && !g.settled[1].1, "503 transient, 200 not");
    }

    #[test]
    fn a_call_joins_the_calls_retrying_at_its_first_failed_attempt_before_it_is_told() {
        let p = policy();
        // Sent by the loop from its first attempt (a signal, a stream body...): a success
        // never counts it as retrying.
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(200), &mut g, 10.0, &mut Half);
        assert!(g.joins.is_empty(), "{:?}", g.joins);
        // A 503: joined as its answer is recorded (the pacer sees the herd it is part of),
        // and once only, however many attempts fail after it.
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 10.0, &mut Half);
        assert_eq!(g.joins, vec![0]);
        e.hooks_done(true, 10.0);
        e.waited(&p, WaitKind::Backoff, &mut g, 110.0, &mut Half);
        e.next_attempt(&p, &mut g, 110.0);
        e.settled(&p, status(503), &mut g, 120.0, &mut Half);
        assert_eq!(g.settled.len(), 2);
        assert_eq!(
            g.joins,
            vec![0, 1],
            "the engine asks; GuardsLent joins once"
        );
    }

    #[test]
    fn a_lean_first_attempt_that_failed_joins_as_the_loop_takes_it() {
        let p = policy();
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.first_sent(&p, 0.0);
        e.settled(&p, status(429), &mut g, 5.0, &mut Half);
        assert_eq!(g.joins, vec![0]);
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.first_sent(&p, 0.0);
        // A network error is a failure too.
        let error = Settled {
            outcome: Outcome::NetworkError,
            ..status(0)
        };
        e.settled(&p, error, &mut g, 5.0, &mut Half);
        assert_eq!(g.joins, vec![0]);
    }

    #[test]
    fn should_retry_false_and_a_late_hook_end_the_call() {
        let p = policy();
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 0.0, &mut Half);
        assert_eq!(
            e.hooks_done(false, 0.0),
            Step::Finish {
                reason: StopReason::ShouldRetry,
                cause: Cause::AttemptError
            }
        );
        assert_eq!(
            e.hook_timed_out(),
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline
            },
            "the deadline passed before the next attempt: its TimeoutError is the cause"
        );
    }

    #[test]
    fn the_deadline_is_checked_before_a_send_after_hooks_and_after_a_wait() {
        let p = RetryPolicy {
            deadline_ms: Some(1000.0),
            ..policy()
        };
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        // A blocked event loop: the first attempt would go after the deadline.
        assert_eq!(
            e.next_attempt(&p, &mut g, 1000.0),
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline
            }
        );
        let mut e = CallEngine::new(&p, 0.0, GET);
        assert!(
            matches!(e.next_attempt(&p, &mut g, 0.0), Step::Send { limit_ms: Some(l), .. } if l == 1000.0)
        );
        e.settled(&p, status(503), &mut g, 10.0, &mut Half);
        // The hooks took 900 ms: a 100 ms wait no longer ends before the deadline.
        assert_eq!(
            e.hooks_done(true, 900.0),
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::AttemptError
            }
        );
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 10.0, &mut Half);
        e.hooks_done(true, 10.0);
        // A late timer: the wait ended after the deadline, which is the cause.
        assert_eq!(
            e.waited(&p, WaitKind::Backoff, &mut g, 1000.0, &mut Half),
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline
            }
        );
    }

    #[test]
    fn an_open_circuit_ends_the_call_before_sending() {
        let p = policy();
        let mut g = Fake {
            open_for: Some(500.0),
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        assert_eq!(e.next_attempt(&p, &mut g, 0.0), Step::CircuitOpen(500.0));
        // After an attempt: a RetryError 'circuit-open' (or the last response).
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 0.0, &mut Half);
        e.hooks_done(true, 0.0);
        e.waited(&p, WaitKind::Backoff, &mut g, 100.0, &mut Half);
        g.open_for = Some(200.0);
        assert_eq!(
            e.next_attempt(&p, &mut g, 100.0),
            Step::Finish {
                reason: StopReason::CircuitOpen,
                cause: Cause::CircuitOpen(200.0)
            }
        );
        // A circuit that will still be open when the wait ends: stop at once.
        let mut g = Fake {
            open_at: true,
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        assert_eq!(
            e.settled(&p, status(503), &mut g, 0.0, &mut Half).1,
            Step::Finish {
                reason: StopReason::CircuitOpen,
                cause: Cause::AttemptError
            }
        );
    }

    /// A GET whose first attempt waits `ms` for the throttle's turn (a turn then, when asked
    /// again).
    fn waiting_for_turn(p: &RetryPolicy, ms: f64) -> (Fake, CallEngine) {
        let mut g = Fake {
            turns: vec![Turn::Wait(ms)],
            ..Fake::default()
        };
        let mut e = CallEngine::new(p, 0.0, GET);
        assert_eq!(
            e.next_attempt(p, &mut g, 0.0),
            Step::WaitTurn(ms.min(TURN_REPOLL_MS))
        );
        (g, e)
    }

    /// The guards of a call to `origin` paced by `throttle` alone.
    fn paced<'a>(
        origin: &'a str,
        throttle: &'a mut crate::core::throttle::AdaptiveThrottle,
        held: &'a mut crate::core::guards::Held,
    ) -> crate::core::guards::GuardsLent<'a> {
        crate::core::guards::GuardsLent {
            origin,
            budget: None,
            breaker: None,
            pacer: Some(throttle),
            held,
        }
    }

    #[test]
    fn a_long_turn_wait_asks_the_throttle_again_and_moves_up_when_turns_ahead_are_given_back() {
        let p = policy();
        let origin = "http://127.0.0.1:8080";
        // A turn every 2 s, the bucket empty after the first: ten callers queue; `given_up`
        // of them give their turns up at 50 ms. When is the last sent?
        let last_sent_at = |given_up: &[usize]| {
            let mut throttle = crate::core::throttle::AdaptiveThrottle::new(
                crate::core::throttle::ThrottleConfig {
                    initial_rate: 0.5,
                    min_rate: 0.5,
                    ramp_ms: 1e6,
                    max_wait_ms: 60_000.0,
                    ..Default::default()
                },
            );
            let mut held = vec![crate::core::guards::Held::default(); 10];
            let mut engines = vec![CallEngine::new(&p, 0.0, GET); 10];
            let steps: Vec<Step> = engines
                .iter_mut()
                .zip(held.iter_mut())
                .map(|(e, h)| e.next_attempt(&p, &mut paced(origin, &mut throttle, h), 0.0))
                .collect();
            // The last waits its turn far ahead, but is told to look again within TURN_REPOLL_MS.
            assert_eq!(steps[9], Step::WaitTurn(TURN_REPOLL_MS));
            for &i in given_up {
                paced(origin, &mut throttle, &mut held[i]).release(50.0);
            }
            // Every caller still waiting wakes when told, in time order, until the last is sent.
            let mut wakes: Vec<(f64, usize)> = steps
                .iter()
                .enumerate()
                .filter(|(i, _)| !given_up.contains(i))
                .filter_map(|(i, step)| match step {
                    Step::WaitTurn(ms) => Some((*ms, i)),
                    _ => None,
                })
                .collect();
            loop {
                wakes.sort_by(|a, b| b.0.total_cmp(&a.0));
                let (at, i) = wakes.pop().expect("the last was never sent");
                let mut g = paced(origin, &mut throttle, &mut held[i]);
                match engines[i].turn_waited(&p, &mut g, at, &mut Half) {
                    Step::WaitTurn(ms) => wakes.push((at + ms, i)),
                    Step::Send { .. } if i == 9 => return at,
                    Step::Send { .. } => {}
                    other => panic!("{other:?}"),
                }
            }
        };
        // The nine ahead give up: it goes at the next token (2 s), having looked at 1 s.
        let sent = last_sent_at(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(sent <= 2_100.0, "sent at {sent} ms");
        // All but the first waiting give up: that one's turn (2 s), then its own (4 s), though
        // when it looked (1 s) the one ahead had not gone yet.
        let sent = last_sent_at(&[2, 3, 4, 5, 6, 7, 8]);
        assert!(sent <= 4_100.0, "sent at {sent} ms");
        // Nobody gives up: the ninth turn after the first, about 18 s (asked nothing meanwhile).
        let sent = last_sent_at(&[]);
        assert!(sent >= 16_000.0, "sent at {sent} ms");
    }

    #[test]
    fn a_shortened_turn_wait_asks_nothing_again_unless_a_turn_ahead_was_given_up() {
        let p = policy();
        // The turn is 2.4 s away: waits of 1000, 1000 and 400, asking nothing in between (the
        // circuit, open meanwhile, is asked once the turn is due, and stops it).
        let (mut g, mut e) = waiting_for_turn(&p, 2_400.0);
        g.open_for = Some(1_000.0);
        assert_eq!(
            e.turn_waited(&p, &mut g, 1_000.0, &mut Half),
            Step::WaitTurn(1_000.0)
        );
        assert_eq!(
            e.turn_waited(&p, &mut g, 2_000.0, &mut Half),
            Step::WaitTurn(400.0)
        );
        assert_eq!(
            e.turn_waited(&p, &mut g, 2_400.0, &mut Half),
            Step::CircuitOpen(1_000.0)
        );
        assert!(g.sent.is_empty());
        // A turn ahead given up at 100 ms: at 1 s the call asks again (and goes).
        let (mut g, mut e) = waiting_for_turn(&p, 2_400.0);
        g.given_back_at = Some(100.0);
        assert!(matches!(
            e.turn_waited(&p, &mut g, 1_000.0, &mut Half),
            Step::Send { attempt: 1, .. }
        ));
    }

    #[test]
    fn a_turn_whose_wait_ends_past_the_deadline_sends_nothing() {
        let p = RetryPolicy {
            deadline_ms: Some(150.0),
            ..policy()
        };
        // The turn was 100 ms away; its timer fired at 313 ms (a blocked event loop).
        let (mut g, mut e) = waiting_for_turn(&p, 100.0);
        assert_eq!(
            e.turn_waited(&p, &mut g, 313.0, &mut Half),
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline
            }
        );
        assert!(g.sent.is_empty(), "an attempt was sent past the deadline");
        assert_eq!(g.released, 1, "the turn was not given back");
        assert_eq!(e.attempts(), 0);
        // On time, the attempt goes.
        let (mut g, mut e) = waiting_for_turn(&p, 100.0);
        assert!(matches!(
            e.turn_waited(&p, &mut g, 101.0, &mut Half),
            Step::Send { attempt: 1, .. }
        ));
    }

    #[test]
    fn the_throttle_paces_and_may_refuse() {
        let p = policy();
        let (mut g, mut e) = waiting_for_turn(&p, 30.0);
        assert!(matches!(
            e.turn_waited(&p, &mut g, 30.0, &mut Half),
            Step::Send { attempt: 1, .. }
        ));
        let mut g = Fake {
            turns: vec![Turn::Stop(StopReason::Throttled)],
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        assert_eq!(
            e.next_attempt(&p, &mut g, 0.0),
            Step::Finish {
                reason: StopReason::Throttled,
                cause: Cause::Nothing
            }
        );
    }

    #[test]
    fn a_refused_retry_ends_with_the_failure_it_would_have_retried() {
        let p = policy();
        let mut g = Fake {
            turns: vec![Turn::Now, Turn::Stop(StopReason::Throttled)],
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        let step = e
            .settled(&p, outcome(Outcome::NetworkError), &mut g, 10.0, &mut Half)
            .1;
        assert!(matches!(step, Step::AskHooks { .. }), "{step:?}");
        e.hooks_done(true, 10.0);
        e.waited(&p, WaitKind::Backoff, &mut g, 1_000.0, &mut Half);
        assert_eq!(
            e.next_attempt(&p, &mut g, 1_000.0),
            Step::Finish {
                reason: StopReason::Throttled,
                cause: Cause::AttemptError
            }
        );
    }

    #[test]
    fn a_circuit_that_opens_during_a_throttle_wait_sends_nothing() {
        let p = policy();
        // Admitted while closed, then a wait for the throttle's turn; meanwhile the circuit
        // opened (other calls failed): the call ends with the circuit, nothing sent.
        let (mut g, mut e) = waiting_for_turn(&p, 500.0);
        g.open_at = true;
        g.open_for = Some(4_000.0);
        assert_eq!(
            e.turn_waited(&p, &mut g, 500.0, &mut Half),
            Step::CircuitOpen(4_000.0)
        );
        assert!(g.sent.is_empty());
        // Still closed after the wait: the turn, then the send.
        let (mut g, mut e) = waiting_for_turn(&p, 500.0);
        assert!(matches!(
            e.turn_waited(&p, &mut g, 500.0, &mut Half),
            Step::Send { attempt: 1, .. }
        ));
    }

    #[test]
    fn a_throttle_wait_that_ends_in_a_half_open_round_sends_only_its_probes() {
        use crate::core::breaker::{BreakerConfig, CircuitBreaker};
        use crate::core::guards::{GuardsLent, Held};
        use crate::core::throttle::{AdaptiveThrottle, ThrottleConfig};
        const O: &str = "http://127.0.0.1:8080";
        let p = policy();
        let mut breaker = CircuitBreaker::new(BreakerConfig {
            failure_threshold: 1,
            open_ms: 300.0,
            half_open_max_calls: 1,
        });
        let mut throttle = AdaptiveThrottle::new(ThrottleConfig::default());
        // Another call's failure opens the circuit at 10 ms: half-open from 310 ms.
        let mut other = Held::default();
        let mut g = GuardsLent {
            origin: O,
            budget: None,
            pacer: None,
            breaker: Some(&mut breaker),
            held: &mut other,
        };
        assert_eq!(g.admit(0.0), Ok(()));
        g.settled(Outcome::Status(503), true, 1, 0.0, 0.0, 10.0);
        // Two calls admitted while it was closed waited for their throttle turns until 400 ms:
        // one probe goes, the other is refused (a half-open round of one probe).
        let steps: Vec<Step> = (0..2)
            .map(|_| {
                let mut held = Held::default();
                held.slot = Some(None);
                let mut e = CallEngine::new(&p, 0.0, GET);
                let mut g = GuardsLent {
                    origin: O,
                    budget: None,
                    pacer: Some(&mut throttle),
                    breaker: Some(&mut breaker),
                    held: &mut held,
                };
                e.turn_waited(&p, &mut g, 400.0, &mut Half)
            })
            .collect();
        assert!(
            matches!(steps[0], Step::Send { attempt: 1, .. }),
            "{steps:?}"
        );
        assert!(matches!(steps[1], Step::CircuitOpen(_)), "{steps:?}");
    }

    /// Sends and settles attempts with `outcomes` in turn, hooks saying yes, until the call
    /// finishes; the finishing step and the attempts made.
    fn run(
        p: &RetryPolicy,
        facts: CallFacts,
        outcomes: &[Settled<'_>],
        g: &mut Fake,
    ) -> (Step, u32) {
        let mut e = CallEngine::new(p, 0.0, facts);
        let mut now = 0.0;
        let mut step = e.next_attempt(p, g, now);
        for s in outcomes {
            assert!(matches!(step, Step::Send { .. }), "{step:?}");
            let settled = Settled {
                outcome: s.outcome,
                redirected: s.redirected,
                header: s.header,
                url_header: s.url_header,
            };
            step = e.settled(p, settled, g, now, &mut Half).1;
            step = loop {
                step = match step {
                    Step::AskHooks { .. } => e.hooks_done(true, now),
                    Step::Wait { ms, kind } => {
                        now += ms;
                        e.waited(p, kind, g, now, &mut Half)
                    }
                    Step::BeforeRetry { .. } => e.next_attempt(p, g, now),
                    other => break other,
                };
            };
            if !matches!(step, Step::Send { .. }) {
                return (step, e.attempts());
            }
        }
        (step, e.attempts())
    }

    fn outcome(o: Outcome) -> Settled<'static> {
        Settled {
            outcome: o,
            redirected: false,
            header: &none,
            url_header: &none,
        }
    }

    /// A `202 Accepted` whose URL headers are `url_header`'s.
    fn accepted<'a>(url_header: &'a dyn Fn(&str) -> Option<String>) -> Settled<'a> {
        Settled {
            url_header,
            ..status(202)
        }
    }

    const KEYED_POST: CallFacts = CallFacts {
        idempotent: false,
        has_key: true,
        replayable: true,
    };

    const POST: CallFacts = CallFacts {
        idempotent: false,
        has_key: false,
        replayable: true,
    };

    #[test]
    fn attempts_run_out_with_the_last_answer() {
        let p = policy();
        let (step, attempts) = run(
            &p,
            GET,
            &[status(503), status(503), status(503)],
            &mut Fake::default(),
        );
        assert_eq!(
            step,
            Step::Finish {
                reason: StopReason::Attempts,
                cause: Cause::AttemptError
            }
        );
        assert_eq!(attempts, 3);
    }

    #[test]
    fn an_attempt_the_deadline_cut_ends_the_call_for_the_deadline_even_as_the_last() {
        // `maxAttempts: 1`: the only attempt's limit is the deadline (no `timeoutMs`), or
        // `timeoutMs` under it; sent by the loop, or by the lean path.
        for (timeout_ms, reason) in [
            (None, StopReason::Deadline),
            (Some(100.0), StopReason::Attempts),
        ] {
            let p = RetryPolicy {
                max_attempts: 1,
                deadline_ms: Some(300.0),
                timeout_ms,
                ..policy()
            };
            let finish = Step::Finish {
                reason,
                cause: Cause::AttemptError,
            };
            let mut g = Fake::default();
            let mut e = CallEngine::new(&p, 0.0, GET);
            assert!(matches!(e.next_attempt(&p, &mut g, 0.0), Step::Send { .. }));
            let ended = timeout_ms.unwrap_or(299.0);
            let (_, step) = e.settled(&p, outcome(Outcome::Timeout), &mut g, ended, &mut Half);
            assert_eq!(step, finish, "loop, timeoutMs {timeout_ms:?}");
            let mut e = CallEngine::new(&p, 0.0, GET);
            e.first_sent(&p, 0.0);
            let (_, step) = e.settled(&p, outcome(Outcome::Timeout), &mut g, ended, &mut Half);
            assert_eq!(step, finish, "lean, timeoutMs {timeout_ms:?}");
        }
    }

    #[test]
    fn final_answers_end_at_once_without_the_hooks() {
        let p = policy();
        for s in [404, 501, 301, 200] {
            let (step, attempts) = run(&p, GET, &[status(s)], &mut Fake::default());
            assert_eq!(
                step,
                Step::Finish {
                    reason: StopReason::NotRetryable,
                    cause: Cause::AttemptError
                },
                "{s}"
            );
            assert_eq!(attempts, 1);
        }
    }

    #[test]
    fn an_unkeyed_post_is_unsafe_to_retry_but_a_refusal_is_retried() {
        let p = policy();
        for o in [
            Outcome::Status(503),
            Outcome::NetworkError,
            Outcome::Timeout,
        ] {
            let (step, attempts) = run(&p, POST, &[outcome(o)], &mut Fake::default());
            assert_eq!(
                step,
                Step::Finish {
                    reason: StopReason::Unsafe,
                    cause: Cause::AttemptError
                },
                "{o:?}"
            );
            assert_eq!(attempts, 1);
        }
        // 429 and 408: the server says it did not process the request.
        for s in [429, 408] {
            let (step, attempts) = run(&p, POST, &[status(s), status(201)], &mut Fake::default());
            assert_eq!(
                step,
                Step::Finish {
                    reason: StopReason::NotRetryable,
                    cause: Cause::AttemptError
                },
                "{s}"
            );
            assert_eq!(attempts, 2);
        }
    }

    #[test]
    fn network_errors_and_timeouts_follow_their_options() {
        let p = policy();
        let (_, attempts) = run(
            &p,
            GET,
            &[
                outcome(Outcome::NetworkError),
                outcome(Outcome::Timeout),
                status(200),
            ],
            &mut Fake::default(),
        );
        assert_eq!(attempts, 3);
        let off = RetryPolicy {
            retry_on_network_error: false,
            retry_on_timeout: false,
            ..policy()
        };
        for o in [Outcome::NetworkError, Outcome::Timeout] {
            let (step, attempts) = run(&off, GET, &[outcome(o)], &mut Fake::default());
            assert_eq!(
                step,
                Step::Finish {
                    reason: StopReason::NotRetryable,
                    cause: Cause::AttemptError
                }
            );
            assert_eq!(attempts, 1);
        }
    }

    #[test]
    fn the_servers_wait_comes_from_retry_after_or_ratelimit_within_the_cap() {
        let p = policy();
        let mut g = Fake::default();
        for (name, value, want) in [
            ("ratelimit-reset", "3", Some(3000.0)),
            ("ratelimit", "limit=10, remaining=0, reset=2", Some(2000.0)),
        ] {
            let read = move |n: &str| (n == name).then(|| value.to_string());
            let mut e = CallEngine::new(&p, 0.0, GET);
            e.next_attempt(&p, &mut g, 0.0);
            let step = e
                .settled(
                    &p,
                    Settled {
                        outcome: Outcome::Status(429),
                        redirected: false,
                        header: &read,
                        url_header: &none,
                    },
                    &mut g,
                    0.0,
                    &mut Half,
                )
                .1;
            match (step, want) {
                (Step::AskHooks { delay_ms, .. }, Some(w)) => assert_eq!(delay_ms, w, "{name}"),
                (other, _) => panic!("{name}: {other:?}"),
            }
        }
        // Past maxRetryAfterMs: the call ends.
        let capped = RetryPolicy {
            max_retry_after_ms: Some(1000.0),
            ..policy()
        };
        let long = |n: &str| (n == "retry-after").then(|| "5".to_string());
        let mut e = CallEngine::new(&capped, 0.0, GET);
        e.next_attempt(&capped, &mut g, 0.0);
        let s = Settled {
            outcome: Outcome::Status(503),
            redirected: false,
            header: &long,
            url_header: &none,
        };
        assert_eq!(
            e.settled(&capped, s, &mut g, 0.0, &mut Half).1,
            Step::Finish {
                reason: StopReason::RetryAfter,
                cause: Cause::AttemptError
            }
        );
        // respectRetryAfter: false: the backoff, and the wait's headers are never read.
        let ignoring = RetryPolicy {
            respect_retry_after: false,
            ..policy()
        };
        let never = |n: &str| -> Option<String> {
            assert!(SHOULD_RETRY_HEADERS.contains(&n), "read {n}");
            None
        };
        let mut e = CallEngine::new(&ignoring, 0.0, GET);
        e.next_attempt(&ignoring, &mut g, 0.0);
        let s = Settled {
            outcome: Outcome::Status(503),
            redirected: false,
            header: &never,
            url_header: &none,
        };
        assert!(
            matches!(e.settled(&ignoring, s, &mut g, 0.0, &mut Half).1, Step::AskHooks { delay_ms, .. } if delay_ms == 100.0)
        );
    }

    #[test]
    fn the_guards_are_told_the_wait_a_failure_asked_for() {
        let one_second = |n: &str| (n == "retry-after").then(|| "1".to_string());
        let zero = |n: &str| (n == "retry-after").then(|| "0".to_string());
        let reset = |n: &str| (n == "ratelimit-reset").then(|| "2".to_string());
        type Header<'a> = &'a dyn Fn(&str) -> Option<String>;
        let headers: [(Header, u16, f64); 5] = [
            (&one_second, 503, 1000.0),
            (&reset, 429, 2000.0),
            (&none, 503, 0.0),
            (&zero, 503, 0.0),
            // a success's Retry-After asks for nothing
            (&one_second, 200, 0.0),
        ];
        for (header, code, want) in headers {
            for respect in [true, false] {
                let p = RetryPolicy {
                    respect_retry_after: respect,
                    ..policy()
                };
                let mut g = Fake::default();
                let mut e = CallEngine::new(&p, 0.0, GET);
                e.next_attempt(&p, &mut g, 0.0);
                let s = Settled {
                    header,
                    ..status(code)
                };
                e.settled(&p, s, &mut g, 0.0, &mut Half);
                // respectRetryAfter: false reads no wait: the guards are told none either
                let want = if respect { want } else { 0.0 };
                assert_eq!(g.waits, [want], "{code}, respect {respect}");
            }
        }
    }

    #[test]
    fn a_redirected_post_ends_a_redirected_get_is_retried() {
        let p = policy();
        let keyed = CallFacts {
            has_key: true,
            ..POST
        };
        let redirected = Settled {
            outcome: Outcome::Status(503),
            redirected: true,
            header: &none,
            url_header: &none,
        };
        let (step, attempts) = run(&p, keyed, &[redirected], &mut Fake::default());
        assert_eq!(
            step,
            Step::Finish {
                reason: StopReason::NotRetryable,
                cause: Cause::AttemptError
            }
        );
        assert_eq!(attempts, 1);
        let again = Settled {
            outcome: Outcome::Status(503),
            redirected: true,
            header: &none,
            url_header: &none,
        };
        let (_, attempts) = run(&p, GET, &[again, status(200)], &mut Fake::default());
        assert_eq!(attempts, 2);
    }

    #[test]
    fn an_attempt_cut_at_the_deadline_ends_with_its_error() {
        let p = RetryPolicy {
            deadline_ms: Some(500.0),
            ..policy()
        };
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        // The timeout came at the deadline: no time is left for a wait.
        let step = e
            .settled(&p, outcome(Outcome::Timeout), &mut g, 500.0, &mut Half)
            .1;
        assert_eq!(
            step,
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::AttemptError
            }
        );
        // A throttle turn no sooner than the deadline: the deadline's error.
        let mut g = Fake {
            turns: vec![Turn::Stop(StopReason::Deadline)],
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        assert_eq!(
            e.next_attempt(&p, &mut g, 0.0),
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::Deadline
            }
        );
    }

    #[test]
    fn the_backoff_grows_across_attempts() {
        let p = RetryPolicy {
            max_attempts: 4,
            ..policy()
        };
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        let mut delays = Vec::new();
        let mut now = 0.0;
        e.next_attempt(&p, &mut g, now);
        for _ in 0..3 {
            match e.settled(&p, status(503), &mut g, now, &mut Half).1 {
                Step::AskHooks { delay_ms, .. } => delays.push(delay_ms),
                other => panic!("{other:?}"),
            }
            e.hooks_done(true, now);
            now += 10_000.0;
            e.waited(&p, WaitKind::Backoff, &mut g, now, &mut Half);
            e.next_attempt(&p, &mut g, now);
        }
        assert_eq!(delays, vec![100.0, 200.0, 400.0]);
    }

    #[test]
    fn throttle_turns() {
        assert_eq!(throttle_turn(10.2, 0.0, 100.0, None), Turn::Wait(11.0));
        assert_eq!(
            throttle_turn(60.0, 50.0, 100.0, None),
            Turn::Stop(StopReason::Throttled)
        );
        assert_eq!(
            throttle_turn(60.0, 0.0, 100.0, Some(60.0)),
            Turn::Stop(StopReason::Deadline)
        );
        assert_eq!(
            throttle_turn(60.0, 0.0, 100.0, Some(61.0)),
            Turn::Wait(60.0)
        );
        assert!(is_pushback(429) && is_pushback(503) && !is_pushback(502) && !is_pushback(200));
    }

    #[test]
    fn retry_after_is_read_for_failures_only() {
        let p = policy();
        let asked = |name: &str| (name == "retry-after").then(|| "7".to_string());
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        let s = Settled {
            outcome: Outcome::Status(503),
            redirected: false,
            header: &asked,
            url_header: &none,
        };
        assert!(
            matches!(e.settled(&p, s, &mut g, 0.0, &mut Half).1, Step::AskHooks { delay_ms, .. } if delay_ms == 7000.0)
        );
        // A policy that retries a 3xx: its Retry-After is not a wait.
        let p = RetryPolicy {
            retry_on_status: vec![301],
            ..policy()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        let s = Settled {
            outcome: Outcome::Status(301),
            redirected: false,
            header: &asked,
            url_header: &none,
        };
        assert!(
            matches!(e.settled(&p, s, &mut g, 0.0, &mut Half).1, Step::AskHooks { delay_ms, .. } if delay_ms == 100.0)
        );
    }

    #[test]
    fn an_http_date_is_read_on_the_wall_clock() {
        let p = policy();
        // 10 s after the epoch; the engine's time is 0, the wall clock's 3 s ahead of it.
        let dated = |name: &str| {
            (name == "retry-after").then(|| "Thu, 01 Jan 1970 00:00:10 GMT".to_string())
        };
        let delay = |offset: Option<f64>| {
            let mut g = Fake::default();
            let mut e = CallEngine::new(&p, 0.0, GET);
            if let Some(ms) = offset {
                e.set_wall_offset_ms(ms);
            }
            e.next_attempt(&p, &mut g, 0.0);
            let s = Settled {
                header: &dated,
                ..status(503)
            };
            match e.settled(&p, s, &mut g, 0.0, &mut Half).1 {
                Step::AskHooks { delay_ms, .. } => delay_ms,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(delay(Some(3000.0)), 7000.0);
        assert_eq!(delay(None), 10_000.0);
        // An offset that is no number reads as none.
        assert_eq!(delay(Some(f64::NAN)), 10_000.0);
    }

    #[test]
    fn a_servers_dates_are_read_on_its_own_clock_when_it_sends_date() {
        let p = policy();
        // The server's clock reads 1 h after the epoch; the client's, the epoch (time 0).
        let delay = |headers: &[(&str, &str)]| {
            let owned: Vec<(String, String)> = headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            let header = move |name: &str| {
                owned
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            let mut g = Fake::default();
            let mut e = CallEngine::new(&p, 0.0, GET);
            e.next_attempt(&p, &mut g, 0.0);
            let s = Settled {
                header: &header,
                ..status(503)
            };
            match e.settled(&p, s, &mut g, 0.0, &mut Half).1 {
                Step::AskHooks { delay_ms, .. } => delay_ms,
                other => panic!("{other:?}"),
            }
        };
        let date = ("date", "Thu, 01 Jan 1970 01:00:00 GMT");
        // Read against the server's Date: 5 s, not an hour and 5 s (which `maxRetryAfterMs`
        // would refuse).
        assert_eq!(
            delay(&[("retry-after", "Thu, 01 Jan 1970 01:00:05 GMT"), date]),
            5000.0
        );
        // A date the server's clock has passed is no wait, whatever the client's clock says.
        assert_eq!(
            delay(&[("retry-after", "Thu, 01 Jan 1970 00:59:00 GMT"), date]),
            0.0
        );
        // An epoch RateLimit-Reset too (10^9 s is read as a Unix time).
        let date_1e9 = ("date", "Sun, 09 Sep 2001 01:46:30 GMT"); // 999,999,990 s
        assert_eq!(
            delay(&[("ratelimit-reset", "1000000000"), date_1e9]),
            10_000.0
        );
        // No usable Date: the client's clock (the epoch), as before.
        assert_eq!(
            delay(&[
                ("retry-after", "Thu, 01 Jan 1970 00:00:05 GMT"),
                ("date", "soon")
            ]),
            5000.0
        );
        assert_eq!(
            delay(&[("retry-after", "Thu, 01 Jan 1970 00:00:05 GMT")]),
            5000.0
        );
        // Seconds do not depend on any clock.
        assert_eq!(delay(&[("retry-after", "3"), date]), 3000.0);
        // A cached refusal, dated 4 s ago by the origin (`Age: 4`): 1 s is left.
        assert_eq!(
            delay(&[
                ("retry-after", "Thu, 01 Jan 1970 01:00:05 GMT"),
                date,
                ("age", "4")
            ]),
            1000.0
        );
    }

    #[test]
    fn a_deferred_retry_waits_without_counting_an_attempt() {
        let p = RetryPolicy {
            deadline_ms: Some(60_000.0),
            ..policy()
        };
        let mut g = Fake {
            budget: vec![Verdict::Defer],
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 0.0, &mut Half);
        e.hooks_done(true, 0.0);
        // Far more waits than maxAttempts: none is an attempt; each a backoff step more.
        let mut now = 100.0;
        let mut waits = Vec::new();
        for _ in 0..(p.max_attempts * 3) {
            match e.waited(&p, WaitKind::Backoff, &mut g, now, &mut Half) {
                Step::Wait {
                    ms,
                    kind: WaitKind::Skip,
                } => waits.push(ms),
                other => panic!("{other:?}"),
            }
            now += 100.0;
        }
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        g.budget = vec![Verdict::Allow];
        match e.waited(&p, WaitKind::Skip, &mut g, now, &mut Half) {
            Step::BeforeRetry {
                attempt, delay_ms, ..
            } => {
                assert_eq!(attempt, 2, "the retry goes as attempt 2");
                assert_eq!(
                    delay_ms,
                    100.0 + waits.iter().sum::<f64>(),
                    "every wait told"
                );
            }
            other => panic!("{other:?}"),
        }
        // The deadline still ends a deferred call.
        let mut g = Fake {
            budget: vec![Verdict::Defer],
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 0.0, &mut Half);
        e.hooks_done(true, 0.0);
        assert_eq!(
            e.waited(&p, WaitKind::Backoff, &mut g, 59_999.0, &mut Half),
            Step::Finish {
                reason: StopReason::Deadline,
                cause: Cause::AttemptError
            }
        );
    }

    #[test]
    fn a_skipped_retry_counts_as_an_attempt_made() {
        let p = policy();
        let mut g = Fake {
            budget: vec![Verdict::Skip],
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        // A skipping budget is not a stopping one: the retry is decided.
        assert!(matches!(
            e.settled(&p, status(503), &mut g, 0.0, &mut Half).1,
            Step::AskHooks { .. }
        ));
        e.hooks_done(true, 0.0);
        let mut now = 100.0;
        // The first attempt was sent; each skip is one more made, until maxAttempts.
        for _ in 1..p.max_attempts - 1 {
            assert!(matches!(
                e.waited(&p, WaitKind::Backoff, &mut g, now, &mut Half),
                Step::Wait {
                    kind: WaitKind::Skip,
                    ..
                }
            ));
            now += 1000.0;
        }
        assert_eq!(
            e.waited(&p, WaitKind::Skip, &mut g, now, &mut Half),
            Step::Finish {
                reason: StopReason::Budget,
                cause: Cause::AttemptError
            }
        );
        // A token budget stops instead.
        let mut g = Fake {
            budget: vec![Verdict::Stop],
            ..Fake::default()
        };
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        assert_eq!(
            e.settled(&p, status(503), &mut g, 0.0, &mut Half).1,
            Step::Finish {
                reason: StopReason::Budget,
                cause: Cause::AttemptError
            }
        );
    }

    /// A GET whose first attempt failed with a 503 and whose retry is to go at 100 ms (its
    /// backoff waited, the budget allowing it then).
    fn retry_due(p: &RetryPolicy, g: &mut Fake) -> CallEngine {
        let mut e = CallEngine::new(p, 0.0, GET);
        e.next_attempt(p, g, 0.0);
        assert!(matches!(
            e.settled(p, status(503), g, 0.0, &mut Half).1,
            Step::AskHooks { .. }
        ));
        e.hooks_done(true, 0.0);
        assert!(matches!(
            e.waited(p, WaitKind::Backoff, g, 100.0, &mut Half),
            Step::BeforeRetry { attempt: 2, .. }
        ));
        e
    }

    #[test]
    fn a_retry_that_waited_for_a_throttle_turn_asks_the_budget_again() {
        let p = policy();
        for verdict in [Verdict::Skip, Verdict::Stop] {
            let mut g = Fake::default();
            let mut e = retry_due(&p, &mut g);
            g.turns = vec![Turn::Wait(50.0)];
            assert_eq!(e.next_attempt(&p, &mut g, 100.0), Step::WaitTurn(50.0));
            // The retries queued with it went first and spent the budget.
            g.budget = vec![verdict];
            let step = e.turn_waited(&p, &mut g, 150.0, &mut Half);
            assert_eq!(g.sent, vec![1], "{verdict:?}: the retry was sent");
            assert_eq!(g.released, 1, "{verdict:?}: its turn is given back");
            match verdict {
                Verdict::Skip => assert!(
                    matches!(
                        step,
                        Step::Wait {
                            kind: WaitKind::Skip,
                            ..
                        }
                    ),
                    "{step:?}"
                ),
                _ => assert_eq!(
                    step,
                    Step::Finish {
                        reason: StopReason::Budget,
                        cause: Cause::AttemptError
                    }
                ),
            }
        }
        // Allowed still: the turn, then the send.
        let mut g = Fake::default();
        let mut e = retry_due(&p, &mut g);
        g.turns = vec![Turn::Wait(50.0)];
        e.next_attempt(&p, &mut g, 100.0);
        assert!(matches!(
            e.turn_waited(&p, &mut g, 150.0, &mut Half),
            Step::Send { attempt: 2, .. }
        ));
        assert_eq!(g.released, 0);
    }

    #[test]
    fn a_token_budget_spent_during_the_backoff_stops_the_retry() {
        let p = policy();
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 0.0, &mut Half);
        e.hooks_done(true, 0.0);
        // Other calls' failures spent it while this call waited.
        g.budget = vec![Verdict::Stop];
        assert_eq!(
            e.waited(&p, WaitKind::Backoff, &mut g, 100.0, &mut Half),
            Step::Finish {
                reason: StopReason::Budget,
                cause: Cause::AttemptError
            }
        );
        assert_eq!(g.sent, vec![1]);
    }

    #[test]
    fn a_failure_the_server_says_not_to_retry_is_the_answer() {
        let p = policy();
        for (name, value) in [
            ("x-should-retry", "false"),
            ("stripe-should-retry", " FALSE "),
        ] {
            let says = |n: &str| (n == name).then(|| value.to_string());
            let mut g = Fake::default();
            let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
            e.next_attempt(&p, &mut g, 0.0);
            let s = Settled {
                outcome: Outcome::Status(503),
                redirected: false,
                header: &says,
                url_header: &none,
            };
            assert_eq!(
                e.settled(&p, s, &mut g, 10.0, &mut Half).1,
                Step::Finish {
                    reason: StopReason::NotRetryable,
                    cause: Cause::AttemptError
                },
                "{name}: {value}"
            );
            // Still a transient failure to the guards (the origin is failing).
            assert_eq!(g.settled, vec![(Outcome::Status(503), true, 1)]);
        }
        // `true` changes nothing: a 400 is not retried, a 503 is.
        let yes = |n: &str| (n == "x-should-retry").then(|| "true".to_string());
        for (status, retried) in [(400, false), (503, true)] {
            let mut g = Fake::default();
            let mut e = CallEngine::new(&p, 0.0, GET);
            e.next_attempt(&p, &mut g, 0.0);
            let s = Settled {
                outcome: Outcome::Status(status),
                redirected: false,
                header: &yes,
                url_header: &none,
            };
            let step = e.settled(&p, s, &mut g, 10.0, &mut Half).1;
            assert_eq!(
                matches!(step, Step::AskHooks { .. }),
                retried,
                "{status}: {step:?}"
            );
        }
    }

    #[test]
    fn the_retry_after_a_skip_is_told_with_its_own_number_and_the_whole_wait() {
        let p = RetryPolicy {
            max_attempts: 5,
            ..policy()
        };
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, GET);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(503), &mut g, 0.0, &mut Half);
        assert_eq!(
            e.hooks_done(true, 0.0),
            Step::Wait {
                ms: 100.0,
                kind: WaitKind::Backoff
            }
        );
        // The budget skips attempt 2 after the first wait: another backoff (200 ms).
        g.budget = vec![Verdict::Skip];
        assert_eq!(
            e.waited(&p, WaitKind::Backoff, &mut g, 100.0, &mut Half),
            Step::Wait {
                ms: 200.0,
                kind: WaitKind::Skip
            }
        );
        // Then it allows: the retry about to go is attempt 3, after 300 ms of waiting.
        g.budget.clear();
        assert_eq!(
            e.waited(&p, WaitKind::Skip, &mut g, 300.0, &mut Half),
            Step::BeforeRetry {
                attempt: 3,
                delay_ms: 300.0,
                reason: RetryReason::Status
            }
        );
        assert!(matches!(
            e.next_attempt(&p, &mut g, 300.0),
            Step::Send { attempt: 3, .. }
        ));
    }

    #[test]
    fn a_202_is_polled_without_using_attempts() {
        let p = RetryPolicy {
            follow_accepted: true,
            max_attempts: 1,
            ..policy()
        };
        let loc = |name: &str| (name == "location").then(|| "https://api.example/op/1".to_string());
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
        e.next_attempt(&p, &mut g, 0.0);
        let s = Settled {
            outcome: Outcome::Status(202),
            redirected: false,
            header: &none,
            url_header: &loc,
        };
        assert_eq!(
            e.settled(&p, s, &mut g, 0.0, &mut Half).1,
            Step::Wait {
                ms: 100.0,
                kind: WaitKind::Poll
            }
        );
        // The poll: a GET of the Location, no guard asked, not an attempt.
        match e.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half) {
            Step::Send {
                attempt: 1,
                url: Some(u),
                retry_headers: false,
                ..
            } => assert_eq!(u, "https://api.example/op/1"),
            other => panic!("{other:?}"),
        }
        assert_eq!(g.sent, vec![1], "the poll was not sent as an attempt");
        let s = Settled {
            outcome: Outcome::Status(202),
            redirected: false,
            header: &none,
            url_header: &none,
        };
        let (counted, step) = e.settled(&p, s, &mut g, 100.0, &mut Half);
        assert!(!counted);
        assert!(matches!(
            step,
            Step::Wait {
                kind: WaitKind::Poll,
                ..
            }
        ));
        e.waited(&p, WaitKind::Poll, &mut g, 400.0, &mut Half);
        let (counted, step) = e.settled(&p, status(200), &mut g, 410.0, &mut Half);
        assert!(!counted);
        assert_eq!(
            step,
            Step::Finish {
                reason: StopReason::NotRetryable,
                cause: Cause::AttemptError
            }
        );
        assert_eq!(e.attempts(), 1);
        // A poll that fails is an attempt.
        let mut e2 = e.clone();
        e2.next_is_poll = true;
        e2.turn_waited(&p, &mut g, 500.0, &mut Half);
        let (counted, _) = e2.settled(&p, status(503), &mut g, 510.0, &mut Half);
        assert!(counted);
        assert_eq!(e2.attempts(), 2);
    }

    #[test]
    fn a_call_that_ends_before_a_final_answer_answers_with_the_202_that_said_where_to_look() {
        let p = RetryPolicy {
            follow_accepted: true,
            max_attempts: 2,
            ..policy()
        };
        let loc = |name: &str| (name == "location").then(|| "https://api.example/op/1".to_string());
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
        e.next_attempt(&p, &mut g, 0.0);
        assert!(!e.answers_with_kept_202(), "nothing accepted yet");
        e.settled(&p, accepted(&loc), &mut g, 0.0, &mut Half);
        assert!(e.keeps_this_202(), "the 202 that named the URL is kept");
        assert!(e.answers_with_kept_202());
        e.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half);
        // The poll's own 202, naming nothing: the first stays the one kept.
        e.settled(&p, accepted(&none), &mut g, 110.0, &mut Half);
        assert!(!e.keeps_this_202());
        assert!(e.answers_with_kept_202());
        e.waited(&p, WaitKind::Poll, &mut g, 400.0, &mut Half);
        // A final answer of the poll URL (a 404) is the answer.
        let mut done = e.clone();
        let (_, step) = done.settled(&p, status(404), &mut g, 410.0, &mut Half);
        assert!(matches!(step, Step::Finish { .. }));
        assert!(!done.answers_with_kept_202());
        // The poll fails (503): an attempt, the 2nd of 2, so the call ends; it was accepted,
        // and the 202 says so (not the status URL's 503).
        let (counted, step) = e.settled(&p, status(503), &mut g, 410.0, &mut Half);
        assert!(counted);
        assert_eq!(
            step,
            Step::Finish {
                reason: StopReason::Attempts,
                cause: Cause::AttemptError
            }
        );
        assert!(!e.keeps_this_202());
        assert!(e.answers_with_kept_202());
        // A keyed request repeated (no URL) answered 409 "in progress" until the attempts run
        // out: a failure as a poll's is judged (retryKeyedConflict), so the 202 answers.
        let mut r = CallEngine::new(&p, 0.0, KEYED_POST);
        r.next_attempt(&p, &mut g, 0.0);
        r.settled(&p, accepted(&none), &mut g, 0.0, &mut Half);
        assert!(r.keeps_this_202(), "a repeated request's 202 is kept");
        r.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half);
        let (_, step) = r.settled(&p, status(409), &mut g, 110.0, &mut Half);
        assert!(matches!(step, Step::Finish { .. }), "{step:?}");
        assert!(r.answers_with_kept_202());
        // Without followAccepted nothing is kept.
        let q = policy();
        let mut f = CallEngine::new(&q, 0.0, KEYED_POST);
        f.next_attempt(&q, &mut g, 0.0);
        f.settled(&q, accepted(&loc), &mut g, 0.0, &mut Half);
        assert!(!f.keeps_this_202() && !f.answers_with_kept_202());
    }

    #[test]
    fn a_repeat_answered_with_the_stored_failure_ends_with_it() {
        let p = RetryPolicy {
            follow_accepted: true,
            max_attempts: 3,
            ..policy()
        };
        fn replayed(name: &str) -> Option<String> {
            (name == "idempotent-replayed").then(|| " TRUE".to_string())
        }
        fn refused(name: &str) -> Option<String> {
            (name == "x-should-retry").then(|| "false".to_string())
        }
        let failure = |header: &'static dyn Fn(&str) -> Option<String>| Settled {
            outcome: Outcome::Status(500),
            redirected: false,
            header,
            url_header: &none,
        };
        // A keyed request repeated after its 202 (no URL): the replayed 500 is the work's
        // result, not a failed poll: the call ends with it, not with the 202.
        for header in [
            &replayed as &'static dyn Fn(&str) -> Option<String>,
            &refused,
        ] {
            let mut g = Fake::default();
            let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
            e.next_attempt(&p, &mut g, 0.0);
            e.settled(&p, accepted(&none), &mut g, 0.0, &mut Half);
            e.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half);
            let (counted, step) = e.settled(&p, failure(header), &mut g, 110.0, &mut Half);
            assert!(!counted, "a final answer to a poll is no attempt");
            assert_eq!(
                step,
                Step::Finish {
                    reason: StopReason::NotRetryable,
                    cause: Cause::AttemptError
                }
            );
            assert!(!e.answers_with_kept_202());
        }
        // The same 500, not replayed: a failed poll, retried, and the 202 kept meanwhile.
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, accepted(&none), &mut g, 0.0, &mut Half);
        e.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half);
        let (counted, step) = e.settled(&p, status(500), &mut g, 110.0, &mut Half);
        assert!(counted);
        assert!(!matches!(step, Step::Finish { .. }), "{step:?}");
        assert!(e.answers_with_kept_202());
        // A status URL's replayed 500 is the monitor's: a failed poll as before.
        let loc = |name: &str| (name == "location").then(|| "https://api.example/op/1".to_string());
        let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, accepted(&loc), &mut g, 0.0, &mut Half);
        e.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half);
        let (counted, step) = e.settled(&p, failure(&replayed), &mut g, 110.0, &mut Half);
        assert!(counted);
        assert!(!matches!(step, Step::Finish { .. }), "{step:?}");
        assert!(e.answers_with_kept_202());
        // Without followAccepted: a keyed request's replayed failure is not retried; a keyless
        // one's header means nothing.
        let q = policy();
        let mut f = CallEngine::new(&q, 0.0, KEYED_POST);
        f.next_attempt(&q, &mut g, 0.0);
        let (_, step) = f.settled(&q, failure(&replayed), &mut g, 0.0, &mut Half);
        assert_eq!(
            step,
            Step::Finish {
                reason: StopReason::NotRetryable,
                cause: Cause::AttemptError
            }
        );
        let mut f = CallEngine::new(&q, 0.0, GET);
        f.next_attempt(&q, &mut g, 0.0);
        let (_, step) = f.settled(&q, failure(&replayed), &mut g, 0.0, &mut Half);
        assert!(!matches!(step, Step::Finish { .. }), "{step:?}");
    }

    #[test]
    fn polls_on_another_origin_ask_and_tell_no_guard() {
        let p = RetryPolicy {
            follow_accepted: true,
            ..policy()
        };
        let loc =
            |name: &str| (name == "location").then(|| "https://status.example/op/1".to_string());
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, accepted(&loc), &mut g, 0.0, &mut Half);
        assert_eq!(e.poll_url(), Some("https://status.example/op/1"));
        e.polls_elsewhere(true);
        assert_eq!(g.settled.len(), 1, "the 202 is the request origin's");
        assert!(matches!(
            e.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half),
            Step::Send { url: Some(_), .. }
        ));
        // The poll fails (503): counted as an attempt, but not by the guards; the request
        // origin's open circuit and empty budget do not stop its retry either.
        g.open_for = Some(5_000.0);
        g.open_at = true;
        g.budget = vec![Verdict::Stop];
        let (counted, step) = e.settled(&p, status(503), &mut g, 100.0, &mut Half);
        assert!(counted);
        assert_eq!(
            g.settled.len(),
            1,
            "the poll's failure was told to the guards"
        );
        let step = match step {
            Step::AskHooks { .. } => e.hooks_done(true, 100.0),
            other => panic!("{other:?}"),
        };
        let Step::Wait { ms, kind } = step else {
            panic!("{step:?}")
        };
        let step = match e.waited(&p, kind, &mut g, 100.0 + ms, &mut Half) {
            Step::BeforeRetry { .. } => e.next_attempt(&p, &mut g, 100.0 + ms),
            other => other,
        };
        assert!(matches!(step, Step::Send { url: Some(_), .. }), "{step:?}");
        assert_eq!(
            g.sent,
            vec![1],
            "a retry of the poll was sent as the guards' attempt"
        );
    }

    #[test]
    fn a_poll_cut_by_the_deadline_keeps_the_202() {
        let p = RetryPolicy {
            follow_accepted: true,
            deadline_ms: Some(1000.0),
            ..policy()
        };
        let mut g = Fake::default();
        let mut e = CallEngine::new(&p, 0.0, KEYED_POST);
        e.next_attempt(&p, &mut g, 0.0);
        e.settled(&p, status(202), &mut g, 0.0, &mut Half);
        e.waited(&p, WaitKind::Poll, &mut g, 100.0, &mut Half);
        assert!(e.poll_cut(true, true));
        assert!(!e.poll_cut(false, true));
    }
}
