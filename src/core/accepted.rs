//! Following `202 Accepted` to the final answer (option `followAccepted`).
//!
//! A server that takes long work answers `202 Accepted` and says where to look:
//!
//! 1. `Operation-Location` (preferred, the status monitor of Azure and Microsoft's REST
//!    guidelines) or `Location`: the call polls that URL with `GET` until it answers
//!    something other than 202. A later 202 with its own header moves the poll there; one
//!    without keeps polling the same URL.
//! 2. No such header, on a request that carries an idempotency key (ours or the caller's) and
//!    whose body can be sent again: the call repeats the request, same key, same bytes (the
//!    IETF Idempotency-Key draft's server answers a repeat with the stored result once there
//!    is one).
//! 3. Neither: the 202 is the answer (nothing to poll).
//!
//! The wait before each poll (or repeat) takes the 202's `Retry-After` as its least, clamped
//! to `maxRetryAfterMs` and to what `setTimeout` accepts (not refused: a server saying "later"
//! is not a failure), and spreads it above by a window that does not grow from poll to poll
//! ([`Backoff::above_floor`], `steady`: clients a server accepted together do not come back
//! together, and the server's pace is kept); without one, with one that asks for no wait (`0`,
//! a date past: never a tight loop), or with `respectRetryAfter: false`, it is the backoff
//! delay of the same number, on a schedule of the polls' own (the first poll waits the first
//! backoff step). A wait that would not end before the deadline is not started: the 202 is
//! the answer, as for retries.
//!
//! The 202 the call answers with when it ends before a final answer (the deadline, a poll
//! that failed and ran out of retries) is the last one that said where to look
//! ([`Accepted::keeps_last_202`]): a poll's own 202 without a URL header does not replace it.
//!
//! Polls are not attempts: they use neither `maxAttempts` nor the guards' bookkeeping of
//! failures. A poll that fails ([`poll_failed`]: a network error, a timeout, a status the
//! policy retries) is one, and is retried under the normal rules.
//!
//! Everything here is pure: URLs arrive resolved (the shell resolves a header against the
//! 202's URL with the platform's URL parser), time as ms numbers, randomness as an [`Rng`].

use super::backoff::{Backoff, Rng};
use super::classify::{
    classify, has_credentials, redirect_refused, Outcome, Verdict, CROSS_ORIGIN_DROPPED_HEADERS,
    REQUEST_BODY_HEADERS,
};
use super::decide::RetryState;
use super::options::RetryPolicy;
use super::retry_after::parse_retry_after;

/// What the shell read from one `202 Accepted`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AcceptedAnswer<'a> {
    /// `Operation-Location`, resolved against the 202's URL; `None` when absent or not a URL.
    pub operation_location: Option<&'a str>,
    /// `Location`, resolved against the 202's URL; `None` when absent or not a URL.
    pub location: Option<&'a str>,
    /// The raw `Retry-After` value, if any.
    pub retry_after: Option<&'a str>,
    /// What the server's clock read when it answered (ms since the Unix epoch: its `Date`),
    /// against which an HTTP-date `Retry-After` is read; `None` (the default): the wall clock.
    pub server_now_ms: Option<f64>,
    /// The request that got the 202 carries an idempotency key.
    pub has_key: bool,
    /// Its body can be sent again (not a stream above the buffering limit, not one-shot).
    pub replayable: bool,
    /// Its method is idempotent (RFC 9110).
    pub idempotent: bool,
    /// The 202 ends a redirect: for a non-idempotent request the server took it, and it is
    /// never sent again (the rule of [`super::decide`]), so it is not repeated either.
    pub redirected: bool,
    /// The 202 says `X-Should-Retry: false` (or `Stripe-Should-Retry: false`): the request
    /// must not be sent again (a server whose stored answer failed would run it again), so it
    /// is not repeated; a poll URL it names is still polled (another request, a `GET`).
    pub refuses_repeat: bool,
}

/// Why a 202 is the call's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcceptedStop {
    /// No `Operation-Location` or `Location` to poll, and no key to repeat the request with
    /// (or the server said not to send it again).
    NothingToPoll,
    /// The wait before the next poll would not end before the deadline.
    Deadline,
}

/// What follows a `202 Accepted`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Wait `delay_ms`, then `GET` this URL.
    Poll {
        /// The URL to poll (absolute).
        url: String,
        /// The wait, in whole ms within `0..=2147483647`.
        delay_ms: u64,
        /// True when the wait came from the 202's `Retry-After`.
        from_server: bool,
    },
    /// Wait `delay_ms`, then send the request again, same key, same body.
    Repeat {
        /// The wait, in whole ms within `0..=2147483647`.
        delay_ms: u64,
        /// True when the wait came from the 202's `Retry-After`.
        from_server: bool,
    },
    /// The 202 is the answer.
    Stop(AcceptedStop),
}

/// Following the 202s of one call: where the polls go, and their own backoff schedule.
#[derive(Clone, Debug)]
pub struct Accepted {
    backoff: Backoff,
    polls: u32,
    poll_url: Option<String>,
    /// The last 202 given to [`Accepted::next`] is the one to answer with (it named the poll
    /// URL, or the request is repeated).
    keeps_last: bool,
    /// How far the wall clock is ahead of the time [`Accepted::next`] is given (a server's
    /// `Retry-After` date is read on the wall clock); 0 by default.
    wall_offset_ms: f64,
}

/// Is `url` one a poll can go to: an `http:` or `https:` URL fetch sends to (not a bad port),
/// with no user name or password in it (a `Request` of such a URL cannot be made)? Any other
/// (`data:`, `ftp:`, a bad port, `https://user:pass@host/`) names nothing: the 202 is followed
/// as if it had no such header, never with a made-up answer or an error after the request
/// was sent.
fn pollable(url: &Option<&str>) -> bool {
    url.is_some_and(|u| redirect_refused(u).is_none() && !has_credentials(u))
}

impl Accepted {
    /// The state of a call that met its first 202.
    pub fn new(policy: &RetryPolicy) -> Self {
        Accepted {
            backoff: Backoff::new(policy),
            polls: 0,
            poll_url: None,
            keeps_last: false,
            wall_offset_ms: 0.0,
        }
    }

    /// The wall clock is `ms` ahead of the time [`Accepted::next`] is given from now on (as
    /// [`super::engine::CallEngine::set_wall_offset_ms`]); a value that is no number reads as 0.
    pub fn set_wall_offset_ms(&mut self, ms: f64) {
        self.wall_offset_ms = if ms.is_finite() { ms } else { 0.0 };
    }

    /// Polls (and repeats) decided so far.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    /// The URL the polls go to, once a 202 named one; `None` before, and while the request
    /// is repeated instead. A failed poll is retried there too.
    pub fn poll_url(&self) -> Option<&str> {
        self.poll_url.as_deref()
    }

    /// Is the last 202 given to [`Accepted::next`] the one the call answers with if it ends
    /// before a final answer? Yes when it named the URL to poll, or when the request is
    /// repeated (no URL); no for a poll's 202 that named none (the one before it says where
    /// to look).
    pub fn keeps_last_202(&self) -> bool {
        self.keeps_last
    }

    /// What follows a 202 read as `answer` at `now_ms`, in a call whose retry state (for the
    /// deadline) is `state`.
    pub fn next<R: Rng + ?Sized>(
        &mut self,
        policy: &RetryPolicy,
        state: &RetryState,
        answer: &AcceptedAnswer<'_>,
        now_ms: f64,
        rng: &mut R,
    ) -> Follow {
        let named = if pollable(&answer.operation_location) {
            answer.operation_location
        } else if pollable(&answer.location) {
            answer.location
        } else {
            None
        };
        if let Some(url) = named {
            self.poll_url = Some(url.to_string());
        }
        let repeat = self.poll_url.is_none();
        self.keeps_last = named.is_some() || repeat;
        if repeat
            && (answer.refuses_repeat
                || !(answer.has_key
                    && answer.replayable
                    && (answer.idempotent || !answer.redirected)))
        {
            return Follow::Stop(AcceptedStop::NothingToPoll);
        }
        self.polls = self.polls.saturating_add(1);
        let asked = answer
            .retry_after
            .filter(|_| policy.respect_retry_after)
            .and_then(|v| {
                let server_now = answer.server_now_ms.unwrap_or(now_ms + self.wall_offset_ms);
                parse_retry_after(v, server_now)
            });
        let (delay_ms, from_server) = match asked {
            // The least wait, spread above by a steady window (within the deadline when it
            // fits there). A wait of nothing (`0`, a date past) is no wait asked: the poll's
            // own backoff, so that it never polls in a tight loop; nor is one that
            // `maxRetryAfterMs` cuts to nothing.
            Some(ms) if ms.min(policy.retry_after_cap_ms()) >= 1.0 => {
                let cap = policy.retry_after_cap_ms();
                let floor = ms.min(cap);
                let within = state.deadline_left_ms(now_ms);
                (
                    self.backoff.above_floor(floor, cap, within, true, rng),
                    true,
                )
            }
            _ => (self.backoff.next_delay(rng), false),
        };
        if !state.wait_fits(now_ms, delay_ms as f64) {
            return Follow::Stop(AcceptedStop::Deadline);
        }
        match &self.poll_url {
            Some(url) if !repeat => Follow::Poll {
                url: url.clone(),
                delay_ms,
                from_server,
            },
            _ => Follow::Repeat {
                delay_ms,
                from_server,
            },
        }
    }
}

/// Is a poll's outcome a failure (so it counts as an attempt and is retried under the normal
/// rules)? A network error, a timeout, a status the policy retries; not a 202, not a final
/// answer. `idempotent` and `has_key` describe what the poll sent (a `GET` poll is idempotent;
/// a repeat is the call's own request).
pub fn poll_failed(
    policy: &RetryPolicy,
    outcome: Outcome,
    idempotent: bool,
    has_key: bool,
) -> bool {
    classify(policy, outcome, idempotent, has_key) != Verdict::Final
}

/// The headers the request carried that a `GET` poll does not send: the request-body headers
/// ([`REQUEST_BODY_HEADERS`], which fetch drops too when a redirect turns a request into a
/// `GET`), the idempotency key's header (a poll is a read, not the operation again), and,
/// when the poll URL is of another origin than the request, the credentials fetch does not
/// send to another origin ([`CROSS_ORIGIN_DROPPED_HEADERS`]).
pub fn poll_dropped_headers(key_header: &str, same_origin: bool) -> Vec<&str> {
    let mut names = REQUEST_BODY_HEADERS.to_vec();
    names.push(key_header);
    if !same_origin {
        names.extend(CROSS_ORIGIN_DROPPED_HEADERS);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::backoff::SplitMix64;
    use crate::core::options::Jitter;

    /// An injected RNG that always gives the same sample.
    struct Fixed(f64);
    impl Rng for Fixed {
        fn next_f64(&mut self) -> f64 {
            self.0
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            jitter: Jitter::None,
            follow_accepted: true,
            ..RetryPolicy::default()
        }
    }

    fn keyed_post() -> AcceptedAnswer<'static> {
        AcceptedAnswer {
            has_key: true,
            replayable: true,
            ..AcceptedAnswer::default()
        }
    }

    fn poll(url: &str, delay_ms: u64, from_server: bool) -> Follow {
        Follow::Poll {
            url: url.into(),
            delay_ms,
            from_server,
        }
    }

    #[test]
    fn follow_accepted_is_off_by_default() {
        assert!(!RetryPolicy::default().follow_accepted);
    }

    #[test]
    fn operation_location_wins_over_location() {
        let p = policy();
        let state = RetryState::new(&p, 0.0);
        let mut a = Accepted::new(&p);
        let answer = AcceptedAnswer {
            operation_location: Some("https://api.example/operations/7"),
            location: Some("https://api.example/orders/7"),
            ..keyed_post()
        };
        assert_eq!(
            a.next(&p, &state, &answer, 0.0, &mut Fixed(0.5)),
            poll("https://api.example/operations/7", 500, false)
        );
        assert_eq!(a.poll_url(), Some("https://api.example/operations/7"));
        // Location alone is polled too.
        let mut b = Accepted::new(&p);
        let answer = AcceptedAnswer {
            location: Some("https://api.example/orders/7"),
            ..AcceptedAnswer::default()
        };
        assert_eq!(
            b.next(&p, &state, &answer, 0.0, &mut Fixed(0.5)),
            poll("https://api.example/orders/7", 500, false)
        );
        // A 202 that says not to send the request again still has its URL polled (a GET).
        let refusing = AcceptedAnswer {
            location: Some("https://api.example/orders/7"),
            refuses_repeat: true,
            ..keyed_post()
        };
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &refusing, 0.0, &mut Fixed(0.5)),
            poll("https://api.example/orders/7", 500, false)
        );
    }

    #[test]
    fn an_unusable_operation_location_falls_back_to_location() {
        let p = policy();
        let state = RetryState::new(&p, 0.0);
        for bad in [
            None,
            Some(""),
            Some("ftp://api.example/op"),
            Some("http://api.example:6000/op"),
            Some("data:application/json,{\"status\":\"succeeded\"}"),
            Some("blob:https://api.example/5d4c"),
            Some("https://user:pass@api.example/op"),
            Some("https://token@api.example/op?a=b@c"),
        ] {
            let mut a = Accepted::new(&p);
            let answer = AcceptedAnswer {
                operation_location: bad,
                location: Some("https://api.example/orders/7"),
                ..AcceptedAnswer::default()
            };
            assert_eq!(
                a.next(&p, &state, &answer, 0.0, &mut Fixed(0.0)),
                poll("https://api.example/orders/7", 500, false),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn without_a_location_a_keyed_request_is_repeated_and_any_other_202_is_the_answer() {
        let p = policy();
        let state = RetryState::new(&p, 0.0);
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &keyed_post(), 0.0, &mut Fixed(0.0)),
            Follow::Repeat {
                delay_ms: 500,
                from_server: false
            }
        );
        // No key (a GET, or a POST with keys off): nothing to poll.
        for answer in [
            AcceptedAnswer {
                idempotent: true,
                replayable: true,
                ..AcceptedAnswer::default()
            },
            AcceptedAnswer {
                replayable: true,
                ..AcceptedAnswer::default()
            },
            // A body that cannot be sent again.
            AcceptedAnswer {
                replayable: false,
                ..keyed_post()
            },
            // A non-idempotent request that was redirected is never sent again.
            AcceptedAnswer {
                redirected: true,
                ..keyed_post()
            },
            // Nor one whose 202 says not to send it again.
            AcceptedAnswer {
                refuses_repeat: true,
                ..keyed_post()
            },
            AcceptedAnswer {
                refuses_repeat: true,
                idempotent: true,
                ..keyed_post()
            },
        ] {
            let mut a = Accepted::new(&p);
            assert_eq!(
                a.next(&p, &state, &answer, 0.0, &mut Fixed(0.0)),
                Follow::Stop(AcceptedStop::NothingToPoll),
                "{answer:?}"
            );
            assert_eq!(a.polls(), 0);
        }
        // A keyed idempotent request that was redirected may be repeated.
        let answer = AcceptedAnswer {
            idempotent: true,
            redirected: true,
            ..keyed_post()
        };
        assert!(matches!(
            Accepted::new(&p).next(&p, &state, &answer, 0.0, &mut Fixed(0.0)),
            Follow::Repeat { .. }
        ));
    }

    #[test]
    fn a_later_202_moves_the_poll_or_keeps_it() {
        let p = policy();
        let state = RetryState::new(&p, 0.0);
        let mut a = Accepted::new(&p);
        let first = AcceptedAnswer {
            location: Some("https://api.example/op/1"),
            ..keyed_post()
        };
        assert!(matches!(
            a.next(&p, &state, &first, 0.0, &mut Fixed(0.0)),
            Follow::Poll { .. }
        ));
        // The poll's own 202 without a header: the same URL (never back to repeating).
        let plain = AcceptedAnswer {
            idempotent: true,
            replayable: true,
            ..AcceptedAnswer::default()
        };
        assert_eq!(
            a.next(&p, &state, &plain, 0.0, &mut Fixed(0.0)),
            poll("https://api.example/op/1", 1000, false)
        );
        // One with its own header moves the poll there.
        let moved = AcceptedAnswer {
            operation_location: Some("https://status.example/op/1"),
            ..plain
        };
        assert_eq!(
            a.next(&p, &state, &moved, 0.0, &mut Fixed(0.0)),
            poll("https://status.example/op/1", 2000, false)
        );
        assert_eq!(a.polls(), 3);
        // A repeated request whose 202 names a URL starts polling it.
        let mut r = Accepted::new(&p);
        assert!(matches!(
            r.next(&p, &state, &keyed_post(), 0.0, &mut Fixed(0.0)),
            Follow::Repeat { .. }
        ));
        assert_eq!(
            r.next(&p, &state, &first, 0.0, &mut Fixed(0.0)),
            poll("https://api.example/op/1", 1000, false)
        );
    }

    #[test]
    fn the_wait_is_at_least_retry_after_spread_above_else_the_backoff_step_of_the_poll_number() {
        let p = RetryPolicy {
            jitter: Jitter::Full,
            ..policy()
        };
        let state = RetryState::new(&p, 0.0);
        let mut a = Accepted::new(&p);
        let with = |ra: &'static str| AcceptedAnswer {
            location: Some("https://api.example/op"),
            retry_after: Some(ra),
            ..AcceptedAnswer::default()
        };
        let without = AcceptedAnswer {
            location: Some("https://api.example/op"),
            ..AcceptedAnswer::default()
        };
        let mut rng = Fixed(0.5);
        // Retry-After in seconds: that, plus half (the sample) of the window above it, the
        // larger of the poll's backoff step (500) and half the wait (1000).
        assert_eq!(
            a.next(&p, &state, &with("2"), 0.0, &mut rng),
            poll("https://api.example/op", 2500, true)
        );
        // None: full jitter over the 2nd backoff step (1000 ms), as the retries' schedule.
        assert_eq!(
            a.next(&p, &state, &without, 0.0, &mut rng),
            poll("https://api.example/op", 500, false)
        );
        // A malformed value falls back to the backoff (3rd step: 2000 ms, half of it).
        assert_eq!(
            a.next(&p, &state, &with("soon"), 0.0, &mut rng),
            poll("https://api.example/op", 1000, false)
        );
        // An HTTP-date: what is left until it, from `now` (the clock is injected), 3500, and
        // half of the window above it, which does not grow from poll to poll (half the wait).
        let date = with("Thu, 01 Jan 1970 00:00:05 GMT");
        assert_eq!(
            a.next(&p, &state, &date, 1_500.0, &mut rng),
            poll("https://api.example/op", 3500 + 875, true)
        );
        // A past date asks for no wait: the poll's backoff (5th step, 8000, half of it),
        // never a tight loop.
        assert_eq!(
            a.next(&p, &state, &date, 9_000.0, &mut rng),
            poll("https://api.example/op", 4000, false)
        );
        // The date is read on the wall clock: 4 s ahead of the time given (a stepped clock),
        // 1 s is left until it; an offset that is no number reads as none.
        a.set_wall_offset_ms(4_000.0);
        assert_eq!(
            a.next(&p, &state, &date, 0.0, &mut rng),
            poll("https://api.example/op", 1000 + 250, true)
        );
        a.set_wall_offset_ms(f64::NAN);
        assert_eq!(
            a.next(&p, &state, &date, 0.0, &mut rng),
            poll("https://api.example/op", 5000 + 1250, true)
        );
        // With the server's clock known (its `Date`, 2 s after the epoch), the date is read
        // on it, whatever the client's: 3 s left.
        let dated = AcceptedAnswer {
            server_now_ms: Some(2_000.0),
            ..date
        };
        a.set_wall_offset_ms(4_000.0);
        assert_eq!(
            a.next(&p, &state, &dated, 60_000.0, &mut rng),
            poll("https://api.example/op", 3000 + 750, true)
        );
    }

    #[test]
    fn clients_accepted_together_do_not_poll_together() {
        // 200 calls told `Retry-After: 1` at once (a companion's acceptAfterMs): each waits at
        // least the second, and the herd is spread over the window above it, not one wave.
        let p = RetryPolicy {
            jitter: Jitter::Full,
            ..policy()
        };
        let state = RetryState::new(&p, 0.0);
        let answer = AcceptedAnswer {
            retry_after: Some("1"),
            ..keyed_post()
        };
        let mut rng = SplitMix64::new(7);
        let mut buckets = [0u32; 5];
        for _ in 0..200 {
            let Follow::Repeat { delay_ms, .. } =
                Accepted::new(&p).next(&p, &state, &answer, 0.0, &mut rng)
            else {
                panic!("not repeated")
            };
            assert!((1000..=1500).contains(&delay_ms), "{delay_ms}");
            buckets[((delay_ms - 1000) / 100).min(4) as usize] += 1;
        }
        // Uniform over 1000..1500: about 40 in each 100 ms.
        assert!(
            buckets.iter().all(|&n| (20..=60).contains(&n)),
            "{buckets:?}"
        );
        // One call told `Retry-After: 1` poll after poll keeps the server's pace: every wait
        // within 1000..1500, however many polls came before.
        let mut a = Accepted::new(&p);
        for i in 0..30 {
            let Follow::Repeat { delay_ms, .. } = a.next(&p, &state, &answer, 0.0, &mut rng) else {
                panic!("not repeated")
            };
            assert!((1000..=1500).contains(&delay_ms), "poll {i}: {delay_ms}");
        }
        // `Retry-After: 0` again and again: the waits grow with the polls as the backoff does.
        let zero = AcceptedAnswer {
            retry_after: Some("0"),
            ..keyed_post()
        };
        let mut a = Accepted::new(&p);
        let total: u64 = (0..8)
            .map(|_| match a.next(&p, &state, &zero, 0.0, &mut Fixed(0.5)) {
                Follow::Repeat { delay_ms, .. } => delay_ms,
                other => panic!("{other:?}"),
            })
            .sum();
        // Half of 500, 1000, ... 30000 (capped): 250 + 500 + ... over eight polls.
        assert_eq!(total, 250 + 500 + 1000 + 2000 + 4000 + 8000 + 15000 + 15000);
        // With `jitter: 'none'` too: the steps themselves.
        let none = policy();
        let mut a = Accepted::new(&none);
        let waits: Vec<u64> = (0..4)
            .map(
                |_| match a.next(&none, &state, &zero, 0.0, &mut Fixed(0.5)) {
                    Follow::Repeat { delay_ms, .. } => delay_ms,
                    other => panic!("{other:?}"),
                },
            )
            .collect();
        assert_eq!(waits, [500, 1000, 2000, 4000]);
    }

    #[test]
    fn the_first_poll_waits_the_first_backoff_step_whatever_the_retries_did() {
        let p = policy();
        // The call's retries already used two steps: the polls' schedule is their own.
        let mut state = RetryState::new(&p, 0.0);
        state.start_attempt();
        let mut rng = SplitMix64::new(1);
        let answer = AcceptedAnswer {
            location: Some("https://api.example/op"),
            ..AcceptedAnswer::default()
        };
        let delays: Vec<u64> = {
            let mut a = Accepted::new(&p);
            (0..4)
                .map(|_| match a.next(&p, &state, &answer, 0.0, &mut rng) {
                    Follow::Poll { delay_ms, .. } => delay_ms,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(delays, [500, 1000, 2000, 4000]);
    }

    #[test]
    fn retry_after_is_clamped_not_refused() {
        let p = policy(); // maxRetryAfterMs: maxDelayMs, 30 s
        let state = RetryState::new(&p, 0.0);
        let answer = AcceptedAnswer {
            location: Some("https://api.example/op"),
            retry_after: Some("3600"),
            ..AcceptedAnswer::default()
        };
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &answer, 0.0, &mut Fixed(0.0)),
            poll("https://api.example/op", 30_000, true)
        );
        // Spread above the clamped wait as above any (half of the 15 s window): callers told
        // the same long wait do not all poll at the cap together.
        let full = RetryPolicy {
            jitter: Jitter::Full,
            ..policy()
        };
        assert_eq!(
            Accepted::new(&full).next(&full, &state, &answer, 0.0, &mut Fixed(0.5)),
            poll("https://api.example/op", 37_500, true)
        );
        // Clamped to nothing (`maxRetryAfterMs: 0`): no wait asked, the poll's backoff step
        // (full jitter: half of the first, 500 ms), never a tight loop.
        let none = RetryPolicy {
            max_retry_after_ms: Some(0.0),
            ..full
        };
        assert_eq!(
            Accepted::new(&none).next(&none, &state, &answer, 0.0, &mut Fixed(0.5)),
            poll("https://api.example/op", 250, false)
        );
        let p = RetryPolicy {
            max_retry_after_ms: Some(45_000.0),
            ..policy()
        };
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &answer, 0.0, &mut Fixed(0.0)),
            poll("https://api.example/op", 45_000, true)
        );
        // What setTimeout accepts, whatever the value.
        let p = RetryPolicy {
            max_retry_after_ms: Some(f64::MAX),
            max_delay_ms: f64::MAX,
            ..policy()
        };
        let huge = AcceptedAnswer {
            retry_after: Some("99999999999999999999999"),
            ..answer
        };
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &huge, 0.0, &mut Fixed(0.0)),
            poll("https://api.example/op", 2_147_483_647, true)
        );
    }

    #[test]
    fn respect_retry_after_false_uses_the_backoff() {
        let p = RetryPolicy {
            respect_retry_after: false,
            ..policy()
        };
        let state = RetryState::new(&p, 0.0);
        let answer = AcceptedAnswer {
            location: Some("https://api.example/op"),
            retry_after: Some("0"),
            ..AcceptedAnswer::default()
        };
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &answer, 0.0, &mut Fixed(0.0)),
            poll("https://api.example/op", 500, false)
        );
    }

    #[test]
    fn a_wait_that_would_not_end_before_the_deadline_is_not_started() {
        let p = RetryPolicy {
            deadline_ms: Some(1_000.0),
            ..policy()
        };
        let state = RetryState::new(&p, 0.0);
        let answer = AcceptedAnswer {
            location: Some("https://api.example/op"),
            retry_after: Some("1"),
            ..AcceptedAnswer::default()
        };
        // 1000 ms from 0 ends at the deadline: not started.
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &answer, 0.0, &mut Fixed(0.0)),
            Follow::Stop(AcceptedStop::Deadline)
        );
        let soon = AcceptedAnswer {
            retry_after: Some("0"),
            ..answer
        };
        // `Retry-After: 0` asks for no wait: the poll's backoff step (500), when it fits.
        assert!(matches!(
            Accepted::new(&p).next(&p, &state, &soon, 499.0, &mut Fixed(0.0)),
            Follow::Poll { delay_ms: 500, .. }
        ));
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &soon, 500.0, &mut Fixed(0.0)),
            Follow::Stop(AcceptedStop::Deadline)
        );
        assert_eq!(
            Accepted::new(&p).next(&p, &state, &soon, 1_000.0, &mut Fixed(0.0)),
            Follow::Stop(AcceptedStop::Deadline)
        );
        // Polls do not use maxAttempts: a call of one attempt still follows.
        let one = RetryPolicy {
            max_attempts: 1,
            ..policy()
        };
        let mut state = RetryState::new(&one, 0.0);
        state.start_attempt();
        let mut a = Accepted::new(&one);
        for _ in 0..10 {
            assert!(matches!(
                a.next(&one, &state, &soon, 0.0, &mut Fixed(0.0)),
                Follow::Poll { .. }
            ));
        }
    }

    #[test]
    fn a_poll_fails_as_an_attempt_would() {
        let p = policy();
        for (outcome, failed) in [
            (Outcome::Status(202), false),
            (Outcome::Status(200), false),
            (Outcome::Status(404), false),
            (Outcome::Status(503), true),
            (Outcome::Status(429), true),
            (Outcome::NetworkError, true),
            (Outcome::Timeout, true),
        ] {
            assert_eq!(poll_failed(&p, outcome, true, false), failed, "{outcome:?}");
        }
        // A keyed repeat's 409 ("still in progress") is a failure, as for its retries.
        assert!(poll_failed(&p, Outcome::Status(409), false, true));
        assert!(!poll_failed(&p, Outcome::Status(409), true, false));
    }

    #[test]
    fn what_a_poll_does_not_send() {
        let same = poll_dropped_headers("Idempotency-Key", true);
        for name in ["content-type", "content-length", "Idempotency-Key"] {
            assert!(same.contains(&name), "{name}");
        }
        assert!(!same.contains(&"authorization") && !same.contains(&"cookie"));
        let other = poll_dropped_headers("X-Key", false);
        for name in [
            "authorization",
            "proxy-authorization",
            "cookie",
            "X-Key",
            "content-type",
        ] {
            assert!(other.contains(&name), "{name}");
        }
    }
}
