//! The retry loop: send, classify, ask the core, wait, send again.
//!
//! The policy is entirely [`RetryState::decide`]; this loop only performs it, calls the
//! caller's hooks, and keeps the attempt history for `RetryError`.

use std::cell::RefCell;

use js_sys::{Date, Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::errors::{retry_error, timeout_error, type_error, AttemptRecord};
use super::guards::{circuit_open_error, origin_of, BreakerShared};
use super::js::AbortSignal;
use super::js::{self, Response};
use super::options::CallOptions;
use super::request::RequestTemplate;
use super::timer::{abort_reason, sleep, AttemptAbort};
use crate::core::backoff::Rng;
use crate::core::breaker::{Admission, BreakerState};
use crate::core::classify::{is_transient, Outcome, RetryReason};
use crate::core::decide::{AttemptOutcome, Decision, RetryState};
use crate::core::options::RetryPolicy;
use crate::core::retry_after::server_delay_ms;
use crate::core::throttle::AdaptiveThrottle;

/// Jitter from `Math.random` (jitter needs spread, not secrecy; keys use the CSPRNG).
pub struct MathRandom;

impl Rng for MathRandom {
    fn next_f64(&mut self) -> f64 {
        js_sys::Math::random()
    }
}

/// Call `transport` (or the global `fetch`) and wait for its answer.
async fn send(
    transport: &Option<Function>,
    input: &JsValue,
    init: &JsValue,
) -> Result<JsValue, JsValue> {
    let returned = match transport {
        Some(f) => f.call2(&JsValue::UNDEFINED, input, init)?,
        None => js::global_fetch(input, init)?,
    };
    JsFuture::from(Promise::resolve(&returned)).await
}

/// Call a caller hook with `arg`, waiting for it when it returns a promise.
async fn call_hook(hook: &Function, arg: &JsValue) -> Result<JsValue, JsValue> {
    let returned = hook.call1(&JsValue::UNDEFINED, arg)?;
    JsFuture::from(Promise::resolve(&returned)).await
}

/// Cancel the body of a response we will not hand out, so its connection is freed.
async fn discard(response: &Response) {
    let body = response.body();
    if body.is_object() {
        let stream: &js::ReadableStream = body.unchecked_ref();
        if let Ok(p) = stream.cancel() {
            let _ = JsFuture::from(p).await;
        }
    }
}

/// The object given to `shouldRetry` and `onRetry`.
fn retry_context(
    attempt: u32,
    delay_ms: u64,
    reason: RetryReason,
    response: Option<&Response>,
    status: Option<u16>,
    error: Option<&JsValue>,
    key: Option<&str>,
) -> JsValue {
    let o: JsValue = js_sys::Object::new().into();
    js::set(&o, "attempt", &JsValue::from(attempt));
    js::set(&o, "delayMs", &JsValue::from_f64(delay_ms as f64));
    js::set(&o, "reason", &JsValue::from_str(reason.as_str()));
    if let Some(r) = response {
        js::set(&o, "response", r);
    }
    if let Some(s) = status {
        js::set(&o, "status", &JsValue::from(s));
    }
    if let Some(e) = error {
        js::set(&o, "error", e);
    }
    if let Some(k) = key {
        js::set(&o, "idempotencyKey", &JsValue::from_str(k));
    }
    o
}

/// A half-open probe slot of the circuit breaker, freed if the attempt ends without a result.
struct ProbeSlot<'a> {
    breaker: Option<&'a BreakerShared>,
    origin: &'a str,
    probe: bool,
}

impl ProbeSlot<'_> {
    /// Record the attempt's result (and report a state change).
    fn settle(mut self, transient_failure: bool, now: f64) {
        if let Some(b) = self.breaker.take() {
            let t = b
                .state
                .borrow_mut()
                .record(self.origin, self.probe, transient_failure, now);
            b.report(self.origin, t);
        }
    }
}

impl Drop for ProbeSlot<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.breaker {
            b.state.borrow_mut().release(self.origin, self.probe);
        }
    }
}

/// Wait until the throttle gives this attempt its turn. Gives the turn up (and stops the
/// call) on abort, or when the deadline would pass first.
async fn wait_for_turn(
    throttle: &RefCell<AdaptiveThrottle>,
    origin: &str,
    state: &RetryState,
    policy: &RetryPolicy,
    signals: &[AbortSignal],
    history: &[AttemptRecord],
) -> Result<(), JsValue> {
    let queued_at = Date::now();
    let max_wait = throttle.borrow().config().max_wait_ms;
    let ticket = throttle.borrow_mut().enqueue(origin, queued_at);
    loop {
        let now = Date::now();
        let wait = match throttle.borrow_mut().poll(origin, ticket, now) {
            Ok(()) => return Ok(()),
            Err(wait) => wait,
        };
        if now - queued_at + wait > max_wait {
            throttle.borrow_mut().abandon(origin, ticket, now);
            return Err(retry_error("throttled", history, &JsValue::UNDEFINED));
        }
        if state.deadline_left_ms(now).is_some_and(|left| wait >= left) {
            throttle.borrow_mut().abandon(origin, ticket, now);
            let cause = timeout_error(policy.deadline_ms.unwrap_or(0.0).ceil() as u64);
            return Err(retry_error("deadline", history, &cause));
        }
        if let Err(reason) = sleep(wait.ceil() as u64, signals).await {
            throttle.borrow_mut().abandon(origin, ticket, Date::now());
            return Err(reason);
        }
    }
}

/// Run one `retryFetch` call to its end.
pub async fn run(input: JsValue, init: JsValue, options: CallOptions) -> Result<JsValue, JsValue> {
    let policy = &options.policy;
    let template = RequestTemplate::new(input, &init, &options).await?;
    let signals = template.signals.as_slice();
    let origin = if options.has_guards() {
        origin_of(&template.url())
    } else {
        String::new()
    };
    let breaker = options.breaker.as_deref();
    let call_started = Date::now();
    let mut state = RetryState::new(policy, call_started);
    let mut rng = MathRandom;
    let mut history: Vec<AttemptRecord> = Vec::new();
    let first_attempt_at: Option<String> = policy
        .retry_headers
        .then(|| String::from(Date::new(&JsValue::from_f64(call_started)).to_iso_string()));

    loop {
        if let Some(reason) = abort_reason(signals) {
            return Err(reason);
        }
        // The circuit breaker: an open circuit sends nothing.
        let mut probe = false;
        if let Some(b) = breaker {
            let (admission, transition) = b.state.borrow_mut().admit(&origin, Date::now());
            b.report(&origin, transition);
            match admission {
                Admission::Allowed { probe: p } => probe = p,
                Admission::Rejected { retry_after_ms } => {
                    let open = circuit_open_error(&origin, retry_after_ms);
                    return Err(if history.is_empty() {
                        open
                    } else {
                        retry_error("circuit-open", &history, &open)
                    });
                }
            }
        }
        let slot = ProbeSlot {
            breaker,
            origin: &origin,
            probe,
        };
        // The adaptive throttle: wait for this attempt's turn.
        if let Some(t) = &options.throttle {
            wait_for_turn(t, &origin, &state, policy, signals, &history).await?;
        }

        let attempt = state.start_attempt();
        let started = Date::now();
        if let Some(t) = &options.throttle {
            t.borrow_mut().on_send(&origin, started);
        }
        let limit = state.attempt_time_limit_ms(policy, started);
        let timeout_cause = limit
            .map(|ms| timeout_error(ms.ceil() as u64))
            .unwrap_or(JsValue::UNDEFINED);
        // No caller signal and no time limit: nothing can abort the attempt, so no signal.
        let abort = if signals.is_empty() && limit.is_none() {
            None
        } else {
            Some(AttemptAbort::new(signals, limit, timeout_cause.clone())?)
        };
        let retry_headers = match &first_attempt_at {
            Some(at) if attempt > 1 => Some((attempt - 1, at.as_str())),
            _ => None,
        };
        let (attempt_input, attempt_init) = template.attempt(abort.as_ref().map(AttemptAbort::signal), retry_headers)?;
        let sent = send(&options.fetch, &attempt_input, &attempt_init).await;
        let timed_out = abort.as_ref().is_some_and(AttemptAbort::timed_out);
        drop(abort);
        let ended = Date::now();

        if let Some(reason) = abort_reason(signals) {
            if let Ok(r) = &sent {
                discard(r.unchecked_ref()).await;
            }
            return Err(reason);
        }
        let (outcome, response, error) = match sent {
            Ok(value) if value.is_object() => {
                let response: Response = value.unchecked_into();
                (
                    Outcome::Status(js::response_status(&response)),
                    Some(response),
                    None,
                )
            }
            Ok(_) => {
                return Err(type_error(
                    "retryFetch: fetch resolved to something that is not a Response",
                ))
            }
            Err(_) if timed_out => (Outcome::Timeout, None, Some(timeout_cause)),
            Err(e) => (Outcome::NetworkError, None, Some(e)),
        };
        let status = match outcome {
            Outcome::Status(s) => Some(s),
            _ => None,
        };

        // Feed the shared guards.
        let transient = is_transient(policy, outcome);
        slot.settle(transient, ended);
        let success = status.is_some_and(|s| s < 400);
        if let Some(b) = &options.budget {
            let mut b = b.borrow_mut();
            if transient {
                b.record_failure(&origin);
            } else if success {
                b.record_success(&origin);
            }
        }
        if let Some(t) = &options.throttle {
            let throttled = matches!(status, Some(429) | Some(503));
            if throttled || success {
                t.borrow_mut().on_answer(&origin, started, throttled, ended);
            }
        }

        let server_delay = match (&response, status) {
            (Some(r), Some(s)) if s >= 400 && policy.respect_retry_after => server_delay_ms(
                js::response_header(r, "retry-after").as_deref(),
                js::response_header(r, "ratelimit-reset").as_deref(),
                js::response_header(r, "ratelimit").as_deref(),
                ended,
            ),
            _ => None,
        };
        history.push(AttemptRecord {
            attempt,
            started_at: started,
            duration_ms: ended - started,
            status,
            error: error.clone(),
            delay_ms: None,
        });
        let report = AttemptOutcome {
            outcome,
            idempotent: template.idempotent,
            has_key: template.key.is_some(),
            server_delay_ms: server_delay,
            replayable: template.replayable(),
            budget_allows_retry: options
                .budget
                .as_ref()
                .map_or(true, |b| b.borrow().allows_retry(&origin)),
        };
        let now = Date::now();
        let decision = state.decide(policy, report, now, &mut rng);
        let finish = |stop_reason: &str, history: &[AttemptRecord]| -> Result<JsValue, JsValue> {
            match (&response, &error) {
                (Some(r), _) => Ok(r.clone().into()),
                (None, Some(e)) => Err(retry_error(stop_reason, history, e)),
                (None, None) => Err(retry_error(stop_reason, history, &JsValue::UNDEFINED)),
            }
        };
        let (delay_ms, reason) = match decision {
            Decision::Stop(stop) => return finish(stop.as_str(), &history),
            Decision::Retry {
                delay_ms, reason, ..
            } => (delay_ms, reason),
        };
        // A breaker that will still be open when the wait ends: stop now, with this outcome.
        if let Some(b) = breaker {
            if b.state.borrow().state(&origin, now + delay_ms as f64) == BreakerState::Open {
                return finish("circuit-open", &history);
            }
        }

        let key = template.key.as_deref();
        if let Some(hook) = &options.should_retry {
            let ctx = retry_context(
                attempt,
                delay_ms,
                reason,
                response.as_ref(),
                status,
                error.as_ref(),
                key,
            );
            let verdict = call_hook(hook, &ctx).await?;
            match verdict.as_bool() {
                Some(true) => {}
                Some(false) => return finish("shouldRetry", &history),
                None => {
                    return Err(type_error(
                        "retryFetch: shouldRetry must return true or false (or a promise of one)",
                    ))
                }
            }
        }
        if let Some(hook) = &options.on_retry {
            let info = retry_context(attempt, delay_ms, reason, None, status, error.as_ref(), key);
            call_hook(hook, &info).await?;
        }
        if let Some(r) = &response {
            discard(r).await;
        }
        if let Some(last) = history.last_mut() {
            last.delay_ms = Some(delay_ms);
        }
        sleep(delay_ms, signals).await?;
    }
}
