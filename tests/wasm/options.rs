//! The options snapshot and its errors, through `createRetryFetch` and `backoffDelays` (which
//! read options with the same code as a `retryFetch` call): each invalid option is a
//! `TypeError` with this exact text (the option, the value as given, what is allowed), an
//! unknown name points at the closest known one, only own enumerable keys are read and each
//! getter once, a throwing getter or proxy trap is the error, every limit is accepted, no value
//! panics; and how a call's options merge over a client's defaults.
//!
//! The e2e table asserts the same through `retryFetch` with looser messages ("names the
//! option", "says expected"): 'invalid options are TypeErrors naming the option, before
//! anything is sent', 'contract: an unknown option is a TypeError naming it and the closest
//! known name, before anything is sent', 'per-call options: ...' (getters, a throwing getter).

use crate::support::*;

const STATUSES: &str = "an array of integer HTTP statuses from 100 to 599";
const KEY: &str = "'auto' (lower-case), false, or a key of 1 to 255 visible ASCII characters";
const HEADER: &str = "an HTTP header name (letters, digits and !#$%&'*+-.^_`|~) that is not a forbidden request header (content-length, host, cookie, sec-*, proxy-*, ...) nor one that already means something in a request (content-*, if-*, authorization, accept, range, x-retry-count, ...)";

fn invalid_option_cases() -> Vec<(String, String)> {
    let inv = |option: &str, got: &str, expected: &str| {
        format!(r#"retryFetch: invalid option "{option}": got {got}; expected {expected}"#)
    };
    let item = |i: u32, got: &str| {
        format!(
            r#"retryFetch: invalid option "retryOnStatus": item [{i}] is {got}; expected {STATUSES}"#
        )
    };
    let int = "an integer from 1 to 100";
    let ms = "a finite number of milliseconds >= 0";
    let pos = "a number of milliseconds > 0 and <= 2147483647";
    let jitter = "'none', 'full', 'equal', 'decorrelated' or 'additive'";
    let bool_ = "true or false";
    let long_key = "k".repeat(256);
    vec![
        // numbers: wrong values and wrong types
        ("({ maxAttempts: 0 })".into(), inv("maxAttempts", "0", int)),
        (
            "({ maxAttempts: 2.5 })".into(),
            inv("maxAttempts", "2.5", int),
        ),
        (
            "({ maxAttempts: 101 })".into(),
            inv("maxAttempts", "101", int),
        ),
        (
            "({ maxAttempts: '3' })".into(),
            inv("maxAttempts", r#""3""#, int),
        ),
        (
            "({ maxAttempts: null })".into(),
            inv("maxAttempts", "null", int),
        ),
        (
            "({ maxAttempts: {} })".into(),
            inv("maxAttempts", "[object Object]", int),
        ),
        (
            "({ baseDelayMs: NaN })".into(),
            inv("baseDelayMs", "NaN", ms),
        ),
        ("({ baseDelayMs: -1 })".into(), inv("baseDelayMs", "-1", ms)),
        (
            "({ maxDelayMs: -Infinity })".into(),
            inv("maxDelayMs", "-Infinity", ms),
        ),
        (
            "({ maxRetryAfterMs: Infinity })".into(),
            inv("maxRetryAfterMs", "Infinity", ms),
        ),
        (
            "({ factor: 0.5 })".into(),
            inv("factor", "0.5", "a finite number from 1 to 100"),
        ),
        (
            "({ factor: 101 })".into(),
            inv("factor", "101", "a finite number from 1 to 100"),
        ),
        ("({ timeoutMs: 0 })".into(), inv("timeoutMs", "0", pos)),
        (
            "({ timeoutMs: 'soon' })".into(),
            inv("timeoutMs", r#""soon""#, pos),
        ),
        (
            "({ deadlineMs: 2147483648 })".into(),
            inv("deadlineMs", "2147483648", pos),
        ),
        (
            "({ maxBufferedBodyBytes: -1 })".into(),
            inv(
                "maxBufferedBodyBytes",
                "-1",
                "an integer number of bytes from 0 to 2147483647",
            ),
        ),
        (
            "({ maxBufferedBodyBytes: 0.5 })".into(),
            inv(
                "maxBufferedBodyBytes",
                "0.5",
                "an integer number of bytes from 0 to 2147483647",
            ),
        ),
        // names
        (
            "({ jitter: 'sometimes' })".into(),
            inv("jitter", r#""sometimes""#, jitter),
        ),
        (
            "({ jitter: 'Full' })".into(),
            inv("jitter", r#""Full""#, jitter),
        ),
        ("({ jitter: 1 })".into(), inv("jitter", "1", jitter)),
        ("({ jitter: null })".into(), inv("jitter", "null", jitter)),
        (
            "({ idempotencyKeyFormat: 'quoted' })".into(),
            inv(
                "idempotencyKeyFormat",
                r#""quoted""#,
                "'plain' or 'sf-string'",
            ),
        ),
        // booleans
        (
            "({ retryOnNetworkError: 'yes' })".into(),
            inv("retryOnNetworkError", r#""yes""#, bool_),
        ),
        (
            "({ retryOnTimeout: 1 })".into(),
            inv("retryOnTimeout", "1", bool_),
        ),
        (
            "({ respectRetryAfter: 'false' })".into(),
            inv("respectRetryAfter", r#""false""#, bool_),
        ),
        (
            "({ retryHeaders: null })".into(),
            inv("retryHeaders", "null", bool_),
        ),
        // retryOnStatus: the list and its items
        (
            "({ retryOnStatus: 503 })".into(),
            inv("retryOnStatus", "503", STATUSES),
        ),
        (
            "({ retryOnStatus: '503' })".into(),
            inv("retryOnStatus", r#""503""#, STATUSES),
        ),
        (
            "({ retryOnStatus: [503, '503'] })".into(),
            item(1, r#""503""#),
        ),
        ("({ retryOnStatus: [503, 700] })".into(), item(1, "700")),
        ("({ retryOnStatus: [99.5] })".into(), item(0, "99.5")),
        (
            "({ retryOnStatus: [500, 502, null] })".into(),
            item(2, "null"),
        ),
        ("({ retryOnStatus: [[503]] })".into(), item(0, "an array")),
        // idempotency keys and headers
        (
            "({ idempotencyKey: true })".into(),
            inv("idempotencyKey", "true", KEY),
        ),
        (
            "({ idempotencyKey: '' })".into(),
            inv("idempotencyKey", r#""""#, KEY),
        ),
        (
            "({ idempotencyKey: 'has space' })".into(),
            inv("idempotencyKey", r#""has space""#, KEY),
        ),
        (
            "({ idempotencyKey: 42 })".into(),
            inv("idempotencyKey", "42", KEY),
        ),
        (
            format!("({{ idempotencyKey: '{long_key}' }})"),
            inv("idempotencyKey", &format!("\"{long_key}\""), KEY),
        ),
        (
            "({ idempotencyHeader: 'Content-Length' })".into(),
            inv("idempotencyHeader", r#""Content-Length""#, HEADER),
        ),
        (
            "({ idempotencyHeader: 'host' })".into(),
            inv("idempotencyHeader", r#""host""#, HEADER),
        ),
        (
            "({ idempotencyHeader: 'Sec-Key' })".into(),
            inv("idempotencyHeader", r#""Sec-Key""#, HEADER),
        ),
        (
            "({ idempotencyHeader: 'Bad Header' })".into(),
            inv("idempotencyHeader", r#""Bad Header""#, HEADER),
        ),
        (
            "({ idempotencyHeader: '' })".into(),
            inv("idempotencyHeader", r#""""#, HEADER),
        ),
        // the options that stay JavaScript values
        (
            "({ signal: {} })".into(),
            inv("signal", "[object Object]", "an AbortSignal"),
        ),
        (
            "({ signal: 'abort' })".into(),
            inv("signal", r#""abort""#, "an AbortSignal"),
        ),
        (
            "({ shouldRetry: 'yes' })".into(),
            inv("shouldRetry", r#""yes""#, "a function"),
        ),
        (
            "({ onRetry: {} })".into(),
            inv("onRetry", "[object Object]", "a function"),
        ),
        (
            "({ fetch: [] })".into(),
            inv("fetch", "an array", "a function"),
        ),
        (
            "({ budget: {} })".into(),
            inv(
                "budget",
                "[object Object]",
                "a RetryBudget, 'own' (a default budget of the client's own), or false (no budget)",
            ),
        ),
        (
            "({ throttle: 7 })".into(),
            inv(
                "throttle",
                "7",
                "an AdaptiveThrottle, or false (no throttle)",
            ),
        ),
        (
            "({ breaker: true })".into(),
            inv("breaker", "true", "a CircuitBreaker"),
        ),
    ]
}

#[wasm_bindgen_test]
fn invalid_options_are_type_errors_naming_the_option_the_value_and_what_is_allowed() {
    for (src, expected) in invalid_option_cases() {
        assert_options_rejected(&src, &expected);
    }
}

#[wasm_bindgen_test]
fn retry_on_status_errors_name_the_item_and_its_index() {
    // every item is checked, the first bad one is named, with its value as it was given
    for (src, index, got) in [
        ("[408, 429, '503']", 2, r#""503""#),
        ("['503', 503]", 0, r#""503""#),
        ("[503, 600]", 1, "600"),
        ("[100, 599, 99]", 2, "99"),
        ("[503, NaN]", 1, "NaN"),
        ("[503, true]", 1, "true"),
        ("[503, {}]", 1, "[object Object]"),
    ] {
        assert_options_rejected(
            &format!("({{ retryOnStatus: {src} }})"),
            &format!(
                r#"retryFetch: invalid option "retryOnStatus": item [{index}] is {got}; expected {STATUSES}"#
            ),
        );
    }
    // the limits and an empty list are fine
    create_retry_fetch(opts("retryOnStatus: [100, 599]")).unwrap();
    create_retry_fetch(opts("retryOnStatus: []")).unwrap();
}

// "item [i] is" belongs to the one list option, retryOnStatus: `{ maxAttempts: ['3'] }` is
// "got an array", not `item [0] is "3"` of an option that has no items.
#[wasm_bindgen_test]
fn an_array_given_to_a_non_list_option_is_not_described_by_its_items() {
    for (src, option, expected) in [
        (
            "({ maxAttempts: ['3'] })",
            "maxAttempts",
            "an integer from 1 to 100",
        ),
        (
            "({ jitter: ['full'] })",
            "jitter",
            "'none', 'full', 'equal', 'decorrelated' or 'additive'",
        ),
        (
            "({ retryHeaders: [true] })",
            "retryHeaders",
            "true or false",
        ),
    ] {
        assert_options_rejected(
            src,
            &format!(r#"retryFetch: invalid option "{option}": got an array; expected {expected}"#),
        );
    }
}

#[wasm_bindgen_test]
fn unknown_options_are_type_errors_naming_the_closest_known_name() {
    for (name, close) in [
        ("maxAttemps", "maxAttempts"),
        ("timeout", "timeoutMs"),
        ("retryOnStatuses", "retryOnStatus"),
        ("MAXATTEMPTS", "maxAttempts"),
        ("basedelay", "baseDelayMs"),
        ("idempotencyHeaders", "idempotencyHeader"),
        ("onretry", "onRetry"),
        ("breakers", "breaker"),
    ] {
        assert_options_rejected(
            &format!("({{ {name}: 3 }})"),
            &format!(r#"retryFetch: unknown option "{name}" (did you mean "{close}"?)"#),
        );
    }
    // nothing close: every name is listed
    let all = "maxAttempts, baseDelayMs, factor, maxDelayMs, jitter, retryOnStatus, retryOnNetworkError, \
               retryOnTimeout, timeoutMs, deadlineMs, respectRetryAfter, maxRetryAfterMs, idempotencyKey, \
               idempotencyHeader, idempotencyKeyFormat, retryHeaders, maxBufferedBodyBytes, followAccepted, signal, shouldRetry, \
               onRetry, beforeRetry, onSettled, headers, fetch, budget, throttle, breaker";
    assert_options_rejected(
        "({ completelyUnrelatedThing: 1 })",
        &format!(r#"retryFetch: unknown option "completelyUnrelatedThing"; the options are {all}"#),
    );
    // an unknown name set to undefined is no option (as with a spread); inherited names and
    // symbols are not read at all
    create_retry_fetch(opts("maxAttemps: undefined, maxAttempts: 2")).unwrap();
    create_retry_fetch(js("Object.create({ maxAttemps: 3 })")).unwrap();
    create_retry_fetch(js("({ [Symbol('maxAttemps')]: 3 })")).unwrap();
    // a non-enumerable own property is not read either
    create_retry_fetch(js(
        "Object.defineProperty({}, 'maxAttemps', { value: 3, enumerable: false })",
    ))
    .unwrap();
}

#[wasm_bindgen_test]
async fn options_that_are_not_an_object_are_type_errors() {
    for (src, got) in [
        ("[]", "an array"),
        ("[1, 2]", "an array"),
        ("42", "42"),
        ("'fast'", r#""fast""#),
        ("true", "true"),
        ("() => 3", "a function"),
    ] {
        let expected =
            format!("retryFetch: invalid options: got {got}; expected an object or undefined");
        assert_options_rejected(src, &expected);
        assert_call_rejected("http://127.0.0.1:9/never", js(src), &expected).await;
    }
    // undefined and null are no options; so is an empty object
    for options in [JsValue::UNDEFINED, JsValue::NULL, Object::new().into()] {
        assert!(create_retry_fetch(options.clone()).unwrap().is_function());
        assert_eq!(backoff_delays(options, n(2.0), n(1.0)).unwrap().length(), 2);
    }
}

/// `createRetryFetch` runs each getter once and throws what a getter throws; a proxy whose
/// `ownKeys` trap throws rejects a `retryFetch` call with that error, nothing sent. (A getter
/// run once per `retryFetch` call, and a throwing one rejecting it: e2e 'per-call options:
/// ...'.)
#[wasm_bindgen_test]
async fn getters_run_once_and_a_throwing_getter_or_proxy_trap_is_the_error() {
    let pair = js("(() => { const c = { n: 0 }; return [c, { get maxAttempts() { c.n += 1; return 2; } }]; })()");
    let counter = Reflect::get_u32(&pair, 0).unwrap();
    let options = Reflect::get_u32(&pair, 1).unwrap();
    create_retry_fetch(options.clone()).unwrap();
    assert_eq!(
        get_f64(&counter, "n"),
        Some(1.0),
        "the getter ran more or less than once"
    );

    let throwing = js("({ get maxAttempts() { throw new RangeError('boom') } })");
    let e = create_retry_fetch(throwing).err().expect("accepted");
    assert!(e.is_instance_of::<js_sys::RangeError>(), "{}", show(&e));
    assert_eq!(message(&e), "boom");
    // a proxy whose ownKeys throws
    let s = seq("200");
    let proxy = js("new Proxy({}, { ownKeys() { throw new SyntaxError('no keys') } })");
    let e = rejected(rf(&s.url, JsValue::UNDEFINED, proxy), "a throwing proxy").await;
    assert!(e.is_instance_of::<js_sys::SyntaxError>(), "{}", show(&e));
    assert_eq!(s.hits().await, 0, "something was sent");
}

#[wasm_bindgen_test]
fn valid_options_and_their_limits_are_accepted() {
    for fields in [
        "maxAttempts: 1",
        "maxAttempts: 100, factor: 100, baseDelayMs: 0, maxDelayMs: 1e308, maxRetryAfterMs: 0",
        "timeoutMs: 2147483647, deadlineMs: 0.5",
        "jitter: 'none'",
        "jitter: 'full'",
        "jitter: 'equal'",
        "jitter: 'decorrelated'",
        "jitter: 'additive'",
        "retryOnStatus: [], retryOnNetworkError: false, retryOnTimeout: false, respectRetryAfter: false",
        "idempotencyKey: 'auto'",
        "idempotencyKey: false",
        "idempotencyKey: '~'.repeat(255)",
        "idempotencyKey: 'order-42', idempotencyKeyFormat: 'sf-string', idempotencyHeader: 'X-Request-Key'",
        "idempotencyKeyFormat: 'plain', retryHeaders: true, maxBufferedBodyBytes: 0",
        "maxBufferedBodyBytes: 2147483647",
        "signal: new AbortController().signal",
        "signal: AbortSignal.abort()",
        "shouldRetry: () => true, onRetry: async () => {}, fetch: (input, init) => fetch(input, init)",
        // null clears what can be "none"
        "timeoutMs: null, deadlineMs: null, maxRetryAfterMs: null, signal: null, shouldRetry: null, onRetry: null, fetch: null, budget: null, throttle: null, breaker: null",
    ] {
        let options = opts(fields);
        // A fixed key is a per-call option: as a client's default every call would share it.
        let shared_key = fields.contains("idempotencyKey: '") && !fields.contains("'auto'");
        match create_retry_fetch(options.clone()) {
            Err(e) if shared_key && show(&e).contains("per call") => {}
            Err(e) => panic!("{{ {fields} }} was rejected: {}", show(&e)),
            Ok(_) if shared_key => panic!("{{ {fields} }}: a client's default key was accepted"),
            Ok(_) => {}
        }
        backoff_delays(options, n(3.0), n(1.0)).unwrap_or_else(|e| panic!("backoffDelays: {{ {fields} }}: {}", show(&e)));
    }
    // the guards themselves
    let options = with(
        Object::new().into(),
        "budget",
        &new_budget(JsValue::UNDEFINED).unwrap(),
    );
    let options = with(
        options,
        "throttle",
        &new_throttle(JsValue::UNDEFINED).unwrap(),
    );
    let options = with(
        options,
        "breaker",
        &new_breaker(JsValue::UNDEFINED).unwrap(),
    );
    create_retry_fetch(options).unwrap();
}

#[wasm_bindgen_test]
fn weird_options_are_type_errors_never_panics() {
    let names = [
        "maxAttempts",
        "baseDelayMs",
        "factor",
        "maxDelayMs",
        "jitter",
        "retryOnStatus",
        "retryOnNetworkError",
        "retryOnTimeout",
        "timeoutMs",
        "deadlineMs",
        "respectRetryAfter",
        "maxRetryAfterMs",
        "idempotencyKey",
        "idempotencyHeader",
        "idempotencyKeyFormat",
        "retryHeaders",
        "maxBufferedBodyBytes",
        "signal",
        "shouldRetry",
        "onRetry",
        "fetch",
        "budget",
        "throttle",
        "breaker",
    ];
    let values = Array::from(&js(
        "[0, -0, -1, 0.5, 1, 100, 101, 1e308, -1e308, NaN, Infinity, -Infinity, 2 ** 53, '', 'x', 'auto', 'none', \
         ' ', '\\u0000\\uffff', 'k'.repeat(10000), true, false, [], [1], [503, 'x'], [[503]], new Array(600).fill(503), \
         {}, () => 1, Symbol('s'), 10n, new Date(0), Object.create(null), new Proxy({}, {}), /re/, new Uint8Array(2), \
         new AbortController().signal, Promise.resolve(1)]",
    ));
    for name in names {
        for value in values.iter() {
            let options = with(Object::new().into(), name, &value);
            for result in [
                create_retry_fetch(options.clone()).map(|_| ()),
                backoff_delays(options, n(3.0), n(1.0)).map(|_| ()),
            ] {
                if let Err(e) = result {
                    assert!(
                        e.is_instance_of::<js_sys::TypeError>(),
                        "{name}: {:?} gave {}",
                        value,
                        show(&e)
                    );
                    assert!(
                        message(&e).contains(&format!("\"{name}\"")),
                        "{name}: the message does not name it: {}",
                        message(&e)
                    );
                }
            }
        }
    }
    // the guards' settings too
    for (class, settings) in [
        ("RetryBudget", &["maxTokens", "tokenRatio"][..]),
        (
            "AdaptiveThrottle",
            &[
                "initialRate",
                "rampMs",
                "beta",
                "scale",
                "minRate",
                "maxWaitMs",
            ][..],
        ),
        (
            "CircuitBreaker",
            &[
                "failureThreshold",
                "openMs",
                "halfOpenMaxCalls",
                "onStateChange",
            ][..],
        ),
    ] {
        for name in settings {
            for value in values.iter() {
                let options = with(Object::new().into(), name, &value);
                let result = match class {
                    "RetryBudget" => new_budget(options).map(|_| ()),
                    "AdaptiveThrottle" => new_throttle(options).map(|_| ()),
                    _ => new_breaker(options).map(|_| ()),
                };
                if let Err(e) = result {
                    assert!(
                        e.is_instance_of::<js_sys::TypeError>(),
                        "{class} {name}: {:?} gave {}",
                        value,
                        show(&e)
                    );
                    assert!(
                        message(&e).starts_with(&format!("{class}: invalid option \"{name}\"")),
                        "{}",
                        message(&e)
                    );
                }
            }
        }
    }
}

/// A call's options merge over a client's defaults into a policy of the call's own: a
/// per-call option leaves the client's defaults as they were, and `budget: null` or
/// `budget: false` takes the client's budget off that call only (its tokens untouched).
/// `timeoutMs: null` clears the client's time limit. (Defaults applied, a per-call option over
/// them, `undefined` ignored, `null` clearing a default `breaker` or `signal`: e2e
/// 'createRetryFetch: defaults validated at once, per-call options merge over them', 'guards
/// work as createRetryFetch defaults, shared by every call', 'contract: a client's default
/// signal and a call's own signal both cancel the call'.)
#[wasm_bindgen_test]
async fn per_call_options_merge_over_a_clients_defaults_and_leave_them_alone() {
    let client = create_retry_fetch(opts("maxAttempts: 1, baseDelayMs: 1")).unwrap();
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, opts("maxAttempts: 2")),
                "per call"
            )
            .await
        ),
        200
    );
    assert_eq!(s.hits().await, 2);
    // the defaults are unchanged by a per-call option
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::NULL),
                "again"
            )
            .await
        ),
        503
    );
    assert_eq!(s.hits().await, 1);

    // null clears a default: here the time limit (each option that can be "none" has its
    // own arm in options::read; e2e clears `breaker` and `signal`)
    let client = create_retry_fetch(opts("timeoutMs: 50, maxAttempts: 1")).unwrap();
    let s = seq("200+delay=150");
    let e = rejected(
        call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
        "default timeout",
    )
    .await;
    assert_retry_error(&e, "attempts", 1, Some("TimeoutError"));
    let s = seq("200+delay=150");
    let res = resolved(
        call_client(&client, &s.url, JsValue::UNDEFINED, opts("timeoutMs: null")),
        "timeoutMs: null",
    )
    .await;
    assert_eq!(status(&res), 200);

    // a guard: { budget: null } takes the client's budget off this call
    let budget = new_budget(opts("maxTokens: 1, refillPerSecond: 0")).unwrap();
    let client = create_retry_fetch(with(opts("baseDelayMs: 1"), "budget", &budget)).unwrap();
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, opts("budget: null")),
                "budget: null"
            )
            .await
        ),
        200
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(1.0),
        "the budget saw a call made with budget: null"
    );
    assert_eq!(
        status(
            &resolved(
                call_client(
                    &client,
                    &seq("503,200").url,
                    JsValue::UNDEFINED,
                    opts("budget: false")
                ),
                "budget: false"
            )
            .await
        ),
        200
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(1.0),
        "the budget saw a call made with budget: false"
    );
    // with the client's budget: a lone call retries (its own failure does not count against
    // it), 1 - 1 + 0.1; the next call finds the count taken by another: not retried
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
                "with budget"
            )
            .await
        ),
        200
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(0.1)
    );
    let s = seq("503,200");
    assert_eq!(
        status(
            &resolved(
                call_client(&client, &s.url, JsValue::UNDEFINED, JsValue::UNDEFINED),
                "budget drained"
            )
            .await
        ),
        503
    );
    assert_eq!(
        call_method(&budget, "tokens", &[s.url_js()])
            .unwrap()
            .as_f64(),
        Some(0.0)
    );
}
