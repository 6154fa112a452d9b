//! The guard classes `RetryBudget`, `CircuitBreaker`, `AdaptiveThrottle` as the exports make
//! them: exact `TypeError`s for bad, unknown and `null` settings, the settings and defaults
//! read back, the `url` argument of their methods (the Rust methods and the JS ones), and the
//! registry a call finds a guard through: a guard of another kind, a freed guard and a guard
//! of another copy of the package are refused with a `TypeError` that says which.
//!
//! The e2e table checks looser versions through the built package ('guards: invalid guard
//! options are TypeErrors naming the option', 'contract: an unknown guard option ...',
//! 'contract: a freed guard ...', 'contract: guard methods given a bad argument ...'); a guard
//! of another copy, the exact messages and the Rust methods are only seen here.

use crate::support::*;

#[wasm_bindgen_test]
fn guard_constructors_reject_bad_settings_with_type_errors_naming_them() {
    let cases: Vec<(Result<JsValue, JsValue>, &str)> = vec![
        (
            new_budget(opts("maxTokens: 0")),
            r#"RetryBudget: invalid option "maxTokens": got 0; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: 1e7")),
            r#"RetryBudget: invalid option "maxTokens": got 10000000; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: NaN")),
            r#"RetryBudget: invalid option "maxTokens": got NaN; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: '5'")),
            r#"RetryBudget: invalid option "maxTokens": got "5"; expected a number > 0 and <= 1000000"#,
        ),
        (
            new_budget(opts("maxTokens: 2, tokenRatio: 3")),
            r#"RetryBudget: invalid option "tokenRatio": got 3; expected a number > 0 and <= maxTokens"#,
        ),
        (
            new_budget(opts("tokenRatio: 0")),
            r#"RetryBudget: invalid option "tokenRatio": got 0; expected a number > 0 and <= maxTokens"#,
        ),
        // A bound broken by the setting given, not by the default it bounds: the given one
        // is named.
        (
            new_budget(opts("maxTokens: 0.05")),
            r#"RetryBudget: invalid option "maxTokens": got 0.05; expected a number > 0 and <= 1000000, and >= tokenRatio"#,
        ),
        (
            new_budget(opts("maxTokens: 0.3")),
            r#"RetryBudget: invalid option "maxTokens": got 0.3; expected a number > 0 and <= 1000000, and >= refillPerSecond"#,
        ),
        (
            new_throttle(opts("initialRate: 0.3")),
            r#"AdaptiveThrottle: invalid option "initialRate": got 0.3; expected a number of requests per second >= minRate"#,
        ),
        (
            new_throttle(opts("initialRate: 0.3, minRate: 0.4")),
            r#"AdaptiveThrottle: invalid option "minRate": got 0.4; expected a number of requests per second > 0 and <= initialRate"#,
        ),
        (
            new_budget(js("[]")),
            "RetryBudget: invalid options: got an array; expected an object or undefined",
        ),
        (
            new_breaker(opts("failureThreshold: 1.5")),
            r#"CircuitBreaker: invalid option "failureThreshold": got 1.5; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("failureThreshold: 0")),
            r#"CircuitBreaker: invalid option "failureThreshold": got 0; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("failureThreshold: null")),
            r#"CircuitBreaker: invalid option "failureThreshold": got null; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("openMs: -1")),
            r#"CircuitBreaker: invalid option "openMs": got -1; expected a number of milliseconds from 0 to 2147483647"#,
        ),
        (
            new_breaker(opts("halfOpenMaxCalls: 1001")),
            r#"CircuitBreaker: invalid option "halfOpenMaxCalls": got 1001; expected an integer from 1 to 1000"#,
        ),
        (
            new_breaker(opts("onStateChange: 5")),
            r#"CircuitBreaker: invalid option "onStateChange": got 5; expected a function"#,
        ),
        (
            new_breaker(opts("onStateChange: 'log'")),
            r#"CircuitBreaker: invalid option "onStateChange": got "log"; expected a function"#,
        ),
        (
            new_breaker(js("42")),
            "CircuitBreaker: invalid options: got 42; expected an object or undefined",
        ),
        (
            new_throttle(js("'x'")),
            r#"AdaptiveThrottle: invalid options: got "x"; expected an object or undefined"#,
        ),
        (
            new_throttle(opts("beta: 1")),
            r#"AdaptiveThrottle: invalid option "beta": got 1; expected a number between 0 and 1 (exclusive)"#,
        ),
        (
            new_throttle(opts("initialRate: 0")),
            r#"AdaptiveThrottle: invalid option "initialRate": got 0; expected a number of requests per second > 0"#,
        ),
        (
            new_throttle(opts("initialRate: 1, minRate: 2")),
            r#"AdaptiveThrottle: invalid option "minRate": got 2; expected a number of requests per second > 0 and <= initialRate"#,
        ),
        (
            new_throttle(opts("rampMs: 0")),
            r#"AdaptiveThrottle: invalid option "rampMs": got 0; expected a number of milliseconds > 0"#,
        ),
        (
            new_throttle(opts("scale: -1")),
            r#"AdaptiveThrottle: invalid option "scale": got -1; expected a number > 0"#,
        ),
        (
            new_throttle(opts("maxWaitMs: 'x'")),
            r#"AdaptiveThrottle: invalid option "maxWaitMs": got "x"; expected a number of milliseconds from 0 to 2147483647"#,
        ),
        (
            new_throttle(opts("maxWaitMs: -5")),
            r#"AdaptiveThrottle: invalid option "maxWaitMs": got -5; expected a number of milliseconds from 0 to 2147483647"#,
        ),
    ];
    for (result, expected) in cases {
        match result {
            Ok(_) => panic!("accepted; expected {expected}"),
            Err(e) => assert_type_error(&e, expected),
        }
    }
}

#[wasm_bindgen_test]
fn guard_constructors_name_an_unknown_setting_and_the_closest_one() {
    for (result, expected) in [
        (
            new_budget(opts("maxToken: 5")),
            r#"RetryBudget: unknown option "maxToken" (did you mean "maxTokens"?)"#,
        ),
        (
            new_budget(opts("ratio: 5")),
            r#"RetryBudget: unknown option "ratio"; the options are maxTokens, tokenRatio, refillPerSecond"#,
        ),
        (
            new_breaker(opts("failureTreshold: 2")),
            r#"CircuitBreaker: unknown option "failureTreshold" (did you mean "failureThreshold"?)"#,
        ),
        (
            new_breaker(opts("onstatechange() {}")),
            r#"CircuitBreaker: unknown option "onstatechange" (did you mean "onStateChange"?)"#,
        ),
        (
            new_throttle(opts("initalRate: 5")),
            r#"AdaptiveThrottle: unknown option "initalRate" (did you mean "initialRate"?)"#,
        ),
        (
            new_throttle(opts("maxWait: 5")),
            r#"AdaptiveThrottle: unknown option "maxWait" (did you mean "maxWaitMs"?)"#,
        ),
        // a setting of another guard
        (
            new_budget(opts("failureThreshold: 2")),
            r#"RetryBudget: unknown option "failureThreshold"; the options are maxTokens, tokenRatio, refillPerSecond"#,
        ),
    ] {
        match result {
            Ok(_) => panic!("accepted; expected {expected}"),
            Err(e) => assert_type_error(&e, expected),
        }
    }
    // undefined is no setting, as with retryFetch's options
    new_budget(opts("maxToken: undefined")).unwrap();
}

// `null` for a number setting is refused by every guard, as by the CircuitBreaker (above),
// never taken silently as "the default".
#[wasm_bindgen_test]
fn a_null_guard_setting_is_a_type_error_like_the_circuit_breakers() {
    let e = new_budget(opts("maxTokens: null"))
        .err()
        .expect("new RetryBudget({ maxTokens: null }) was accepted");
    assert_type_error(
        &e,
        r#"RetryBudget: invalid option "maxTokens": got null; expected a number > 0 and <= 1000000"#,
    );
    let e = new_throttle(opts("beta: null"))
        .err()
        .expect("new AdaptiveThrottle({ beta: null }) was accepted");
    assert_type_error(
        &e,
        r#"AdaptiveThrottle: invalid option "beta": got null; expected a number between 0 and 1 (exclusive)"#,
    );
}

#[wasm_bindgen_test]
fn guard_settings_and_defaults_are_read() {
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    assert_eq!(get_f64(&budget, "maxTokens"), Some(10.0));
    assert_eq!(get_f64(&budget, "tokenRatio"), Some(0.1));
    let budget = new_budget(opts("maxTokens: 4, tokenRatio: 0.5")).unwrap();
    assert_eq!(get_f64(&budget, "maxTokens"), Some(4.0));
    assert_eq!(get_f64(&budget, "tokenRatio"), Some(0.5));
    assert_eq!(
        call_method(&budget, "tokens", &["https://a.example/".into()])
            .unwrap()
            .as_f64(),
        Some(4.0),
        "full when never seen"
    );
    let budget = new_budget(opts("maxTokens: 1000000, tokenRatio: 1000000")).unwrap();
    assert_eq!(get_f64(&budget, "maxTokens"), Some(1_000_000.0));

    // the class is the exported one
    assert_eq!(
        get_str(&get(&budget, "constructor"), "name").as_deref(),
        Some("RetryBudget")
    );
    let breaker = new_breaker(opts(
        "failureThreshold: 1000, openMs: 0, halfOpenMaxCalls: 1000, onStateChange: null",
    ))
    .unwrap();
    assert_eq!(
        get_str(&get(&breaker, "constructor"), "name").as_deref(),
        Some("CircuitBreaker")
    );
    assert_eq!(
        call_method(&breaker, "state", &["https://a.example/".into()])
            .unwrap()
            .as_string()
            .as_deref(),
        Some("closed")
    );
    let throttle = new_throttle(opts(
        "initialRate: 5, rampMs: 1, beta: 0.5, scale: 1, minRate: 5, maxWaitMs: 0",
    ))
    .unwrap();
    assert_eq!(
        get_str(&get(&throttle, "constructor"), "name").as_deref(),
        Some("AdaptiveThrottle")
    );
    assert!(
        call_method(&throttle, "rate", &["https://a.example/".into()])
            .unwrap()
            .is_undefined(),
        "an origin never seen has no rate"
    );
    new_throttle(Object::new().into()).unwrap();
    new_throttle(JsValue::NULL).unwrap();
}

#[wasm_bindgen_test]
fn guard_methods_check_their_url_argument() {
    let budget = RetryBudgetHandle::new(JsValue::UNDEFINED).unwrap();
    let breaker = CircuitBreakerHandle::new(JsValue::UNDEFINED).unwrap();
    let throttle = AdaptiveThrottleHandle::new(JsValue::UNDEFINED).unwrap();
    // the Rust methods
    assert_eq!(budget.tokens("https://a.example/x".into()).unwrap(), 10.0);
    assert_eq!(
        breaker.state("https://a.example/x".into()).unwrap(),
        "closed"
    );
    assert_eq!(throttle.rate("https://a.example/x".into()).unwrap(), None);
    let url = js("new URL('https://a.example/x?y')");
    assert_eq!(budget.tokens(url.clone()).unwrap(), 10.0, "a URL object");
    assert_eq!(breaker.state(url.clone()).unwrap(), "closed");
    let bad = |label: &str, got: &str, e: JsValue| {
        assert_type_error(
            &e,
            &format!("{label}: the argument url must be a string or a URL; got {got}"),
        );
    };
    bad(
        "RetryBudget.tokens",
        "42",
        budget.tokens(n(42.0)).unwrap_err(),
    );
    bad(
        "RetryBudget.tokens",
        "null",
        budget.tokens(JsValue::NULL).unwrap_err(),
    );
    bad(
        "CircuitBreaker.state",
        "undefined",
        breaker.state(JsValue::UNDEFINED).unwrap_err(),
    );
    bad(
        "CircuitBreaker.state",
        "[object Object]",
        breaker.state(Object::new().into()).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "[object Object]",
        throttle.rate(Object::new().into()).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "an array",
        throttle.rate(js("['https://a.example/']")).unwrap_err(),
    );

    // and the same through the JS methods of the exported classes
    let (budget, breaker, throttle) = (
        JsValue::from(budget),
        JsValue::from(breaker),
        JsValue::from(throttle),
    );
    bad(
        "RetryBudget.tokens",
        "42",
        call_method(&budget, "tokens", &[n(42.0)]).unwrap_err(),
    );
    bad(
        "CircuitBreaker.state",
        "undefined",
        call_method(&breaker, "state", &[]).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "[object Object]",
        call_method(&throttle, "rate", &[Object::new().into()]).unwrap_err(),
    );
    bad(
        "AdaptiveThrottle.rate",
        "a function",
        call_method(&throttle, "rate", &[js("() => 1")]).unwrap_err(),
    );
    assert_eq!(
        call_method(&budget, "tokens", &[url]).unwrap().as_f64(),
        Some(10.0)
    );
}

/// Any string is taken without a panic: a URL (relative ones against the page's location,
/// where there is one) reads its origin's state, a default for an origin not seen; a string
/// that is no URL, or a URL of no origin (`data:`, `javascript:`), is a `TypeError` saying so,
/// not a default for an origin that cannot exist.
#[wasm_bindgen_test]
fn guard_methods_take_any_url_string() {
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    let breaker = new_breaker(JsValue::UNDEFINED).unwrap();
    let throttle = new_throttle(JsValue::UNDEFINED).unwrap();
    let long = format!("https://a.example/{}", "9".repeat(10_000));
    let parses = js("(u) => { try { return new URL(u, globalThis.location?.href).origin !== 'null'; } catch { return false; } }")
        .unchecked_into::<js_sys::Function>();
    for url in [
        "",
        "not a url",
        "http://",
        "javascript:alert(1)",
        "data:text/plain,x",
        "\u{0}\u{ffff}😀",
        "https://bücher.example/",
        &long,
    ] {
        let parses = parses
            .call1(&JsValue::NULL, &url.into())
            .unwrap()
            .is_truthy();
        let tokens = call_method(&budget, "tokens", &[url.into()]);
        let state = call_method(&breaker, "state", &[url.into()]);
        let rate = call_method(&throttle, "rate", &[url.into()]);
        if parses {
            assert_eq!(tokens.unwrap().as_f64(), Some(10.0), "{url:.40}");
            assert_eq!(state.unwrap().as_string().as_deref(), Some("closed"));
            assert!(rate.unwrap().is_undefined());
        } else {
            for (method, result) in [
                ("RetryBudget.tokens", tokens),
                ("CircuitBreaker.state", state),
                ("AdaptiveThrottle.rate", rate),
            ] {
                let error = result.unwrap_err();
                assert!(
                    error.is_instance_of::<js_sys::TypeError>(),
                    "{method} {url:.40}"
                );
                let message = String::from(js_sys::Error::from(error).message());
                assert!(
                    message.contains("the argument url is not a URL of an origin"),
                    "{method} {url:.40}: {message}"
                );
            }
        }
    }
    let http = parses.call1(&JsValue::NULL, &"http://".into()).unwrap();
    assert!(!http.is_truthy(), "\"http://\" is no URL anywhere");
    assert!(call_method(&budget, "tokens", &["http://".into()]).is_err());
}

#[wasm_bindgen_test]
async fn guards_are_not_interchangeable_and_freed_or_foreign_guards_are_refused() {
    let s = seq("200");
    let budget = new_budget(JsValue::UNDEFINED).unwrap();
    let breaker = new_breaker(JsValue::UNDEFINED).unwrap();
    let throttle = new_throttle(JsValue::UNDEFINED).unwrap();
    let inv = |option: &str, got: &str, expected: &str| {
        format!(r#"retryFetch: invalid option "{option}": got {got}; expected {expected}"#)
    };
    for (option, guard, expected) in [
        (
            "budget",
            &breaker,
            "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
        ),
        (
            "budget",
            &throttle,
            "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
        ),
        ("breaker", &throttle, "a CircuitBreaker"),
        ("breaker", &budget, "a CircuitBreaker"),
        (
            "throttle",
            &budget,
            "an AdaptiveThrottle, or false (no throttle)",
        ),
    ] {
        let options = with(Object::new().into(), option, guard);
        let msg = inv(option, "[object Object]", expected);
        assert_type_error(
            &create_retry_fetch(options.clone()).err().expect("accepted"),
            &msg,
        );
        assert_call_rejected(&s.url, options, &msg).await;
    }

    // a guard of another copy of the package (here: an object that looks like one but is not in
    // this module's registry)
    let foreign = js("(() => { class RetryBudget { get __retryFetchGuard() { return 0.5; } } return new RetryBudget(); })()");
    let msg = inv(
        "budget",
        "a RetryBudget from another copy of retry-fetch (each copy, e.g. the ES module and the CommonJS build, keeps its own guards)",
        "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
    );
    assert_call_rejected(&s.url, with(Object::new().into(), "budget", &foreign), &msg).await;

    // a freed guard is a clear TypeError naming its class, not "null pointer passed to rust"
    for (option, guard, class, expected) in [
        (
            "budget",
            &budget,
            "RetryBudget",
            "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
        ),
        ("breaker", &breaker, "CircuitBreaker", "a CircuitBreaker"),
        (
            "throttle",
            &throttle,
            "AdaptiveThrottle",
            "an AdaptiveThrottle, or false (no throttle)",
        ),
    ] {
        call_method(guard, "free", &[]).unwrap();
        let article = if class.starts_with('A') { "an" } else { "a" };
        let msg = inv(
            option,
            &format!("{article} {class} that was freed (free() was called on it)"),
            expected,
        );
        let options = with(Object::new().into(), option, guard);
        assert_type_error(
            &create_retry_fetch(options.clone())
                .err()
                .expect("a freed guard was accepted"),
            &msg,
        );
        assert_call_rejected(&s.url, options, &msg).await;
    }
    assert_eq!(s.hits().await, 0, "something was sent");
}
