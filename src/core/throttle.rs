//! An adaptive client-side send rate per origin, shared by every call of an app: a token
//! bucket whose fill rate finds the server's capacity from its 429/503 answers, in the spirit
//! of the AWS SDKs' adaptive retry mode (CUBIC) and TCP's slow start.
//!
//! Every attempt (first ones included) takes a turn (FIFO) and waits until a token is there,
//! so a herd of callers queues at the rate the server can take instead of storming it. The
//! bucket holds 10 ms of sends (at least one token): a fresh origin grants its first turn at
//! once, so a lone call that succeeds waits for nothing.
//!
//! The rate ([`ThrottleConfig`] has the defaults):
//!
//! - **Slow start**: a new origin starts at `initial_rate` and doubles every `ramp_ms` while
//!   callers queue for turns, until the first throttling answer, so a cold herd is paced from
//!   its first request. While nobody queues it stays at the send rate measured (at least
//!   `initial_rate`): healthy traffic banks no rate the next herd would meet unpaced.
//! - **Cut**: a refusal cuts to β × the rate (the measured send rate when nobody waits), or
//!   to β² at slow start's exit when callers were queued (a burst allowance lets slow start
//!   overshoot before the first refusal), never below β × the rate sent while nobody queued
//!   (a warm origin's served traffic). One cut per round: refusals of attempts sent before
//!   the last cut, or within a smoothed round trip after it (the server still busy with what
//!   came before), lower the ceiling `W_max` (the rate refused) by β instead. Never below
//!   `min_rate`.
//! - **Return**: toward 0.85 × `W_max`, with a time constant of `ramp_ms / 4` (not after a
//!   refusal that asked for a wait: below).
//! - **CUBIC beyond**: `C·(t − K)³ + W_max` with `K = ∛((W_max − cut) / C)`, flat near
//!   `W_max`, then probing above it; never above twice the send rate measured when nobody
//!   waits, so an idle period banks nothing.
//! - **Probe again**: when callers queue after a cut made while nobody did (the traffic's own
//!   burst was refused, not a rate the throttle set), or are still queued `2 × ramp_ms` after
//!   the last cut with answers served and no refusal since, slow start takes over again from
//!   the current rate (CUBIC alone takes seconds to climb back from a cut); waiters ask again
//!   at that moment.
//! - **A server that asks for waits** (a 429 or 503 with `Retry-After`, or a `RateLimit`
//!   reset, that cuts the rate): every request the rate overshoots by waits that long, so
//!   for that wait after the cut the bucket holds 2 ms of sends instead of 10 (queued turns
//!   do not go out as a burst into the server's emptied capacity) and the rate stays at the
//!   cut (no quick return: CUBIC alone), and slow start probes again no sooner than half the
//!   wait after the cut (counted up to `max_wait_ms`), a blind cut's included. The engine
//!   tells the wait only when the call honours it (`respectRetryAfter`).
//!
//! Why this design, and the designs it replaced: `docs/ARCHITECTURE.md`; the measurements:
//! `BENCHMARKS.md`.

use super::guards::Pacer;
use super::options::{check_guard_settings, OptionError, MAX_TIMER_MS, THROTTLE_RANGES};
use super::origins::OriginMap;

/// What an answer says of its origin's load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Answer {
    /// Served: a status below 400.
    Served,
    /// Pushed back: 429 or 503.
    Refused,
    /// Pushed back with a wait asked, in ms (`Retry-After`, or a `RateLimit` reset; more
    /// than 0): every request the rate overshoots by waits that long.
    RefusedWithWait(f64),
}

impl Answer {
    /// A 429 or 503 whose answer asked for `wait_ms` (`RefusedWithWait`), or for none
    /// (`Refused`: NaN, 0 or less).
    pub fn refused(wait_ms: f64) -> Answer {
        let answer = Answer::RefusedWithWait(wait_ms);
        if answer.wait_asked_ms() > 0.0 {
            answer
        } else {
            Answer::Refused
        }
    }

    /// The wait this answer asked for, in ms: 0 for none (served, refused without a wait, or a
    /// wait of NaN, 0 or less), at most the longest timer ([`MAX_TIMER_MS`]).
    pub fn wait_asked_ms(self) -> f64 {
        match self {
            Answer::RefusedWithWait(ms) if ms > 0.0 => ms.min(MAX_TIMER_MS),
            _ => 0.0,
        }
    }
}

/// Throttle settings.
///
/// # Default
/// `initial_rate` 200 req/s, `ramp_ms` 200, `beta` 0.7, `scale` 0.4, `min_rate` 0.5 req/s,
/// `max_wait_ms` 10000.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottleConfig {
    /// Starting send rate of a new origin, req/s. Default 200.
    pub initial_rate: f64,
    /// Slow start doubles the rate every `ramp_ms` while callers queue, until the first
    /// throttling answer; after a cut the rate returns to its plateau with a time constant of
    /// `ramp_ms / 4`, and callers still queued `2 × ramp_ms` after it probe again (after a
    /// refusal that asked for a wait: no return while the wait lasts, and the probe no sooner
    /// than half the wait). Default 200.
    pub ramp_ms: f64,
    /// Multiplicative decrease on a throttling answer, in `(0, 1)`: β per round, β² at slow
    /// start's exit. Default 0.7.
    pub beta: f64,
    /// CUBIC's scale constant C, in req/s per s³. Default 0.4.
    pub scale: f64,
    /// The lowest send rate, req/s. Default 0.5.
    pub min_rate: f64,
    /// The longest an attempt waits for its turn, in ms; one that would wait longer is not
    /// sent (the call stops, reason `'throttled'`). Also the most of a server's asked wait
    /// that delays a probe. Default 10000.
    pub max_wait_ms: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            initial_rate: 200.0,
            ramp_ms: 200.0,
            beta: 0.7,
            scale: 0.4,
            min_rate: 0.5,
            max_wait_ms: 10_000.0,
        }
    }
}

impl ThrottleConfig {
    /// Check the ranges documented on each field.
    pub fn validate(self) -> Result<Self, OptionError> {
        let values = [
            self.initial_rate,
            self.ramp_ms,
            self.beta,
            self.scale,
            self.min_rate,
            self.max_wait_ms,
        ];
        check_guard_settings(&THROTTLE_RANGES, &values).map(|()| self)
    }
}

/// Sends per second, smoothed over 100 ms buckets (AWS's RateClocker, finer).
#[derive(Clone, Copy, Debug, Default)]
struct RateMeter {
    bucket_start_ms: f64,
    count: f64,
    rate: f64,
    seeded: bool,
}

const METER_BUCKET_MS: f64 = 100.0;
const METER_SMOOTHING: f64 = 0.8;

impl RateMeter {
    fn record(&mut self, now_ms: f64) {
        if !self.seeded {
            self.seeded = true;
            self.bucket_start_ms = now_ms;
        }
        let elapsed = now_ms - self.bucket_start_ms;
        if elapsed >= METER_BUCKET_MS {
            let current = self.count / (elapsed / 1000.0);
            self.rate = current * METER_SMOOTHING + self.rate * (1.0 - METER_SMOOTHING);
            self.count = 0.0;
            self.bucket_start_ms = now_ms;
        }
        self.count += 1.0;
    }

    /// The smoothed rate, or the rate of the bucket in progress when nothing is smoothed yet.
    fn rate(&self, now_ms: f64) -> f64 {
        if self.rate > 0.0 {
            self.rate
        } else {
            let elapsed = (now_ms - self.bucket_start_ms).max(METER_BUCKET_MS);
            self.count / (elapsed / 1000.0)
        }
    }
}

/// The bucket holds at most 10 ms worth of sends (at least one token; 2 ms while a server's
/// asked wait lasts: [`WAIT_ASKED_BUCKET_MS`]): bursts stay small, so a server with a small
/// concurrency limit is not hit by a wave of queued turns at once, yet a waiter whose timer
/// fires a millisecond late does not lose its share of the rate.
const BUCKET_MS: f64 = 10.0;

/// The bucket after a refusal that asked for a wait holds 2 ms of sends (at least one token):
/// a server that sheds with `Retry-After` makes every request sent into its emptied capacity
/// wait that long, and a burst of queued turns would send several at once.
const WAIT_ASKED_BUCKET_MS: f64 = 2.0;

/// After a cut the rate returns to this share of the rate the server refused at (the
/// plateau), and stays there until CUBIC's convex part probes beyond it.
const PLATEAU: f64 = 0.85;

/// Callers still queued this many `ramp_ms` after the last cut, with answers served and no
/// refusal since: the rate the server takes is probed again, in slow start (CUBIC alone would
/// take seconds to find a capacity far above the rate it was cut to).
const PROBE_AFTER_RAMPS: f64 = 2.0;

/// After a refusal that asked for a wait, slow start probes again no sooner than this share
/// of the wait after the cut (nor sooner than `PROBE_AFTER_RAMPS`): every request a probe
/// overshoots by waits that long, so such a server is probed less often. Half the wait is
/// probed while the callers refused at the cut are still away (they come back from the full
/// wait on), not as they come back.
const PROBE_AFTER_WAIT_ASKED: f64 = 0.5;

/// The weight of a new round-trip sample in the smoothed round trip (TCP's 1/8).
const RTT_SMOOTHING: f64 = 0.125;

#[derive(Clone, Debug)]
struct OriginThrottle {
    created_ms: f64,
    /// True after the first throttling answer: recovery curve instead of slow start.
    backed_off: bool,
    /// The last cut came while nobody waited for a turn.
    blind_cut: bool,
    /// The wait the refusal of the last cut asked for, ms (0: none, or that wait is over).
    wait_asked_ms: f64,
    /// An attempt was served since the last cut (in an outage none is, and nothing probes).
    served_since_cut: bool,
    /// Slow start's curve: `slow_rate · 2^((t − slow_from_ms) / ramp_ms)`.
    slow_rate: f64,
    slow_from_ms: f64,
    /// In slow start, the send rate measured the last time nobody waited for a turn (sent
    /// before any refusal: served): the capacity is at least about that.
    served_rate: f64,
    fill_rate: f64,
    tokens: f64,
    last_refill_ms: f64,
    /// The send rate at the last throttling answer, lowered by further refusals of that
    /// round: the capacity is below it (CUBIC's `W_max`).
    w_max: f64,
    /// The rate the last cut set, where the recovery curve starts.
    cut_rate: f64,
    /// How low further refusals of the last cut's round may bring `w_max`.
    w_floor: f64,
    last_decrease_ms: f64,
    /// The smoothed time from a send to its served answer, ms (0 before the first).
    srtt_ms: f64,
    sends: RateMeter,
    /// When a caller last had to wait for its turn (demand above the fill rate, though at a
    /// given moment none may be queued: one caller sending one call after another).
    last_wait_ms: f64,
    /// The next ticket to be served, and the next to be issued (FIFO turns).
    head: u64,
    tail: u64,
    /// Tickets given up while waiting (skipped when they reach the head).
    abandoned: Vec<u64>,
    /// When a ticket waiting for its turn was last given up (its turn is others' now).
    given_back_ms: f64,
}

impl OriginThrottle {
    #[inline(never)]
    fn new(config: &ThrottleConfig, now_ms: f64) -> Self {
        OriginThrottle {
            created_ms: now_ms,
            backed_off: false,
            blind_cut: false,
            wait_asked_ms: 0.0,
            served_since_cut: false,
            slow_rate: config.initial_rate,
            slow_from_ms: now_ms,
            served_rate: 0.0,
            fill_rate: config.initial_rate,
            tokens: capacity(config.initial_rate, BUCKET_MS),
            last_refill_ms: now_ms,
            w_max: config.initial_rate,
            cut_rate: config.initial_rate,
            w_floor: config.initial_rate,
            last_decrease_ms: f64::NEG_INFINITY,
            srtt_ms: 0.0,
            sends: RateMeter::default(),
            last_wait_ms: f64::NEG_INFINITY,
            head: 0,
            tail: 0,
            abandoned: Vec::new(),
            given_back_ms: f64::NEG_INFINITY,
        }
    }

    /// The bucket's size at the fill rate: [`BUCKET_MS`] of sends, or [`WAIT_ASKED_BUCKET_MS`]
    /// after a refusal that asked for a wait (at least one token).
    fn capacity(&self) -> f64 {
        let bucket_ms = if self.wait_asked_ms > 0.0 {
            WAIT_ASKED_BUCKET_MS
        } else {
            BUCKET_MS
        };
        capacity(self.fill_rate, bucket_ms)
    }

    /// How long after the last cut callers still queued make slow start probe again:
    /// `2 × ramp_ms`, or half the wait the cut's refusal asked for when that is more.
    fn probe_after_ms(&self, config: &ThrottleConfig) -> f64 {
        let asked = self.wait_asked_ms.min(config.max_wait_ms);
        (PROBE_AFTER_RAMPS * config.ramp_ms).max(PROBE_AFTER_WAIT_ASKED * asked)
    }

    fn skip_abandoned(&mut self) {
        while let Some(i) = self.abandoned.iter().position(|&t| t == self.head) {
            self.abandoned.swap_remove(i);
            self.head += 1;
        }
    }

    /// Callers are queued for turns (demand is above the fill rate).
    fn waiting(&self) -> bool {
        self.tail > self.head + self.abandoned.len() as u64
    }

    /// Demand is above the fill rate: callers are queued, or one had to wait within the time
    /// of two turns, and within `ramp_ms` (a caller sending one call after another, which is
    /// not queued when it asks again; not longer, so that a herd's queue emptying, or a slow
    /// caller's last wait, is not taken for demand).
    fn wanted(&self, config: &ThrottleConfig, now_ms: f64) -> bool {
        self.waiting()
            || now_ms - self.last_wait_ms < (2_000.0 / self.fill_rate).min(config.ramp_ms)
    }

    /// Time (ms) until `needed` more tokens have accumulated: at the fill rate, or along the
    /// slow-start curve `rate · 2^(t / ramp)` before the first throttling answer.
    fn time_for_tokens(&self, config: &ThrottleConfig, needed: f64) -> f64 {
        if needed <= 0.0 {
            return 0.0;
        }
        if self.backed_off {
            return needed / self.fill_rate * 1000.0;
        }
        let ramp_s = config.ramp_ms / 1000.0;
        let ln2 = std::f64::consts::LN_2;
        config.ramp_ms * (1.0 + needed * ln2 / (self.fill_rate * ramp_s)).ln() / ln2
    }

    /// Bring the bucket and the rate to `now_ms`; every change of who waits (a turn taken,
    /// granted or given up) comes after one, so the state seen here held since the last.
    fn refill(&mut self, config: &ThrottleConfig, now_ms: f64) {
        if self.wait_asked_ms > 0.0 && now_ms - self.last_decrease_ms >= self.wait_asked_ms {
            // the wait the server asked for is over: the usual rules again
            self.wait_asked_ms = 0.0;
        }
        let probe_after = self.probe_after_ms(config);
        let calm = now_ms - self.last_decrease_ms >= probe_after;
        // (A blind cut by a refusal that asked for a wait probes when calm, as any other.)
        let blind = self.blind_cut && self.wait_asked_ms == 0.0;
        if self.backed_off && self.served_since_cut && self.waiting() && (blind || calm) {
            // Callers queue after a cut made while none did (the traffic's own bursts were
            // refused, not a rate the throttle set), or long after the last cut with no
            // refusal since: the rate the server takes is not known, so slow start probes for
            // it again from here.
            if !self.blind_cut {
                self.served_rate = self.fill_rate;
            }
            self.backed_off = false;
            self.blind_cut = false;
            self.slow_rate = self.fill_rate;
            self.slow_from_ms = self
                .last_refill_ms
                .max((self.last_decrease_ms + probe_after).min(now_ms));
        }
        if !self.backed_off {
            // slow start: double every ramp_ms (capped to stay finite)
            let doublings = ((now_ms - self.slow_from_ms) / config.ramp_ms).clamp(0.0, 60.0);
            // 2^doublings: whole doublings exactly, the fraction through `exp`
            let whole = doublings.floor();
            let grown = self.slow_rate
                * 2f64.powi(whole as i32)
                * ((doublings - whole) * std::f64::consts::LN_2).exp();
            // It grows while callers wait for turns (or one just did: a caller sending one
            // call after another is never queued when it asks); otherwise the
            // rate was not what limited the sends, and it stays at the rate measured (at
            // least `initial_rate`), so healthy traffic does not bank a rate the herd that
            // follows would meet unpaced.
            let limit = if self.wanted(config, now_ms) {
                f64::INFINITY
            } else {
                self.served_rate = self.sends.rate(now_ms);
                config.initial_rate.max(self.served_rate)
            };
            if grown > limit {
                self.slow_rate = limit;
                self.slow_from_ms = now_ms;
                self.fill_rate = limit;
            } else {
                self.fill_rate = grown;
            }
        }
        let elapsed_s = ((now_ms - self.last_refill_ms) / 1000.0).max(0.0);
        self.tokens = (self.tokens + elapsed_s * self.fill_rate).min(self.capacity());
        self.last_refill_ms = now_ms;
    }

    /// The recovery curve at `now_ms`: the larger of a quick return from the cut to the
    /// plateau (time constant `ramp_ms / 4`) and CUBIC through `W_max`.
    fn curve(&self, config: &ThrottleConfig, now_ms: f64) -> f64 {
        let dt_ms = (now_ms - self.last_decrease_ms).max(0.0);
        let plateau = PLATEAU * self.w_max;
        let tau_ms = config.ramp_ms / 4.0;
        let decay = (-dt_ms / tau_ms).exp();
        // After a refusal that asked for a wait, no quick return: the rate the server refused
        // at may be far above what it takes (a bucket's burst let slow start overshoot), and
        // every request sent above it waits what the server asked.
        let quick = if self.wait_asked_ms > 0.0 {
            self.cut_rate
        } else {
            plateau - (plateau - self.cut_rate).max(0.0) * decay
        };
        let k = cube_root((self.w_max - self.cut_rate).max(0.0) / config.scale);
        let cubic = config.scale * (dt_ms / 1000.0 - k).powi(3) + self.w_max;
        quick.max(cubic)
    }
}

/// `x^(1/3)` for `x >= 0` (0 for anything else) through `ln`/`exp`, which the rest of the
/// core already links in: `f64::cbrt` would add libm's `cbrt` and `fma` (~2 kB of wasm) for a
/// value that only needs to be close (relative error ~1e-15). The core uses no `exp2` or
/// `log2` either: libm's `exp2` carries a 4 kB table.
fn cube_root(x: f64) -> f64 {
    if x > 0.0 && x.is_finite() {
        (x.ln() / 3.0).exp()
    } else if x == f64::INFINITY {
        x
    } else {
        0.0
    }
}

/// A bucket of `bucket_ms` of sends at `rate`, at least one token.
fn capacity(rate: f64, bucket_ms: f64) -> f64 {
    (rate * bucket_ms / 1000.0).max(1.0)
}

/// The send rates of every origin seen.
#[derive(Clone, Debug, Default)]
pub struct AdaptiveThrottle {
    config: ThrottleConfig,
    origins: OriginMap<OriginThrottle>,
}

impl AdaptiveThrottle {
    /// A throttle with `config` (already validated).
    pub fn new(config: ThrottleConfig) -> Self {
        AdaptiveThrottle {
            config,
            origins: OriginMap::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> ThrottleConfig {
        self.config
    }

    fn origin(&mut self, origin: &str, now_ms: f64) -> &mut OriginThrottle {
        let config = self.config;
        // At rest: nobody waits for a turn, and no refusal was ever seen.
        self.origins.get_or_insert_with(
            origin,
            || OriginThrottle::new(&config, now_ms),
            |t| t.head == t.tail && !t.backed_off,
        )
    }

    /// The current send rate of `origin`, req/s (`None` for an origin never seen).
    pub fn rate(&mut self, origin: &str, now_ms: f64) -> Option<f64> {
        let config = self.config;
        let o = self.origins.get_mut(origin)?;
        o.refill(&config, now_ms);
        Some(o.fill_rate)
    }

    /// Take a turn to send to `origin`: a ticket to pass to [`AdaptiveThrottle::poll`].
    /// Turns are served in order, each when a token is there.
    pub fn enqueue(&mut self, origin: &str, now_ms: f64) -> u64 {
        let config = self.config;
        let o = self.origin(origin, now_ms);
        o.refill(&config, now_ms);
        let ticket = o.tail;
        o.tail += 1;
        ticket
    }

    /// May `ticket` send now? `Ok(())`: yes, its token is taken. `Err(ms)`: not yet; ask again
    /// after `ms` (at least 1). A waiter asks again, rather than sleeping a fixed wait, so that
    /// rate changes while it waits (a cut, or slow start's growth) reprice its turn.
    pub fn poll(&mut self, origin: &str, ticket: u64, now_ms: f64) -> Result<(), f64> {
        let config = self.config;
        let o = self.origin(origin, now_ms);
        o.refill(&config, now_ms);
        o.skip_abandoned();
        // The callers still waiting ahead of it: a turn given up anywhere ahead moves it up.
        let given_up = o.abandoned.iter().filter(|&&t| t < ticket).count() as u64;
        let ahead = ticket.saturating_sub(o.head).saturating_sub(given_up) as f64;
        if ahead == 0.0 && o.tokens >= 1.0 {
            o.tokens -= 1.0;
            o.head = o.head.max(ticket + 1);
            o.skip_abandoned();
            return Ok(());
        }
        o.last_wait_ms = now_ms;
        let mut wait = o.time_for_tokens(&config, ahead + 1.0 - o.tokens);
        let probe_at = o.last_decrease_ms + o.probe_after_ms(&config);
        if o.backed_off && probe_at > now_ms {
            // Ask again when slow start may probe, whose rate the wait does not count on: a
            // caller asleep at the head of the queue would hold every turn behind it.
            wait = wait.min(probe_at - now_ms);
        }
        Err(wait.max(1.0))
    }

    /// Give up `ticket` (the call stopped or was aborted while waiting for its turn).
    pub fn abandon(&mut self, origin: &str, ticket: u64, now_ms: f64) {
        let config = self.config;
        let o = self.origin(origin, now_ms);
        o.refill(&config, now_ms);
        if ticket >= o.head && !o.abandoned.contains(&ticket) {
            o.abandoned.push(ticket);
            o.skip_abandoned();
            o.given_back_ms = now_ms;
        }
    }

    /// Was a turn of `origin` given up by a caller waiting for it after `since_ms`? Then the
    /// callers queued behind it may go sooner than they were told.
    pub fn given_back_since(&self, origin: &str, since_ms: f64) -> bool {
        self.origins
            .get(origin)
            .is_some_and(|o| o.given_back_ms > since_ms)
    }

    /// An attempt to `origin` is being sent at `now_ms` (for the measured send rate).
    pub fn on_send(&mut self, origin: &str, now_ms: f64) {
        self.origin(origin, now_ms).sends.record(now_ms);
    }

    /// The answer to an attempt sent at `sent_ms` arrived at `now_ms`.
    pub fn on_answer(&mut self, origin: &str, sent_ms: f64, answer: Answer, now_ms: f64) {
        let config = self.config;
        let o = self.origin(origin, now_ms);
        o.refill(&config, now_ms);
        let measured = o.sends.rate(now_ms);
        if answer != Answer::Served {
            let wait_asked_ms = answer.wait_asked_ms();
            // An attempt sent within a round trip of the last cut met the server still busy
            // with what was sent before it (a slot is held for the whole service time).
            if sent_ms <= o.last_decrease_ms + o.srtt_ms {
                // Another refusal of a round already answered by a cut: the rate was further
                // above the capacity than one refusal says. The ceiling comes down by beta
                // (never below the cut itself); the rate is not cut again.
                o.w_max = (o.w_max * config.beta).max(o.w_floor);
                o.fill_rate = o.fill_rate.min(PLATEAU * o.w_max).max(config.min_rate);
            } else {
                // Callers waiting for turns: sending at the fill rate. Otherwise the measured
                // send rate (AWS), which is lower when demand is below the fill rate.
                let waiting = o.waiting();
                let current = if waiting || measured <= 0.0 {
                    o.fill_rate
                } else {
                    o.fill_rate.min(measured)
                };
                // Slow start that paced a queue overshoots by up to a doubling (more against a
                // bucket's burst) before the first refusal comes back: its exit cuts twice,
                // but overshoots no more than it grew, so never below beta times the rate it
                // started from (a warm one starts from the rate its traffic was served at).
                let cut = if o.backed_off || !waiting {
                    current * config.beta
                } else {
                    (current * config.beta * config.beta)
                        .max(config.beta * o.served_rate.min(current))
                };
                o.cut_rate = cut.min(PLATEAU * current).max(config.min_rate);
                o.w_floor = o.cut_rate / PLATEAU;
                if !o.backed_off {
                    o.w_floor = o.w_floor.max(o.served_rate.min(current));
                }
                o.backed_off = true;
                o.blind_cut = !waiting;
                o.wait_asked_ms = wait_asked_ms;
                o.served_since_cut = false;
                o.w_max = current;
                o.fill_rate = o.cut_rate;
                o.last_decrease_ms = now_ms;
            }
        } else {
            o.served_since_cut = true;
            let rtt = (now_ms - sent_ms).max(0.0);
            o.srtt_ms = if o.srtt_ms > 0.0 {
                o.srtt_ms + (rtt - o.srtt_ms) * RTT_SMOOTHING
            } else {
                rtt
            };
            if o.backed_off {
                let curve = o.curve(&config, now_ms);
                // An origin used below its rate does not bank it: at most twice what is sent.
                let ceiling = if o.waiting() || measured <= 0.0 {
                    f64::INFINITY
                } else {
                    2.0 * measured
                };
                o.fill_rate = curve.min(ceiling).max(config.min_rate);
            }
        }
        o.tokens = o.tokens.min(o.capacity());
    }
}

/// How many calls to an origin must be retrying together when it answers 429 or 503 for the
/// default throttle to start pacing it: 10. A lone call, or calls one after another, are
/// never paced by it.
pub const HERD_CALLS: u32 = 10;

/// The throttle every call shares when it is given none (`throttle` not set; `false` turns it
/// off, an [`AdaptiveThrottle`] replaces it). It paces retries only, never a first attempt
/// (the success path stays as it is), and only a herd's: an origin is paced from the moment it
/// answers 429 or 503 while at least [`HERD_CALLS`] calls to it are retrying together, as an
/// [`AdaptiveThrottle`] with the default settings paces it (slow start from `initial_rate` at
/// that moment, the rate the origin takes found from there), until no call to it is retrying
/// any more. A call is retrying from its first failed attempt (the engine joins it then),
/// so calls in flight that have not failed are no herd. A lone call's retries are never paced.
#[derive(Clone, Debug, Default)]
pub struct DefaultThrottle {
    paced: AdaptiveThrottle,
    /// Calls retrying per origin: from their first failed attempt until they end.
    retrying: OriginMap<u32>,
}

impl DefaultThrottle {
    /// A default throttle with `config` for the origins it paces.
    pub fn new(config: ThrottleConfig) -> Self {
        DefaultThrottle {
            paced: AdaptiveThrottle::new(config),
            retrying: OriginMap::default(),
        }
    }

    /// Does it pace `origin` now?
    pub fn paces(&self, origin: &str) -> bool {
        self.paced.origins.get(origin).is_some()
    }

    /// The send rate of `origin`, req/s, while it is paced.
    pub fn rate(&mut self, origin: &str, now_ms: f64) -> Option<f64> {
        self.paced.rate(origin, now_ms)
    }

    /// How many calls to `origin` are retrying.
    pub fn retrying(&self, origin: &str) -> u32 {
        self.retrying.get(origin).copied().unwrap_or(0)
    }
}

impl Pacer for DefaultThrottle {
    fn enqueue(&mut self, origin: &str, now_ms: f64) -> u64 {
        if self.paces(origin) {
            self.paced.enqueue(origin, now_ms)
        } else {
            UNQUEUED
        }
    }
    fn poll(&mut self, origin: &str, ticket: u64, now_ms: f64) -> Result<(), f64> {
        if ticket == UNQUEUED || !self.paces(origin) {
            return Ok(());
        }
        self.paced.poll(origin, ticket, now_ms)
    }
    fn abandon(&mut self, origin: &str, ticket: u64, now_ms: f64) {
        if ticket != UNQUEUED && self.paces(origin) {
            self.paced.abandon(origin, ticket, now_ms);
        }
    }
    fn given_back_since(&self, origin: &str, since_ms: f64) -> bool {
        self.paces(origin) && self.paced.given_back_since(origin, since_ms)
    }
    fn on_send(&mut self, origin: &str, now_ms: f64) {
        if let Some(o) = self.paced.origins.get_mut(origin) {
            o.sends.record(now_ms);
        }
    }
    fn on_answer(&mut self, origin: &str, sent_ms: f64, answer: Answer, now_ms: f64) {
        if let Some(o) = self.paced.origins.get(origin) {
            // Answers to what was sent before the pacing began, or in its first `ramp_ms`,
            // are the unpaced wave that started it and the server still working through it:
            // they say nothing of the paced rate (counted, the first paced retries meeting the
            // emptied server would cut the rate far below what it takes).
            if sent_ms >= o.created_ms + self.paced.config.ramp_ms {
                self.paced.on_answer(origin, sent_ms, answer, now_ms);
            }
        } else if answer != Answer::Served && self.retrying(origin) >= HERD_CALLS {
            // A herd pushed back: pacing starts here, in slow start.
            self.paced.origin(origin, now_ms);
        }
    }
    fn max_wait_ms(&self) -> f64 {
        self.paced.config.max_wait_ms
    }
    fn paces_first_attempts(&self) -> bool {
        false
    }
    fn joined(&mut self, origin: &str, _now_ms: f64) {
        *self.retrying.get_or_insert_with(origin, || 0, |n| *n == 0) += 1;
    }
    fn left(&mut self, origin: &str, _now_ms: f64) {
        let left = match self.retrying.get_mut(origin) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n
            }
            None => 0,
        };
        if left == 0 {
            // The herd is over: the throttle steps aside (the next one starts unpaced).
            self.retrying.remove(origin);
            self.paced.origins.remove(origin);
        }
    }
}

/// The ticket of a turn the default throttle did not queue (its origin was not paced): always
/// granted.
const UNQUEUED: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "http://127.0.0.1:1";

    fn throttle() -> AdaptiveThrottle {
        AdaptiveThrottle::new(ThrottleConfig::default())
    }

    /// A throttle whose slow start is negligible: a flat `rate` until the first refusal.
    fn flat(rate: f64) -> AdaptiveThrottle {
        AdaptiveThrottle::new(ThrottleConfig {
            initial_rate: rate,
            ramp_ms: 1e9,
            ..ThrottleConfig::default()
        })
    }

    /// Take a turn at `now` by polling until it is granted; returns when it was granted.
    fn turn(t: &mut AdaptiveThrottle, now: f64) -> f64 {
        let ticket = t.enqueue(O, now);
        let mut at = now;
        while let Err(wait) = t.poll(O, ticket, at) {
            at += wait;
        }
        at
    }

    #[test]
    fn a_fresh_throttle_adds_nothing_to_a_lone_call() {
        let mut t = throttle();
        let ticket = t.enqueue(O, 5.0);
        assert_eq!(
            t.poll(O, ticket, 5.0),
            Ok(()),
            "the first turn is granted at once"
        );
        t.on_send(O, 5.0);
        t.on_answer(O, 5.0, Answer::Served, 12.0);
        // calls one after the other, each after the last answered: never a wait
        let mut now = 12.0;
        for _ in 0..100 {
            assert_eq!(turn(&mut t, now), now);
            t.on_send(O, now);
            t.on_answer(O, now, Answer::Served, now + 7.0);
            now += 7.0;
        }
    }

    #[test]
    fn a_new_origin_starts_at_the_initial_rate_and_ramps_up_while_callers_wait() {
        let mut t = throttle();
        assert_eq!(turn(&mut t, 0.0), 0.0);
        assert_eq!(turn(&mut t, 0.0), 0.0);
        assert_eq!(t.rate(O, 0.0), Some(200.0));
        // the bucket (10 ms of sends) is empty: the next caller waits, and slow start goes on
        let waiting = t.enqueue(O, 0.0);
        assert!(t.poll(O, waiting, 0.0).is_err());
        assert_eq!(t.rate(O, 200.0), Some(400.0));
        assert_eq!(t.rate(O, 600.0), Some(1600.0));
        assert!(t.rate(O, 1e9).unwrap().is_finite());
    }

    /// `calls` healthy calls through `t`, one every `1000 / rate` ms, each served 7 ms after it
    /// was sent; the last is sent one spacing before `end`.
    fn healthy(t: &mut AdaptiveThrottle, calls: usize, rate: f64, end: f64) {
        let gap = 1000.0 / rate;
        for i in 0..calls {
            let at = end - (calls - i) as f64 * gap;
            assert_eq!(turn(t, at), at, "a healthy call waited");
            t.on_send(O, at);
            t.on_answer(O, at, Answer::Served, at + 7.0);
        }
    }

    #[test]
    fn healthy_traffic_banks_no_rate_for_the_herd_that_follows() {
        for rate in [50.0, 200.0, 360.0, 1000.0] {
            let mut t = throttle();
            healthy(&mut t, 200, rate, 0.0);
            // slow start doubled with time before; now it stays at the rate sent (at least
            // the initial rate) while nobody waits
            let r = t.rate(O, 0.0).unwrap();
            assert!(
                r >= 200.0 && r <= 200f64.max(1.05 * rate),
                "{rate} req/s sent: {r}"
            );
            // a herd meets a bucket of 10 ms of that rate, not one of a banked rate
            let tickets: Vec<u64> = (0..200).map(|_| t.enqueue(O, 0.0)).collect();
            let at_once = tickets
                .iter()
                .filter(|&&k| t.poll(O, k, 0.0).is_ok())
                .count();
            assert!(
                at_once as f64 <= (r / 100.0).ceil(),
                "{rate} req/s: {at_once} sent at once"
            );
        }
    }

    #[test]
    fn a_warm_throttle_meets_the_herd_as_a_fresh_one_does() {
        // 200 healthy calls at half and at nine tenths of the capacity just before the herd;
        // the storm harness below starts the herd at 0
        for share in [0.5, 0.9] {
            // (server, the least time it needs for 200 requests)
            let servers = [
                (Server::bucket(400.0, 20.0), 455.0),
                (Server::slots(8, 20.0), 500.0),
                (Server::slots(4, 10.0), 500.0),
            ];
            for (mut server, ideal) in servers {
                let mut t = throttle();
                healthy(&mut t, 200, share * 400.0, 0.0);
                let s = storm(&mut t, &mut server, 200, None);
                assert_eq!(s.served_ms.len(), 200);
                assert!(s.requests <= 210, "{share}: {} requests", s.requests);
                assert!(s.p99() <= 1.5 * ideal, "{share}: p99 {}", s.p99());
            }
            let mut t = throttle();
            healthy(&mut t, 200, share * 400.0, 0.0);
            let s = storm(&mut t, &mut Server::bucket(400.0, 20.0), 200, Some(1000.0));
            assert!(s.refused_callers <= 2, "{share}: {}", s.refused_callers);
        }
    }

    /// A herd of 200 against `server` shedding with `Retry-After: 1`: all served, at most 2
    /// callers refused (each waits a whole second: p99 within 1.5 x `ideal_ms` allows 2).
    fn sheds_at_most_two(t: &mut AdaptiveThrottle, server: &mut Server, ideal_ms: f64) {
        let s = storm(t, server, 200, Some(1000.0));
        assert_eq!(s.served_ms.len(), 200);
        assert!(
            s.refused_callers <= 2,
            "{} callers refused",
            s.refused_callers
        );
        assert!(s.p99() <= 1.5 * ideal_ms, "p99 {}", s.p99());
    }

    #[test]
    fn a_warm_throttle_against_a_server_shedding_at_200_per_second_refuses_at_most_two() {
        let mut t = throttle();
        healthy(&mut t, 200, 100.0, 0.0);
        sheds_at_most_two(&mut t, &mut Server::bucket(200.0, 10.0), 955.0);
    }

    #[test]
    fn a_warm_slow_starts_exit_cuts_no_lower_than_beta_times_the_rate_served() {
        let mut t = throttle();
        healthy(&mut t, 200, 360.0, 0.0);
        let served = t.rate(O, 0.0).unwrap();
        // a herd queues; slow start goes on from the rate served and is refused at once
        let tickets: Vec<u64> = (0..50).map(|_| t.enqueue(O, 0.0)).collect();
        for &k in &tickets[..3] {
            assert!(t.poll(O, k, 0.0).is_ok());
            t.on_send(O, 0.0);
        }
        let before = t.rate(O, 5.0).unwrap();
        t.on_answer(O, 0.0, Answer::Refused, 5.0);
        let cut = t.rate(O, 5.0).unwrap();
        assert!(
            (cut - 0.7 * served).abs() < 0.02 * served && cut > 0.49 * before,
            "{served} served, {before} -> {cut}"
        );
        // further refusals of that round lower the ceiling no lower than the rate served
        for _ in 0..20 {
            t.on_answer(O, 0.0, Answer::Refused, 6.0);
        }
        let mut now = 6.0;
        while now < 400.0 {
            now += 2.0;
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        let r = t.rate(O, now).unwrap();
        assert!(r >= 0.84 * served, "{served} served: back to {r}");
    }

    #[test]
    fn a_herd_after_a_refusal_of_healthy_traffic_finds_the_capacity_again() {
        // healthy traffic at half the capacity, one of its calls refused (its own burst
        // against 4 slots), then the herd: slow start probes again instead of pacing the herd
        // at the rate the refusal left
        for servers in [Server::slots(4, 10.0), Server::bucket(400.0, 20.0)] {
            let mut t = throttle();
            healthy(&mut t, 100, 200.0, -300.0);
            t.on_send(O, -300.0);
            t.on_answer(O, -300.0, Answer::Refused, -299.0);
            assert!(t.rate(O, -299.0).unwrap() < 200.0, "cut");
            healthy(&mut t, 60, 200.0, 0.0);
            let mut server = servers.clone();
            let ideal = if server.slots > 0 { 500.0 } else { 455.0 };
            let s = storm(&mut t, &mut server, 200, None);
            assert_eq!(s.served_ms.len(), 200);
            assert!(s.requests <= 210, "{} requests", s.requests);
            assert!(s.p99() <= 1.5 * ideal, "p99 {}", s.p99());
        }
    }

    #[test]
    fn callers_queued_long_after_a_cut_probe_for_more() {
        let mut t = throttle();
        t.enqueue(O, 0.0); // a caller waiting
        t.on_answer(O, 0.0, Answer::Refused, 0.0); // cut to 0.49 x 200, the plateau 0.85 x 200
        let mut now = 0.0;
        while now < 300.0 {
            now += 5.0;
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        let plateau = t.rate(O, now).unwrap();
        assert!(plateau <= 0.85 * 200.0 + 1e-6, "{plateau}");
        // a waiter is told to ask again when the probe starts, not after its whole wait
        let tickets: Vec<u64> = (0..100).map(|_| t.enqueue(O, now)).collect();
        let wait = t.poll(O, tickets[99], now).unwrap_err();
        assert!(now + wait <= 401.0, "asks again at {}", now + wait);
        // from 2 x rampMs after the cut, with callers queued and no refusal: slow start again
        assert!(t.rate(O, 600.0).unwrap() > 1.9 * plateau);
        // its exit cuts no lower than beta times the rate served before the probe
        t.on_answer(O, 590.0, Answer::Refused, 600.0);
        assert!(t.rate(O, 600.0).unwrap() >= 0.7 * plateau - 1e-6);
    }

    #[test]
    fn a_server_that_asks_for_waits_is_probed_again_after_half_the_wait() {
        // as above, but the refusal asked for a wait of 2 s: no probe 2 x rampMs after it
        let mut t = throttle();
        t.enqueue(O, 0.0); // a caller waiting
        t.on_answer(O, 0.0, Answer::RefusedWithWait(2000.0), 0.0);
        let mut now = 0.0;
        while now < 300.0 {
            now += 5.0;
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        // no quick return to 0.85 x 200: CUBIC alone from the cut (0.49 x 200)
        let plateau = t.rate(O, now).unwrap();
        assert!(plateau < 0.6 * 200.0, "{plateau}");
        let tickets: Vec<u64> = (0..300).map(|_| t.enqueue(O, now)).collect();
        // the last waiter asks again when the probe may start: half the wait after the cut
        let wait = t.poll(O, tickets[299], now).unwrap_err();
        assert!(
            (now + wait - 1000.0).abs() < 1e-6,
            "asks again at {}",
            now + wait
        );
        assert!(
            t.rate(O, 600.0).unwrap() <= plateau + 1e-6,
            "no probe at 2 x rampMs"
        );
        assert!(
            t.rate(O, 999.0).unwrap() <= plateau + 1e-6,
            "nor before half the wait"
        );
        assert!(
            t.rate(O, 1300.0).unwrap() > 1.9 * plateau,
            "slow start from half the wait"
        );
        // a cut by a refusal that asks for no wait: the quick return to 0.85 x the refused rate,
        // and the probe 2 x rampMs after the cut again
        let refused_at = t.rate(O, 1300.0).unwrap();
        t.on_answer(O, 1290.0, Answer::Refused, 1300.0);
        let mut now = 1300.0;
        while now < 1695.0 {
            now += 5.0;
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        let returned = t.rate(O, 1695.0).unwrap();
        assert!(
            returned > 0.8 * refused_at,
            "quick return: {returned} of {refused_at}"
        );
        assert!(
            returned <= 0.85 * refused_at + 1e-6,
            "no probe before 2 x rampMs"
        );
        assert!(
            t.rate(O, 1800.0).unwrap() > 1.3 * returned,
            "slow start from 1700"
        );
    }

    #[test]
    fn a_blind_cut_that_asked_for_a_wait_probes_no_sooner_than_half_the_wait() {
        for (answer, probes_at_once) in [
            (Answer::Refused, true),
            (Answer::RefusedWithWait(2000.0), false),
        ] {
            // healthy traffic at 100 req/s, nobody queued
            let mut t = throttle();
            let mut now = 0.0;
            while now < 500.0 {
                let k = t.enqueue(O, now);
                assert_eq!(t.poll(O, k, now), Ok(()));
                t.on_send(O, now);
                t.on_answer(O, now, Answer::Served, now + 5.0);
                now += 10.0;
            }
            // refused while nobody waits (a blind cut), then one served
            t.on_answer(O, now - 5.0, answer, now);
            t.on_answer(O, now, Answer::Served, now + 5.0);
            // a herd queues 20 ms later
            let at = now + 20.0;
            let _tickets: Vec<u64> = (0..100).map(|_| t.enqueue(O, at)).collect();
            let before = t.rate(O, at).unwrap();
            let later = t.rate(O, at + 300.0).unwrap();
            assert_eq!(
                later > 1.9 * before,
                probes_at_once,
                "{answer:?}: {before} -> {later}"
            );
        }
    }

    #[test]
    fn the_rules_for_a_server_that_asks_for_waits_last_as_long_as_its_wait() {
        let mut t = throttle();
        let waiting = t.enqueue(O, 0.0);
        t.on_answer(O, 0.0, Answer::RefusedWithWait(1000.0), 0.0); // cut to 0.49 x 200
        t.abandon(O, waiting, 0.0); // nobody queued: no probe
        let mut now = 0.0;
        while now < 990.0 {
            now += 5.0;
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        let held = t.rate(O, 990.0).unwrap();
        // CUBIC alone (about 139 req/s by then), not the quick return to 0.85 x 200
        assert!(
            held < 0.75 * 200.0,
            "no quick return while the wait lasts: {held}"
        );
        // the wait is over: back toward 0.85 x the refused rate (200)
        while now < 1200.0 {
            now += 5.0;
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        let returned = t.rate(O, 1200.0).unwrap();
        assert!(returned > 0.8 * 200.0, "{returned}");
    }

    #[test]
    fn after_a_refusal_that_asked_for_a_wait_queued_turns_do_not_go_out_as_a_burst() {
        for (answer, burst) in [(Answer::Refused, 4), (Answer::RefusedWithWait(1000.0), 1)] {
            // 1000 req/s, flat: refused with a caller waiting, cut to 0.49 x 1000 req/s
            let mut t = flat(1000.0);
            let first = t.enqueue(O, 0.0);
            t.on_answer(O, 0.0, answer, 0.0);
            t.abandon(O, first, 0.0);
            // after an idle while, a queue: how many turns go at once?
            let tickets: Vec<u64> = (0..8).map(|_| t.enqueue(O, 100.0)).collect();
            let at_once = tickets
                .iter()
                .take_while(|&&k| t.poll(O, k, 100.0).is_ok())
                .count();
            assert_eq!(at_once, burst, "{answer:?}");
        }
    }

    #[test]
    fn a_wait_asked_is_counted_up_to_max_wait_ms() {
        let mut t = throttle();
        t.enqueue(O, 0.0);
        t.on_answer(O, 0.0, Answer::RefusedWithWait(3_600_000.0), 0.0);
        // asked an hour: the probe comes half of maxWaitMs (10 s) after the cut
        for now in (1..=980).map(|i| f64::from(i) * 5.0) {
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        let tickets: Vec<u64> = (0..3000).map(|_| t.enqueue(O, 4900.0)).collect();
        let wait = t.poll(O, tickets[2999], 4900.0).unwrap_err();
        assert!(
            (4900.0 + wait - 5000.0).abs() < 1e-6,
            "asks again at {}",
            4900.0 + wait
        );
        let before = t.rate(O, 4999.0).unwrap();
        assert!(before <= 1.01 * t.rate(O, 4900.0).unwrap());
        assert!(t.rate(O, 5300.0).unwrap() > 1.9 * before);
    }

    #[test]
    fn refusals_within_a_round_trip_of_a_cut_do_not_cut_again() {
        let mut t = flat(400.0);
        t.enqueue(O, 0.0); // a caller waiting
                           // answers come 22 ms after their sends (a server holding a slot 20 ms)
        for i in 0..20 {
            let now = 30.0 + i as f64;
            t.on_answer(O, now - 22.0, Answer::Served, now);
        }
        t.on_answer(O, 49.0, Answer::Refused, 51.0);
        let cut = t.rate(O, 51.0).unwrap();
        // sent 10 ms after the cut: the server was still busy with what came before it
        t.on_answer(O, 61.0, Answer::Refused, 63.0);
        assert_eq!(t.rate(O, 63.0), Some(cut));
        // sent more than a round trip after the cut: a new round, a new cut
        t.on_answer(O, 80.0, Answer::Refused, 82.0);
        assert!(t.rate(O, 82.0).unwrap() < cut);
    }

    #[test]
    fn turns_are_served_in_order_at_the_fill_rate() {
        let mut t = flat(100.0);
        // the bucket holds 10 ms of sends (at least one token): one goes now, then one every 10 ms
        let tickets: Vec<u64> = (0..4).map(|_| t.enqueue(O, 0.0)).collect();
        assert_eq!(t.poll(O, tickets[0], 0.0), Ok(()));
        let w1 = t.poll(O, tickets[1], 0.0).unwrap_err();
        let w3 = t.poll(O, tickets[3], 0.0).unwrap_err();
        assert!((w1 - 10.0).abs() < 0.01, "{w1}");
        assert!((w3 - 30.0).abs() < 0.01, "{w3}");
        assert!(t.poll(O, tickets[2], 10.0).is_err(), "not before ticket 1");
        assert_eq!(t.poll(O, tickets[1], 10.0), Ok(()));
        assert_eq!(t.poll(O, tickets[2], 20.0), Ok(()));
    }

    #[test]
    fn slow_start_serves_a_herd_faster_than_the_initial_rate() {
        let mut t = throttle();
        let tickets: Vec<u64> = (0..200).map(|_| t.enqueue(O, 0.0)).collect();
        let mut now = 0.0;
        for ticket in tickets {
            while let Err(wait) = t.poll(O, ticket, now) {
                now += wait;
            }
        }
        // at a flat 200 req/s this would take 1 s
        assert!(now < 450.0, "200 turns took {now} ms");
    }

    #[test]
    fn slow_start_serves_one_caller_sending_one_after_another_faster_than_the_initial_rate() {
        // One caller, each call 0.5 ms after the last one's turn (2,000 a second if unpaced),
        // never two waiting at once: its waits are the demand slow start grows for.
        let mut t = throttle();
        let mut now = 0.0;
        let mut sent = 0;
        while now < 2_000.0 {
            let ticket = t.enqueue(O, now);
            while let Err(wait) = t.poll(O, ticket, now) {
                now += wait;
            }
            t.on_send(O, now);
            sent += 1;
            now += 0.5;
        }
        // at a flat 200 req/s this would be 400
        assert!(sent > 1_500, "{sent} turns in 2 s");
    }

    #[test]
    fn a_slow_callers_last_wait_is_no_demand_once_ramp_ms_passed() {
        // A caller at 1 req/s whose second call comes a little early and waits for its turn.
        let mut waited = 0;
        for second_call in (500..1_000).step_by(50) {
            let mut t = AdaptiveThrottle::new(ThrottleConfig {
                initial_rate: 1.0,
                ..ThrottleConfig::default()
            });
            let first_turn = turn(&mut t, 0.0);
            t.on_send(O, first_turn);
            let asked = f64::from(second_call);
            let now = turn(&mut t, asked);
            t.on_send(O, now);
            waited += usize::from(now > asked);
            // Idle since: reading the rate grows nothing, and reads the same twice.
            let first = t.rate(O, now + 1_500.0).unwrap();
            let second = t.rate(O, now + 1_500.0).unwrap();
            assert_eq!(first, second, "second call at {second_call} ms");
            assert!(first < 2.0, "{first}");
        }
        assert!(waited > 0);
    }

    #[test]
    fn abandoned_turns_do_not_block_the_queue() {
        let mut t = flat(100.0);
        turn(&mut t, 0.0);
        let a = t.enqueue(O, 0.0);
        let b = t.enqueue(O, 0.0);
        t.abandon(O, a, 0.0);
        assert!((t.poll(O, b, 0.0).unwrap_err() - 10.0).abs() < 0.01);
        assert_eq!(t.poll(O, b, 10.0), Ok(()));
    }

    #[test]
    fn slow_starts_exit_cuts_twice_then_one_cut_per_round() {
        let mut t = throttle();
        t.enqueue(O, 0.0); // a caller waiting: the cut starts from the fill rate
        let before = t.rate(O, 10.0).unwrap();
        t.on_answer(O, 0.0, Answer::Refused, 10.0);
        let after_first = t.rate(O, 10.0).unwrap();
        assert!(
            (after_first - 0.49 * before).abs() < 1e-6,
            "{before} -> {after_first}"
        );
        // more refusals of attempts sent before the cut: the rate is not cut again
        for _ in 0..100 {
            t.on_answer(O, 5.0, Answer::Refused, 12.0);
        }
        assert_eq!(t.rate(O, 12.0), Some(after_first));
        // a refusal of an attempt sent after the cut: a second cut, by beta
        t.on_answer(O, 11.0, Answer::Refused, 20.0);
        let second = t.rate(O, 20.0).unwrap();
        assert!(
            (second - 0.7 * after_first).abs() < 1e-6,
            "{after_first} -> {second}"
        );
    }

    #[test]
    fn a_refusal_with_nobody_waiting_cuts_the_measured_send_rate_by_beta() {
        let mut t = throttle();
        for i in 0..5 {
            let now = i as f64 * 20.0;
            assert_eq!(turn(&mut t, now), now);
            t.on_send(O, now);
        }
        // 5 sends in the last 100 ms: 50 req/s sent, far below slow start's 200+
        t.on_answer(O, 80.0, Answer::Refused, 90.0);
        assert!(
            (t.rate(O, 90.0).unwrap() - 0.7 * 50.0).abs() < 1e-6,
            "{:?}",
            t.rate(O, 90.0)
        );
    }

    #[test]
    fn after_a_cut_successes_bring_the_rate_back_under_the_refused_rate_quickly() {
        let mut t = AdaptiveThrottle::new(ThrottleConfig {
            initial_rate: 400.0,
            ..ThrottleConfig::default()
        });
        t.enqueue(O, 0.0);
        t.on_answer(O, 0.0, Answer::Refused, 0.0); // refused at 400 (slow start's exit): cut to 196
        assert!((t.rate(O, 0.0).unwrap() - 196.0).abs() < 1e-6);
        let mut last = 0.0;
        for ms in (2..=200).step_by(2) {
            let now = ms as f64;
            t.on_answer(O, now - 7.0, Answer::Served, now);
            let r = t.rate(O, now).unwrap();
            assert!(
                r >= last - 1e-9,
                "the rate fell on a success: {last} -> {r}"
            );
            last = r;
        }
        // four time constants (rampMs / 4 = 50 ms each): within 2% of the plateau, 0.85 x 400
        assert!(last > 0.98 * 340.0 && last <= 340.0 + 1e-6, "{last}");
        // one more refusal of that round lowers the ceiling by beta (not below the cut)
        t.on_answer(O, 0.0, Answer::Refused, 201.0);
        assert!((t.rate(O, 201.0).unwrap() - 0.85 * 0.7 * 400.0).abs() < 1e-6);
        for _ in 0..10 {
            t.on_answer(O, 0.0, Answer::Refused, 201.0);
        }
        assert!(
            (t.rate(O, 201.0).unwrap() - 196.0).abs() < 1e-6,
            "not below the cut"
        );
    }

    #[test]
    fn cubic_probes_above_the_refused_rate_after_a_long_calm() {
        let mut t = flat(400.0);
        t.enqueue(O, 0.0);
        t.on_answer(O, 0.0, Answer::Refused, 0.0);
        let mut now = 0.0;
        while now < 30_000.0 {
            now += 100.0;
            t.on_answer(O, now - 7.0, Answer::Served, now);
        }
        // K = cbrt((400 - 196) / 0.4), about 8 s; the rate at 30 s is 0.4 (30 - K)^3 + 400
        let k = ((400.0 - 196.0) / 0.4f64).cbrt();
        let r = t.rate(O, now).unwrap();
        assert!((r - (0.4 * (30.0 - k).powi(3) + 400.0)).abs() < 1e-6, "{r}");
        assert!(r > 4000.0);
    }

    #[test]
    fn the_rate_never_falls_below_min_rate() {
        let mut t = throttle();
        for i in 0..200 {
            let now = i as f64 * 10.0;
            t.on_answer(O, now, Answer::Refused, now + 1.0);
        }
        assert_eq!(t.rate(O, 2_001.0), Some(0.5));
    }

    #[test]
    fn an_idle_origin_does_not_bank_an_unlimited_rate() {
        let mut t = throttle();
        t.on_send(O, 0.0);
        t.on_answer(O, 0.0, Answer::Refused, 1.0);
        for i in 1..100 {
            let now = i as f64 * 1000.0;
            t.on_send(O, now); // 1 req/s
            t.on_answer(O, now, Answer::Served, now + 1.0);
        }
        assert!(t.rate(O, 100_000.0).unwrap() <= 2.5);
    }

    // -----------------------------------------------------------------------------------------
    // Storms with an injected clock: `n` callers take turns at once against a server that
    // refuses at once (1 ms each way) what it cannot take; the callers read whole ms and
    // sleep the wait rounded up, as the wasm client does.

    /// A server: a token bucket (`rate` req/s holding `burst`, full at start), halving at
    /// `halve_after_ms` after the first request; or at most `slots` in service.
    #[derive(Clone, Debug)]
    struct Server {
        rate: f64,
        burst: f64,
        halve_after_ms: f64,
        slots: usize,
        service_ms: f64,
        tokens: f64,
        refilled_at: f64,
        first_at: Option<f64>,
        busy_until: Vec<f64>,
    }

    impl Server {
        fn bucket(rate: f64, burst: f64) -> Server {
            Server {
                rate,
                burst,
                halve_after_ms: f64::INFINITY,
                slots: 0,
                service_ms: 5.0,
                tokens: burst,
                refilled_at: 0.0,
                first_at: None,
                busy_until: Vec::new(),
            }
        }

        fn slots(slots: usize, service_ms: f64) -> Server {
            Server {
                rate: 0.0,
                slots,
                service_ms,
                ..Server::bucket(0.0, 0.0)
            }
        }

        fn admit(&mut self, now: f64) -> bool {
            let first = *self.first_at.get_or_insert(now);
            if self.slots > 0 {
                self.busy_until.retain(|&end| end > now);
                if self.busy_until.len() >= self.slots {
                    return false;
                }
                self.busy_until.push(now + self.service_ms);
                return true;
            }
            let change = first + self.halve_after_ms;
            let gained = |from: f64, to: f64, rate: f64| (to - from).max(0.0) * rate / 1000.0;
            let split = change.clamp(self.refilled_at, now);
            let g =
                gained(self.refilled_at, split, self.rate) + gained(split, now, self.rate / 2.0);
            self.tokens = (self.tokens + g).min(self.burst);
            self.refilled_at = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                true
            } else {
                false
            }
        }
    }

    #[derive(Debug)]
    struct Storm {
        /// Requests the server saw.
        requests: usize,
        /// Callers refused at least once.
        refused_callers: usize,
        /// When each caller was served, in order.
        served_ms: Vec<f64>,
    }

    impl Storm {
        /// The time by which 99% of the callers were served.
        fn p99(&self) -> f64 {
            self.served_ms[(self.served_ms.len() as f64 * 0.99).ceil() as usize - 1]
        }
    }

    /// `n` callers start at 0. A refused caller waits `retry_after_ms` (the server's
    /// Retry-After) or else `25 ms × attempts` (about full jitter's mean), then takes a turn.
    fn storm(
        t: &mut AdaptiveThrottle,
        server: &mut Server,
        n: usize,
        retry_after_ms: Option<f64>,
    ) -> Storm {
        #[derive(Clone, Copy)]
        enum Ev {
            Turn,
            Arrive,
            Answer(bool),
        }
        let mut events = crate::core::timeline::Timeline::new();
        for c in 0..n {
            events.push(0.0, (c, Ev::Turn));
        }
        let mut tickets: Vec<Option<u64>> = vec![None; n];
        let mut sent_at = vec![0.0; n];
        let mut attempts = vec![0u32; n];
        let mut refused = vec![false; n];
        let (mut requests, mut served_ms) = (0, Vec::new());
        while let Some((at, (c, ev))) = events.pop() {
            let now = at.floor();
            let mut push = |at: f64, ev: Ev| events.push(at, (c, ev));
            match ev {
                Ev::Turn => {
                    let ticket = *tickets[c].get_or_insert_with(|| t.enqueue(O, now));
                    match t.poll(O, ticket, now) {
                        Ok(()) => {
                            tickets[c] = None;
                            attempts[c] += 1;
                            sent_at[c] = now;
                            t.on_send(O, now);
                            push(at + 1.0, Ev::Arrive);
                        }
                        Err(wait) => push(at + wait.ceil(), Ev::Turn),
                    }
                }
                Ev::Arrive => {
                    requests += 1;
                    let ok = server.admit(at);
                    push(
                        at + 1.0 + if ok { server.service_ms } else { 0.0 },
                        Ev::Answer(ok),
                    );
                }
                Ev::Answer(ok) => {
                    t.on_answer(
                        O,
                        sent_at[c],
                        match (ok, retry_after_ms) {
                            (true, _) => Answer::Served,
                            (false, None) => Answer::Refused,
                            (false, Some(ms)) => Answer::RefusedWithWait(ms),
                        },
                        now,
                    );
                    if ok {
                        served_ms.push(at);
                    } else {
                        refused[c] = true;
                        push(
                            at + retry_after_ms.unwrap_or(25.0 * attempts[c] as f64),
                            Ev::Turn,
                        );
                    }
                }
            }
        }
        Storm {
            requests,
            refused_callers: refused.iter().filter(|&&r| r).count(),
            served_ms,
        }
    }

    #[test]
    fn a_rate_limited_server_is_found_in_one_round() {
        // 400 req/s, burst 20: the least time for 200 requests is 455 ms
        let mut t = throttle();
        let s = storm(&mut t, &mut Server::bucket(400.0, 20.0), 200, None);
        assert_eq!(s.served_ms.len(), 200);
        assert!(
            s.requests <= 210,
            "amplification {}",
            s.requests as f64 / 200.0
        );
        assert!(s.p99() <= 1.5 * 455.0, "p99 {}", s.p99());
        // converged near the capacity
        let r = t.rate(O, s.p99()).unwrap();
        assert!((0.75 * 400.0..=1.05 * 400.0).contains(&r), "rate {r}");
    }

    #[test]
    fn a_concurrency_limited_server_is_found_too() {
        // 8 in service, 20 ms each: 400 req/s, 500 ms for 200
        let mut t = throttle();
        let s = storm(&mut t, &mut Server::slots(8, 20.0), 200, None);
        assert_eq!(s.served_ms.len(), 200);
        assert!(
            s.requests <= 210,
            "amplification {}",
            s.requests as f64 / 200.0
        );
        assert!(s.p99() <= 1.5 * 500.0, "p99 {}", s.p99());
    }

    #[test]
    fn a_server_shedding_with_retry_after_refuses_at_most_two_callers() {
        let mut t = throttle();
        sheds_at_most_two(&mut t, &mut Server::bucket(400.0, 20.0), 455.0);
    }

    #[test]
    fn when_the_capacity_halves_the_rate_follows() {
        // 400 req/s until 250 ms after the first request, then 200: 655 ms for 200 requests
        let mut t = throttle();
        let mut server = Server {
            halve_after_ms: 250.0,
            ..Server::bucket(400.0, 20.0)
        };
        let s = storm(&mut t, &mut server, 200, None);
        assert_eq!(s.served_ms.len(), 200);
        assert!(
            s.requests <= 210,
            "amplification {}",
            s.requests as f64 / 200.0
        );
        assert!(s.p99() <= 1.5 * 655.0, "p99 {}", s.p99());
        let r = t.rate(O, s.p99()).unwrap();
        assert!(r <= 200.0, "rate {r} after the capacity fell to 200");

        // and a herd that found 400 req/s follows a drop to 200 later on
        let mut t = throttle();
        let mut server = Server {
            halve_after_ms: 1_000.0,
            ..Server::bucket(400.0, 20.0)
        };
        let s = storm(&mut t, &mut server, 600, None);
        assert_eq!(s.served_ms.len(), 600);
        assert!(
            s.requests <= 630,
            "amplification {}",
            s.requests as f64 / 600.0
        );
        // near the new capacity (a probe for more may be under way)
        let r = t.rate(O, s.p99()).unwrap();
        assert!(r <= 1.1 * 200.0, "rate {r} after the capacity fell to 200");
    }

    #[test]
    fn validation() {
        let d = ThrottleConfig::default();
        assert!(d.validate().is_ok());
        assert!(ThrottleConfig { beta: 1.0, ..d }.validate().is_err());
        assert!(ThrottleConfig {
            initial_rate: 0.0,
            ..d
        }
        .validate()
        .is_err());
        assert!(ThrottleConfig {
            min_rate: 300.0,
            ..d
        }
        .validate()
        .is_err());
        assert!(ThrottleConfig {
            ramp_ms: f64::NAN,
            ..d
        }
        .validate()
        .is_err());
        assert!(ThrottleConfig {
            max_wait_ms: -1.0,
            ..d
        }
        .validate()
        .is_err());
    }

    #[test]
    fn cube_root_is_close_to_cbrt() {
        for x in [
            1e-12, 0.001, 0.3, 1.0, 2.0, 8.0, 27.0, 100.0, 12345.678, 1e9, 1e300,
        ] {
            let want = f64::cbrt(x);
            assert!(
                (cube_root(x) - want).abs() <= want * 1e-12,
                "{x}: {} vs {want}",
                cube_root(x)
            );
        }
        assert_eq!(cube_root(0.0), 0.0);
        assert_eq!(cube_root(-1.0), 0.0);
        assert_eq!(cube_root(f64::NAN), 0.0);
        assert_eq!(cube_root(f64::INFINITY), f64::INFINITY);
    }

    // ---- the default throttle ------------------------------------------------------------

    #[test]
    fn the_default_throttle_never_paces_a_lone_call_or_calls_one_after_another() {
        let mut t = DefaultThrottle::default();
        for call in 0..100 {
            let now = call as f64 * 10.0;
            t.joined(O, now);
            for attempt in 0..9 {
                let at = now + attempt as f64;
                t.on_answer(O, at, Answer::Refused, at + 0.5); // every attempt refused
                let ticket = t.enqueue(O, at + 1.0);
                assert_eq!(t.poll(O, ticket, at + 1.0), Ok(()));
            }
            t.left(O, now + 9.0);
        }
        assert!(!t.paces(O));
        assert!(!t.paces_first_attempts());
    }

    #[test]
    fn a_herd_pushed_back_is_paced_until_its_calls_are_done() {
        let mut t = DefaultThrottle::default();
        for _ in 0..(HERD_CALLS - 1) {
            t.joined(O, 0.0);
        }
        t.on_answer(O, 0.0, Answer::Refused, 1.0);
        assert!(!t.paces(O), "nine calls are not a herd");
        t.joined(O, 1.0);
        t.on_answer(O, 0.0, Answer::Refused, 2.0);
        assert!(t.paces(O) && !t.paces("http://other:1"));
        assert_eq!(
            t.rate(O, 2.0),
            Some(200.0),
            "slow start from the initial rate"
        );
        // 100 retries at once: the first two at once (the bucket), the rest along slow start
        let tickets: Vec<u64> = (0..100).map(|_| t.enqueue(O, 2.0)).collect();
        let mut granted = vec![None; 100];
        let mut now = 2.0;
        while granted.iter().any(Option::is_none) {
            for (i, &ticket) in tickets.iter().enumerate() {
                if granted[i].is_none() && t.poll(O, ticket, now).is_ok() {
                    granted[i] = Some(now);
                }
            }
            now += 1.0;
        }
        assert_eq!(granted[0], Some(2.0));
        let last = granted[99].unwrap_or_default();
        assert!(
            (250.0..400.0).contains(&(last - 2.0)),
            "the 100th turn at {last}"
        );
        // the calls end: the throttle steps aside
        for i in 0..HERD_CALLS {
            assert!(t.paces(O), "{i} calls left");
            t.left(O, now);
        }
        assert!(!t.paces(O));
        assert_eq!(t.enqueue(O, now), UNQUEUED);
    }
}
