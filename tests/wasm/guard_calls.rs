//! The guards' shared, per-origin state as calls see it: the budget's tokens per origin
//! however the URL is spelled, given back on a success and untouched by a permanent answer;
//! the breaker's state per origin, its `onStateChange` events (exact shape), its
//! `CircuitOpenError` (exact message), `half-open` after `openMs`, a throwing listener
//! ignored, two breakers independent; the throttle's pacing, its turn past the deadline, and
//! a 429 cutting its rate.
//!
//! The effect of each guard on a call is the e2e table's ('retry budget: ...', 'circuit
//! breaker: ...', 'adaptive throttle: ...', 'contract: a retry refused by the circuit it opened
//! is a RetryError 'circuit-open' ...'); the engine's rules for them are `core::engine`'s.

use crate::support::*;

#[wasm_bindgen_test]
async fn the_retry_budget_stops_retries_per_origin() {
    let budget = new_budget(opts("maxTokens: 4, tokenRatio: 1, refillPerSecond: 0")).unwrap();
    let tokens = |url: &str| {
        call_method(&budget, "tokens", &[url.into()])
            .unwrap()
            .as_f64()
            .unwrap()
    };
    let options = with(
        opts("maxAttempts: 3, baseDelayMs: 1, jitter: 'none'"),
        "budget",
        &budget,
    );
    let origin = server();
    assert_eq!(tokens(origin), 4.0);

    // a lone call gets every retry: its own failures do not count against it (4 -> 1)
    let s = seq("503");
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options.clone()), "budget").await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 3);
    assert_eq!(tokens(&s.url), 1.0);
    // the budget is per origin: every path of it, however the URL is spelled
    assert_eq!(tokens(&format!("{origin}/another/path?x=1#y")), 1.0);
    assert_eq!(tokens(&origin.replace("http://", "HTTP://")), 1.0);
    assert_eq!(
        call_method(
            &budget,
            "tokens",
            &[js_fn("u", "return new URL(u)", &[s.url_js()])]
        )
        .unwrap()
        .as_f64(),
        Some(1.0)
    );
    assert_eq!(
        tokens(&origin.replace("127.0.0.1", "localhost")),
        4.0,
        "another origin"
    );
    assert_eq!(tokens("https://example.com/"), 4.0);
    // another call finds the count taken by the first (1 -> 0; 0 + its own 1 is not above
    // 4 / 2): not retried; without a response that is RetryError 'budget'
    let s = seq("reset,200");
    let e = rejected(
        rf(&s.url, JsValue::UNDEFINED, options.clone()),
        "budget, network",
    )
    .await;
    assert_retry_error(&e, "budget", 1, Some("TypeError"));
    assert_eq!(tokens(&s.url), 0.0);
    // a success gives back tokenRatio; a permanent answer neither takes nor gives
    let s = seq("200");
    resolved(rf(&s.url, JsValue::UNDEFINED, options.clone()), "success").await;
    assert_eq!(tokens(&s.url), 1.0);
    let s = seq("404");
    resolved(rf(&s.url, JsValue::UNDEFINED, options), "404").await;
    assert_eq!(tokens(&s.url), 1.0);
}

#[wasm_bindgen_test]
async fn the_circuit_breaker_opens_refuses_and_closes_after_a_probe() {
    let listener = Recorder::new(|_| JsValue::UNDEFINED);
    let breaker = new_breaker(with(
        opts("failureThreshold: 2, openMs: 200"),
        "onStateChange",
        &listener.js(),
    ))
    .unwrap();
    let state = |url: &str| {
        call_method(&breaker, "state", &[url.into()])
            .unwrap()
            .as_string()
            .unwrap()
    };
    let events = || -> Vec<(String, String, String)> {
        listener
            .calls()
            .iter()
            .map(|e| {
                (
                    get_str(e, "origin").unwrap(),
                    get_str(e, "from").unwrap(),
                    get_str(e, "to").unwrap(),
                )
            })
            .collect()
    };
    let ev = |from: &str, to: &str| (server().to_string(), from.to_string(), to.to_string());
    let options = with(
        opts("maxAttempts: 5, baseDelayMs: 1, jitter: 'none'"),
        "breaker",
        &breaker,
    );

    // two transient failures open it; the retry that would start while it is open is not made
    let s = seq("503");
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options.clone()), "opening").await;
    assert_eq!(status(&res), 503);
    assert_eq!(s.hits().await, 2);
    assert_eq!(state(&s.url), "open");
    assert_eq!(state(server()), "open");
    assert_eq!(state("http://127.0.0.1:1/"), "closed", "another origin");
    assert_eq!(events(), [ev("closed", "open")]);
    // the event is a plain object with exactly these fields
    assert_eq!(
        show(&listener.calls()[0]),
        format!(r#"{{"origin":"{}","from":"closed","to":"open"}}"#, server())
    );

    // while open: CircuitOpenError at once, nothing sent
    let s = seq("200");
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options.clone()), "open").await;
    assert!(is_circuit_open_error(e.clone()), "{}", show(&e));
    assert!(!is_retry_error(e.clone()));
    assert!(e.is_instance_of::<js_sys::Error>());
    assert_eq!(get_str(&e, "name").as_deref(), Some("CircuitOpenError"));
    assert_eq!(get_str(&e, "origin").as_deref(), Some(server()));
    let wait = get_f64(&e, "retryAfterMs").unwrap();
    assert!(wait > 0.0 && wait <= 200.0, "retryAfterMs {wait}");
    assert_eq!(
        message(&e),
        format!(
            "retryFetch: the circuit for {} is open; nothing was sent (retry after {wait} ms)",
            server()
        )
    );
    assert_eq!(s.hits().await, 0);

    // after openMs: half-open; one probe's success closes it
    sleep(wait + 30.0).await;
    assert_eq!(state(&s.url), "half-open");
    let res = resolved(rf(&s.url, JsValue::UNDEFINED, options), "probe").await;
    assert_eq!(status(&res), 200);
    assert_eq!(state(&s.url), "closed");
    assert_eq!(
        events(),
        [
            ev("closed", "open"),
            ev("open", "half-open"),
            ev("half-open", "closed")
        ]
    );
}

/// A throwing `onStateChange` changes nothing: the breaker opens, the call ends as it would
/// (a RetryError 'circuit-open' after the reset: e2e 'contract: a retry refused by the circuit
/// it opened ...'); and another breaker knows nothing of it.
#[wasm_bindgen_test]
async fn a_throwing_state_listener_changes_nothing_and_breakers_keep_their_own_state() {
    let breaker = new_breaker(opts(
        "failureThreshold: 1, openMs: 60000, onStateChange() { throw new Error('listener bug') }",
    ))
    .unwrap();
    let options = with(opts("maxAttempts: 3, baseDelayMs: 1"), "breaker", &breaker);
    let s = seq("reset,200");
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options.clone()), "reset").await;
    assert_retry_error(&e, "circuit-open", 1, Some("TypeError"));
    assert_eq!(s.hits().await, 1);
    assert_eq!(
        call_method(&breaker, "state", &[s.url_js()])
            .unwrap()
            .as_string()
            .as_deref(),
        Some("open")
    );
    // another breaker knows nothing of it
    let other = new_breaker(JsValue::UNDEFINED).unwrap();
    let s = seq("200");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            with(Object::new().into(), "breaker", &other),
        ),
        "another breaker",
    )
    .await;
    assert_eq!(status(&res), 200);
}

#[wasm_bindgen_test]
async fn the_adaptive_throttle_paces_calls_refuses_a_turn_past_the_deadline_and_slows_on_429() {
    // (an attempt that would wait past maxWaitMs: RetryError 'throttled', nothing sent: e2e
    // 'adaptive throttle: an attempt that would wait longer than maxWaitMs is not sent')
    // 1 request per second (slow start made negligible): the second call would wait ~1 s,
    // past its deadline
    let throttle = new_throttle(opts("initialRate: 1, rampMs: 1e9")).unwrap();
    let rate = |url: &str| call_method(&throttle, "rate", &[url.into()]).unwrap();
    assert!(rate(server()).is_undefined());
    let a = seq("200");
    assert_eq!(
        status(
            &resolved(
                rf(
                    &a.url,
                    JsValue::UNDEFINED,
                    with(Object::new().into(), "throttle", &throttle),
                ),
                "first",
            )
            .await
        ),
        200
    );
    let r = rate(&a.url).as_f64().expect("no rate after a send");
    assert!((0.99..1.01).contains(&r), "rate {r}");
    let b = seq("200");
    let e = rejected(
        rf(
            &b.url,
            JsValue::UNDEFINED,
            with(opts("deadlineMs: 100"), "throttle", &throttle),
        ),
        "deadline",
    )
    .await;
    assert_retry_error(&e, "deadline", 0, Some("TimeoutError"));
    assert_eq!(b.hits().await, 0);

    // 20 per second: the second of two calls made together goes about 50 ms after the first
    let throttle = new_throttle(opts("initialRate: 20, rampMs: 1e9")).unwrap();
    let options = with(Object::new().into(), "throttle", &throttle);
    let (a, b) = (seq("200"), seq("200"));
    let pa = rf(&a.url, JsValue::UNDEFINED, options.clone());
    let pb = rf(&b.url, JsValue::UNDEFINED, options);
    assert_eq!(status(&resolved(pa, "a").await), 200);
    assert_eq!(status(&resolved(pb, "b").await), 200);
    let at = |log: Vec<JsValue>| get_f64(&log[0], "at").unwrap();
    let gap = at(b.log().await) - at(a.log().await);
    assert!(gap >= 30.0, "the second call went {gap} ms after the first");

    // a 429 cuts the rate (minRate keeps the retry's wait short)
    let throttle = new_throttle(opts("minRate: 50")).unwrap();
    let s = seq("429,200");
    let options = with(opts("baseDelayMs: 1"), "throttle", &throttle);
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "429").await),
        200
    );
    let r = call_method(&throttle, "rate", &[s.url_js()])
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(r < 100.0, "the rate is still {r} after a 429");
}
