//! The error objects the exports make: `isRetryError` / `isCircuitOpenError` by name, a
//! `RetryError`'s message and its `cause` (the very error of the last attempt, a
//! `TypeError` for a network error), an attempt's `TimeoutError` and its message, the
//! deadline's `RetryError`, and the `TypeError` for a `shouldRetry` verdict that is not a
//! boolean. Without an entry file's `setErrorClasses` (as here) they are plain `Error`s with
//! these names.
//!
//! The reasons, `attempts` records and causes' names are the e2e table's ('RetryError
//! carries the attempt history and the last error', 'timeouts that never recover end in a
//! RetryError whose cause is a TimeoutError', 'the deadline holds: ...', 'contract:
//! shouldRetry throwing (or rejecting) ...'); the messages and identities are only checked
//! here.

use crate::support::*;

#[wasm_bindgen_test]
fn is_retry_error_and_is_circuit_open_error_go_by_name() {
    let named = |name: &str| {
        js_fn(
            "n",
            "const e = new Error('x'); e.name = n; return e;",
            &[name.into()],
        )
    };
    assert!(is_retry_error(named("RetryError")));
    assert!(!is_retry_error(named("CircuitOpenError")));
    assert!(is_circuit_open_error(named("CircuitOpenError")));
    assert!(!is_circuit_open_error(named("RetryError")));
    // by name, across realms and copies: a plain object with the name counts
    assert!(is_retry_error(opts("name: 'RetryError'")));
    assert!(is_circuit_open_error(opts("name: 'CircuitOpenError'")));
    for v in [
        js("new Error('RetryError')"),
        js("new TypeError('x')"),
        js("'RetryError'"),
        JsValue::NULL,
        JsValue::UNDEFINED,
        n(0.0),
        opts("name: 'retryerror'"),
        js("Object.create(null)"),
        js("({ get name() { throw new Error('getter') } })"),
    ] {
        assert!(!is_retry_error(v.clone()), "{}", show(&v));
        assert!(!is_circuit_open_error(v.clone()), "{}", show(&v));
    }
}

/// "retryFetch failed after N attempts (reason): <the cause's message>"; every record's
/// `error` is the attempt's own (a `TypeError` from fetch for a reset) and `cause` is the
/// last one, the same object.
#[wasm_bindgen_test]
async fn a_retry_errors_message_says_why_and_its_cause_is_the_last_attempts_error() {
    let s = seq("reset");
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, maxAttempts: 2"),
        ),
        "reset x 2",
    )
    .await;
    assert_retry_error(&e, "attempts", 2, Some("TypeError"));
    assert!(
        message(&e).starts_with("retryFetch failed after 2 attempts (attempts): "),
        "{}",
        message(&e)
    );
    let records = attempts_of(&e);
    for r in &records {
        assert!(get(r, "error").is_instance_of::<js_sys::TypeError>());
    }
    assert!(
        Object::is(&get(&e, "cause"), &get(&records[1], "error")),
        "cause is the last error"
    );
}

/// An attempt past `timeoutMs` is a `TimeoutError` "retryFetch: the attempt timed out after
/// 100 ms", ended at its limit (each record's `durationMs`), and the `RetryError` quotes it.
#[wasm_bindgen_test]
async fn a_timed_out_attempt_is_a_timeout_error_that_says_after_how_long() {
    let s = seq("hang");
    let started = Date::now();
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("timeoutMs: 100, maxAttempts: 2, baseDelayMs: 1"),
        ),
        "hang",
    )
    .await;
    let elapsed = Date::now() - started;
    assert_retry_error(&e, "attempts", 2, Some("TimeoutError"));
    assert_eq!(
        message(&get(&e, "cause")),
        "retryFetch: the attempt timed out after 100 ms"
    );
    assert!(get(&e, "cause").is_instance_of::<js_sys::Error>());
    assert_eq!(message(&e), "retryFetch failed after 2 attempts (attempts): retryFetch: the attempt timed out after 100 ms");
    for r in attempts_of(&e) {
        assert_eq!(
            get_str(&get(&r, "error"), "name").as_deref(),
            Some("TimeoutError")
        );
        assert!(get_f64(&r, "durationMs").unwrap() >= 90.0);
    }
    assert!(
        elapsed >= 190.0 && elapsed < 3000.0,
        "two 100 ms attempts took {elapsed} ms"
    );
    assert_eq!(s.hits().await, 2);
}

/// An attempt in flight at the deadline is cut there: a `RetryError` 'deadline' with that one
/// attempt, caused by a `TimeoutError`.
#[wasm_bindgen_test]
async fn an_attempt_cut_by_the_deadline_is_a_retry_error_caused_by_a_timeout_error() {
    let s = seq("hang");
    let started = Date::now();
    let e = rejected(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("deadlineMs: 150, baseDelayMs: 1"),
        ),
        "deadline",
    )
    .await;
    assert_retry_error(&e, "deadline", 1, Some("TimeoutError"));
    assert!(Date::now() - started < 2000.0);
}

#[wasm_bindgen_test]
async fn a_should_retry_verdict_that_is_not_a_boolean_is_a_type_error_that_says_so() {
    let s = seq("503,200");
    let hook = Recorder::new(|_| JsValue::from_str("yes"));
    let options = with(opts("baseDelayMs: 1"), "shouldRetry", &hook.js());
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options), "non-boolean").await;
    assert_type_error(
        &e,
        "retryFetch: shouldRetry must return true or false (or a promise of one)",
    );
    assert_eq!(s.hits().await, 1);
}
