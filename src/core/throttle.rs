//! An adaptive client-side send rate per origin, in the spirit of the AWS SDKs' adaptive
//! retry mode: a token bucket whose fill rate shrinks when the server answers 429 or 503 and
//! grows back on success, following CUBIC (the AWS constants: β = 0.7, C = 0.4).
//!
//! Every attempt (first ones included) takes a turn and waits until a token is there, so a herd of
//! callers queues at the rate the server can take instead of storming it. Two refinements
//! make it work for a herd inside one process, where AWS's per-client design collapses:
//!
//! - **Slow start.** A new origin starts at `initial_rate` req/s and the rate doubles every
//!   `ramp_ms` until the first throttling answer (TCP's slow start, in time): a cold herd is
//!   paced from its first request, while an app that never sees a throttling answer is
//!   effectively unlimited after a second or so.
//! - **One decrease per round.** Throttling answers to attempts sent before the last decrease
//!   are ignored (TCP's one reduction per window): a burst of 503s from one wave shrinks the
//!   rate once, not once per answer.
//!
//! After a decrease the rate follows `C·(t − K)³ + W_max`, where `W_max` is the rate at the
//! decrease and `K = ∛(W_max·(1 − β)/C)`; it never exceeds twice the measured send rate, so
//! an idle period does not bank an unlimited rate.

use super::options::OptionError;
use super::origins::OriginMap;

/// Throttle settings.
///
/// # Default
/// `initial_rate` 100 req/s, `ramp_ms` 100, `beta` 0.7, `scale` 0.4, `min_rate` 0.5 req/s,
/// `max_wait_ms` 10000.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottleConfig {
    /// Starting send rate of a new origin, req/s. Default 100.
    pub initial_rate: f64,
    /// Slow start doubles the rate every `ramp_ms` until the first throttling answer. Default 100.
    pub ramp_ms: f64,
    /// Multiplicative decrease on a throttling answer, in `(0, 1)`. Default 0.7.
    pub beta: f64,
    /// CUBIC's scale constant C, in req/s per s³. Default 0.4.
    pub scale: f64,
    /// The lowest send rate, req/s. Default 0.5.
    pub min_rate: f64,
    /// The longest an attempt waits for its turn, in ms; one that would wait longer is not
    /// sent (the call stops, reason `'throttled'`). Default 10000.
    pub max_wait_ms: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig { initial_rate: 100.0, ramp_ms: 100.0, beta: 0.7, scale: 0.4, min_rate: 0.5, max_wait_ms: 10_000.0 }
    }
}

impl ThrottleConfig {
    /// Check the ranges documented on each field.
    pub fn validate(self) -> Result<Self, OptionError> {
        let positive = |v: f64| v.is_finite() && v > 0.0 && v <= 1e9;
        if !positive(self.initial_rate) {
            return Err(OptionError::new("initialRate", "a number of requests per second > 0"));
        }
        if !positive(self.ramp_ms) {
            return Err(OptionError::new("rampMs", "a number of milliseconds > 0"));
        }
        if !(self.beta.is_finite() && self.beta > 0.0 && self.beta < 1.0) {
            return Err(OptionError::new("beta", "a number between 0 and 1 (exclusive)"));
        }
        if !positive(self.scale) {
            return Err(OptionError::new("scale", "a number > 0"));
        }
        if !positive(self.min_rate) || self.min_rate > self.initial_rate {
            return Err(OptionError::new("minRate", "a number of requests per second > 0 and <= initialRate"));
        }
        if !(self.max_wait_ms.is_finite() && self.max_wait_ms >= 0.0 && self.max_wait_ms <= super::options::MAX_TIMER_MS) {
            return Err(OptionError::new("maxWaitMs", "a number of milliseconds from 0 to 2147483647"));
        }
        Ok(self)
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

#[derive(Clone, Debug)]
struct OriginThrottle {
    created_ms: f64,
    /// True after the first throttling answer: CUBIC instead of slow start.
    backed_off: bool,
    fill_rate: f64,
    tokens: f64,
    last_refill_ms: f64,
    w_max: f64,
    k_s: f64,
    last_decrease_ms: f64,
    sends: RateMeter,
    /// The next ticket to be served, and the next to be issued (FIFO turns).
    head: u64,
    tail: u64,
    /// Tickets given up while waiting (skipped when they reach the head).
    abandoned: Vec<u64>,
}

impl OriginThrottle {
    fn new(config: &ThrottleConfig, now_ms: f64) -> Self {
        OriginThrottle {
            created_ms: now_ms,
            backed_off: false,
            fill_rate: config.initial_rate,
            tokens: capacity(config.initial_rate),
            last_refill_ms: now_ms,
            w_max: config.initial_rate,
            k_s: 0.0,
            last_decrease_ms: f64::NEG_INFINITY,
            sends: RateMeter::default(),
            head: 0,
            tail: 0,
            abandoned: Vec::new(),
        }
    }

    fn skip_abandoned(&mut self) {
        while let Some(i) = self.abandoned.iter().position(|&t| t == self.head) {
            self.abandoned.swap_remove(i);
            self.head += 1;
        }
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
        config.ramp_ms * (1.0 + needed * ln2 / (self.fill_rate * ramp_s)).log2()
    }

    fn refill(&mut self, config: &ThrottleConfig, now_ms: f64) {
        if !self.backed_off {
            // slow start: double every ramp_ms (capped to stay finite)
            let doublings = ((now_ms - self.created_ms) / config.ramp_ms).clamp(0.0, 60.0);
            self.fill_rate = config.initial_rate * doublings.exp2();
        }
        let elapsed_s = ((now_ms - self.last_refill_ms) / 1000.0).max(0.0);
        self.tokens = (self.tokens + elapsed_s * self.fill_rate).min(capacity(self.fill_rate));
        self.last_refill_ms = now_ms;
    }
}

/// The bucket holds at most 5 ms worth of sends (at least one token): bursts stay small, so a
/// server with a small concurrency limit is not hit by a wave of queued turns at once.
/// `x^(1/3)` for `x >= 0` (0 for anything else) through `log2`/`exp2`, which the slow start
/// already links in: `f64::cbrt` would add libm's `cbrt` and `fma` (~2 kB of wasm) for a
/// value that only needs to be close (relative error ~1e-15).
fn cube_root(x: f64) -> f64 {
    if x > 0.0 && x.is_finite() {
        (x.log2() / 3.0).exp2()
    } else if x == f64::INFINITY {
        x
    } else {
        0.0
    }
}

fn capacity(rate: f64) -> f64 {
    (rate / 200.0).max(1.0)
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
        AdaptiveThrottle { config, origins: OriginMap::default() }
    }

    /// The settings.
    pub fn config(&self) -> ThrottleConfig {
        self.config
    }

    fn origin(&mut self, origin: &str, now_ms: f64) -> &mut OriginThrottle {
        let config = self.config;
        self.origins.get_or_insert_with(origin, || OriginThrottle::new(&config, now_ms))
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
        let o = self.origin(origin, now_ms);
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
        let ahead = ticket.saturating_sub(o.head) as f64;
        if ahead == 0.0 && o.tokens >= 1.0 {
            o.tokens -= 1.0;
            o.head = o.head.max(ticket + 1);
            o.skip_abandoned();
            return Ok(());
        }
        Err(o.time_for_tokens(&config, ahead + 1.0 - o.tokens).max(1.0))
    }

    /// Give up `ticket` (the call stopped or was aborted while waiting for its turn).
    pub fn abandon(&mut self, origin: &str, ticket: u64, now_ms: f64) {
        let o = self.origin(origin, now_ms);
        if ticket >= o.head && !o.abandoned.contains(&ticket) {
            o.abandoned.push(ticket);
            o.skip_abandoned();
        }
    }

    /// An attempt to `origin` is being sent at `now_ms` (for the measured send rate).
    pub fn on_send(&mut self, origin: &str, now_ms: f64) {
        self.origin(origin, now_ms).sends.record(now_ms);
    }

    /// The answer to an attempt sent at `sent_ms` arrived at `now_ms`: `throttled` (429 or
    /// 503) or a success (`throttled == false`).
    pub fn on_answer(&mut self, origin: &str, sent_ms: f64, throttled: bool, now_ms: f64) {
        let config = self.config;
        let o = self.origin(origin, now_ms);
        o.refill(&config, now_ms);
        let measured = o.sends.rate(now_ms);
        if throttled {
            if sent_ms < o.last_decrease_ms {
                return; // this round was already answered by a decrease
            }
            // Callers waiting for turns: sending at the fill rate. Otherwise the measured send
            // rate (AWS), which is lower when demand is below the fill rate.
            let waiting = o.tail > o.head + o.abandoned.len() as u64;
            let current = if waiting || measured <= 0.0 { o.fill_rate } else { o.fill_rate.min(measured) };
            o.backed_off = true;
            o.w_max = current;
            o.k_s = cube_root(o.w_max * (1.0 - config.beta) / config.scale);
            o.last_decrease_ms = now_ms;
            o.fill_rate = (current * config.beta).max(config.min_rate);
        } else if o.backed_off {
            let t = (now_ms - o.last_decrease_ms) / 1000.0;
            let cubic = config.scale * (t - o.k_s).powi(3) + o.w_max;
            let ceiling = if measured > 0.0 { 2.0 * measured } else { f64::INFINITY };
            o.fill_rate = cubic.min(ceiling).max(config.min_rate);
        }
        o.tokens = o.tokens.min(capacity(o.fill_rate));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "http://127.0.0.1:1";

    fn throttle() -> AdaptiveThrottle {
        AdaptiveThrottle::new(ThrottleConfig::default())
    }

    #[test]
    fn a_new_origin_starts_at_the_initial_rate_and_ramps_up() {
        let mut t = throttle();
        assert_eq!(turn(&mut t, 0.0), 0.0);
        assert_eq!(t.rate(O, 0.0), Some(100.0));
        assert_eq!(t.rate(O, 100.0), Some(200.0));
        assert_eq!(t.rate(O, 300.0), Some(800.0));
        assert!(t.rate(O, 1e9).unwrap().is_finite());
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
    fn turns_are_served_in_order_at_the_fill_rate() {
        let mut t = AdaptiveThrottle::new(ThrottleConfig { ramp_ms: 1e9, ..ThrottleConfig::default() });
        // the bucket holds 5 ms of sends (at least one token): one goes now, then one every 10 ms
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
        // at a flat 100 req/s this would take about 2 s
        assert!(now < 500.0, "200 turns took {now} ms");
    }

    #[test]
    fn abandoned_turns_do_not_block_the_queue() {
        let mut t = AdaptiveThrottle::new(ThrottleConfig { ramp_ms: 1e9, ..ThrottleConfig::default() });
        turn(&mut t, 0.0);
        let a = t.enqueue(O, 0.0);
        let b = t.enqueue(O, 0.0);
        t.abandon(O, a, 0.0);
        assert!((t.poll(O, b, 0.0).unwrap_err() - 10.0).abs() < 0.01);
        assert_eq!(t.poll(O, b, 10.0), Ok(()));
    }

    #[test]
    fn a_throttling_answer_cuts_the_rate_once_per_round() {
        let mut t = throttle();
        turn(&mut t, 0.0);
        t.on_answer(O, 0.0, true, 10.0);
        let after_first = t.rate(O, 10.0).unwrap();
        assert!(after_first < 100.0, "{after_first}");
        // more answers to attempts sent before the decrease: ignored
        for _ in 0..100 {
            t.on_answer(O, 5.0, true, 12.0);
        }
        assert_eq!(t.rate(O, 12.0), Some(after_first));
        // an attempt sent after the decrease, throttled: a second cut
        t.on_answer(O, 11.0, true, 20.0);
        assert!(t.rate(O, 20.0).unwrap() < after_first);
    }

    #[test]
    fn the_rate_never_falls_below_min_rate() {
        let mut t = throttle();
        for i in 0..200 {
            let now = i as f64 * 10.0;
            t.on_answer(O, now, true, now + 1.0);
        }
        assert_eq!(t.rate(O, 2_001.0), Some(0.5));
    }

    #[test]
    fn successes_grow_the_rate_back_along_cubic() {
        let mut t = throttle();
        for i in 0..50 {
            t.on_send(O, i as f64 * 2.0);
        }
        t.on_answer(O, 0.0, true, 100.0);
        let cut = t.rate(O, 100.0).unwrap();
        let mut now = 100.0;
        let mut last = cut;
        for _ in 0..100 {
            // demand well above the rate: the 2x-measured ceiling does not bind
            for i in 0..50 {
                t.on_send(O, now + i as f64 * 2.0);
            }
            now += 100.0;
            t.on_answer(O, now, false, now + 1.0);
            let r = t.rate(O, now + 1.0).unwrap();
            assert!(r >= last - 1e-9 || r >= cut, "rate fell on success: {last} -> {r}");
            last = r;
        }
        assert!(last > cut, "{cut} -> {last}");
    }

    #[test]
    fn an_idle_origin_does_not_bank_an_unlimited_rate() {
        let mut t = throttle();
        t.on_send(O, 0.0);
        t.on_answer(O, 0.0, true, 1.0);
        for i in 1..100 {
            let now = i as f64 * 1000.0;
            t.on_send(O, now); // 1 req/s
            t.on_answer(O, now, false, now + 1.0);
        }
        assert!(t.rate(O, 100_000.0).unwrap() <= 2.5);
    }

    #[test]
    fn validation() {
        let d = ThrottleConfig::default();
        assert!(d.validate().is_ok());
        assert!(ThrottleConfig { beta: 1.0, ..d }.validate().is_err());
        assert!(ThrottleConfig { initial_rate: 0.0, ..d }.validate().is_err());
        assert!(ThrottleConfig { min_rate: 200.0, ..d }.validate().is_err());
        assert!(ThrottleConfig { ramp_ms: f64::NAN, ..d }.validate().is_err());
        assert!(ThrottleConfig { max_wait_ms: -1.0, ..d }.validate().is_err());
    }

    #[test]
    fn cube_root_is_close_to_cbrt() {
        for x in [1e-12, 0.001, 0.3, 1.0, 2.0, 8.0, 27.0, 100.0, 12345.678, 1e9, 1e300] {
            let want = f64::cbrt(x);
            assert!((cube_root(x) - want).abs() <= want * 1e-12, "{x}: {} vs {want}", cube_root(x));
        }
        assert_eq!(cube_root(0.0), 0.0);
        assert_eq!(cube_root(-1.0), 0.0);
        assert_eq!(cube_root(f64::NAN), 0.0);
        assert_eq!(cube_root(f64::INFINITY), f64::INFINITY);
    }
}
