//! `backoffDelays(options, count, seed?)`: the seed reaches the jitter (the same seed, the
//! same delays; another, others), without one `Math.random` does, every jitter mode stays
//! in its bounds, and `count` and `seed` are checked with exact `TypeError`s.
//!
//! The schedule without jitter, `maxDelayMs`, the clamp to `setTimeout`'s maximum and the
//! decorrelated bounds are the e2e table's ('backoffDelays: the schedule, seeded jitter,
//! bounds and validation', 'huge delays are clamped to what setTimeout accepts'); the policy
//! itself is `core::backoff`'s (native tests and tests/core_properties.rs).

use crate::support::*;

#[wasm_bindgen_test]
fn backoff_delays_are_reproducible_with_a_seed_and_stay_within_each_jitter_modes_bounds() {
    let a = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(42.0)).unwrap());
    let b = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(42.0)).unwrap());
    let c = numbers(&backoff_delays(JsValue::UNDEFINED, n(20.0), n(43.0)).unwrap());
    assert_eq!(a, b, "the same seed gives the same delays");
    assert_ne!(a, c, "another seed gives other delays");
    for (i, d) in a.iter().enumerate() {
        let cap = (500.0 * 2f64.powi(i as i32)).min(30_000.0);
        assert!(
            (0.0..=cap).contains(d) && d.fract() == 0.0,
            "full jitter: delay {i} = {d} outside 0..={cap}"
        );
    }
    // without a seed: Math.random, different from call to call
    let mut seen = HashSet::new();
    for _ in 0..50 {
        seen.insert(
            backoff_delays(JsValue::UNDEFINED, n(1.0), JsValue::UNDEFINED)
                .unwrap()
                .get(0)
                .as_f64()
                .unwrap() as u64,
        );
    }
    assert!(
        seen.len() > 10,
        "full jitter gave only {} distinct first delays in 50 calls",
        seen.len()
    );

    // every jitter mode stays within its bounds
    for (mode, lo, hi) in [
        ("equal", 250.0, 500.0),
        ("additive", 500.0, 1000.0),
        ("decorrelated", 500.0, 1500.0),
    ] {
        let first =
            numbers(&backoff_delays(opts(&format!("jitter: '{mode}'")), n(1.0), n(7.0)).unwrap())
                [0];
        assert!(
            (lo..=hi).contains(&first),
            "{mode}: first delay {first} outside {lo}..={hi}"
        );
    }
    // count's limits
    assert_eq!(
        backoff_delays(JsValue::UNDEFINED, n(0.0), n(1.0))
            .unwrap()
            .length(),
        0
    );
    assert_eq!(
        backoff_delays(JsValue::UNDEFINED, n(10_000.0), JsValue::UNDEFINED)
            .unwrap()
            .length(),
        10_000
    );
}

#[wasm_bindgen_test]
fn backoff_delays_check_count_and_seed() {
    let count = |v: JsValue, got: &str| {
        let e = backoff_delays(JsValue::UNDEFINED, v, JsValue::UNDEFINED)
            .err()
            .expect("accepted");
        assert_type_error(
            &e,
            &format!(
                r#"retryFetch: invalid option "count": got {got}; expected an integer from 0 to 10000"#
            ),
        );
    };
    count(n(-1.0), "-1");
    count(n(1.5), "1.5");
    count(n(10_001.0), "10001");
    count(n(f64::NAN), "NaN");
    count(JsValue::from_str("3"), r#""3""#);
    count(JsValue::UNDEFINED, "undefined");
    count(JsValue::NULL, "null");
    for (seed, got) in [
        (n(f64::NAN), "NaN"),
        (n(f64::INFINITY), "Infinity"),
        (JsValue::from_str("x"), r#""x""#),
        (JsValue::TRUE, "true"),
    ] {
        let e = backoff_delays(JsValue::UNDEFINED, n(1.0), seed)
            .err()
            .expect("accepted");
        assert_type_error(
            &e,
            &format!(r#"retryFetch: invalid option "seed": got {got}; expected a finite number"#),
        );
    }
    let e = backoff_delays(opts("jitter: 'x'"), n(1.0), JsValue::UNDEFINED)
        .err()
        .expect("accepted");
    assert_type_error(
        &e,
        r#"retryFetch: invalid option "jitter": got "x"; expected 'none', 'full', 'equal', 'decorrelated' or 'additive'"#,
    );
    let e = backoff_delays(opts("maxAtempts: 2"), n(1.0), JsValue::UNDEFINED)
        .err()
        .expect("accepted");
    assert_type_error(
        &e,
        r#"retryFetch: unknown option "maxAtempts" (did you mean "maxAttempts"?)"#,
    );
}
