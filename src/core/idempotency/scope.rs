//! What a key is stored under: the request fingerprint (method, path and query, SHA-256 of
//! the body), the store key (an HMAC of the caller's identity, keyed with the secret, and the
//! key), the secret's rule, and the keys a handler derives for its downstream calls (from the
//! key and the identity, not the secret).

use sha2::{Digest, Sha256};

use crate::core::key::hex;
use crate::core::options::OptionError;

/// SHA-256 of `bytes`, as 64 lower-case hex digits.
///
/// ```
/// use retry_fetch::core::idempotency::sha256_hex;
/// assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
/// ```
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The request fingerprint: what must be the same for a repeat to count as the same request
/// (the IETF draft: "a different request payload" with the same key is a 422).
///
/// It is the SHA-256, as 64 hex digits, of `method`, a NUL, `path_and_query` (the URL's path
/// and query, e.g. `/payments?currency=EUR`; not the host, so every instance behind a load
/// balancer computes the same value), a NUL and the SHA-256 of the body bytes. Neither the
/// method (an HTTP token) nor an URL path contains a NUL, so the parts cannot run into each
/// other. Headers are not part of it: a retry may legitimately differ in e.g.
/// `X-Retry-Count`.
pub fn fingerprint(method: &str, path_and_query: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(path_and_query.as_bytes());
    h.update([0]);
    h.update(Sha256::digest(body));
    hex(&h.finalize())
}

/// Whether a body of this `Content-Type` is fingerprinted as its canonical JSON (its value's
/// JSON with object keys sorted at every level) rather than its bytes: `application/json` or
/// any `+json` type, parameters and case aside. So a request is the same request whether the
/// companion read its bytes or a framework's JSON parser read them first (the Express and
/// Fastify adapters get only the parsed value): instances of a fleet that mount the companion
/// differently, behind one store, agree; and so do two encodings of one JSON value (key order,
/// spacing). A body that is not valid UTF-8 JSON is fingerprinted as its bytes.
///
/// ```
/// use retry_fetch::core::idempotency::fingerprints_json;
/// assert!(fingerprints_json("application/json"));
/// assert!(fingerprints_json("Application/JSON; charset=utf-8"));
/// assert!(fingerprints_json("application/merge-patch+json"));
/// assert!(!fingerprints_json("text/plain"));
/// assert!(!fingerprints_json("application/x-www-form-urlencoded"));
/// assert!(!fingerprints_json("application/jsonp"));
/// ```
pub fn fingerprints_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let Some((kind, sub)) = essence.split_once('/') else {
        return false;
    };
    let sub = sub.to_ascii_lowercase();
    kind.eq_ignore_ascii_case("application") && (sub == "json" || sub.ends_with("+json"))
}

/// The most significant digits a JSON number may have for its body to be fingerprinted as
/// canonical JSON: 15 (a double's decimal precision), so that two numbers that differ in the
/// text differ as doubles too (`12345678901234567891` and `...892` do not, as JSON.parse
/// reads them).
pub const EXACT_DIGITS: usize = 15;

/// The largest decimal exponent of a JSON number's leading digit for its body to be
/// fingerprinted as canonical JSON: far from a double's overflow (`1e400` reads as Infinity,
/// which JSON writes as `null`) and its subnormals.
pub const EXACT_EXPONENT: i64 = 290;

/// Whether every number in the JSON text `text` reads as a double without losing anything that
/// tells it from another number (at most [`EXACT_DIGITS`] significant digits, a leading digit's
/// exponent within ±[`EXACT_EXPONENT`]): then its canonical JSON (which writes each number
/// as the double JSON.parse reads) tells two bodies apart exactly when their numbers differ.
/// Otherwise the body is fingerprinted as its bytes: two bodies whose 64-bit ids differ past
/// a double's precision are two requests. Strings are skipped; the text's validity is
/// JSON.parse's to judge.
///
/// ```
/// use retry_fetch::core::idempotency::json_numbers_exact;
/// assert!(json_numbers_exact(br#"{"amount": 4200, "rate": 0.125, "big": 1.5e20, "n": -0}"#));
/// assert!(json_numbers_exact(br#"{"id": "12345678901234567891"}"#)); // a string
/// assert!(!json_numbers_exact(br#"{"id": 12345678901234567891}"#));
/// assert!(!json_numbers_exact(b"[0.1000000000000000055511151231257827]"));
/// assert!(!json_numbers_exact(b"[1e400]"));
/// assert!(json_numbers_exact(b"[1.50000000000000000000, 100e-2]")); // zeros say nothing
/// ```
pub fn json_numbers_exact(text: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        match b {
            b'"' => {
                // Skip the string, its escapes included.
                i += 1;
                while let Some(&c) = text.get(i) {
                    i += if c == b'\\' { 2 } else { 1 };
                    if c == b'"' {
                        break;
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while text
                    .get(i)
                    .is_some_and(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                {
                    i += 1;
                }
                if !number_exact(text.get(start..i).unwrap_or_default()) {
                    return false;
                }
            }
            _ => i += 1,
        }
    }
    true
}

/// [`json_numbers_exact`] of one number's text (`-12.5e3`).
fn number_exact(number: &[u8]) -> bool {
    let (mantissa, exponent) = match number.iter().position(|c| matches!(c, b'e' | b'E')) {
        Some(at) => (
            number.get(..at).unwrap_or_default(),
            number.get(at + 1..).unwrap_or_default(),
        ),
        None => (number, &b""[..]),
    };
    let exponent: i64 = match std::str::from_utf8(exponent)
        .ok()
        .map(|e| e.trim_start_matches('+'))
    {
        Some("") => 0,
        Some(e) => match e.parse::<i64>() {
            // `unsigned_abs`: `i64::MIN` has no `abs` (it would wrap to itself, and pass).
            Ok(e) if e.unsigned_abs() < 100_000 => e,
            _ => return false,
        },
        None => return false,
    };
    let mantissa = mantissa.strip_prefix(b"-").unwrap_or(mantissa);
    let point = mantissa
        .iter()
        .position(|&c| c == b'.')
        .unwrap_or(mantissa.len());
    let digits: Vec<u8> = mantissa
        .iter()
        .copied()
        .filter(u8::is_ascii_digit)
        .collect();
    let Some(first) = digits.iter().position(|&d| d != b'0') else {
        return true; // zero
    };
    let last = digits.iter().rposition(|&d| d != b'0').unwrap_or(first);
    // The leading digit's decimal exponent: its place from the point, plus the exponent.
    let lead = point as i64 - 1 - first as i64 + exponent;
    last - first < EXACT_DIGITS && lead.abs() <= EXACT_EXPONENT
}

/// The key under which a request's record is stored: the idempotency key scoped by the
/// caller's identity (the IETF draft's composite key; a unique `(idempotency_key, user_id)`
/// pair), so two users who happen to send the same key never see each other's responses.
///
/// - with an identity: the HMAC-SHA-256 of the identity keyed with `secret` (64 hex digits),
///   `:`, the key. A keyed hash, so that what the store holds cannot be turned back into the
///   credential (an API token, a Basic-auth password) by hashing guesses: without the secret a
///   dictionary gets nowhere. Every instance that shares the store must use the same secret
///   (the store keeps one, or the `secret` option gives it);
/// - without one (`None` or an empty string): `-:` and the key (no secret needed).
///
/// A hex digest never contains `-`, so the two forms cannot collide.
///
/// ```
/// use retry_fetch::core::idempotency::store_key;
/// assert_eq!(store_key(b"s", None, "k1"), "-:k1");
/// let alice = store_key(b"secret-1", Some("alice".as_bytes()), "k1");
/// assert_eq!(alice.len(), 64 + 3);
/// assert_ne!(alice, store_key(b"secret-2", Some("alice".as_bytes()), "k1"));
/// ```
pub fn store_key(secret: &[u8], identity: Option<&[u8]>, key: &str) -> String {
    match identity {
        Some(id) if !id.is_empty() => {
            use hmac::{Mac, SimpleHmac};
            // HMAC accepts a key of any length: new_from_slice cannot fail.
            let mut out = match SimpleHmac::<Sha256>::new_from_slice(secret) {
                Ok(mut mac) => {
                    mac.update(id);
                    hex(&mac.finalize().into_bytes())
                }
                Err(_) => sha256_hex(id),
            };
            out.push(':');
            out.push_str(key);
            out
        }
        _ => {
            let mut out = String::with_capacity(key.len() + 2);
            out.push_str("-:");
            out.push_str(key);
            out
        }
    }
}

/// The shortest `secret` accepted, in characters.
pub const MIN_SECRET_LEN: usize = 16;

/// The rule for a secret, which the messages below share.
macro_rules! secret_rule {
    () => {
        "a string of at least 16 characters that every instance sharing the store uses"
    };
}

/// What `secret` (and what a store's `secret()` returns) must be.
pub const SECRET_EXPECTED: &str = concat!(
    secret_rule!(),
    " (e.g. 64 random hex digits from your secret manager)"
);

/// What `secret` must be when the store keeps none (it has no `secret()`).
pub const SECRET_MISSING_EXPECTED: &str =
    concat!(secret_rule!(), ": this store has no secret() to keep one");

/// `secret`: the key of the HMAC that scopes store keys ([`store_key`]); at least
/// [`MIN_SECRET_LEN`] characters.
pub fn secret(v: &str) -> Result<&str, OptionError> {
    if v.chars().count() >= MIN_SECRET_LEN {
        Ok(v)
    } else {
        Err(OptionError::new("secret", SECRET_EXPECTED))
    }
}

/// What `idempotent()`'s `scope` must be.
pub const SCOPE_EXPECTED: &str = "a non-empty string (e.g. the queue's or the tenant's name)";

/// `idempotent()`'s `scope`: a non-empty string. Scopes are compared as given, so `''` would
/// scope nothing: its jobs would share their keys with those of no scope ([`store_key`] takes an
/// empty identity for none). It is refused rather than taken silently for no scope.
///
/// ```
/// use retry_fetch::core::idempotency::scope;
/// assert_eq!(scope("shipments"), Ok("shipments"));
/// assert!(scope("").is_err());
/// ```
pub fn scope(v: &str) -> Result<&str, OptionError> {
    if v.is_empty() {
        Err(OptionError::new("scope", SCOPE_EXPECTED))
    } else {
        Ok(v)
    }
}

/// What a request's downstream keys ([`derived_key`]) are derived from: its idempotency key
/// and its scope, and nothing of the store, so that every instance, and the same one after a
/// restart, derives the same keys whatever secret its store holds (a `MemoryStore`'s is new
/// in every process; a `RedisStore` that lost its own makes another).
///
/// - with an identity: the SHA-256 of a domain-separation prefix and the identity (64 hex
///   digits: the identity itself is never part of a derived key, which is sent to other
///   services), `:`, the key;
/// - without one (`None` or an empty string): `-:` and the key, as its [`store_key`].
///
/// Different identities give different bases; a hex digest never contains `-`, so a scoped
/// base cannot be an unscoped one.
///
/// ```
/// use retry_fetch::core::idempotency::key_for_base;
/// assert_eq!(key_for_base(None, "k1"), "-:k1");
/// let alice = key_for_base(Some("alice".as_bytes()), "k1");
/// assert_eq!(alice.len(), 64 + 3);
/// assert_ne!(alice, key_for_base(Some("bob".as_bytes()), "k1"));
/// ```
pub fn key_for_base(identity: Option<&[u8]>, key: &str) -> String {
    match identity {
        Some(id) if !id.is_empty() => {
            let mut h = Sha256::new();
            h.update(b"retry-fetch keyFor scope\0");
            h.update(id);
            let mut out = hex(&h.finalize());
            out.push(':');
            out.push_str(key);
            out
        }
        _ => store_key(&[], None, key),
    }
}

/// A key for one downstream call, derived from the request's [`key_for_base`] (its key and
/// scope) and a name of the caller's choice (`ctx.keyFor('charge')`): the same inputs give the
/// same key on every retry and every instance, different names or scopes give different keys.
/// It is a UUID (version 8, RFC 9562) made of the SHA-256 of a domain-separation prefix,
/// `base`, a NUL and `name`, so any API that takes UUID keys (Stripe takes up to 255
/// characters) takes it.
///
/// ```
/// use retry_fetch::core::idempotency::derived_key;
/// let a = derived_key("-:k1", b"charge");
/// assert_eq!(a.len(), 36);
/// assert_eq!(a, derived_key("-:k1", b"charge"));
/// assert_ne!(a, derived_key("-:k1", b"refund"));
/// assert_ne!(a, derived_key("-:k2", b"charge"));
/// assert_eq!(&a[14..15], "8");
/// ```
pub fn derived_key(base: &str, name: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"retry-fetch keyFor\0");
    h.update(base.as_bytes());
    h.update([0]);
    h.update(name);
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    crate::core::key::uuid(bytes, 8)
}
