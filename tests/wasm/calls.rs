//! Real calls whose behaviour the e2e scenario table (tests/e2e/scenarios.mjs, contract.mjs)
//! does not assert yet. Each test says what the table lacks; once a scenario there asserts it
//! as strongly (in Node and in Chromium), the test here goes. Everything else a call does
//! (retries, keys, bodies, hooks, aborts, timeouts, the deadline, redirects, transports) is
//! the table's and is not repeated here.

use crate::support::*;

/// The exported `retryFetch` with no options at all (`undefined` or `null`): the built-in
/// defaults and the default client's own settle closure, not a per-call one. (The table
/// always passes options to `retryFetch`; `client(url)` takes a client's closure.)
#[wasm_bindgen_test]
async fn no_options_at_all_is_the_built_in_defaults() {
    let s = seq("503,200");
    let res = resolved(
        rf(&s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
        "no options",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert_eq!(s.hits().await, 2);
    // a success goes straight back: one attempt
    let s = seq("200");
    let res = resolved(
        retry_fetch(s.url_js(), JsValue::UNDEFINED, JsValue::NULL),
        "200",
    )
    .await;
    assert_eq!(status(&res), 200);
    assert!(body_text(&res).await.contains(r#""hit":1"#));
    assert_eq!(s.hits().await, 1);
}

/// 501 and a 301 without a Location (not a redirect: fetch returns it) are answers, sent once.
/// (The table sends 400, 401, 404 and a keyless GET's 409.)
#[wasm_bindgen_test]
async fn a_501_and_a_301_without_location_are_returned_at_once() {
    for st in ["501", "301"] {
        let s = seq(&format!("{st},200"));
        let res = resolved(rf(&s.url, JsValue::UNDEFINED, opts("baseDelayMs: 1")), st).await;
        assert_eq!(status(&res).to_string(), st);
        assert_eq!(s.hits().await, 1, "{st} was retried");
    }
}

/// A PATCH gets a key of ours, a PUT (idempotent) none. (The table keys POSTs and checks
/// that a GET gets none.)
#[wasm_bindgen_test]
async fn a_patch_gets_a_key_and_a_put_none() {
    let s = seq("200");
    resolved(
        rf(
            &s.url,
            opts("method: 'PATCH', body: 'x'"),
            JsValue::UNDEFINED,
        ),
        "PATCH",
    )
    .await;
    let key = header(&s.log().await[0], "idempotency-key").expect("no key on a PATCH");
    assert!(is_uuid_v4(&key), "not a UUID v4: {key}");
    let s = seq("200");
    resolved(
        rf(&s.url, opts("method: 'PUT', body: 'x'"), JsValue::UNDEFINED),
        "PUT",
    )
    .await;
    assert_eq!(header(&s.log().await[0], "idempotency-key"), None);
}

/// A fixed key in Structured Field form under another header name, on every attempt of a
/// POST and of a GET that has an init; our auto key under another header name, the same on
/// the retry; never an `Idempotency-Key` besides. (The table: a fixed key under the default
/// header on a POST, and one attempt of an auto key in sf-string form.)
#[wasm_bindgen_test]
async fn a_fixed_key_and_the_auto_key_go_under_another_header_on_every_attempt() {
    for init in [opts("method: 'POST', body: 'x'"), opts("method: 'GET'")] {
        let s = seq("503,200");
        let options = opts("baseDelayMs: 1, idempotencyKey: 'order-42', idempotencyKeyFormat: 'sf-string', idempotencyHeader: 'X-Request-Key'");
        assert_eq!(
            status(&resolved(rf(&s.url, init, options), "fixed key").await),
            200
        );
        let log = s.log().await;
        assert_eq!(log.len(), 2);
        for r in log {
            assert_eq!(
                header(&r, "x-request-key").as_deref(),
                Some(r#""order-42""#),
                "{}",
                get_str(&r, "method").unwrap()
            );
            assert_eq!(header(&r, "idempotency-key"), None);
        }
    }
    // the auto key under another header name
    let s = seq("503,200");
    let options = opts("baseDelayMs: 1, idempotencyHeader: 'X-Request-Key'");
    assert_eq!(
        status(
            &resolved(
                rf(&s.url, opts("method: 'POST', body: 'x'"), options),
                "auto key"
            )
            .await
        ),
        200
    );
    let log = s.log().await;
    let key = header(&log[0], "x-request-key").expect("no X-Request-Key");
    assert!(is_uuid_v4(&key));
    assert_eq!(header(&log[1], "x-request-key"), Some(key));
    assert_eq!(header(&log[0], "idempotency-key"), None);
}

/// README: a string `idempotencyKey` is sent "on every attempt, whatever the method". A GET
/// given as a bare URL with no `init` is the lean path's plain GET (`fetch(url)`), which must
/// not be taken when a fixed key is to be added; the first attempt would go without it. (The
/// table's fixed key is on a POST.)
#[wasm_bindgen_test]
async fn a_fixed_key_is_sent_on_every_attempt_of_a_get_without_init() {
    for through_a_client in [false, true] {
        let s = seq("503,200");
        let options = opts("baseDelayMs: 1, idempotencyKey: 'order-42'");
        let call = if through_a_client {
            // Per call: a client's defaults cannot hold a key (every call would share it).
            let client = create_retry_fetch(opts("baseDelayMs: 1")).unwrap();
            call_client(&client, &s.url, JsValue::UNDEFINED, options)
        } else {
            rf(&s.url, JsValue::UNDEFINED, options)
        };
        assert_eq!(status(&resolved(call, "fixed key, GET").await), 200);
        let keys: Vec<_> = s
            .log()
            .await
            .iter()
            .map(|r| header(r, "idempotency-key"))
            .collect();
        assert_eq!(
            keys,
            [Some("order-42".to_string()), Some("order-42".to_string())],
            "through a client: {through_a_client}"
        );
    }
}

/// A request fetch cannot send is the platform's `TypeError`, never a `RetryError`, and
/// nothing is sent: with no options at all, an invalid header name, a relative URL where there
/// is no base (Node). (The table: a GET or HEAD with a body, an invalid method, a signal that
/// is not an AbortSignal, an invalid URL, ftp: and a bad port, always with options.)
#[wasm_bindgen_test]
async fn a_request_fetch_cannot_send_is_a_type_error_before_anything_is_sent() {
    let s = seq("200");
    for (label, init) in [
        ("a GET with a body", opts("body: 'x'")),
        ("a HEAD with a body", opts("method: 'HEAD', body: 'x'")),
        ("an invalid method", opts("method: 'BAD METHOD'")),
        ("a signal that is not an AbortSignal", opts("signal: {}")),
        (
            "an invalid header name",
            opts("headers: { 'bad header': 'x' }"),
        ),
    ] {
        let e = rejected(rf(&s.url, init, JsValue::UNDEFINED), label).await;
        assert_any_type_error(&e, label);
    }
    let e = rejected(
        rf(
            &s.url,
            opts("headers: { 'bad header': 'x' }"),
            opts("baseDelayMs: 1"),
        ),
        "an invalid header name, with options",
    )
    .await;
    assert_any_type_error(&e, "an invalid header name, with options");
    if !in_browser() {
        // Node has no base URL
        let e = rejected(
            rf("/relative", JsValue::UNDEFINED, JsValue::UNDEFINED),
            "a relative URL",
        )
        .await;
        assert_any_type_error(&e, "a relative URL");
    }
    // (a port out of range: invalid for every WHATWG URL parser)
    let e = rejected(
        rf(
            "http://127.0.0.1:99999/",
            JsValue::UNDEFINED,
            JsValue::UNDEFINED,
        ),
        "an invalid URL",
    )
    .await;
    assert_any_type_error(&e, "an invalid URL");
    assert_eq!(s.hits().await, 0, "something was sent");
}

/// `Retry-After: 0` is a wait of 0 that replaces the backoff (here exactly 5 s); a `RateLimit-Reset`
/// past `maxRetryAfterMs` ends the call with that response, as a `Retry-After` past it does.
/// (The table: Retry-After of 1 s, as a date, and past the default cap; RateLimit-Reset of
/// 1 s within the cap.)
#[wasm_bindgen_test]
async fn a_retry_after_of_zero_and_a_rate_limit_reset_past_the_cap() {
    let s = seq("503+ra=0,200");
    let started = Date::now();
    assert_eq!(
        status(
            &resolved(
                rf(
                    &s.url,
                    JsValue::UNDEFINED,
                    opts("baseDelayMs: 5000, jitter: 'none'")
                ),
                "ra=0"
            )
            .await
        ),
        200
    );
    assert_eq!(s.hits().await, 2);
    assert!(
        Date::now() - started < 2000.0,
        "it waited the backoff, not the Retry-After of 0"
    );
    // RateLimit-Reset when there is no Retry-After
    let s = seq("429+rlr=120,200");
    let res = resolved(
        rf(
            &s.url,
            JsValue::UNDEFINED,
            opts("baseDelayMs: 1, maxRetryAfterMs: 1000"),
        ),
        "RateLimit-Reset",
    )
    .await;
    assert_eq!(
        status(&res),
        429,
        "a RateLimit-Reset past the cap stops the call"
    );
    assert_eq!(s.hits().await, 1);
}

/// A timeout is ambiguous (the server may have acted): a POST without a key is not retried
/// after one, `RetryError` 'unsafe'. (The table: an unkeyed POST after a 5xx and after a
/// reset.)
#[wasm_bindgen_test]
async fn an_unkeyed_post_that_timed_out_is_not_retried() {
    let s = seq("hang");
    let options = opts("timeoutMs: 100, baseDelayMs: 1, idempotencyKey: false");
    let e = rejected(
        rf(&s.url, opts("method: 'POST', body: 'x'"), options),
        "POST hang",
    )
    .await;
    assert_retry_error(&e, "unsafe", 1, Some("TimeoutError"));
    sleep(30.0).await;
    assert_eq!(s.hits().await, 1);
}

/// A custom `fetch` that throws synchronously is a failed attempt like a rejection (retried,
/// then the `RetryError`'s cause); one that resolves to `undefined` is this `TypeError`, not
/// retried. (The table: a transport returning its own Responses, and one resolving to `{}`,
/// `42` or `{ status: 200 }`.)
#[wasm_bindgen_test]
async fn a_custom_fetch_that_throws_or_resolves_to_undefined() {
    let calls = Rc::new(Cell::new(0u32));
    let c = calls.clone();
    let throwing = Closure::<dyn FnMut(JsValue, JsValue) -> Result<JsValue, JsValue>>::new(
        move |_: JsValue, _: JsValue| {
            c.set(c.get() + 1);
            Err(js_sys::Error::new("transport down").into())
        },
    );
    let options = with(
        opts("baseDelayMs: 1, maxAttempts: 2"),
        "fetch",
        throwing.as_ref(),
    );
    let e = rejected(
        rf("https://example.invalid/", JsValue::UNDEFINED, options),
        "throwing transport",
    )
    .await;
    assert_retry_error(&e, "attempts", 2, Some("Error"));
    assert_eq!(message(&get(&e, "cause")), "transport down");
    assert_eq!(calls.get(), 2);

    let calls = Rc::new(Cell::new(0u32));
    let c = calls.clone();
    let odd =
        Closure::<dyn FnMut(JsValue, JsValue) -> JsValue>::new(move |_: JsValue, _: JsValue| {
            c.set(c.get() + 1);
            Promise::resolve(&JsValue::UNDEFINED).into()
        });
    let options = with(opts("baseDelayMs: 1"), "fetch", odd.as_ref());
    let e = rejected(
        rf("https://example.invalid/", JsValue::UNDEFINED, options),
        "undefined",
    )
    .await;
    assert_type_error(
        &e,
        "retryFetch: fetch resolved to something that is not a Response",
    );
    assert_eq!(calls.get(), 1, "undefined was retried");
}

/// `onRetry`'s info: the key the request was sent with, never the response; after a reset
/// the error (fetch's `TypeError`) and, for a GET, no status and no key. (The table: attempt,
/// delay, reason, status, a UUID key, an error given.)
#[wasm_bindgen_test]
async fn on_retry_gets_the_key_sent_and_never_the_response() {
    let s = seq("503,502,200");
    let hook = Recorder::new(|_| JsValue::UNDEFINED);
    let options = with(opts("baseDelayMs: 1"), "onRetry", &hook.js());
    let res = resolved(
        rf(&s.url, opts("method: 'POST', body: 'x'"), options),
        "onRetry",
    )
    .await;
    assert_eq!(status(&res), 200);
    let key = header(&s.log().await[0], "idempotency-key").unwrap();
    let calls = hook.calls();
    assert_eq!(calls.len(), 2);
    for ctx in &calls {
        assert_eq!(
            get_str(ctx, "idempotencyKey").as_deref(),
            Some(key.as_str())
        );
        assert!(
            !Reflect::has(ctx, &"response".into()).unwrap(),
            "onRetry got the response"
        );
    }
    // network errors: reason 'network' and the error
    let s = seq("reset,200");
    let hook = Recorder::new(|_| JsValue::UNDEFINED);
    let options = with(opts("baseDelayMs: 1"), "onRetry", &hook.js());
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "network").await),
        200
    );
    let ctx = &hook.calls()[0];
    assert_eq!(get_str(ctx, "reason").as_deref(), Some("network"));
    assert!(get(ctx, "error").is_instance_of::<js_sys::TypeError>());
    assert!(get(ctx, "status").is_undefined() && get(ctx, "idempotencyKey").is_undefined());
}

/// `shouldRetry` is asked only about what the policy would retry: a 404 is returned without
/// it. (The table asks it about 503s and resets.)
#[wasm_bindgen_test]
async fn should_retry_is_not_asked_about_what_the_policy_would_not_retry() {
    let s = seq("404");
    let hook = Recorder::new(|_| JsValue::TRUE);
    let options = with(opts("baseDelayMs: 1"), "shouldRetry", &hook.js());
    assert_eq!(
        status(&resolved(rf(&s.url, JsValue::UNDEFINED, options), "404").await),
        404
    );
    assert!(hook.calls().is_empty());
}

/// With no options, `init.signal` on the lean path: an abort in flight rejects with its reason
/// as it is (a string here), and an already-aborted signal sends nothing; an already-aborted
/// `options.signal` rejects with its own reason. (The table: `init.signal` with options and an
/// `Error` reason, an already-aborted `options.signal` with the default reason.)
#[wasm_bindgen_test]
async fn an_abort_without_options_rejects_with_the_signals_own_reason() {
    let s = seq("hang");
    let controller = web_sys::AbortController::new().unwrap();
    let init = with(Object::new().into(), "signal", &controller.signal());
    let call = rf(&s.url, init, JsValue::UNDEFINED);
    s.wait_for_hits(1).await;
    let reason = JsValue::from_str("a string reason");
    controller.abort_with_reason(&reason);
    let e = rejected(call, "init.signal").await;
    assert_eq!(e.as_string().as_deref(), Some("a string reason"));

    // already aborted: nothing is sent
    let s = seq("200");
    let options = with(
        Object::new().into(),
        "signal",
        &js("AbortSignal.abort(new RangeError('already'))"),
    );
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, options), "already aborted").await;
    assert!(e.is_instance_of::<js_sys::RangeError>(), "{}", show(&e));
    let init = with(
        Object::new().into(),
        "signal",
        &js("AbortSignal.abort(new RangeError('already'))"),
    );
    let e = rejected(
        rf(&s.url, init, JsValue::UNDEFINED),
        "already aborted init.signal",
    )
    .await;
    assert!(e.is_instance_of::<js_sys::RangeError>(), "{}", show(&e));
    assert_eq!(s.hits().await, 0);
}
