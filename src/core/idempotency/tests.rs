//! The rules of the server side, natively: keys, fingerprints, scopes, the state machine,
//! options, answers and identities, with property tests for their bounds.

use super::*;
use sha2::{Digest, Sha256};

/// `default_identity` of a request with these `Authorization` and `Cookie` headers.
fn id(authorization: Option<&str>, cookie: Option<&str>) -> Option<String> {
    default_identity(|name| match name {
        "authorization" => authorization.map(String::from),
        "cookie" => cookie.map(String::from),
        _ => None,
    })
}

#[test]
fn plain_keys() {
    assert_eq!(
        parse_key("8e03978e-40d5-43e8-bc93-6894a57f9324").as_deref(),
        Ok("8e03978e-40d5-43e8-bc93-6894a57f9324")
    );
    assert_eq!(parse_key("  abc\t").as_deref(), Ok("abc"));
    assert_eq!(
        parse_key("a\"b").as_deref(),
        Ok("a\"b"),
        "a quote inside a plain key is fine"
    );
    assert_eq!(parse_key("!~"), Ok("!~".into()));
}

#[test]
fn invalid_plain_keys() {
    assert_eq!(parse_key(""), Err(KeyError::Empty));
    assert_eq!(parse_key("   "), Err(KeyError::Empty));
    assert_eq!(parse_key("a b"), Err(KeyError::NotVisibleAscii));
    assert_eq!(parse_key("k1, k2"), Err(KeyError::NotVisibleAscii));
    assert_eq!(parse_key("caf\u{e9}"), Err(KeyError::NotVisibleAscii));
    assert_eq!(parse_key("a\u{7f}"), Err(KeyError::NotVisibleAscii));
    assert_eq!(parse_key("a\nb"), Err(KeyError::NotVisibleAscii));
}

#[test]
fn length_limit() {
    let ok = "k".repeat(255);
    assert_eq!(parse_key(&ok), Ok(ok.clone()));
    assert_eq!(parse_key(&"k".repeat(256)), Err(KeyError::TooLong));
    // The limit applies to the key, not to its quoted form.
    let quoted = format!("\"{ok}\"");
    assert_eq!(parse_key(&quoted), Ok(ok));
    assert_eq!(
        parse_key(&format!("\"{}\"", "\\\\".repeat(255))),
        Ok("\\".repeat(255))
    );
    assert_eq!(
        parse_key(&format!("\"{}\"", "\\\\".repeat(256))),
        Err(KeyError::TooLong)
    );
}

#[test]
fn sf_strings() {
    assert_eq!(parse_key(r#""abc""#).as_deref(), Ok("abc"));
    assert_eq!(parse_key(r#" "abc" "#).as_deref(), Ok("abc"));
    assert_eq!(parse_key(r#""a\"b\\c""#).as_deref(), Ok(r#"a"b\c"#));
    assert_eq!(parse_key(r#""""#), Err(KeyError::Empty));
    assert_eq!(
        parse_key(r#""abc"#),
        Err(KeyError::BadSfString),
        "unterminated"
    );
    assert_eq!(parse_key(r#"""#), Err(KeyError::BadSfString));
    assert_eq!(
        parse_key(r#""a\b""#),
        Err(KeyError::BadSfString),
        "bad escape"
    );
    assert_eq!(
        parse_key(r#""abc\"#),
        Err(KeyError::BadSfString),
        "dangling backslash"
    );
    assert_eq!(
        parse_key(r#""abc";a=1"#),
        Err(KeyError::BadSfString),
        "parameters"
    );
    assert_eq!(
        parse_key(r#""abc", "def""#),
        Err(KeyError::BadSfString),
        "a list"
    );
    assert_eq!(
        parse_key("\"a\u{e9}\""),
        Err(KeyError::BadSfString),
        "non-ASCII"
    );
    assert_eq!(parse_key("\"a\tb\""), Err(KeyError::BadSfString), "tab");
    // A space is a valid sf-string character but not a valid key character.
    assert_eq!(parse_key(r#""a b""#), Err(KeyError::NotVisibleAscii));
}

#[test]
fn round_trips_with_the_client_header_forms() {
    use crate::core::key::header_value;
    use crate::core::options::KeyFormat;
    for key in [
        "abc",
        "8e03978e-40d5-43e8-bc93-6894a57f9324",
        r#"a"b\c"#,
        "!#$%&'()*+,-./:;<=>?@[]^_`{|}~",
    ] {
        assert_eq!(
            parse_key(&header_value(key, KeyFormat::SfString)).as_deref(),
            Ok(key)
        );
        if !key.starts_with('"') {
            assert_eq!(
                parse_key(&header_value(key, KeyFormat::Plain)).as_deref(),
                Ok(key)
            );
        }
    }
}

#[test]
fn error_messages_are_sentences() {
    for e in [
        KeyError::Empty,
        KeyError::TooLong,
        KeyError::NotVisibleAscii,
        KeyError::BadSfString,
    ] {
        assert!(e.message().starts_with("the idempotency key"), "{e:?}");
    }
}

#[test]
fn sha256_vectors() {
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        sha256_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
}

#[test]
fn fingerprint_composition() {
    // SHA-256(method NUL path NUL SHA-256(body)), spelled out.
    let mut input = b"POST\0/pay?x=1\0".to_vec();
    input.extend_from_slice(&Sha256::digest(b"{\"amount\":1}"));
    assert_eq!(
        fingerprint("POST", "/pay?x=1", b"{\"amount\":1}"),
        sha256_hex(&input)
    );
    assert_eq!(fingerprint("POST", "/pay", b"").len(), 64);
}

#[test]
fn fingerprint_tells_requests_apart() {
    let base = fingerprint("POST", "/pay", b"{\"amount\":1}");
    assert_eq!(base, fingerprint("POST", "/pay", b"{\"amount\":1}"));
    assert_ne!(base, fingerprint("POST", "/pay", b"{\"amount\":2}"), "body");
    assert_ne!(
        base,
        fingerprint("PUT", "/pay", b"{\"amount\":1}"),
        "method"
    );
    assert_ne!(
        base,
        fingerprint("POST", "/pay?x", b"{\"amount\":1}"),
        "query"
    );
    assert_ne!(
        base,
        fingerprint("POST", "/refund", b"{\"amount\":1}"),
        "path"
    );
    // Parts cannot slide into each other.
    assert_ne!(
        fingerprint("POST", "/a", b""),
        fingerprint("POST/", "a", b"")
    );
}

#[test]
fn store_keys_are_scoped_and_unambiguous() {
    let s = b"0123456789abcdef";
    assert_eq!(store_key(s, None, "k"), "-:k");
    assert_eq!(
        store_key(s, Some("".as_bytes()), "k"),
        "-:k",
        "an empty identity is no identity"
    );
    let alice = store_key(s, Some("alice".as_bytes()), "k");
    let bob = store_key(s, Some("bob".as_bytes()), "k");
    assert_ne!(alice, bob);
    assert_ne!(alice, store_key(s, None, "k"));
    // HMAC-SHA-256 (RFC 4231 test case 2: key "Jefe").
    assert_eq!(
        store_key(
            b"Jefe",
            Some("what do ya want for nothing?".as_bytes()),
            "k"
        ),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843:k"
    );
    assert!(
        !alice.contains("alice"),
        "the identity is not stored in clear"
    );
    assert_ne!(
        alice,
        format!("{}:k", sha256_hex(b"alice")),
        "not a plain hash a dictionary can invert"
    );
    assert_ne!(
        alice,
        store_key(b"another secret!!", Some("alice".as_bytes()), "k"),
        "the secret keys the hash"
    );
    // identity "a:b" + key "c" vs identity "a" + key "b:c"
    assert_ne!(
        store_key(s, Some("a:b".as_bytes()), "c"),
        store_key(s, Some("a".as_bytes()), "b:c")
    );
    // An anonymous key that looks like a scoped one still differs (prefix `-:`).
    assert_ne!(store_key(s, None, &alice), alice);
    assert!(secret("0123456789abcde").is_err() && secret("0123456789abcdef").is_ok());
}

#[test]
fn credentials_recognised_by_default() {
    let with = |name: &'static str, value: &'static str| {
        default_identity(move |h| (h == name).then(|| value.to_string()))
    };
    for header in CREDENTIAL_HEADERS {
        assert_eq!(
            with(header, "alice"),
            Some(format!("{header}:alice")),
            "{header}"
        );
        assert_ne!(with(header, "alice"), with(header, "bob"));
    }
    for cookie in [
        "token=a",
        "jwt=a",
        "access_token=a",
        "sb-abcd-auth-token=a",
        "sb-abcd-auth-token.0=a",
        ".AspNetCore.Cookies=a",
        ".AspNetCore.Session=a",
        "koa.sess=a",
        "authjs.session-token=a",
        "__Secure-next-auth.session-token=a",
    ] {
        assert_eq!(
            id(None, Some(&format!("_ga=1; {cookie}"))),
            Some(format!("cookie:{cookie}")),
            "{cookie}"
        );
    }
    assert_eq!(id(None, Some("theme=dark; _ga=GA1; csrftoken=x")), None);
    // A header credential wins over a cookie.
    assert_eq!(
        default_identity(|h| match h {
            "x-api-key" => Some("k".into()),
            "cookie" => Some("sid=1".into()),
            _ => None,
        }),
        Some("x-api-key:k".into())
    );
}

#[test]
fn endings() {
    assert_eq!(ending(201, false, false, false, true, false), Ending::Store);
    assert_eq!(
        ending(500, false, false, false, true, false),
        Ending::Store,
        "a 500 may follow an effect"
    );
    assert_eq!(
        ending(500, false, true, false, true, false),
        Ending::Store,
        "tx not used: nothing rolled back"
    );
    assert_eq!(
        ending(500, false, true, true, true, false),
        Ending::Free,
        "tx used: rolled back"
    );
    assert_eq!(ending(502, false, true, true, true, false), Ending::Store);
    assert_eq!(ending(503, true, false, false, true, false), Ending::Free);
    assert_eq!(
        ending(201, false, true, true, false, false),
        Ending::Free,
        "never commit an effect without its answer"
    );
    assert_eq!(
        ending(201, false, false, false, false, false),
        Ending::Store,
        "the too-large problem is stored"
    );
    // After the companion aborted the handler (handlerTimeoutMs): a failure is the abort's.
    for status in [500, 502, 503, 504] {
        for (tx, used) in [(false, false), (true, false), (true, true)] {
            assert_eq!(
                ending(status, false, tx, used, true, true),
                Ending::Stopped,
                "{status} after the companion's abort"
            );
        }
    }
    assert_eq!(ending(503, true, false, false, true, true), Ending::Stopped);
    assert_eq!(
        ending(201, false, true, true, true, true),
        Ending::Store,
        "an answer the handler still gave is its own"
    );
    assert_eq!(ending(429, false, false, false, true, true), Ending::Free);
    assert_eq!(ending(201, false, true, true, false, true), Ending::Free);
    assert!(
        !stores_header("Connection", None)
            && !stores_header("transfer-encoding", None)
            && !stores_header("Set-Cookie2", None)
    );
    assert!(stores_header("content-type", None) && stores_header("location", Some("keep-alive")));
    assert!(!stores_header("X-Hop", Some("x-hop")) && !stores_header("a", Some(" b ,a")));
}

#[test]
fn state_machine() {
    let fp = "f1";
    let now = 10_000.0;
    assert_eq!(claim_action(Record::Absent, fp, now), Action::Process);
    assert_eq!(
        claim_action(Record::Completed { fingerprint: fp }, fp, now),
        Action::Replay
    );
    assert_eq!(
        claim_action(Record::Completed { fingerprint: "f2" }, fp, now),
        Action::Mismatch
    );
    let live = |f| Record::InProgress {
        fingerprint: f,
        lock_expires_at_ms: now + 1.0,
    };
    assert_eq!(claim_action(live(fp), fp, now), Action::InProgress);
    assert_eq!(claim_action(live("f2"), fp, now), Action::Mismatch);
    let dead = |f| Record::InProgress {
        fingerprint: f,
        lock_expires_at_ms: now,
    };
    assert_eq!(
        claim_action(dead(fp), fp, now),
        Action::LockExpired,
        "expiry is inclusive"
    );
    assert_eq!(claim_action(dead("f2"), fp, now), Action::LockExpired);
    // A lock with a nonsense expiry never blocks forever.
    let nan = Record::InProgress {
        fingerprint: fp,
        lock_expires_at_ms: f64::NAN,
    };
    assert_eq!(claim_action(nan, fp, now), Action::LockExpired);
}

#[test]
fn action_names() {
    let all = [
        Action::Process,
        Action::Replay,
        Action::Mismatch,
        Action::InProgress,
        Action::LockExpired,
    ];
    let names: Vec<_> = all.iter().map(|a| a.name()).collect();
    assert_eq!(
        names,
        [
            "process",
            "replay",
            "mismatch",
            "in-progress",
            "lock-expired"
        ]
    );
}

#[test]
fn option_defaults() {
    let o = ServerOptions::default();
    assert_eq!(o.header, "Idempotency-Key");
    assert_eq!(o.ttl_ms, 86_400_000.0);
    assert_eq!(o.lock_timeout_ms, 60_000.0);
    assert_eq!(o.concurrent, Concurrent::Wait);
    assert_eq!(o.effective_wait_timeout_ms(), 60_000.0);
    assert_eq!(
        ServerOptions {
            wait_timeout_ms: Some(5.0),
            ..o.clone()
        }
        .effective_wait_timeout_ms(),
        5.0
    );
    assert_eq!(o.poll_ms, 25.0);
    assert_eq!(o.store_timeout_ms, 5_000.0);
    assert_eq!(o.max_body_bytes, 1_048_576.0);
    assert_eq!(o.renew_interval_ms(), 20_000.0);
    assert_eq!(
        ServerOptions {
            lock_timeout_ms: 2.0,
            ..o.clone()
        }
        .renew_interval_ms(),
        1.0
    );
    assert_eq!(o.handler_timeout_ms, None);
}

#[test]
fn a_holder_waits_for_the_history_a_renewal_interval_at_most_a_second() {
    let with_lock = |ms: f64| ServerOptions {
        lock_timeout_ms: ms,
        ..ServerOptions::default()
    };
    assert_eq!(with_lock(60_000.0).history_wait_ms(), 1000.0);
    assert_eq!(with_lock(3000.0).history_wait_ms(), 1000.0);
    assert_eq!(with_lock(1500.0).history_wait_ms(), 500.0);
    assert_eq!(with_lock(2.0).history_wait_ms(), 1.0);
}

#[test]
fn not_processed_answers_are_not_stored() {
    for status in [408, 425, 429] {
        assert!(!stores_answer(status, false), "{status}");
        assert!(!stores_answer(status, true), "{status} with Retry-After");
    }
    assert!(!stores_answer(503, true));
    for status in [200, 201, 204, 400, 404, 409, 422, 500, 502, 503, 504] {
        assert!(stores_answer(status, false), "{status}");
    }
}

#[test]
fn default_scope_from_credentials() {
    assert_eq!(id(Some("  "), None), None, "a blank Authorization is none");
    assert_eq!(id(Some(""), Some("sid=1")), Some("cookie:sid=1".into()));
    assert_eq!(
        id(None, Some("__Host-session=x; a=b")),
        Some("cookie:__Host-session=x".into())
    );
    assert_eq!(
        id(None, Some("connect.sid=s%3Aabc")),
        Some("cookie:connect.sid=s%3Aabc".into())
    );
    assert_eq!(
        id(None, Some("JSESSIONID=9")),
        Some("cookie:JSESSIONID=9".into())
    );
    assert_eq!(
        id(None, Some("my_app_session=9")),
        Some("cookie:my_app_session=9".into())
    );
    assert_eq!(
        id(None, Some("sid=")),
        None,
        "an empty session cookie is none"
    );
    assert_eq!(id(None, Some("garbage")), None);
    // A known name wins over a suffix match that comes first.
    assert_eq!(
        id(None, Some("rl_session=1; connect.sid=s")),
        Some("cookie:connect.sid=s".into())
    );
    assert_eq!(
        id(None, Some("a_session=1; b_session=2")),
        Some("cookie:a_session=1".into())
    );
    // Other cookies changing between a request and its retry do not change the scope.
    assert_eq!(
        id(None, Some("_ga=1; sid=a")),
        id(None, Some("sid=a; _ga=2"))
    );
    // Authorization and cookie identities cannot collide.
    assert_ne!(id(Some("sid=a"), None), id(None, Some("sid=a")));
}

#[test]
fn derived_keys_are_stable_uuids() {
    let k = derived_key("-:k1", b"charge");
    assert_eq!(k, derived_key("-:k1", b"charge"));
    assert!(k
        .bytes()
        .enumerate()
        .all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) {
            c == b'-'
        } else {
            c.is_ascii_hexdigit() && !c.is_ascii_uppercase()
        }));
    assert!(matches!(&k[19..20], "8" | "9" | "a" | "b"));
    assert_ne!(derived_key("-:k1", b"a"), derived_key("-:k1", b"b"));
    assert_ne!(
        derived_key(&key_for_base(Some("alice".as_bytes()), "k1"), b"a"),
        derived_key(&key_for_base(Some("bob".as_bytes()), "k1"), b"a")
    );
    // The NUL separator: ("-:k1", "2x") and ("-:k12", "x") differ.
    assert_ne!(derived_key("-:k1", b"2x"), derived_key("-:k12", b"x"));
}

#[test]
fn derived_keys_do_not_depend_on_the_secret() {
    // The base is made of the identity and the key alone: two stores with different secrets
    // (a restart with a new MemoryStore, a RedisStore that lost its secret) give one base,
    // though their store keys differ.
    let base = key_for_base(Some("authorization:Bearer t1".as_bytes()), "k1");
    assert_ne!(
        store_key(
            b"secret of one process",
            Some("authorization:Bearer t1".as_bytes()),
            "k1"
        ),
        store_key(
            b"secret of the next one",
            Some("authorization:Bearer t1".as_bytes()),
            "k1"
        )
    );
    assert_eq!(
        base,
        format!(
            "{}:k1",
            sha256_hex(b"retry-fetch keyFor scope\0authorization:Bearer t1")
        )
    );
    // The identity is hashed, never part of the base in clear.
    assert!(!base.contains("Bearer"));
    // Scopes stay apart: another identity, no identity, an empty one (none).
    assert_ne!(
        base,
        key_for_base(Some("authorization:Bearer t2".as_bytes()), "k1")
    );
    assert_ne!(base, key_for_base(None, "k1"));
    assert_eq!(
        key_for_base(Some("".as_bytes()), "k1"),
        key_for_base(None, "k1")
    );
    assert_eq!(key_for_base(None, "k1"), store_key(b"any", None, "k1"));
    // An unscoped base is never a scoped one, whatever the key.
    assert_ne!(key_for_base(None, &base), base);
}

#[test]
fn held_keys_wait() {
    assert_eq!(
        claim_action(Record::Held, "f", f64::NAN),
        Action::InProgress
    );
}

#[test]
fn keys_held_for_another_fingerprint_are_mismatches() {
    // At once, whatever the time: nothing about the holder's lock is known, nor needed.
    for now in [0.0, 1e15, f64::NAN] {
        assert_eq!(
            claim_action(Record::HeldForOther, "f", now),
            Action::Mismatch
        );
    }
}

#[test]
fn option_names_are_closest_matches() {
    use crate::core::options::closest_name;
    assert_eq!(
        closest_name("lockTimeout", &SERVER_OPTION_NAMES),
        Some("lockTimeoutMs")
    );
    assert_eq!(
        closest_name("maxBodySize", &SERVER_OPTION_NAMES),
        Some("maxBodyBytes")
    );
    assert_eq!(closest_name("ttl", &JOB_OPTION_NAMES), Some("ttlMs"));
    assert!(
        max_body_bytes(0.0).is_ok()
            && max_body_bytes(-1.0).is_err()
            && max_body_bytes(1.5).is_err()
    );
}

#[test]
fn option_validation() {
    assert_eq!(ttl_ms(1.0), Ok(1.0));
    assert_eq!(ttl_ms(MAX_TTL_MS), Ok(MAX_TTL_MS));
    for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY, MAX_TTL_MS + 1.0] {
        assert_eq!(ttl_ms(bad).map_err(|e| e.option), Err("ttlMs"), "{bad}");
    }
    assert_eq!(lock_timeout_ms(60_000.0), Ok(60_000.0));
    assert_eq!(lock_timeout_ms(1_000.0), Ok(1_000.0));
    assert!(
        lock_timeout_ms(999.0).is_err(),
        "a lock shorter than a second lapses under a live holder"
    );
    assert!(lock_timeout_ms(1.0).is_err());
    assert!(lock_timeout_ms(0.0).is_err());
    assert_eq!(handler_timeout_ms(1.0), Ok(1.0));
    assert!(handler_timeout_ms(0.0).is_err());
    assert_eq!(ignored_method("get"), Ok("GET".into()));
    assert!(ignored_method("G ET").is_err() && ignored_method("").is_err());
    let o = ServerOptions::default();
    assert!(
        o.ignores_key("GET")
            && o.ignores_key("head")
            && o.ignores_key("OPTIONS")
            && !o.ignores_key("POST")
    );
    assert!(lock_timeout_ms(MAX_TIMER_MS + 1.0).is_err());
    assert_eq!(wait_timeout_ms(0.0), Ok(0.0));
    assert_eq!(
        wait_timeout_ms(-1.0).map_err(|e| e.option),
        Err("waitTimeoutMs")
    );
    assert_eq!(poll_ms(1.0), Ok(1.0));
    assert_eq!(poll_ms(0.0).map_err(|e| e.option), Err("pollMs"));
    assert_eq!(store_timeout_ms(1.0), Ok(1.0));
    assert_eq!(store_timeout_ms(MAX_TIMER_MS), Ok(MAX_TIMER_MS));
    for bad in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY, MAX_TIMER_MS + 1.0] {
        assert_eq!(
            store_timeout_ms(bad).map_err(|e| e.option),
            Err("storeTimeoutMs"),
            "{bad}"
        );
    }
    assert_eq!(header("Idempotency-Key"), Ok("Idempotency-Key".into()));
    assert_eq!(header("X-Request-Id"), Ok("X-Request-Id".into()));
    for bad in ["", "Bad Header", "a:b", "caf\u{e9}"] {
        assert_eq!(header(bad).map_err(|e| e.option), Err("header"), "{bad}");
    }
    assert_eq!(concurrent("wait"), Ok(Concurrent::Wait));
    assert_eq!(concurrent("reject"), Ok(Concurrent::Reject));
    assert_eq!(
        concurrent("Reject").map_err(|e| e.expected),
        Err(CONCURRENT_EXPECTED)
    );
    assert_eq!(Concurrent::Reject.name(), "reject");
}

#[test]
fn required_by_default() {
    for m in ["POST", "PATCH", "post", "patch"] {
        assert!(key_required_by_default(m), "{m}");
    }
    for m in ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "PURGE"] {
        assert!(!key_required_by_default(m), "{m}");
    }
}

mod properties {
    use super::super::*;
    use super::id;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        /// `keyFor` always gives a lower-case UUID (version 8, RFC variant), the same one
        /// for the same inputs.
        #[test]
        fn derived_keys_are_uuids(store_key in ".{0,300}", name in ".{1,50}") {
            let k = derived_key(&store_key, name.as_bytes());
            prop_assert_eq!(k.len(), 36);
            prop_assert_eq!(&k[14..15], "8");
            prop_assert!(matches!(&k[19..20], "8" | "9" | "a" | "b"));
            let shaped = k.bytes().enumerate().all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { c == b'-' } else { c.is_ascii_digit() || (b'a'..=b'f').contains(&c) });
            prop_assert!(shaped);
            prop_assert_eq!(k.clone(), derived_key(&store_key, name.as_bytes()));
            // A derived key is itself a valid idempotency key for the next service down.
            prop_assert!(validate_key(&k).is_ok());
        }

        /// Whatever a header holds, an accepted key is 1 to 255 visible ASCII characters.
        #[test]
        fn accepted_keys_are_valid(value in ".{0,300}") {
            if let Ok(key) = parse_key(&value) {
                prop_assert!(!key.is_empty() && key.len() <= MAX_KEY_LEN);
                prop_assert!(key.bytes().all(|b| (0x21..=0x7e).contains(&b)));
            }
        }

        /// A plain key (drawn mostly from the valid space, lengths around the bound, with an
        /// occasional space or non-ASCII character) is accepted, as itself, exactly when it is
        /// 1 to 255 visible ASCII characters (once the spaces around it are trimmed).
        #[test]
        fn plain_keys_are_accepted_iff_valid(key in "[!#-~]{0,260}|[!#-~]{250,260}|[!#-~]{0,20}[ \u{e9}\u{7f}][!#-~]{0,20}") {
            // Spaces and tabs around the value are not part of it.
            let trimmed = key.trim_matches([' ', '\t']);
            let valid = !trimmed.is_empty()
                && trimmed.len() <= MAX_KEY_LEN
                && trimmed.bytes().all(|b| (0x21..=0x7e).contains(&b));
            prop_assert_eq!(parse_key(&key).ok(), valid.then(|| trimmed.to_string()));
        }

        /// A key sent as an RFC 8941 sf-string (quotes and backslashes escaped) reads back as
        /// the key, accepted exactly when the key itself is valid.
        #[test]
        fn sf_string_keys_are_accepted_iff_valid(key in "[ -~]{0,260}|[!-~]{250,260}") {
            let encoded = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
            let valid = validate_key(&key).is_ok();
            prop_assert_eq!(parse_key(&encoded).ok(), valid.then(|| key.clone()));
        }

        /// Cookies other than the session's never change the default scope.
        #[test]
        fn other_cookies_do_not_change_the_scope(session in "[a-zA-Z0-9]{1,20}", other in "[a-z_]{1,8}", value in "[a-zA-Z0-9]{0,20}") {
            prop_assume!(!is_session_cookie(&other));
            let alone = id(None, Some(&format!("sid={session}")));
            let with = id(None, Some(&format!("{other}={value}; sid={session}")));
            prop_assert_eq!(alone, with);
        }

        /// A lock is waited for while live, taken over once expired; a held key is always waited for.
        #[test]
        fn locks_expire_exactly(exp in 0u32..64, now in 0u32..64) {
            // Times from a small integer range, so that `now == exp` (the boundary) is drawn.
            let (exp, now) = (f64::from(exp), f64::from(now));
            let lock = Record::InProgress { fingerprint: "f", lock_expires_at_ms: exp };
            let action = claim_action(lock, "f", now);
            prop_assert_eq!(action, if now >= exp { Action::LockExpired } else { Action::InProgress });
            prop_assert_eq!(claim_action(Record::Held, "g", now), Action::InProgress);
            prop_assert_eq!(claim_action(Record::HeldForOther, "g", now), Action::Mismatch);
        }
    }

    proptest! {
        /// A number of at most 15 significant digits (within the exponent bound) reads back
        /// exactly; one of 17 distinct digits does not.
        #[test]
        fn json_numbers_exact_by_digits(mantissa in 1u64..999_999_999_999_999, exp in -275i32..275, neg: bool) {
            let text = format!("{{\"a\": {}{}e{}}}", if neg { "-" } else { "" }, mantissa, exp);
            prop_assert!(json_numbers_exact(text.as_bytes()), "{}", text);
            let long = format!("[{}{}]", mantissa, 12_345_678_901_234_567u64 % 99 + 10_000_000_000_000_000);
            prop_assert!(!json_numbers_exact(long.as_bytes()), "{}", long);
        }
    }
}

#[test]
fn json_numbers_exact_skips_strings_with_escapes() {
    assert!(json_numbers_exact(
        br#"{"a": "x\"12345678901234567891\\", "b": 1}"#
    ));
    assert!(!json_numbers_exact(
        br#"{"a": "x\"", "b": 12345678901234567891}"#
    ));
    assert!(json_numbers_exact(b""));
    assert!(json_numbers_exact(b"[-0, 0.0, 0e999]"));
    // Exponents whose absolute value does not fit in an i64 (`i64::MIN`'s) or overflows:
    // not exact, and no overflow (a debug build would panic).
    assert!(!json_numbers_exact(b"[1e-9223372036854775808]"));
    assert!(!json_numbers_exact(b"[0.001e-9223372036854775808]"));
    assert!(!json_numbers_exact(b"[1e9223372036854775807]"));
    assert!(!json_numbers_exact(b"[1e99999999999999999999]"));
}
