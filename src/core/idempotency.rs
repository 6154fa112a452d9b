//! The server side of idempotency keys (the IETF `Idempotency-Key` header draft: a repeat
//! gets the stored answer, a concurrent duplicate waits on a lock, keys are unique per caller): reading the key, the request fingerprint, the store key
//! scoped by the caller's identity, the options of `idempotency(handler, options)`, and the
//! per-request state machine.
//!
//! Everything here is pure: the shell (`src/wasm/server/`, behind the `server` cargo
//! feature) and `js/server.js` bring the clock, the store and the handler.
//!
//! The scheme, for a request that carries a key:
//!
//! 1. parse the header ([`parse_key`]): plain, or an RFC 8941 sf-string (`"abc"`); an invalid
//!    key is a 400;
//! 2. compute the [`fingerprint`] (method, path and query, SHA-256 of the body) and the
//!    [`store_key`] (a keyed hash of the identity + key);
//! 3. take the lock atomically in the store (`SET key lock NX PX lockTimeoutMs` in Redis); on
//!    success run the handler, store its response as completed, release the lock;
//! 4. when the store already holds a record, [`decide`] what to do with it: replay it, answer
//!    422 (another payload), wait or answer 409 (still running), or take over a lock whose
//!    holder died.

use sha2::{Digest, Sha256};

use super::options::OptionError;

/// The longest key accepted, in characters (the client's limit too).
pub const MAX_KEY_LEN: usize = 255;

/// Default header that carries the key: `Idempotency-Key` (the IETF draft's, and Stripe's).
pub const DEFAULT_HEADER: &str = "Idempotency-Key";

/// Default time a completed response is kept: 24 hours (what Stripe keeps).
pub const DEFAULT_TTL_MS: f64 = 86_400_000.0;

/// Default lifetime of a lock: 60 s. A lock whose holder died (crash, hang) stops counting
/// after this, and the next request with the key runs the handler.
pub const DEFAULT_LOCK_TIMEOUT_MS: f64 = 60_000.0;

/// Default interval at which a waiting request polls the store: 25 ms.
pub const DEFAULT_POLL_MS: f64 = 25.0;

/// Default `maxBodyBytes`: 1 MiB. The body is read (to fingerprint it) before the handler
/// runs, so the limit bounds the memory one request can take.
pub const DEFAULT_MAX_BODY_BYTES: f64 = 1_048_576.0;

/// The longest `ttlMs` accepted: 365 days.
pub const MAX_TTL_MS: f64 = 31_536_000_000.0;

/// The longest lock, wait and poll interval accepted: 2^31 - 1 ms (what `setTimeout` takes).
pub const MAX_TIMER_MS: f64 = 2_147_483_647.0;

/// Why a key header value was refused (the request is answered 400).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The value is empty (or only whitespace), or an empty sf-string `""`.
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] characters.
    TooLong,
    /// The key has a character outside visible ASCII (`!` to `~`): a space, a control
    /// character, a non-ASCII character, or several keys joined by `", "`.
    NotVisibleAscii,
    /// The value starts with `"` but is not one RFC 8941 string: no closing quote, a
    /// backslash not followed by `"` or `\`, or something after the closing quote.
    BadSfString,
}

impl KeyError {
    /// A sentence for the `detail` of the 400 problem answer.
    pub fn message(self) -> &'static str {
        match self {
            KeyError::Empty => "the idempotency key is empty",
            KeyError::TooLong => "the idempotency key is longer than 255 characters",
            KeyError::NotVisibleAscii => {
                "the idempotency key must be visible ASCII characters only (no spaces, no commas between several keys)"
            }
            KeyError::BadSfString => {
                "the idempotency key starts with '\"' but is not a valid structured-field string (RFC 8941: one quoted string, only \\\" and \\\\ escapes)"
            }
        }
    }
}

/// Is `key` acceptable: 1 to 255 visible ASCII characters (`!` to `~`)?
///
/// This is what the client sends (its `idempotencyKey` option has the same rule).
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        Err(KeyError::Empty)
    } else if !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        Err(KeyError::NotVisibleAscii)
    } else if key.len() > MAX_KEY_LEN {
        Err(KeyError::TooLong)
    } else {
        Ok(())
    }
}

/// Read the key from a header value, in plain form (`abc`) or in the IETF draft's
/// structured-field string form (`"abc"`, RFC 8941 §3.3.3, with `\"` and `\\` escapes), then
/// [`validate_key`] it.
///
/// Leading and trailing spaces and tabs are ignored. A value that starts with `"` is always
/// read as an sf-string. Parameters after the string (`"abc";a=1`) are refused.
///
/// ```
/// use retry_fetch::core::idempotency::{parse_key, KeyError};
/// assert_eq!(parse_key("abc-123"), Ok("abc-123".to_string()));
/// assert_eq!(parse_key(r#""abc-123""#), Ok("abc-123".to_string()));
/// assert_eq!(parse_key(r#""a\"b""#), Ok(r#"a"b"#.to_string()));
/// assert_eq!(parse_key("a, b"), Err(KeyError::NotVisibleAscii));
/// ```
pub fn parse_key(value: &str) -> Result<String, KeyError> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    let key = match value.strip_prefix('"') {
        Some(rest) => parse_sf_string(rest)?,
        None => value.to_string(),
    };
    validate_key(&key)?;
    Ok(key)
}

/// The body of an sf-string after its opening quote: up to the closing quote, which must
/// end the value.
fn parse_sf_string(rest: &str) -> Result<String, KeyError> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err(KeyError::BadSfString),
            },
            '"' => {
                return if chars.as_str().is_empty() {
                    Ok(out)
                } else {
                    Err(KeyError::BadSfString)
                };
            }
            // RFC 8941: an sf-string holds %x20-7E only; anything else is a parse error.
            ' '..='~' => out.push(c),
            _ => return Err(KeyError::BadSfString),
        }
    }
    Err(KeyError::BadSfString) // no closing quote
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0x0f)] as char);
    }
    out
}

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
/// let alice = store_key(b"secret-1", Some("alice"), "k1");
/// assert_eq!(alice.len(), 64 + 3);
/// assert_ne!(alice, store_key(b"secret-2", Some("alice"), "k1"));
/// ```
pub fn store_key(secret: &[u8], identity: Option<&str>, key: &str) -> String {
    match identity {
        Some(id) if !id.is_empty() => {
            use hmac::{Mac, SimpleHmac};
            // HMAC accepts a key of any length: new_from_slice cannot fail.
            let mut out = match SimpleHmac::<Sha256>::new_from_slice(secret) {
                Ok(mut mac) => {
                    mac.update(id.as_bytes());
                    hex(&mac.finalize().into_bytes())
                }
                Err(_) => sha256_hex(id.as_bytes()),
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

/// What the store holds for a key, as far as the decision is concerned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Record<'a> {
    /// Nothing (never seen, expired after `ttlMs`, or released after the handler threw).
    Absent,
    /// A request with this key is running: its fingerprint and when its lock expires (ms
    /// since the Unix epoch).
    InProgress {
        /// The fingerprint of the request that holds the lock.
        fingerprint: &'a str,
        /// When the lock stops counting, ms since the Unix epoch.
        lock_expires_at_ms: f64,
    },
    /// A live transaction holds the key but its record is not visible (a `PostgresStore`: the
    /// holder's row is uncommitted). Its holder is alive by definition: a dead one's
    /// connection rolled it back.
    Held,
    /// A response is stored for this key.
    Completed {
        /// The fingerprint of the request that produced it.
        fingerprint: &'a str,
    },
}

/// What to do with a request whose key has the given [`Record`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Take the lock and run the handler (the key is free).
    Process,
    /// Answer with the stored response, plus `Idempotent-Replayed: true`.
    Replay,
    /// The key was used for a different request (fingerprint): 422.
    Mismatch,
    /// The first request with this key is still running: wait for it (poll the store), or
    /// answer 409 when `concurrent: 'reject'` (or when the wait times out).
    InProgress,
    /// The lock's holder died (its lock expired): take the lock over, compare-and-swap on the
    /// old holder's token, and run the handler.
    LockExpired,
}

impl Action {
    /// The name the JavaScript side switches on: `process`, `replay`, `mismatch`,
    /// `in-progress`, `lock-expired`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Process => "process",
            Action::Replay => "replay",
            Action::Mismatch => "mismatch",
            Action::InProgress => "in-progress",
            Action::LockExpired => "lock-expired",
        }
    }
}

/// The state machine of one key: given what the store holds, this request's fingerprint and
/// the time now (ms since the Unix epoch), what to do.
///
/// | stored | same fingerprint | other fingerprint |
/// |---|---|---|
/// | absent | process | process |
/// | in progress, lock live (`now < expiry`) | in progress (wait / 409) | mismatch (422) |
/// | in progress, lock expired (`now >= expiry`) | lock expired (take over) | lock expired (take over) |
/// | completed | replay | mismatch (422) |
/// | held by a live transaction (details unseen) | in progress (wait / 409) | in progress |
///
/// An expired lock is treated as absent whatever its fingerprint: its holder died before
/// storing anything, so nothing was answered under this key (Redis deletes such a lock by
/// itself through its `PX` expiry; this covers stores that do not, and clocks that differ).
/// A live lock with another fingerprint is a 422 at once rather than a wait, as the answer
/// cannot be anything else.
///
/// ```
/// use retry_fetch::core::idempotency::{decide, Action, Record};
/// assert_eq!(decide(Record::Absent, "f", 0.0), Action::Process);
/// assert_eq!(decide(Record::Completed { fingerprint: "f" }, "f", 0.0), Action::Replay);
/// assert_eq!(decide(Record::Completed { fingerprint: "g" }, "f", 0.0), Action::Mismatch);
/// let lock = Record::InProgress { fingerprint: "f", lock_expires_at_ms: 1000.0 };
/// assert_eq!(decide(lock, "f", 999.0), Action::InProgress);
/// assert_eq!(decide(lock, "f", 1000.0), Action::LockExpired);
/// assert_eq!(decide(Record::Held, "f", 0.0), Action::InProgress);
/// ```
pub fn decide(record: Record<'_>, fingerprint: &str, now_ms: f64) -> Action {
    match record {
        Record::Absent => Action::Process,
        // `>=` or NaN: a lock with a nonsense expiry must not block the key forever.
        Record::InProgress {
            lock_expires_at_ms: exp,
            ..
        } if now_ms >= exp || exp.is_nan() => Action::LockExpired,
        Record::InProgress { fingerprint: f, .. } if f != fingerprint => Action::Mismatch,
        Record::InProgress { .. } | Record::Held => Action::InProgress,
        Record::Completed { fingerprint: f } if f != fingerprint => Action::Mismatch,
        Record::Completed { .. } => Action::Replay,
    }
}

/// What a second request with the same key does while the first is still running.
///
/// # Default
/// [`Concurrent::Wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concurrent {
    /// `'wait'`: poll the store until the first finishes, then answer with its (replayed)
    /// response; a 409 when `waitTimeoutMs` runs out first (without the lock both would run).
    Wait,
    /// `'reject'`: answer 409 at once (the IETF draft's behaviour; the client retries a 409
    /// when it sent a key).
    Reject,
}

impl Concurrent {
    /// The JavaScript name: `'wait'` or `'reject'`.
    pub fn name(self) -> &'static str {
        match self {
            Concurrent::Wait => "wait",
            Concurrent::Reject => "reject",
        }
    }
}

/// The validated numeric and string options of `idempotency(handler, options)` (the store and
/// the functions are checked by the shell).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerOptions {
    /// `header`: the header that carries the key. Default `Idempotency-Key`.
    pub header: String,
    /// `ttlMs`: how long a completed response is kept. Default 86 400 000 (24 h).
    pub ttl_ms: f64,
    /// `lockTimeoutMs`: how long a lock counts. Default 60 000.
    pub lock_timeout_ms: f64,
    /// `concurrent`. Default [`Concurrent::Wait`].
    pub concurrent: Concurrent,
    /// `waitTimeoutMs`: how long a second request waits for the first. Default: `lock_timeout_ms`.
    pub wait_timeout_ms: Option<f64>,
    /// `pollMs`: the store polling interval while waiting. Default 25.
    pub poll_ms: f64,
    /// `maxBodyBytes`: the largest request body read for the fingerprint; a longer one is
    /// answered 413 before the handler runs. Default [`DEFAULT_MAX_BODY_BYTES`] (1 MiB).
    pub max_body_bytes: f64,
    /// `handlerTimeoutMs`: how long a keyed handler may run before its `request.signal`
    /// aborts (a `TimeoutError`). Default none: no limit.
    pub handler_timeout_ms: Option<f64>,
    /// `ignoredMethods`: the methods whose key is ignored (upper-case). Default
    /// [`DEFAULT_IGNORED_METHODS`].
    pub ignored_methods: Vec<String>,
    /// `acceptAfterMs`: a keyed request whose handler has not settled after this is answered
    /// `202 Accepted` (with `Retry-After`) while the handler goes on; a repeat while it runs
    /// gets `202` at once. Default none: the caller waits for the handler.
    pub accept_after_ms: Option<f64>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            header: DEFAULT_HEADER.to_string(),
            ttl_ms: DEFAULT_TTL_MS,
            lock_timeout_ms: DEFAULT_LOCK_TIMEOUT_MS,
            concurrent: Concurrent::Wait,
            wait_timeout_ms: None,
            poll_ms: DEFAULT_POLL_MS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            handler_timeout_ms: None,
            ignored_methods: DEFAULT_IGNORED_METHODS
                .iter()
                .map(|m| m.to_string())
                .collect(),
            accept_after_ms: None,
        }
    }
}

impl ServerOptions {
    /// `waitTimeoutMs`, or `lockTimeoutMs` when it was not given.
    pub fn effective_wait_timeout_ms(&self) -> f64 {
        self.wait_timeout_ms.unwrap_or(self.lock_timeout_ms)
    }

    /// How often a holder renews its lock while its handler runs: a third of
    /// `lockTimeoutMs` (at least 1 ms), so two renewals can be late before the lock lapses.
    pub fn renew_interval_ms(&self) -> f64 {
        (self.lock_timeout_ms / 3.0).floor().max(1.0)
    }

    /// Is the key of a `method` request ignored (`ignoredMethods`)? Compared without case.
    pub fn ignores_key(&self, method: &str) -> bool {
        self.ignored_methods
            .iter()
            .any(|m| m.eq_ignore_ascii_case(method))
    }
}

/// What `ttlMs` must be.
pub const TTL_EXPECTED: &str = "an integer number of milliseconds from 1 to 31536000000 (365 days)";
/// What `pollMs` and `handlerTimeoutMs` must be.
pub const POSITIVE_MS_EXPECTED: &str = "an integer number of milliseconds from 1 to 2147483647";
/// The shortest `lockTimeoutMs` accepted: 1 s. A live holder renews its lock every third of
/// it; below a second, one slow store round trip or event-loop pause (a GC, a long JSON
/// parse) lets a live holder's lock lapse, and a duplicate runs the handler again.
pub const MIN_LOCK_TIMEOUT_MS: f64 = 1_000.0;
/// What `lockTimeoutMs` must be.
pub const LOCK_TIMEOUT_EXPECTED: &str = "an integer number of milliseconds from 1000 to 2147483647 (a live holder renews its lock every third of it)";
/// What `ignoredMethods` must be.
pub const IGNORED_METHODS_EXPECTED: &str =
    "an array of HTTP method names (e.g. ['GET', 'HEAD', 'OPTIONS'])";
/// The methods whose `Idempotency-Key` is ignored by default: `GET`, `HEAD`, `OPTIONS`. They
/// are safe (RFC 9110): a repeat has no effect to prevent, and storing their answers would
/// let any client fill the store by adding a key to a read.
pub const DEFAULT_IGNORED_METHODS: [&str; 3] = ["GET", "HEAD", "OPTIONS"];
/// What `waitTimeoutMs` must be.
pub const WAIT_MS_EXPECTED: &str = "an integer number of milliseconds from 0 to 2147483647";
/// What `header` must be.
pub const HEADER_EXPECTED: &str = "an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)";
/// What `concurrent` must be.
pub const CONCURRENT_EXPECTED: &str = "'wait' or 'reject'";

fn integer_in(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && v.fract() == 0.0 && v >= lo && v <= hi
}

/// `ttlMs`: an integer from 1 to 365 days in ms.
pub fn ttl_ms(v: f64) -> Result<f64, OptionError> {
    if integer_in(v, 1.0, MAX_TTL_MS) {
        Ok(v)
    } else {
        Err(OptionError::new("ttlMs", TTL_EXPECTED))
    }
}

/// `lockTimeoutMs`: an integer from [`MIN_LOCK_TIMEOUT_MS`] to 2^31 - 1.
pub fn lock_timeout_ms(v: f64) -> Result<f64, OptionError> {
    if integer_in(v, MIN_LOCK_TIMEOUT_MS, MAX_TIMER_MS) {
        Ok(v)
    } else {
        Err(OptionError::new("lockTimeoutMs", LOCK_TIMEOUT_EXPECTED))
    }
}

/// `handlerTimeoutMs`: an integer from 1 to 2^31 - 1.
pub fn handler_timeout_ms(v: f64) -> Result<f64, OptionError> {
    if integer_in(v, 1.0, MAX_TIMER_MS) {
        Ok(v)
    } else {
        Err(OptionError::new("handlerTimeoutMs", POSITIVE_MS_EXPECTED))
    }
}

/// One method of `ignoredMethods`: an HTTP method name (a token), kept upper-case.
pub fn ignored_method(v: &str) -> Result<String, OptionError> {
    let token = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if token {
        Ok(v.to_ascii_uppercase())
    } else {
        Err(OptionError::new("ignoredMethods", IGNORED_METHODS_EXPECTED))
    }
}

/// `waitTimeoutMs`: an integer from 0 to 2^31 - 1 (0: answer 409 unless the first request has
/// just finished).
pub fn wait_timeout_ms(v: f64) -> Result<f64, OptionError> {
    if integer_in(v, 0.0, MAX_TIMER_MS) {
        Ok(v)
    } else {
        Err(OptionError::new("waitTimeoutMs", WAIT_MS_EXPECTED))
    }
}

/// `pollMs`: an integer from 1 to 2^31 - 1.
pub fn poll_ms(v: f64) -> Result<f64, OptionError> {
    if integer_in(v, 1.0, MAX_TIMER_MS) {
        Ok(v)
    } else {
        Err(OptionError::new("pollMs", POSITIVE_MS_EXPECTED))
    }
}

/// `header`: an HTTP field name (an RFC 9110 token).
pub fn header(v: &str) -> Result<String, OptionError> {
    let token = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if token {
        Ok(v.to_string())
    } else {
        Err(OptionError::new("header", HEADER_EXPECTED))
    }
}

/// `concurrent`: `'wait'` or `'reject'`.
pub fn concurrent(v: &str) -> Result<Concurrent, OptionError> {
    match v {
        "wait" => Ok(Concurrent::Wait),
        "reject" => Ok(Concurrent::Reject),
        _ => Err(OptionError::new("concurrent", CONCURRENT_EXPECTED)),
    }
}

/// What `maxBodyBytes` must be.
pub const BODY_BYTES_EXPECTED: &str = "an integer number of bytes from 0 to 2147483647";

/// `maxBodyBytes`: an integer from 0 to 2^31 - 1.
pub fn max_body_bytes(v: f64) -> Result<f64, OptionError> {
    if integer_in(v, 0.0, MAX_TIMER_MS) {
        Ok(v)
    } else {
        Err(OptionError::new("maxBodyBytes", BODY_BYTES_EXPECTED))
    }
}

/// Every option `idempotency(handler, options)` takes, by its JavaScript name.
pub const SERVER_OPTION_NAMES: [&str; 18] = [
    "store",
    "header",
    "required",
    "identity",
    "secret",
    "ttlMs",
    "lockTimeoutMs",
    "concurrent",
    "waitTimeoutMs",
    "pollMs",
    "maxBodyBytes",
    "handlerTimeoutMs",
    "ignoredMethods",
    "acceptAfterMs",
    "history",
    "onStoreError",
    "onError",
    "onEvent",
];

/// Every option `idempotent(fn, options)` takes, by its JavaScript name.
pub const JOB_OPTION_NAMES: [&str; 14] = [
    "store",
    "key",
    "scope",
    "secret",
    "ttlMs",
    "lockTimeoutMs",
    "concurrent",
    "waitTimeoutMs",
    "pollMs",
    "maxRuns",
    "history",
    "onStoreError",
    "onEvent",
    "onDeadLetter",
];

/// The statuses that say "this request was not processed, send it again": a handler's answer
/// with one of them is not stored, the key is freed, and the client's retry runs the handler
/// (a stored `429` would answer every patient retry with the same `429` for `ttlMs`).
///
/// `408 Request Timeout`, `425 Too Early`, `429 Too Many Requests`; and `503 Service
/// Unavailable` when it carries `Retry-After` (a 503 without it may follow a partial effect).
pub const NOT_PROCESSED_STATUSES: [u16; 3] = [408, 425, 429];

/// Is a handler's answer with `status` (and a `Retry-After` header or not) a final answer to
/// store and replay? `false` for the "not processed" answers of [`NOT_PROCESSED_STATUSES`] and
/// a `503` with `Retry-After`.
///
/// ```
/// use retry_fetch::core::idempotency::stores_answer;
/// assert!(stores_answer(201, false));
/// assert!(stores_answer(500, false));
/// assert!(stores_answer(503, false));
/// assert!(!stores_answer(503, true));
/// assert!(!stores_answer(429, false));
/// ```
pub fn stores_answer(status: u16, has_retry_after: bool) -> bool {
    !(NOT_PROCESSED_STATUSES.contains(&status) || (status == 503 && has_retry_after))
}

/// What becomes of a key whose handler threw (or resolved with something that is not a
/// `Response`) after it started, or answered in a way that is not kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterThrow {
    /// Free the key: the store's transaction is rolled back, and with it every write the
    /// handler made through `ctx.tx`; the retry runs the handler from the start.
    Release,
    /// Store a `500` for the key and replay it: the handler may have had an effect (a charge)
    /// before it threw, and running it again could repeat it.
    StoreFailure,
}

/// A handler that started may have had effects, so a throw ends like a stored `500`, unless
/// the store is transactional and the handler used its transaction (`ctx.tx`), in which case
/// the rollback undid its writes and the key is freed; or unless the companion itself aborted
/// the handler's `request.signal` (`handlerTimeoutMs`): a handler stopped by its server is
/// not an answer, so the key is freed (rolled back) and the retry runs it again.
///
/// ```
/// use retry_fetch::core::idempotency::{after_throw, AfterThrow};
/// assert_eq!(after_throw(true, true, false), AfterThrow::Release);
/// assert_eq!(after_throw(true, false, false), AfterThrow::StoreFailure);
/// assert_eq!(after_throw(false, false, false), AfterThrow::StoreFailure);
/// assert_eq!(after_throw(false, false, true), AfterThrow::Release);
/// ```
pub fn after_throw(
    transactional_store: bool,
    used_transaction: bool,
    aborted_by_companion: bool,
) -> AfterThrow {
    if aborted_by_companion || (transactional_store && used_transaction) {
        AfterThrow::Release
    } else {
        AfterThrow::StoreFailure
    }
}

/// What becomes of a handler's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Store it for the key (and, with a transactional store, commit the handler's writes).
    Store,
    /// Free the key (with a transactional store: roll back the handler's writes); the answer
    /// is sent but not kept.
    Free,
}

/// The answer with `status` (with `Retry-After` or not) is stored ([`stores_answer`]),
/// except:
/// - a "not processed" answer ([`NOT_PROCESSED_STATUSES`], a `503` with `Retry-After`): freed;
/// - a `500` from a handler that wrote through a transactional store's `ctx.tx`: freed, its
///   writes rolled back. A 500 is what a framework answers for a handler that threw
///   half-way; committing its writes would keep half an operation under a failed answer;
/// - an answer that cannot be stored (`storable` false: too large, not JSON) from a handler
///   that wrote through a transactional store's `ctx.tx`: freed, so the effect is never
///   committed without its answer.
///
/// ```
/// use retry_fetch::core::idempotency::{ending, Ending};
/// assert_eq!(ending(201, false, true, true, true), Ending::Store);
/// assert_eq!(ending(500, false, true, true, true), Ending::Free);
/// assert_eq!(ending(500, false, false, false, true), Ending::Store);
/// assert_eq!(ending(429, false, false, false, true), Ending::Free);
/// assert_eq!(ending(201, false, true, true, false), Ending::Free);
/// ```
pub fn ending(
    status: u16,
    has_retry_after: bool,
    transactional_store: bool,
    used_transaction: bool,
    storable: bool,
) -> Ending {
    let rolled_back = transactional_store && used_transaction && (status == 500 || !storable);
    if rolled_back || !stores_answer(status, has_retry_after) {
        Ending::Free
    } else {
        Ending::Store
    }
}

/// Response headers never stored nor replayed: `Set-Cookie` and `Set-Cookie2` (a replay must
/// not hand one caller's session to another, nor renew a session), and the hop-by-hop headers
/// of RFC 9110 §7.6.1 (`Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
/// `Transfer-Encoding`, `Upgrade`, and those `Connection` names), which describe one
/// connection, not the answer.
pub const UNSTORED_HEADERS: [&str; 9] = [
    "set-cookie",
    "set-cookie2",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Is the response header `name` stored with the answer? Not one of [`UNSTORED_HEADERS`],
/// nor a header the answer's `Connection` header names (`connection`: its value), which
/// RFC 9110 §7.6.1 makes hop-by-hop too.
///
/// ```
/// use retry_fetch::core::idempotency::stores_header;
/// assert!(stores_header("content-type", None));
/// assert!(!stores_header("keep-alive", None));
/// assert!(!stores_header("x-hop", Some("close, X-Hop")));
/// assert!(stores_header("x-other", Some("close, X-Hop")));
/// ```
pub fn stores_header(name: &str, connection: Option<&str>) -> bool {
    let named =
        connection.is_some_and(|c| c.split(',').any(|t| t.trim().eq_ignore_ascii_case(name)));
    !named
        && !UNSTORED_HEADERS
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
}

/// Request headers that carry a credential, in the order they are looked for when no
/// `identity` is given (lower-case): `Authorization`, then the API-key and token headers
/// APIs commonly use.
pub const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "x-api-key",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "x-session-token",
];

/// Cookie names taken for a session or credential cookie when no `identity` is given (compared
/// without case): the usual names of Express, Koa, Rails, Django, PHP, Java, Laravel, ASP.NET,
/// Auth.js and of JWT cookies.
pub const SESSION_COOKIE_NAMES: [&str; 17] = [
    "connect.sid",
    "sid",
    "session",
    "sessionid",
    "session_id",
    "jsessionid",
    "phpsessid",
    "laravel_session",
    "next-auth.session-token",
    "authjs.session-token",
    "koa.sess",
    ".aspnetcore.cookies",
    "token",
    "jwt",
    "access_token",
    "auth_token",
    "id_token",
];

/// Name endings that make a cookie count as a credential (after the known names): `session`,
/// `sessionid`, `session-token`, `auth-token` (Supabase's `sb-<ref>-auth-token`),
/// `auth_token`, `access_token`, `access-token`.
pub const SESSION_COOKIE_SUFFIXES: [&str; 7] = [
    "session",
    "sessionid",
    "session-token",
    "auth-token",
    "auth_token",
    "access_token",
    "access-token",
];

/// How surely `name` is a credential cookie's name: 2 for one of [`SESSION_COOKIE_NAMES`]
/// (or a name starting with `.aspnetcore.`), 1 for a name with one of
/// [`SESSION_COOKIE_SUFFIXES`], 0 otherwise. `__Host-` and `__Secure-` prefixes are ignored;
/// chunked cookies (`sb-x-auth-token.0`) count by their base name.
fn session_cookie_rank(name: &str) -> u8 {
    let lower = name.trim().to_ascii_lowercase();
    let bare = lower
        .strip_prefix("__host-")
        .or_else(|| lower.strip_prefix("__secure-"))
        .unwrap_or(&lower);
    // `name.0`, `name.1`: one cookie split in chunks (Supabase, Auth.js).
    let base = match bare.rsplit_once('.') {
        Some((b, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => b,
        _ => bare,
    };
    if SESSION_COOKIE_NAMES.contains(&base) || base.starts_with(".aspnetcore.") {
        2
    } else if SESSION_COOKIE_SUFFIXES.iter().any(|s| base.ends_with(s)) {
        1
    } else {
        0
    }
}

/// Is `name` a session cookie's name (see [`session_cookie_rank`])?
#[cfg(test)]
fn is_session_cookie(name: &str) -> bool {
    session_cookie_rank(name) > 0
}

/// The default scope of a key when the `identity` option is not given: the caller's
/// credentials, so that a caller who reuses another's key never gets that caller's stored
/// answer. `header(name)` reads a request header (lower-case name). The first of
/// [`CREDENTIAL_HEADERS`] present (`authorization:Bearer t1`); else the credential cookie's
/// `name=value` (the first cookie of the highest [`session_cookie_rank`]); else `None`: the request carries no credential this recognises, and its
/// key is not scoped. Other cookies (analytics, preferences) are left out: they may change
/// between a request and its retry. The store keeps only a keyed hash of it ([`store_key`]).
///
/// ```
/// use retry_fetch::core::idempotency::default_identity;
/// let from = |h: &'static [(&'static str, &'static str)]| move |name: &str| h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string());
/// assert_eq!(default_identity(from(&[("authorization", "Bearer t1"), ("cookie", "sid=abc")])), Some("authorization:Bearer t1".into()));
/// assert_eq!(default_identity(from(&[("x-api-key", "alice")])), Some("x-api-key:alice".into()));
/// assert_eq!(default_identity(from(&[("cookie", "_ga=1; sid=abc")])), Some("cookie:sid=abc".into()));
/// assert_eq!(default_identity(from(&[("cookie", "_ga=1; theme=dark")])), None);
/// assert_eq!(default_identity(from(&[])), None);
/// ```
pub fn default_identity(header: impl Fn(&str) -> Option<String>) -> Option<String> {
    for name in CREDENTIAL_HEADERS {
        if let Some(value) = header(name) {
            let value = value.trim();
            if !value.is_empty() {
                return Some(format!("{name}:{value}"));
            }
        }
    }
    let cookie = header("cookie")?;
    // A known name wins over a suffix match wherever it is in the header (`rl_session`, an
    // analytics cookie whose value changes, must not shadow `connect.sid`); among equals, the
    // first (a session split in chunks counts by its first chunk).
    let (_, name, value) = cookie
        .split(';')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let (name, value) = (name.trim(), value.trim());
            let rank = session_cookie_rank(name);
            (rank > 0 && !value.is_empty()).then_some((rank, name, value))
        })
        .fold(None, |best: Option<(u8, &str, &str)>, c| match best {
            Some(b) if b.0 >= c.0 => Some(b),
            _ => Some(c),
        })?;
    Some(format!("cookie:{name}={value}"))
}

/// A key for one downstream call, derived from the request's store key (scope and key) and a
/// name of the caller's choice (`ctx.keyFor('charge')`): the same inputs give the same key on
/// every retry and every instance, different names or scopes give different keys. It is a
/// UUID (version 8, RFC 9562) made of the SHA-256 of `store_key`, a NUL and `name`, so any
/// API that takes UUID keys (Stripe takes up to 255 characters) takes it.
///
/// ```
/// use retry_fetch::core::idempotency::derived_key;
/// let a = derived_key("-:k1", "charge");
/// assert_eq!(a.len(), 36);
/// assert_eq!(a, derived_key("-:k1", "charge"));
/// assert_ne!(a, derived_key("-:k1", "refund"));
/// assert_ne!(a, derived_key("-:k2", "charge"));
/// assert_eq!(&a[14..15], "8");
/// ```
pub fn derived_key(store_key: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"retry-fetch keyFor\0");
    h.update(store_key.as_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    super::key::uuid(bytes, 8)
}

/// The largest answer body the companion stores: 32 MiB. A larger answer is still sent, but
/// what is stored (and replayed) for its key is a 500 problem saying it was too large: the
/// store's record is one JSON string, and a body near V8's string limit would fail to encode.
pub const MAX_STORED_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// Should `method` carry a key when the `required` option is not given? POST and PATCH (the
/// methods RFC 9110 does not make idempotent that APIs use for side effects), in any case.
pub fn key_required_by_default(method: &str) -> bool {
    method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PATCH")
}

#[cfg(test)]
mod tests {
    use super::*;

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
            store_key(s, Some(""), "k"),
            "-:k",
            "an empty identity is no identity"
        );
        let alice = store_key(s, Some("alice"), "k");
        let bob = store_key(s, Some("bob"), "k");
        assert_ne!(alice, bob);
        assert_ne!(alice, store_key(s, None, "k"));
        // HMAC-SHA-256 (RFC 4231 test case 2: key "Jefe").
        assert_eq!(
            store_key(b"Jefe", Some("what do ya want for nothing?"), "k"),
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
            store_key(b"another secret!!", Some("alice"), "k"),
            "the secret keys the hash"
        );
        // identity "a:b" + key "c" vs identity "a" + key "b:c"
        assert_ne!(
            store_key(s, Some("a:b"), "c"),
            store_key(s, Some("a"), "b:c")
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
        assert_eq!(ending(201, false, false, false, true), Ending::Store);
        assert_eq!(
            ending(500, false, false, false, true),
            Ending::Store,
            "a 500 may follow an effect"
        );
        assert_eq!(
            ending(500, false, true, false, true),
            Ending::Store,
            "tx not used: nothing rolled back"
        );
        assert_eq!(
            ending(500, false, true, true, true),
            Ending::Free,
            "tx used: rolled back"
        );
        assert_eq!(ending(502, false, true, true, true), Ending::Store);
        assert_eq!(ending(503, true, false, false, true), Ending::Free);
        assert_eq!(
            ending(201, false, true, true, false),
            Ending::Free,
            "never commit an effect without its answer"
        );
        assert_eq!(
            ending(201, false, false, false, false),
            Ending::Store,
            "the too-large problem is stored"
        );
        assert!(
            !stores_header("Connection", None)
                && !stores_header("transfer-encoding", None)
                && !stores_header("Set-Cookie2", None)
        );
        assert!(
            stores_header("content-type", None) && stores_header("location", Some("keep-alive"))
        );
        assert!(!stores_header("X-Hop", Some("x-hop")) && !stores_header("a", Some(" b ,a")));
    }

    #[test]
    fn state_machine() {
        let fp = "f1";
        let now = 10_000.0;
        assert_eq!(decide(Record::Absent, fp, now), Action::Process);
        assert_eq!(
            decide(Record::Completed { fingerprint: fp }, fp, now),
            Action::Replay
        );
        assert_eq!(
            decide(Record::Completed { fingerprint: "f2" }, fp, now),
            Action::Mismatch
        );
        let live = |f| Record::InProgress {
            fingerprint: f,
            lock_expires_at_ms: now + 1.0,
        };
        assert_eq!(decide(live(fp), fp, now), Action::InProgress);
        assert_eq!(decide(live("f2"), fp, now), Action::Mismatch);
        let dead = |f| Record::InProgress {
            fingerprint: f,
            lock_expires_at_ms: now,
        };
        assert_eq!(
            decide(dead(fp), fp, now),
            Action::LockExpired,
            "expiry is inclusive"
        );
        assert_eq!(decide(dead("f2"), fp, now), Action::LockExpired);
        // A lock with a nonsense expiry never blocks forever.
        let nan = Record::InProgress {
            fingerprint: fp,
            lock_expires_at_ms: f64::NAN,
        };
        assert_eq!(decide(nan, fp, now), Action::LockExpired);
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
        let k = derived_key("-:k1", "charge");
        assert_eq!(k, derived_key("-:k1", "charge"));
        assert!(k
            .bytes()
            .enumerate()
            .all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) {
                c == b'-'
            } else {
                c.is_ascii_hexdigit() && !c.is_ascii_uppercase()
            }));
        assert!(matches!(&k[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(derived_key("-:k1", "a"), derived_key("-:k1", "b"));
        assert_ne!(
            derived_key(&store_key(b"s", Some("alice"), "k1"), "a"),
            derived_key(&store_key(b"s", Some("bob"), "k1"), "a")
        );
        // The NUL separator: ("-:k1", "2x") and ("-:k12", "x") differ.
        assert_ne!(derived_key("-:k1", "2x"), derived_key("-:k12", "x"));
    }

    #[test]
    fn held_keys_wait() {
        assert_eq!(decide(Record::Held, "f", f64::NAN), Action::InProgress);
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
                let k = derived_key(&store_key, &name);
                prop_assert_eq!(k.len(), 36);
                prop_assert_eq!(&k[14..15], "8");
                prop_assert!(matches!(&k[19..20], "8" | "9" | "a" | "b"));
                let shaped = k.bytes().enumerate().all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { c == b'-' } else { c.is_ascii_digit() || (b'a'..=b'f').contains(&c) });
                prop_assert!(shaped);
                prop_assert_eq!(k.clone(), derived_key(&store_key, &name));
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
            fn locks_expire_exactly(exp in 0.0f64..1e13, now in 0.0f64..1e13) {
                let lock = Record::InProgress { fingerprint: "f", lock_expires_at_ms: exp };
                let action = decide(lock, "f", now);
                prop_assert_eq!(action, if now >= exp { Action::LockExpired } else { Action::InProgress });
                prop_assert_eq!(decide(Record::Held, "g", now), Action::InProgress);
            }
        }
    }
}
