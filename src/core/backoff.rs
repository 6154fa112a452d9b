//! The backoff schedule: exponential growth, a cap, and jitter over an injected [`Rng`].
//!
//! The delay before attempt `n + 1` is `min(maxDelayMs, baseDelayMs * factor^(n-1))`, then
//! jitter (see [`Jitter`]). Every delay is an integer number of ms in `0..=cap`, and the cap
//! never exceeds what `setTimeout` accepts ([`MAX_TIMER_MS`]). Nothing overflows: the power is
//! computed in `f64` and saturates to infinity, which the cap then clamps.

use super::options::{Jitter, RetryPolicy, MAX_TIMER_MS};

/// A source of uniform random numbers in `[0, 1)`. The shell uses `Math.random` (jitter needs
/// no cryptographic strength); tests and `backoffDelays(..., seed)` use [`SplitMix64`].
pub trait Rng {
    /// A uniform sample in `[0, 1)`.
    fn next_f64(&mut self) -> f64;
}

/// A small, fast, seedable generator (SplitMix64), for deterministic schedules and tests.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Rng for SplitMix64 {
    fn next_f64(&mut self) -> f64 {
        // 53 random bits -> [0, 1)
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The delay schedule of one call. Keeps the previous delay, which decorrelated jitter needs.
///
/// ```
/// use retry_fetch::core::backoff::{Backoff, SplitMix64};
/// use retry_fetch::core::options::{Jitter, RetryPolicy};
/// let policy = RetryPolicy { jitter: Jitter::None, ..RetryPolicy::default() };
/// let mut backoff = Backoff::new(&policy);
/// let mut rng = SplitMix64::new(1);
/// let delays: Vec<u64> = (0..3).map(|_| backoff.next_delay(&mut rng)).collect();
/// assert_eq!(delays, [500, 1000, 2000]);
/// ```
#[derive(Clone, Debug)]
pub struct Backoff {
    base_ms: f64,
    factor: f64,
    cap_ms: f64,
    jitter: Jitter,
    /// Retries scheduled so far (0 before the first).
    retries: u32,
    /// The previous jittered delay (decorrelated jitter's state); starts at the base.
    previous_ms: f64,
}

impl Backoff {
    /// A fresh schedule for `policy`.
    pub fn new(policy: &RetryPolicy) -> Self {
        let cap_ms = clamp_ms(policy.max_delay_ms);
        let base_ms = clamp_ms(policy.base_delay_ms);
        Backoff {
            base_ms,
            factor: policy.factor,
            cap_ms,
            jitter: policy.jitter,
            retries: 0,
            previous_ms: base_ms,
        }
    }

    /// The un-jittered exponential delay before retry number `retry` (1-based):
    /// `min(cap, base * factor^(retry-1))`.
    pub fn exponential_ms(&self, retry: u32) -> f64 {
        let exponent = retry.saturating_sub(1).min(i32::MAX as u32) as i32;
        let d = self.base_ms * self.factor.powi(exponent);
        if d.is_nan() {
            // 0 * inf: a zero base stays zero.
            0.0
        } else {
            d.min(self.cap_ms)
        }
    }

    /// The next delay, in whole ms within `0..=cap`, and advance the schedule.
    pub fn next_delay<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        self.retries = self.retries.saturating_add(1);
        let d = self.exponential_ms(self.retries);
        let u = sample(rng);
        let jittered = match self.jitter {
            Jitter::None => d,
            Jitter::Full => u * d,
            Jitter::Equal => d / 2.0 + u * (d / 2.0),
            Jitter::Decorrelated => {
                let low = self.base_ms.min(self.cap_ms);
                let high = (self.previous_ms * 3.0).max(low);
                low + u * (high - low)
            }
            Jitter::Additive => d + u * self.base_ms,
        };
        let delay = jittered.min(self.cap_ms).max(0.0);
        self.previous_ms = delay;
        delay.floor() as u64
    }

    /// The wait before the next retry when the server asked for `floor_ms` (`Retry-After`,
    /// `RateLimit`): never less than asked, and spread above it so that clients refused
    /// together do not come back together: `floor + uniform(0, w)`, where `w` is
    /// [`Backoff::floor_window_ms`] (it grows with the attempt, as the backoff does), at most
    /// `cap_ms` (and never below the floor; a `steady` wait may pass `cap_ms`, below). With [`Jitter::None`] the wait is the floor
    /// itself. `within_ms`, when the wait must end before it (what is left of a deadline) and
    /// the floor does: the window is narrowed to end there, so the spread stays uniform and
    /// the retry is still made. `steady`: the window of the first retry however many came
    /// before, so that a wait a server asks for again and again while work goes on (a 202's
    /// `Retry-After`, poll after poll) keeps one width (`max(base, floor / 2)`) instead of
    /// being pushed further out each time, and is spread above a floor that `cap_ms` clamped
    /// (up to what `setTimeout` accepts), or callers told the same long wait poll together. Advances the schedule as [`Backoff::next_delay`]
    /// does.
    pub fn above_floor<R: Rng + ?Sized>(
        &mut self,
        floor_ms: f64,
        cap_ms: f64,
        within_ms: Option<f64>,
        steady: bool,
        rng: &mut R,
    ) -> u64 {
        self.retries = self.retries.saturating_add(1);
        let window_retry = if steady { 1 } else { self.retries };
        let floor = clamp_ms(floor_ms.ceil());
        let mut window = self.floor_window_ms(floor, window_retry);
        if let Some(room) = within_ms.map(|w| w - 1.0 - floor).filter(|r| *r >= 0.0) {
            window = window.min(room);
        }
        let spread = match self.jitter {
            Jitter::None => 0.0,
            _ => sample(rng) * window,
        };
        // A retry's wait stays within `cap_ms`; a poll's (`steady`) is spread above its floor
        // even where the floor is the cap, or callers told the same long wait poll together.
        let top = if steady {
            MAX_TIMER_MS
        } else {
            clamp_ms(cap_ms)
        };
        let wait = (floor + spread).min(top).max(floor).floor();
        self.previous_ms = wait.min(self.cap_ms).max(self.base_ms.min(self.cap_ms));
        wait as u64
    }

    /// The window above a server's wait of `floor_ms` for retry number `retry` (1-based): the
    /// larger of the retry's un-jittered backoff delay and half the server's wait, both grown
    /// by `factor` per retry (`floor / 2 · factor^(retry-1)`), at most `MAX_TIMER_MS`.
    pub fn floor_window_ms(&self, floor_ms: f64, retry: u32) -> f64 {
        let exponent = retry.saturating_sub(1).min(i32::MAX as u32) as i32;
        let scaled = clamp_ms(floor_ms / 2.0 * self.factor.powi(exponent));
        self.exponential_ms(retry).max(scaled)
    }

    /// Record a delay that replaced the computed one (a server's `Retry-After`), so that
    /// decorrelated jitter continues from what actually happened.
    pub fn note_external_delay(&mut self, delay_ms: u64) {
        self.retries = self.retries.saturating_add(1);
        self.previous_ms = clamp_ms(delay_ms as f64)
            .min(self.cap_ms)
            .max(self.base_ms.min(self.cap_ms));
    }
}

/// A sample from `rng`, forced into `[0, 1)` whatever the implementation returns.
fn sample<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u = rng.next_f64();
    if u.is_finite() && u >= 0.0 {
        u.min(1.0 - f64::EPSILON)
    } else {
        0.0
    }
}

/// `v` clamped to `0..=MAX_TIMER_MS` (NaN becomes 0).
pub fn clamp_ms(v: f64) -> f64 {
    if v.is_nan() {
        0.0
    } else {
        v.clamp(0.0, MAX_TIMER_MS)
    }
}

/// The first `count` delays `policy` would use, as `backoffDelays` returns them.
pub fn delays<R: Rng + ?Sized>(policy: &RetryPolicy, count: u32, rng: &mut R) -> Vec<u64> {
    let mut backoff = Backoff::new(policy);
    (0..count).map(|_| backoff.next_delay(rng)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(jitter: Jitter) -> RetryPolicy {
        RetryPolicy {
            jitter,
            ..RetryPolicy::default()
        }
    }

    struct Fixed(f64);
    impl Rng for Fixed {
        fn next_f64(&mut self) -> f64 {
            self.0
        }
    }

    #[test]
    fn exponential_without_jitter_matches_seed_000() {
        // the classic schedule: base 500 ms doubling, 500 ms, 1 s, 2 s, ...
        let d = delays(&policy(Jitter::None), 5, &mut Fixed(0.5));
        assert_eq!(d, [500, 1000, 2000, 4000, 8000]);
    }

    #[test]
    fn cap_bounds_the_schedule() {
        let p = RetryPolicy {
            max_delay_ms: 3000.0,
            ..policy(Jitter::None)
        };
        assert_eq!(
            delays(&p, 5, &mut Fixed(0.0)),
            [500, 1000, 2000, 3000, 3000]
        );
    }

    #[test]
    fn full_jitter_scales_the_whole_delay() {
        assert_eq!(
            delays(&policy(Jitter::Full), 3, &mut Fixed(0.5)),
            [250, 500, 1000]
        );
        assert_eq!(delays(&policy(Jitter::Full), 2, &mut Fixed(0.0)), [0, 0]);
    }

    #[test]
    fn equal_jitter_keeps_half() {
        assert_eq!(
            delays(&policy(Jitter::Equal), 2, &mut Fixed(0.0)),
            [250, 500]
        );
        assert_eq!(
            delays(&policy(Jitter::Equal), 2, &mut Fixed(0.5)),
            [375, 750]
        );
    }

    #[test]
    fn additive_jitter_adds_up_to_one_base() {
        assert_eq!(
            delays(&policy(Jitter::Additive), 2, &mut Fixed(0.5)),
            [750, 1250]
        );
    }

    #[test]
    fn decorrelated_grows_from_previous() {
        // low = 500, high = 3 * previous
        let d = delays(&policy(Jitter::Decorrelated), 3, &mut Fixed(0.5));
        // 500 + 0.5*(1500-500) = 1000; 500 + 0.5*(3000-500) = 1750; 500 + 0.5*(5250-500) = 2875
        assert_eq!(d, [1000, 1750, 2875]);
    }

    #[test]
    fn huge_values_never_overflow() {
        let p = RetryPolicy {
            base_delay_ms: MAX_TIMER_MS,
            factor: 100.0,
            max_delay_ms: MAX_TIMER_MS,
            max_attempts: 100,
            ..policy(Jitter::None)
        };
        let d = delays(&p, 100, &mut Fixed(0.9));
        assert!(d.iter().all(|&x| x == MAX_TIMER_MS as u64));
        let zero = RetryPolicy {
            base_delay_ms: 0.0,
            factor: 100.0,
            ..policy(Jitter::Decorrelated)
        };
        assert!(delays(&zero, 100, &mut Fixed(0.9)).iter().all(|&x| x == 0));
    }

    #[test]
    fn a_misbehaving_rng_is_contained() {
        for u in [f64::NAN, -1.0, 7.0, f64::INFINITY] {
            for j in [
                Jitter::Full,
                Jitter::Equal,
                Jitter::Decorrelated,
                Jitter::Additive,
            ] {
                let d = delays(&policy(j), 10, &mut Fixed(u));
                assert!(d.iter().all(|&x| x <= 30_000), "{j:?} {u} {d:?}");
            }
        }
    }

    #[test]
    fn seeded_schedules_repeat() {
        let a = delays(&policy(Jitter::Full), 8, &mut SplitMix64::new(42));
        let b = delays(&policy(Jitter::Full), 8, &mut SplitMix64::new(42));
        let c = delays(&policy(Jitter::Full), 8, &mut SplitMix64::new(43));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
