//! Property tests (proptest) and a few integration tests of the public, pure core API:
//! backoff schedule bounds, header parsers, idempotency keys, option validation and the
//! per-attempt retry decision.
//!
//! Every property states an invariant that the implementation could break; where a check
//! mirrors a formula of `src/core`, the mirror is written out here independently.

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

use retry_fetch::core::backoff::{self, Rng, SplitMix64};
use retry_fetch::core::classify::{classify, Outcome, RetryReason, Verdict};
use retry_fetch::core::decide::{AttemptOutcome, Decision, RetryState, Stop};
use retry_fetch::core::key;
use retry_fetch::core::options::{self, Jitter, KeyFormat, KeyMode, RetryPolicy, MAX_TIMER_MS};
use retry_fetch::core::retry_after;

const MAX_TIMER_U64: u64 = 2_147_483_647;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        // Keep failures out of the source tree (no `proptest-regressions/` directory); a
        // failure prints its minimal input, which is enough to reproduce it.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------
// Strategies and helpers
// ---------------------------------------------------------------------------------------

const ALL_JITTERS: [Jitter; 5] = [
    Jitter::None,
    Jitter::Full,
    Jitter::Equal,
    Jitter::Decorrelated,
    Jitter::Additive,
];

fn jitter_strategy() -> impl Strategy<Value = Jitter> {
    proptest::sample::select(ALL_JITTERS.to_vec())
}

/// `baseDelayMs` in `0..=1e7`, with integers and the bounds well represented.
fn base_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => 0.0f64..=1e7,
        3 => (0u32..=10_000_000).prop_map(f64::from),
        1 => (0u32..=5_000).prop_map(f64::from),
        1 => Just(0.0),
        1 => Just(1e7),
    ]
}

/// `factor` in `1..=100`.
fn factor_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => 1.0f64..=100.0,
        2 => 1.0f64..=3.0,
        2 => (1u32..=100).prop_map(f64::from),
        1 => Just(1.0),
        1 => Just(100.0),
    ]
}

/// `maxDelayMs` in `0..=2147483647`.
fn max_delay_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => 0.0f64..=MAX_TIMER_MS,
        3 => (0u32..=100_000).prop_map(f64::from),
        1 => 0.0f64..=1000.0,
        1 => Just(0.0),
        1 => Just(MAX_TIMER_MS),
    ]
}

fn policy_strategy() -> impl Strategy<Value = RetryPolicy> {
    (
        jitter_strategy(),
        base_strategy(),
        factor_strategy(),
        max_delay_strategy(),
        1u32..=100,
    )
        .prop_map(|(jitter, base, factor, max, attempts)| RetryPolicy {
            jitter,
            base_delay_ms: base,
            factor,
            max_delay_ms: max,
            max_attempts: attempts,
            ..RetryPolicy::default()
        })
}

/// The cap every delay must respect: `min(maxDelayMs, 2^31 - 1)`.
fn cap_of(policy: &RetryPolicy) -> f64 {
    policy.max_delay_ms.min(MAX_TIMER_MS)
}

/// Records every sample its inner generator hands out.
struct Recording<R> {
    inner: R,
    seen: Vec<f64>,
}

impl<R: Rng> Rng for Recording<R> {
    fn next_f64(&mut self) -> f64 {
        let u = self.inner.next_f64();
        self.seen.push(u);
        u
    }
}

/// Returns the given values in a cycle, however wrong they are (NaN, negative, > 1).
struct Scripted {
    values: Vec<f64>,
    i: usize,
}

impl Rng for Scripted {
    fn next_f64(&mut self) -> f64 {
        let v = self.values[self.i % self.values.len()];
        self.i += 1;
        v
    }
}

/// Any f64 at all, with the special values and integers near the validators' bounds
/// well represented.
fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => proptest::num::f64::ANY,
        3 => (-1_000i32..=11_000).prop_map(f64::from),
        2 => (-1_000i32..=11_000).prop_map(|i| f64::from(i) + 0.5),
        1 => (-3i64..=3).prop_map(|d| (2_147_483_647 + d) as f64),
        1 => (-3i64..=3).prop_map(|d| (2_147_483_647 + d) as f64 + 0.25),
        1 => proptest::sample::select(vec![
            0.0, -0.0, 1.0, 100.0, 100.000_000_000_001, 0.999_999_999_999, 99.0, 101.0, 599.0, 600.0,
            10_000.0, 10_001.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE,
            f64::EPSILON, f64::MAX, f64::MIN, 1e300, -1e-300,
        ]),
    ]
}

// ---------------------------------------------------------------------------------------
// 1-3: the backoff schedule
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// 1. Every delay of every jitter mode is within `[0, cap]`.
    #[test]
    fn every_delay_is_within_zero_and_the_cap(
        policy in policy_strategy(),
        count in 0u32..=100,
        seed in any::<u64>(),
    ) {
        let cap = cap_of(&policy);
        let d = backoff::delays(&policy, count, &mut SplitMix64::new(seed));
        prop_assert_eq!(d.len(), count as usize);
        for (i, &x) in d.iter().enumerate() {
            prop_assert!(x as f64 <= cap, "delay #{} = {} > cap {} ({:?})", i + 1, x, cap, policy.jitter);
            prop_assert!(x <= MAX_TIMER_U64);
        }
    }

    /// 1b. The same bound holds for a policy built through the validators (which clamp
    /// `maxDelayMs`), and for a generator that returns garbage (NaN, negatives, >= 1).
    #[test]
    fn the_cap_holds_with_validated_options_and_a_hostile_rng(
        jitter in jitter_strategy(),
        raw_base in 0.0f64..=1e7,
        raw_factor in 1.0f64..=100.0,
        raw_max in 0.0f64..=1e13,
        count in 0u32..=100,
        script in proptest::collection::vec(any_f64(), 1..8),
    ) {
        let policy = RetryPolicy {
            jitter,
            base_delay_ms: options::non_negative_ms("baseDelayMs", raw_base).unwrap(),
            factor: options::factor(raw_factor).unwrap(),
            max_delay_ms: options::non_negative_ms("maxDelayMs", raw_max).unwrap(),
            ..RetryPolicy::default()
        };
        let cap = raw_max.min(MAX_TIMER_MS);
        let d = backoff::delays(&policy, count, &mut Scripted { values: script, i: 0 });
        prop_assert_eq!(d.len(), count as usize);
        prop_assert!(d.iter().all(|&x| x as f64 <= cap), "{:?} cap {}", d, cap);
    }

    /// 2. Decorrelated jitter: `d_k` within `[min(base, cap), min(cap, 3 * previous)]`,
    /// previous starting at the base. The schedule keeps the unrounded previous delay while
    /// it returns whole ms, so the observable check allows the floor's `< 1 ms` on
    /// `previous` (`3 * (prev + 1)`, i.e. `<= 3 * prev + 2` in whole ms); the exact check
    /// replays the recorded samples through the formula of `backoff.rs`.
    #[test]
    fn decorrelated_stays_between_base_and_three_times_previous(
        base in base_strategy(),
        factor in factor_strategy(),
        max in max_delay_strategy(),
        count in 1u32..=100,
        seed in any::<u64>(),
    ) {
        let policy = RetryPolicy {
            jitter: Jitter::Decorrelated,
            base_delay_ms: base,
            factor,
            max_delay_ms: max,
            ..RetryPolicy::default()
        };
        let cap = cap_of(&policy);
        let low = base.min(cap);
        let mut rng = Recording { inner: SplitMix64::new(seed), seen: Vec::new() };
        let d = backoff::delays(&policy, count, &mut rng);
        prop_assert_eq!(rng.seen.len(), d.len(), "one sample per delay");

        // Observable bounds, from the returned whole-ms delays only.
        let mut previous_observed: Option<u64> = None;
        for (k, &x) in d.iter().enumerate() {
            let x = x as f64;
            prop_assert!(x >= low.floor(), "d_{} = {} < min(base, cap) = {}", k + 1, x, low);
            let upper = match previous_observed {
                None => cap.min(3.0 * base).floor(),
                Some(p) => cap.min(3.0 * p as f64 + 2.0).floor(),
            };
            prop_assert!(x <= upper, "d_{} = {} > {} (previous {:?}, cap {})", k + 1, x, upper, previous_observed, cap);
            previous_observed = Some(x as u64);
        }

        // Exact replay: previous starts at the base; each sample u (forced into [0, 1))
        // gives min(cap, low + u * (max(3 * previous, low) - low)).
        let mut previous = base;
        for (k, (&x, &u)) in d.iter().zip(&rng.seen).enumerate() {
            let u = if u.is_finite() && u >= 0.0 { u.min(1.0 - f64::EPSILON) } else { 0.0 };
            let high = (3.0 * previous).max(low);
            let real = (low + u * (high - low)).min(cap).max(0.0);
            prop_assert!(real >= low && real <= cap.min(3.0 * previous).max(low));
            prop_assert_eq!(x, real.floor() as u64, "d_{} (u = {}, previous = {})", k + 1, u, previous);
            previous = real;
        }
    }

    /// 3. 'none' is exactly `floor(min(cap, base * factor^(n-1)))`; 'full' never exceeds it;
    /// 'equal' never goes below half of it (1 ms floor tolerance); 'additive' is at least it.
    #[test]
    fn modes_relate_to_the_exponential_delay(
        policy in policy_strategy(),
        count in 1u32..=100,
        seed in any::<u64>(),
    ) {
        let cap = cap_of(&policy);
        let exponential: Vec<f64> = (1..=count)
            .map(|n| (policy.base_delay_ms * policy.factor.powi(n as i32 - 1)).min(cap))
            .collect();
        let run = |jitter: Jitter| {
            backoff::delays(&RetryPolicy { jitter, ..policy.clone() }, count, &mut SplitMix64::new(seed))
        };
        let none = run(Jitter::None);
        let full = run(Jitter::Full);
        let equal = run(Jitter::Equal);
        let additive = run(Jitter::Additive);
        for (i, &e) in exponential.iter().enumerate() {
            let n = i + 1;
            prop_assert_eq!(none[i], e.floor() as u64, "none, n = {}", n);
            prop_assert!(full[i] as f64 <= e, "full, n = {}: {} > {}", n, full[i], e);
            prop_assert!(equal[i] as f64 >= e / 2.0 - 1.0, "equal, n = {}: {} < {} / 2", n, equal[i], e);
            prop_assert!(equal[i] as f64 <= e, "equal, n = {}: {} > {}", n, equal[i], e);
            prop_assert!(additive[i] >= none[i], "additive, n = {}: {} < {}", n, additive[i], none[i]);
            prop_assert!(additive[i] as f64 <= cap.min(e + policy.base_delay_ms), "additive, n = {}", n);
        }
    }

    /// 3b. With integer base and factor the exponential schedule is computed here in exact
    /// integer arithmetic, independently of `powi`, and 'none' must match it exactly.
    #[test]
    fn none_matches_exact_integer_arithmetic(
        base in prop_oneof![0u64..=10_000_000, 0u64..=1_000],
        factor in 1u64..=100,
        max in prop_oneof![0u64..=MAX_TIMER_U64, 0u64..=100_000],
        count in 1u32..=100,
    ) {
        let policy = RetryPolicy {
            jitter: Jitter::None,
            base_delay_ms: base as f64,
            factor: factor as f64,
            max_delay_ms: max as f64,
            ..RetryPolicy::default()
        };
        let d = backoff::delays(&policy, count, &mut SplitMix64::new(0));
        let mut exact: u128 = u128::from(base);
        for (i, &x) in d.iter().enumerate() {
            let expected = exact.min(u128::from(max)) as u64;
            prop_assert_eq!(x, expected, "n = {}", i + 1);
            exact = exact.saturating_mul(u128::from(factor)).min(u128::from(u64::MAX));
        }
    }
}

// ---------------------------------------------------------------------------------------
// 4-5: server-requested waits
// ---------------------------------------------------------------------------------------

fn header_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".*",
        "[0-9 ,;=\"a-zA-Z:-]{0,64}",
        // Close to the real grammars, so the deeper branches are reached too.
        "[ \t]{0,2}[0-9]{1,25}[ \t]{0,2}",
        "(\"[a-z,;]{0,4}\"|[a-z]{1,4})(;(r|t|remaining|reset|x)=[ 0-9a-z\"]{0,4}){0,4}(, ?(\"[a-z]{0,3}\"|[a-z]{1,3})(;(r|t)=[0-9]{0,3}){0,3}){0,3}",
        "(Mon|Sun|Sunday|Thu), [0-9]{2}[ -](Nov|Jan|Feb|Xyz)[ -][0-9]{2,4} [0-9]{2}:[0-9]{2}:[0-9]{2} (GMT|UTC)",
        "(Sun|Thu) (Nov|Feb) [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}",
        // Valid IMF-fixdates, in the past or the future of `now`.
        (0u64..=4_000_000_000).prop_map(|s| {
            httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s))
        }),
    ]
}

fn now_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.0f64..4e12,
        2 => (0u64..4_000_000_000_000).prop_map(|v| v as f64),
        1 => proptest::num::f64::ANY,
    ]
}

fn check_wait(what: &str, x: Option<f64>, now: f64) -> Result<(), TestCaseError> {
    if let Some(x) = x {
        prop_assert!(!x.is_nan(), "{} gave NaN", what);
        prop_assert!(x >= 0.0, "{} gave {} < 0", what, x);
        if now.is_finite() {
            prop_assert!(
                x.is_finite(),
                "{} gave {} for a finite now {}",
                what,
                x,
                now
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// 4. No parser panics on any text, and every wait is a non-negative number.
    #[test]
    fn parsers_never_panic_and_waits_are_non_negative(
        a in header_text(),
        b in header_text(),
        c in header_text(),
        now in now_strategy(),
        present in any::<(bool, bool, bool)>(),
    ) {
        check_wait("parse_retry_after", retry_after::parse_retry_after(&a, now), now)?;
        check_wait("parse_ratelimit_reset", retry_after::parse_ratelimit_reset(&b, now), now)?;
        check_wait("parse_ratelimit", retry_after::parse_ratelimit(&c), now)?;
        let (pa, pb, pc) = present;
        let ra = pa.then_some(a.as_str());
        let rr = pb.then_some(b.as_str());
        let rl = pc.then_some(c.as_str());
        let combined = retry_after::server_delay_ms(ra, rr, rl, now);
        check_wait("server_delay_ms", combined, now)?;
        // Precedence: Retry-After, then RateLimit-Reset, then RateLimit.
        let expected = ra
            .and_then(|v| retry_after::parse_retry_after(v, now))
            .or_else(|| rr.and_then(|v| retry_after::parse_ratelimit_reset(v, now)))
            .or_else(|| rl.and_then(retry_after::parse_ratelimit));
        prop_assert_eq!(combined.map(f64::to_bits), expected.map(f64::to_bits));
    }

    /// 4b. The same with two plain regexes on their own (`.*` and the header
    /// alphabet), and `now` fixed at a realistic clock.
    #[test]
    fn parsers_never_panic_on_plain_regex_text(
        s in ".*",
        t in "[0-9 ,;=\"a-zA-Z:-]{0,64}",
    ) {
        let now = 1_700_000_000_000.0;
        for v in [&s, &t] {
            check_wait("parse_retry_after", retry_after::parse_retry_after(v, now), now)?;
            check_wait("parse_ratelimit_reset", retry_after::parse_ratelimit_reset(v, now), now)?;
            check_wait("parse_ratelimit", retry_after::parse_ratelimit(v), now)?;
            check_wait("server_delay_ms", retry_after::server_delay_ms(Some(v), Some(v), Some(v), now), now)?;
        }
    }

    /// 5. Delta-seconds printed as text (with optional surrounding spaces and tabs) parse
    /// to exactly that many seconds in ms, whatever `now` is.
    #[test]
    fn delta_seconds_round_trip(
        s in prop_oneof![0u64..=1_000_000_000_000, 0u64..=1_000, Just(1_000_000_000_000u64)],
        pad_left in "[ \t]{0,3}",
        pad_right in "[ \t]{0,3}",
        now in now_strategy(),
    ) {
        let text = format!("{pad_left}{s}{pad_right}");
        let ms = s as f64 * 1000.0;
        prop_assert_eq!(retry_after::parse_retry_after(&text, now), Some(ms));
        prop_assert_eq!(retry_after::server_delay_ms(Some(&text), None, None, now), Some(ms));
        if s < 1_000_000_000 {
            prop_assert_eq!(retry_after::parse_ratelimit_reset(&text, now), Some(ms));
        }
        prop_assert_eq!(retry_after::parse_ratelimit(&format!("\"q\";r=0;t={text}")), Some(ms));
        prop_assert_eq!(retry_after::parse_ratelimit(&format!("\"q\";r=1;t={text}")), None);
    }

    /// 5b. An IMF-fixdate `Retry-After` asks for exactly the time left until that date
    /// (zero for a date in the past).
    #[test]
    fn http_date_retry_after_is_the_time_left(
        at_s in 0u64..=253_402_300_799, // up to 9999-12-31T23:59:59Z
        offset_ms in -100_000_000i64..=100_000_000,
    ) {
        let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(at_s));
        let at_ms = at_s as f64 * 1000.0;
        let now = at_ms - offset_ms as f64;
        prop_assert_eq!(retry_after::parse_http_date_ms(&date), Some(at_ms));
        prop_assert_eq!(retry_after::parse_retry_after(&date, now), Some((offset_ms as f64).max(0.0)), "{}", date);
    }

    /// 5c. `RateLimit`: the wait is the largest `t` among exhausted (`r=0`) policies.
    #[test]
    fn ratelimit_waits_for_the_longest_exhausted_policy(
        members in proptest::collection::vec((0u64..=3, prop_oneof![0u64..=10, 0u64..=100_000]), 0..6),
    ) {
        let text = members
            .iter()
            .enumerate()
            .map(|(i, (r, t))| format!("\"p{i}\";r={r};t={t}"))
            .collect::<Vec<_>>()
            .join(", ");
        let expected = members.iter().filter(|(r, _)| *r == 0).map(|(_, t)| *t).max().map(|t| t as f64 * 1000.0);
        prop_assert_eq!(retry_after::parse_ratelimit(&text), expected, "{}", text);
    }
}

// ---------------------------------------------------------------------------------------
// 6: idempotency keys
// ---------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// 6. Any 16 bytes give a valid UUID v4 that keeps the 122 random bits, and its header
    /// forms are the key itself and the key in quotes.
    #[test]
    fn uuid_v4_from_any_bytes(bytes in any::<[u8; 16]>()) {
        let k = key::uuid_v4(bytes);
        prop_assert_eq!(k.len(), 36);
        prop_assert!(key::is_uuid_v4(&k), "{}", k);
        prop_assert!(key::is_uuid_v4(&k.to_ascii_uppercase()), "{}", k);
        prop_assert!(k.bytes().all(|b| b == b'-' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        prop_assert_eq!(key::header_value(&k, KeyFormat::SfString), format!("\"{k}\""));
        prop_assert_eq!(key::header_value(&k, KeyFormat::Plain), k.clone());

        // The random bits survive: decode the hex and compare with the input, the version
        // and variant bits forced.
        let hex: String = k.chars().filter(|&c| c != '-').collect();
        let decoded: Vec<u8> =
            (0..16).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()).collect();
        let mut expected = bytes;
        expected[6] = (expected[6] & 0x0f) | 0x40;
        expected[8] = (expected[8] & 0x3f) | 0x80;
        prop_assert_eq!(decoded, expected.to_vec());
    }

    /// 6b. Any key the options accept survives the sf-string form: quoted, and unescaping
    /// gives the key back.
    #[test]
    fn sf_string_round_trips_any_accepted_key(k in "[!-~]{1,255}") {
        prop_assume!(k != "auto");
        prop_assert_eq!(options::key_mode(&k), Ok(KeyMode::Fixed(k.clone())));
        let v = key::header_value(&k, KeyFormat::SfString);
        prop_assert!(v.len() >= 2 && v.starts_with('"') && v.ends_with('"'));
        let inner = &v[1..v.len() - 1];
        let mut unescaped = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => unescaped.push(chars.next().expect("a backslash escapes something")),
                '"' => prop_assert!(false, "unescaped quote inside {}", v),
                c => unescaped.push(c),
            }
        }
        prop_assert_eq!(unescaped, k);
    }
}

// ---------------------------------------------------------------------------------------
// 7: option validation
// ---------------------------------------------------------------------------------------

/// Is `v` exactly one of the integers `lo..=hi`? (Written without `fract`, unlike the code.)
fn is_int_in(v: f64, lo: u32, hi: u32) -> bool {
    v >= f64::from(lo) && v <= f64::from(hi) && f64::from(v as u32) == v
}

proptest! {
    #![proptest_config(config())]

    /// 7. The numeric validators never panic and accept exactly the documented ranges.
    #[test]
    fn numeric_validators_accept_exactly_their_ranges(v in any_f64()) {
        // maxAttempts: an integer from 1 to 100.
        let expected = (1..=100u32).find(|&i| f64::from(i) == v);
        prop_assert_eq!(options::max_attempts(v).ok(), expected, "maxAttempts {}", v);
        if let Err(e) = options::max_attempts(v) {
            prop_assert_eq!(e.option, "maxAttempts");
        }

        // factor: a finite number from 1 to 100.
        let ok = (1.0..=100.0).contains(&v);
        prop_assert_eq!(options::factor(v).ok(), ok.then_some(v), "factor {}", v);

        // baseDelayMs / maxDelayMs / maxRetryAfterMs: finite >= 0, clamped to 2^31 - 1.
        let r = options::non_negative_ms("maxDelayMs", v);
        if v.is_finite() && v >= 0.0 {
            let got = r.unwrap();
            prop_assert!((0.0..=MAX_TIMER_MS).contains(&got));
            prop_assert_eq!(got, v.min(MAX_TIMER_MS));
        } else {
            prop_assert_eq!(r.unwrap_err().option, "maxDelayMs");
        }

        // timeoutMs / deadlineMs: > 0 and <= 2^31 - 1.
        let ok = v > 0.0 && v <= MAX_TIMER_MS;
        prop_assert_eq!(options::positive_ms("timeoutMs", v).ok(), ok.then_some(v), "timeoutMs {}", v);

        // retryOnStatus entries: an integer from 100 to 599.
        let expected = (100..=599u16).find(|&i| f64::from(i) == v);
        prop_assert_eq!(options::status_code(v).ok(), expected, "status {}", v);

        // maxBufferedBodyBytes: an integer from 0 to 2^31 - 1.
        let expected = is_int_in(v, 0, 2_147_483_647).then_some(v as u32);
        prop_assert_eq!(options::body_limit(v).ok(), expected, "body limit {}", v);

        // backoffDelays count: an integer from 0 to 10000.
        let expected = (0..=10_000u32).find(|&i| f64::from(i) == v);
        prop_assert_eq!(options::delay_count(v).ok(), expected, "count {}", v);
    }

    /// 7b. The string validators never panic and accept exactly the documented sets.
    #[test]
    fn string_validators_accept_exactly_their_sets(
        s in prop_oneof![
            ".*",
            "[ -~]{0,260}",
            "[ -~]{253,258}",
            "[A-Za-z0-9!#$%&'*+.^_`|~ \"(),/:;<=>?@\\[\\]{}-]{0,12}",
            proptest::sample::select(vec![
                "auto", "none", "full", "equal", "decorrelated", "additive", "Full", "plain",
                "sf-string", "Plain", "", " ",
            ]).prop_map(String::from),
        ],
    ) {
        let jitter = options::jitter(&s).ok();
        let named = ["none", "full", "equal", "decorrelated", "additive"].iter().position(|n| *n == s);
        prop_assert_eq!(jitter, named.map(|i| ALL_JITTERS[i]));
        prop_assert_eq!(Jitter::from_name(&s), jitter);

        let format = options::key_format(&s).ok();
        let expected = match s.as_str() {
            "plain" => Some(KeyFormat::Plain),
            "sf-string" => Some(KeyFormat::SfString),
            _ => None,
        };
        prop_assert_eq!(format, expected);

        let mode = options::key_mode(&s);
        let expected = if s == "auto" {
            Some(KeyMode::Auto)
        } else if (1..=255).contains(&s.len()) && s.bytes().all(|b| (b'!'..=b'~').contains(&b)) {
            Some(KeyMode::Fixed(s.clone()))
        } else {
            None
        };
        prop_assert_eq!(mode.ok(), expected);

        const TCHAR: &str = "!#$%&'*+-.^_`|~";
        let is_token = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || TCHAR.contains(c));
        let refused = options::is_forbidden_request_header(&s) || options::has_a_meaning(&s);
        prop_assert_eq!(options::header_name(&s).ok(), (is_token && !refused).then(|| s.clone()));
    }
}

// ---------------------------------------------------------------------------------------
// 8: one call, decided attempt by attempt
// ---------------------------------------------------------------------------------------

fn outcome_strategy() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => proptest::sample::select(vec![200u16, 201, 204, 400, 404, 408, 409, 422, 429, 500, 501, 502, 503, 504])
            .prop_map(Outcome::Status),
        1 => (100u16..=599).prop_map(Outcome::Status),
        2 => Just(Outcome::NetworkError),
        2 => Just(Outcome::Timeout),
    ]
}

fn server_delay_strategy() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        6 => Just(None),
        3 => (0.0f64..100_000.0).prop_map(Some),
        2 => (0u32..=5_000).prop_map(|v| Some(f64::from(v))),
        1 => proptest::sample::select(vec![
            f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -0.0, 1e300, MAX_TIMER_MS, MAX_TIMER_MS + 1.0,
        ]).prop_map(Some),
    ]
}

fn call_policy_strategy() -> impl Strategy<Value = RetryPolicy> {
    (
        (
            jitter_strategy(),
            0.0f64..5_000.0,
            1.0f64..4.0,
            prop_oneof![0.0f64..60_000.0, Just(MAX_TIMER_MS)],
            1u32..=100,
        ),
        (
            proptest::sample::subsequence(vec![408u16, 409, 425, 429, 500, 502, 503, 504], 0..=8),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            proptest::option::of(prop_oneof![
                0.5f64..100_000.0,
                (1u32..=100_000).prop_map(f64::from),
                Just(MAX_TIMER_MS)
            ]),
            proptest::option::of(prop_oneof![
                0.0f64..100_000.0,
                Just(0.0),
                Just(MAX_TIMER_MS)
            ]),
        ),
    )
        .prop_map(
            |(
                (jitter, base, factor, max, attempts),
                (statuses, net, timeout, respect),
                (deadline, max_ra),
            )| {
                RetryPolicy {
                    jitter,
                    base_delay_ms: base,
                    factor,
                    max_delay_ms: max,
                    max_attempts: attempts,
                    retry_on_status: statuses,
                    retry_on_network_error: net,
                    retry_on_timeout: timeout,
                    respect_retry_after: respect,
                    deadline_ms: deadline,
                    max_retry_after_ms: max_ra,
                    ..RetryPolicy::default()
                }
            },
        )
}

fn reason_of(outcome: Outcome) -> RetryReason {
    match outcome {
        Outcome::Status(_) => RetryReason::Status,
        Outcome::NetworkError => RetryReason::Network,
        Outcome::Timeout => RetryReason::Timeout,
    }
}

/// One call: per attempt, an outcome, how long the attempt took (whole ms) and the server's
/// requested wait. The method's safety and the key are fixed for the call.
#[derive(Debug, Clone)]
struct Call {
    start_ms: f64,
    idempotent: bool,
    has_key: bool,
    attempts: Vec<(Outcome, u32, Option<f64>)>,
    /// The body can be sent again (a stream above the buffering limit cannot).
    replayable: bool,
    seed: u64,
}

fn call_strategy(flags: BoxedStrategy<(bool, bool)>) -> impl Strategy<Value = Call> {
    (
        prop_oneof![Just(0.0), (0u64..=4_000_000_000_000).prop_map(|v| v as f64)],
        flags,
        proptest::collection::vec(
            (
                outcome_strategy(),
                prop_oneof![Just(0u32), 0u32..=3_000],
                server_delay_strategy(),
            ),
            1..=110,
        ),
        any::<u64>(),
        proptest::bool::weighted(0.9),
    )
        .prop_map(
            |(start_ms, (idempotent, has_key), attempts, seed, replayable)| Call {
                start_ms,
                idempotent,
                has_key,
                attempts,
                replayable,
                seed,
            },
        )
}

/// Run `call` under `policy` and check every invariant of a single decision and of the
/// whole call. Returns the decisions.
fn simulate(policy: &RetryPolicy, call: &Call) -> Result<Vec<Decision>, TestCaseError> {
    let mut state = RetryState::new(policy, call.start_ms);
    let mut rng = SplitMix64::new(call.seed);
    let mut now = call.start_ms;
    let mut decisions = Vec::new();
    let mut retries = 0u32;
    let mut waited_ms: u64 = 0;
    let cap = cap_of(policy);

    for &(outcome, took_ms, server_delay_ms) in &call.attempts {
        let n = state.start_attempt();
        prop_assert_eq!(n, retries + 1);
        prop_assert_eq!(state.attempts(), n);
        now += f64::from(took_ms);
        let report = AttemptOutcome {
            outcome,
            idempotent: call.idempotent,
            has_key: call.has_key,
            server_delay_ms,
            replayable: call.replayable,
            budget_allows_retry: true,
            redirected: false,
            server_refuses: false,
        };
        let verdict = classify(policy, outcome, call.idempotent, call.has_key);
        let decision = state.decide(policy, report, now, &mut rng);
        decisions.push(decision);
        let asked = if policy.respect_retry_after {
            server_delay_ms
        } else {
            None
        };

        match decision {
            Decision::Retry {
                delay_ms,
                reason,
                from_server,
            } => {
                retries += 1;
                waited_ms += delay_ms;
                prop_assert_eq!(verdict, Verdict::Retryable(reason));
                prop_assert_eq!(reason, reason_of(outcome));
                prop_assert!(
                    n < policy.max_attempts,
                    "retry after attempt {} of {}",
                    n,
                    policy.max_attempts
                );
                prop_assert!(retries < policy.max_attempts);
                prop_assert!(delay_ms <= MAX_TIMER_U64);
                prop_assert!(call.replayable, "retried a body that cannot be sent again");
                prop_assert_eq!(from_server, asked.is_some());
                if let Some(a) = asked {
                    prop_assert!(
                        a <= policy.retry_after_cap_ms(),
                        "accepted {} above {}",
                        a,
                        policy.retry_after_cap_ms()
                    );
                    // The wait asked is a floor; above it a window as wide as this retry's
                    // un-jittered backoff delay (none with jitter 'none'), up to the cap.
                    let floor = if a <= 0.0 {
                        0
                    } else {
                        (a.ceil().min(MAX_TIMER_MS)) as u64
                    };
                    let grown = policy.factor.powi(n as i32 - 1);
                    let window = (policy.base_delay_ms * grown)
                        .min(policy.max_delay_ms)
                        .max(floor as f64 / 2.0 * grown)
                        .min(MAX_TIMER_MS);
                    let top = if policy.jitter == Jitter::None {
                        floor as f64
                    } else {
                        (floor as f64 + window).min(policy.retry_after_cap_ms().max(floor as f64))
                    };
                    prop_assert!(delay_ms >= floor, "waited {} < asked {}", delay_ms, a);
                    prop_assert!(
                        delay_ms as f64 <= top.floor() + 1.0,
                        "waited {} above {}",
                        delay_ms,
                        top
                    );
                } else {
                    prop_assert!(delay_ms as f64 <= cap, "{} above the cap {}", delay_ms, cap);
                }
                // Safety matrix: no key, non-idempotent: only "not processed" statuses.
                if !call.idempotent && !call.has_key {
                    prop_assert!(
                        matches!(outcome, Outcome::Status(408 | 429)),
                        "retried a non-idempotent request without key after {:?}",
                        outcome
                    );
                }
                if let Some(deadline) = policy.deadline_ms {
                    prop_assert!(
                        (waited_ms as f64) < deadline,
                        "waited {} of a {} ms deadline",
                        waited_ms,
                        deadline
                    );
                    prop_assert!(
                        now + delay_ms as f64 - call.start_ms < deadline,
                        "the wait ends after the deadline"
                    );
                }
                now += delay_ms as f64;
            }
            Decision::Stop(stop) => {
                match stop {
                    Stop::Final => prop_assert_eq!(verdict, Verdict::Final),
                    Stop::UnsafeToRetry(r) => {
                        prop_assert_eq!(verdict, Verdict::UnsafeToRetry(r));
                        prop_assert!(!call.idempotent && !call.has_key);
                    }
                    Stop::AttemptsExhausted(r) => {
                        prop_assert_eq!(verdict, Verdict::Retryable(r));
                        prop_assert_eq!(n, policy.max_attempts);
                    }
                    Stop::DeadlineExhausted(r) => {
                        prop_assert_eq!(verdict, Verdict::Retryable(r));
                        prop_assert!(policy.deadline_ms.is_some());
                    }
                    Stop::BodyNotReplayable(r) => {
                        prop_assert_eq!(verdict, Verdict::Retryable(r));
                        prop_assert!(!call.replayable);
                    }
                    Stop::BudgetExhausted(_) => prop_assert!(false, "no budget in this simulation"),
                    Stop::RetryAfterTooLong(r) => {
                        prop_assert_eq!(verdict, Verdict::Retryable(r));
                        let a = asked.expect("a server delay was asked for");
                        prop_assert!(a.is_nan() || a > policy.retry_after_cap_ms());
                    }
                }
                // Liveness: a retryable failure of a replayable request with attempts left,
                // no deadline and no server wait is always retried.
                if matches!(verdict, Verdict::Retryable(_))
                    && call.replayable
                    && n < policy.max_attempts
                    && policy.deadline_ms.is_none()
                {
                    prop_assert!(
                        asked.is_some(),
                        "stopped with {:?} though nothing prevented a retry",
                        stop
                    );
                }
                break;
            }
        }
    }
    prop_assert!(retries < policy.max_attempts);
    Ok(decisions)
}

fn any_flags() -> BoxedStrategy<(bool, bool)> {
    any::<(bool, bool)>().boxed()
}

proptest! {
    #![proptest_config(config())]

    /// 8. Any call: at most `m - 1` retries, waits inside the deadline, the safety matrix.
    #[test]
    fn a_call_obeys_attempts_deadline_and_safety(policy in call_policy_strategy(), call in call_strategy(any_flags())) {
        simulate(&policy, &call)?;
    }

    /// 8b. Non-idempotent without key: never a retry after a network error, a timeout or a
    /// 5xx, whatever the policy lists as retryable.
    #[test]
    fn unkeyed_non_idempotent_is_never_retried_after_unknown_effect(
        policy in call_policy_strategy(),
        call in call_strategy(Just((false, false)).boxed()),
    ) {
        let decisions = simulate(&policy, &call)?;
        for (d, (outcome, _, _)) in decisions.iter().zip(&call.attempts) {
            let unknown = matches!(outcome, Outcome::NetworkError | Outcome::Timeout | Outcome::Status(500..=599));
            if unknown {
                prop_assert!(!matches!(d, Decision::Retry { .. }), "{:?} after {:?}", d, outcome);
            }
        }
    }

    /// 8c. Always-transient outcomes without server waits or deadline: every failed attempt
    /// is retried until `m` attempts were made (`min(len, m - 1)` retries), then
    /// `AttemptsExhausted`.
    #[test]
    fn transient_failures_use_every_attempt(
        policy in call_policy_strategy(),
        outcomes in proptest::collection::vec(prop_oneof![Just(Outcome::Status(503)), Just(Outcome::NetworkError), Just(Outcome::Timeout)], 1..=110),
        seed in any::<u64>(),
    ) {
        let policy = RetryPolicy {
            deadline_ms: None,
            retry_on_status: vec![503],
            retry_on_network_error: true,
            retry_on_timeout: true,
            ..policy
        };
        let call = Call {
            start_ms: 0.0,
            idempotent: true,
            has_key: false,
            attempts: outcomes.iter().map(|&o| (o, 10, None)).collect(),
            replayable: true,
            seed,
        };
        let decisions = simulate(&policy, &call)?;
        let m = policy.max_attempts as usize;
        let retries = decisions.iter().filter(|d| matches!(d, Decision::Retry { .. })).count();
        prop_assert_eq!(retries, outcomes.len().min(m - 1));
        if outcomes.len() >= m {
            prop_assert!(matches!(decisions.last(), Some(Decision::Stop(Stop::AttemptsExhausted(_)))));
        }
        // Without server waits the delays are exactly the backoff schedule of the policy.
        let delays: Vec<u64> = decisions
            .iter()
            .filter_map(|d| match d { Decision::Retry { delay_ms, .. } => Some(*delay_ms), _ => None })
            .collect();
        prop_assert_eq!(delays.clone(), backoff::delays(&policy, delays.len() as u32, &mut SplitMix64::new(seed)));
    }
}

proptest! {
    #![proptest_config(config())]

    /// 8d. The deadline boundary: with a constant delay `b` (no jitter, factor 1) and
    /// instant attempts, a wait is started only if it ends strictly before the deadline
    /// `d`, so exactly `ceil(d / b) - 1` retries happen (when attempts allow). Deadlines
    /// that are exact multiples of `b` are well represented.
    #[test]
    fn a_wait_ending_exactly_at_the_deadline_is_not_started(
        b in 1u32..=1_000,
        multiple in 1u32..=40,
        extra in prop_oneof![Just(0u32), 0u32..=999],
        start in prop_oneof![Just(0.0), (0u64..=4_000_000_000_000).prop_map(|v| v as f64)],
    ) {
        let d = f64::from(b) * f64::from(multiple) + f64::from(extra % b);
        let policy = RetryPolicy {
            max_attempts: 100,
            jitter: Jitter::None,
            base_delay_ms: f64::from(b),
            factor: 1.0,
            max_delay_ms: MAX_TIMER_MS,
            deadline_ms: Some(d),
            retry_on_status: vec![503],
            ..RetryPolicy::default()
        };
        let call = Call {
            start_ms: start,
            idempotent: true,
            has_key: false,
            attempts: vec![(Outcome::Status(503), 0, None); 100],
            replayable: true,
            seed: 0,
        };
        let decisions = simulate(&policy, &call)?;
        let retries = decisions.iter().filter(|x| matches!(x, Decision::Retry { .. })).count() as u64;
        let expected = (d as u64).div_ceil(u64::from(b)) - 1;
        prop_assert_eq!(retries, expected.min(99), "b = {}, d = {}", b, d);
        if expected < 99 {
            prop_assert_eq!(
                decisions.last(),
                Some(&Decision::Stop(Stop::DeadlineExhausted(RetryReason::Status)))
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Integration tests of the public core API
// ---------------------------------------------------------------------------------------

/// A fixed sample, for readable schedules.
struct Half;
impl Rng for Half {
    fn next_f64(&mut self) -> f64 {
        0.5
    }
}

#[test]
fn headers_to_decision_end_to_end() {
    // A POST without key gets 503 + Retry-After: unsafe, whatever the server says.
    let policy = RetryPolicy::default();
    let now = 1_700_000_000_000.0;
    let wait = retry_after::server_delay_ms(Some("2"), None, None, now);
    assert_eq!(wait, Some(2000.0));
    let mut state = RetryState::new(&policy, now);
    state.start_attempt();
    let post = AttemptOutcome {
        outcome: Outcome::Status(503),
        idempotent: false,
        has_key: false,
        server_delay_ms: wait,
        replayable: true,
        budget_allows_retry: true,
        redirected: false,
        server_refuses: false,
    };
    assert_eq!(
        state.decide(&policy, post, now, &mut Half),
        Decision::Stop(Stop::UnsafeToRetry(RetryReason::Status))
    );

    // The same with a key: the server's wait is the floor, and with a sample of 0.5 half the
    // window above it (the larger of the first backoff delay, 500 ms, and half the wait).
    let mut state = RetryState::new(&policy, now);
    state.start_attempt();
    let keyed = AttemptOutcome {
        has_key: true,
        ..post
    };
    assert_eq!(
        state.decide(&policy, keyed, now, &mut Half),
        Decision::Retry {
            delay_ms: 2500,
            reason: RetryReason::Status,
            from_server: true
        }
    );

    // 429 with a RateLimit field (no Retry-After): the longest exhausted window.
    let wait = retry_after::server_delay_ms(
        None,
        None,
        Some(r#""a";r=0;t=3, "b";r=0;t=7, "c";r=2;t=60"#),
        now,
    );
    assert_eq!(wait, Some(7000.0));
    let mut state = RetryState::new(&policy, now);
    state.start_attempt();
    let limited = AttemptOutcome {
        outcome: Outcome::Status(429),
        server_delay_ms: wait,
        ..post
    };
    assert_eq!(
        state.decide(&policy, limited, now, &mut Half),
        Decision::Retry {
            delay_ms: 8750, // the 7 s asked, and half the 3.5 s window above it
            reason: RetryReason::Status,
            from_server: true
        }
    );
}

#[test]
fn rate_limit_reset_as_unix_time_and_http_date() {
    let now = 1_700_000_000_000.0;
    assert_eq!(
        retry_after::parse_ratelimit_reset("1700000042", now),
        Some(42_000.0)
    );
    assert_eq!(
        retry_after::parse_ratelimit_reset("1600000000", now),
        Some(0.0)
    );
    assert_eq!(
        retry_after::parse_ratelimit_reset("999999999", now),
        Some(999_999_999_000.0)
    );
    // 2023-11-14T22:13:20Z is 1_700_000_000 s.
    assert_eq!(
        retry_after::parse_retry_after("Tue, 14 Nov 2023 22:13:30 GMT", now),
        Some(10_000.0)
    );
    assert_eq!(
        retry_after::parse_retry_after("Tuesday, 14-Nov-23 22:13:30 GMT", now),
        Some(10_000.0)
    );
    assert_eq!(
        retry_after::parse_retry_after("Tue Nov 14 22:13:30 2023", now),
        Some(10_000.0)
    );
    assert_eq!(
        retry_after::parse_retry_after("Tue, 14 Nov 2023 22:13:30 CET", now),
        None
    );
}

#[test]
fn validated_options_drive_a_deterministic_schedule() {
    let policy = RetryPolicy {
        max_attempts: options::max_attempts(5.0).unwrap(),
        base_delay_ms: options::non_negative_ms("baseDelayMs", 100.0).unwrap(),
        factor: options::factor(3.0).unwrap(),
        max_delay_ms: options::non_negative_ms("maxDelayMs", 2_000.0).unwrap(),
        jitter: options::jitter("none").unwrap(),
        ..RetryPolicy::default()
    };
    let count = options::delay_count(6.0).unwrap();
    assert_eq!(
        backoff::delays(&policy, count, &mut Half),
        [100, 300, 900, 2000, 2000, 2000]
    );
    let equal = RetryPolicy {
        jitter: Jitter::Equal,
        ..policy.clone()
    };
    assert_eq!(backoff::delays(&equal, 4, &mut Half), [75, 225, 675, 1500]);

    // The schedule of a whole call: 4 retries, then the attempts run out.
    let mut state = RetryState::new(&policy, 0.0);
    let mut now = 0.0;
    let mut delays = Vec::new();
    loop {
        state.start_attempt();
        let o = AttemptOutcome {
            outcome: Outcome::Timeout,
            idempotent: true,
            has_key: false,
            server_delay_ms: None,
            replayable: true,
            budget_allows_retry: true,
            redirected: false,
            server_refuses: false,
        };
        match state.decide(&policy, o, now, &mut Half) {
            Decision::Retry {
                delay_ms, reason, ..
            } => {
                assert_eq!(reason.as_str(), "timeout");
                delays.push(delay_ms);
                now += delay_ms as f64;
            }
            Decision::Stop(stop) => {
                assert_eq!(stop, Stop::AttemptsExhausted(RetryReason::Timeout));
                break;
            }
        }
    }
    assert_eq!(delays, [100, 300, 900, 2000]);
    assert_eq!(state.attempts(), 5);
}

#[test]
fn deadline_limits_the_attempt_and_the_wait() {
    let policy = RetryPolicy {
        jitter: Jitter::None,
        timeout_ms: Some(options::positive_ms("timeoutMs", 800.0).unwrap()),
        deadline_ms: Some(options::positive_ms("deadlineMs", 2_000.0).unwrap()),
        ..RetryPolicy::default()
    };
    let mut state = RetryState::new(&policy, 10_000.0);
    state.start_attempt();
    assert_eq!(state.attempt_time_limit_ms(&policy, 10_000.0), Some(800.0));
    let o = AttemptOutcome {
        outcome: Outcome::Timeout,
        idempotent: true,
        has_key: false,
        server_delay_ms: None,
        replayable: true,
        budget_allows_retry: true,
        redirected: false,
        server_refuses: false,
    };
    // Attempt 1 times out at 10_800; wait 500 ends at 11_300 < 12_000.
    assert!(matches!(
        state.decide(&policy, o, 10_800.0, &mut Half),
        Decision::Retry { delay_ms: 500, .. }
    ));
    state.start_attempt();
    assert_eq!(state.attempt_time_limit_ms(&policy, 11_300.0), Some(700.0));
    // Attempt 2 ends at 12_000: the deadline is spent, a 1000 ms wait cannot fit.
    assert!(state.deadline_passed(12_000.0));
    assert_eq!(
        state.decide(&policy, o, 12_000.0, &mut Half),
        Decision::Stop(Stop::DeadlineExhausted(RetryReason::Timeout))
    );
}

#[test]
fn a_generated_key_in_both_header_forms() {
    let k = key::uuid_v4(*b"0123456789abcdef");
    assert_eq!(k, "30313233-3435-4637-b839-616263646566");
    assert!(key::is_uuid_v4(&k));
    assert_eq!(
        key::header_value(&k, options::key_format("plain").unwrap()),
        k
    );
    assert_eq!(
        key::header_value(&k, options::key_format("sf-string").unwrap()),
        format!("\"{k}\"")
    );
    assert_eq!(options::key_mode("auto"), Ok(KeyMode::Auto));
    assert_eq!(
        options::header_name("Idempotency-Key").unwrap(),
        RetryPolicy::default().idempotency_header
    );
}

// ---------------------------------------------------------------------------------------
// The adaptive throttle
// ---------------------------------------------------------------------------------------

mod throttle {
    use super::config;
    use proptest::prelude::*;
    use retry_fetch::core::options::MAX_TIMER_MS;
    use retry_fetch::core::throttle::{AdaptiveThrottle, Answer, ThrottleConfig};

    const O: &str = "http://127.0.0.1:1";

    /// One event: a caller takes a turn, a waiting one asks again or gives up, an attempt is
    /// sent, an answer (refused or served) comes; `dt` ms after the previous event.
    #[derive(Clone, Debug)]
    enum Ev {
        Enqueue,
        Poll(usize),
        Abandon(usize),
        Send,
        /// `wait`: the wait a refusal asked for, in ms (`None`: none).
        Answer {
            ago: f64,
            refused: bool,
            wait: Option<f64>,
        },
    }

    fn wait() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            (0.0f64..5000.0).prop_map(Some),
            prop::sample::select(vec![0.0, -1.0, 1e12, f64::INFINITY, f64::NAN]).prop_map(Some),
        ]
    }

    fn event() -> impl Strategy<Value = (f64, Ev)> {
        let ev =
            prop_oneof![
                Just(Ev::Enqueue),
                (0usize..64).prop_map(Ev::Poll),
                (0usize..64).prop_map(Ev::Abandon),
                Just(Ev::Send),
                (0.0f64..500.0, any::<bool>(), wait())
                    .prop_map(|(ago, refused, wait)| Ev::Answer { ago, refused, wait }),
            ];
        (prop_oneof![Just(0.0), 0.0f64..5.0, 0.0f64..2000.0], ev)
    }

    proptest! {
        #![proptest_config(config())]

        /// Whatever happens, in whatever order: the rate stays finite and within
        /// `minRate..`, and a caller is told to wait a finite time of at least 1 ms.
        #[test]
        fn the_rate_and_the_waits_stay_finite(events in prop::collection::vec(event(), 1..300)) {
            let mut t = AdaptiveThrottle::new(ThrottleConfig::default());
            let mut now = 0.0;
            let mut tickets: Vec<u64> = Vec::new();
            for (dt, ev) in events {
                now += dt;
                match ev {
                    Ev::Enqueue => tickets.push(t.enqueue(O, now)),
                    Ev::Poll(i) if !tickets.is_empty() => {
                        let k = tickets[i % tickets.len()];
                        if let Err(wait) = t.poll(O, k, now) {
                            prop_assert!(wait.is_finite() && wait >= 1.0, "wait {wait}");
                        }
                    }
                    Ev::Abandon(i) if !tickets.is_empty() => {
                        let k = tickets.swap_remove(i % tickets.len());
                        t.abandon(O, k, now);
                    }
                    Ev::Send => t.on_send(O, now),
                    Ev::Answer { ago, refused, wait } => {
                        let answer = match (refused, wait) {
                            (false, _) => Answer::Served,
                            (true, None) => Answer::Refused,
                            (true, Some(ms)) => Answer::RefusedWithWait(ms),
                        };
                        t.on_answer(O, now - ago, answer, now)
                    }
                    _ => {}
                }
                if let Some(r) = t.rate(O, now) {
                    prop_assert!(r.is_finite() && r >= 0.5, "rate {r}");
                }
            }
        }

        /// A refusal's wait of NaN, 0 or less is no wait, and one past the longest timer is
        /// that timer: two throttles, one told the waits as they come and one told them so
        /// made plain, agree on every rate and every turn.
        #[test]
        fn odd_waits_read_as_no_wait_or_the_longest(events in prop::collection::vec(event(), 1..300)) {
            let mut told = AdaptiveThrottle::new(ThrottleConfig::default());
            let mut plain = AdaptiveThrottle::new(ThrottleConfig::default());
            let mut now = 0.0;
            let mut tickets: Vec<(u64, u64)> = Vec::new();
            for (dt, ev) in events {
                now += dt;
                match ev {
                    Ev::Enqueue => tickets.push((told.enqueue(O, now), plain.enqueue(O, now))),
                    Ev::Poll(i) if !tickets.is_empty() => {
                        let (a, b) = tickets[i % tickets.len()];
                        prop_assert_eq!(told.poll(O, a, now), plain.poll(O, b, now));
                    }
                    Ev::Abandon(i) if !tickets.is_empty() => {
                        let (a, b) = tickets.swap_remove(i % tickets.len());
                        told.abandon(O, a, now);
                        plain.abandon(O, b, now);
                    }
                    Ev::Send => {
                        told.on_send(O, now);
                        plain.on_send(O, now);
                    }
                    Ev::Answer { ago, refused, wait } => {
                        let (a, b) = match (refused, wait) {
                            (false, _) => (Answer::Served, Answer::Served),
                            (true, None) => (Answer::Refused, Answer::Refused),
                            (true, Some(ms)) if ms.is_nan() || ms <= 0.0 => {
                                (Answer::RefusedWithWait(ms), Answer::Refused)
                            }
                            (true, Some(ms)) => {
                                (Answer::RefusedWithWait(ms), Answer::RefusedWithWait(ms.min(MAX_TIMER_MS)))
                            }
                        };
                        told.on_answer(O, now - ago, a, now);
                        plain.on_answer(O, now - ago, b, now);
                    }
                    _ => {}
                }
                prop_assert_eq!(told.rate(O, now), plain.rate(O, now));
            }
        }

        /// Healthy calls one after another (each answered before the next is sent) never wait
        /// for a turn, however long they go on.
        #[test]
        fn healthy_calls_one_after_another_never_wait(
            calls in prop::collection::vec((0.0f64..3000.0, 0.5f64..200.0), 1..200),
        ) {
            let mut t = AdaptiveThrottle::new(ThrottleConfig::default());
            let mut now = 0.0;
            for (gap, rtt) in calls {
                now += gap;
                let k = t.enqueue(O, now);
                prop_assert_eq!(t.poll(O, k, now), Ok(()));
                t.on_send(O, now);
                now += rtt;
                t.on_answer(O, now - rtt, Answer::Served, now);
            }
        }

        /// Healthy traffic at any steady pace banks no rate: a herd that comes after it gets
        /// at once no more turns than 10 ms of the pace it followed (or of the initial rate),
        /// not the thousands of req/s slow start would have reached with time.
        #[test]
        fn healthy_traffic_banks_no_rate_for_a_herd(
            rate in 20.0f64..1500.0,
            calls in 50usize..400,
        ) {
            let mut t = AdaptiveThrottle::new(ThrottleConfig::default());
            let gap = 1000.0 / rate;
            for i in 0..calls {
                let at = i as f64 * gap;
                let k = t.enqueue(O, at);
                let mut when = at;
                while let Err(wait) = t.poll(O, k, when) {
                    when += wait;
                }
                t.on_send(O, when);
                t.on_answer(O, when, Answer::Served, when + 5.0);
            }
            let start = calls as f64 * gap;
            let herd: Vec<u64> = (0..200).map(|_| t.enqueue(O, start)).collect();
            let at_once = herd.iter().filter(|&&k| t.poll(O, k, start).is_ok()).count();
            let pace = rate.max(200.0);
            prop_assert!(
                at_once as f64 <= (1.25 * pace / 100.0).ceil(),
                "{} at once after {} calls at {} req/s", at_once, calls, rate
            );
        }
    }
}
