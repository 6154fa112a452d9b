//! Retry options, their defaults, and validation into a typed [`OptionError`].
//!
//! Every check happens once, when options are read, before any request is sent. The wasm
//! shell converts JavaScript values into the plain Rust types taken here (a JS number is an
//! `f64`) and turns an [`OptionError`] into a `TypeError` that names the option, the value
//! and what is allowed.

/// The largest delay `setTimeout` accepts: 2^31 - 1 ms (about 24.8 days). Every delay is
/// clamped to `0..=MAX_TIMER_MS`.
pub const MAX_TIMER_MS: f64 = 2_147_483_647.0;

/// The largest `maxAttempts` accepted.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;

/// Default size limit for buffering a `ReadableStream` body so it can be replayed: 1 MiB.
pub const DEFAULT_MAX_BUFFERED_BODY_BYTES: u32 = 1024 * 1024;

/// How the computed exponential delay is randomised, so that clients that failed together do
/// not retry together.
///
/// # Default
/// [`Jitter::Full`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// `'none'`: exactly the exponential delay.
    None,
    /// `'full'`: uniform in `0..d` (AWS "full jitter"; the default).
    Full,
    /// `'equal'`: `d/2 + uniform(0..d/2)`.
    Equal,
    /// `'decorrelated'`: `min(cap, uniform(base, 3 * previous))`.
    Decorrelated,
    /// `'additive'`: `d + uniform(0..base)`, exponential delay plus up to one base of random extra.
    Additive,
}

impl Jitter {
    /// Parses the JavaScript name of a jitter mode (`'none'`, `'full'`, `'equal'`,
    /// `'decorrelated'`, `'additive'`).
    pub fn from_name(name: &str) -> Option<Jitter> {
        Some(match name {
            "none" => Jitter::None,
            "full" => Jitter::Full,
            "equal" => Jitter::Equal,
            "decorrelated" => Jitter::Decorrelated,
            "additive" => Jitter::Additive,
            _ => return None,
        })
    }
}

/// The wire form of the idempotency key header value.
///
/// # Default
/// [`KeyFormat::Plain`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    /// `'plain'`: the key as is, `Idempotency-Key: 8e03978e-...` (what Stripe and most servers read).
    Plain,
    /// `'sf-string'`: an RFC 8941 structured-field string, `Idempotency-Key: "8e03978e-..."`
    /// (the IETF Idempotency-Key draft's form).
    SfString,
}

/// Whether and which idempotency key a call sends.
///
/// # Default
/// [`KeyMode::Auto`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyMode {
    /// `'auto'`: a fresh UUID v4 per call on non-idempotent methods, unless the request
    /// already carries the header.
    Auto,
    /// A string: this key, on every attempt of the call, whatever the method.
    Fixed(String),
    /// `false`: no key is added.
    Off,
}

impl KeyMode {
    /// May a call add a key of ours to a request whose method is (or is not) idempotent? A
    /// fixed key: always; `'auto'`: only for a non-idempotent method (and then only when the
    /// request does not already carry the header, which the shell checks); `false`: never.
    pub fn may_add_key(&self, idempotent: bool) -> bool {
        match self {
            KeyMode::Fixed(_) => true,
            KeyMode::Auto => !idempotent,
            KeyMode::Off => false,
        }
    }
}

/// A validated, complete set of retry options. Build it with [`RetryPolicy::default`] and
/// the setters in the shell; every field has passed validation.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts including the first, `1..=100`. Default 3.
    pub max_attempts: u32,
    /// Delay before the second attempt, in ms. Default 500.
    pub base_delay_ms: f64,
    /// Growth factor of the delay per attempt, `>= 1`. Default 2.
    pub factor: f64,
    /// Upper bound of every computed delay, in ms. Default 30000.
    pub max_delay_ms: f64,
    /// Jitter mode. Default [`Jitter::Full`].
    pub jitter: Jitter,
    /// Status codes worth retrying. Default `[408, 429, 500, 502, 503, 504]`.
    pub retry_on_status: Vec<u16>,
    /// Retry a 409 Conflict of a request that carries an idempotency key (the server says the
    /// first request with that key is still in progress). True with the default
    /// `retry_on_status`; a list the caller gives is the whole list, so giving one sets this to
    /// false (put 409 in the list to keep it). Default true.
    pub retry_keyed_conflict: bool,
    /// Retry network errors (subject to the safe-to-retry matrix). Default true.
    pub retry_on_network_error: bool,
    /// Retry per-attempt timeouts (subject to the safe-to-retry matrix). Default true.
    pub retry_on_timeout: bool,
    /// Per-attempt timeout in ms. Default none.
    pub timeout_ms: Option<f64>,
    /// Total time budget of the call in ms. Default none.
    pub deadline_ms: Option<f64>,
    /// Let `Retry-After` (or `RateLimit`) replace the computed delay. Default true.
    pub respect_retry_after: bool,
    /// Longest server-requested wait accepted, in ms; `None` means "same as `max_delay_ms`".
    /// Default none.
    pub max_retry_after_ms: Option<f64>,
    /// Idempotency key mode. Default [`KeyMode::Auto`].
    pub idempotency_key: KeyMode,
    /// Header name that carries the key. Default `Idempotency-Key`.
    pub idempotency_header: String,
    /// Wire form of the key. Default [`KeyFormat::Plain`].
    pub idempotency_key_format: KeyFormat,
    /// Send `X-Retry-Count` and `X-Original-Request-At` on attempts after the first.
    /// Default false.
    pub retry_headers: bool,
    /// Largest `ReadableStream` body buffered for replay, in bytes. Default 1 MiB.
    pub max_buffered_body_bytes: u32,
    /// Follow a `202 Accepted` to the final answer (poll its `Operation-Location` or
    /// `Location`, or repeat a keyed request): see [`super::accepted`]. Default false.
    pub follow_accepted: bool,
}

/// The default retryable status codes: 408, 429, 500, 502, 503, 504.
pub const DEFAULT_RETRY_ON_STATUS: [u16; 6] = [408, 429, 500, 502, 503, 504];

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            base_delay_ms: 500.0,
            factor: 2.0,
            max_delay_ms: 30_000.0,
            jitter: Jitter::Full,
            retry_on_status: DEFAULT_RETRY_ON_STATUS.to_vec(),
            retry_keyed_conflict: true,
            retry_on_network_error: true,
            retry_on_timeout: true,
            timeout_ms: None,
            deadline_ms: None,
            respect_retry_after: true,
            max_retry_after_ms: None,
            idempotency_key: KeyMode::Auto,
            idempotency_header: "Idempotency-Key".to_string(),
            idempotency_key_format: KeyFormat::Plain,
            retry_headers: false,
            max_buffered_body_bytes: DEFAULT_MAX_BUFFERED_BODY_BYTES,
            follow_accepted: false,
        }
    }
}

impl RetryPolicy {
    /// Does the policy retry no status below 400? Then a call may take the lean path, where
    /// the first answer below 400 goes straight back ([`RetryPolicy::lean_answer`]).
    pub fn retries_no_status_below_400(&self) -> bool {
        !self.retry_on_status.iter().any(|&s| s < 400)
    }

    /// On the lean path, is an answer with `status` the call's answer? Below 400, but a 202
    /// that `follow_accepted` follows.
    #[inline]
    pub fn lean_answer(&self, status: u16) -> bool {
        status < 400 && (status != 202 || !self.follow_accepted)
    }

    /// The time limit of an attempt sent with `deadline_left_ms` of `deadlineMs` left (`None`:
    /// no deadline; a call's first attempt has all of it): `timeoutMs`, shortened to what is
    /// left. `None`: no limit.
    pub fn attempt_limit_ms(&self, deadline_left_ms: Option<f64>) -> Option<f64> {
        match (self.timeout_ms, deadline_left_ms) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (t, l) => t.or(l),
        }
    }

    /// The effective cap on a server-requested wait: `max_retry_after_ms`, or `max_delay_ms`
    /// when that is unset.
    pub fn retry_after_cap_ms(&self) -> f64 {
        self.max_retry_after_ms.unwrap_or(self.max_delay_ms)
    }
}

/// An option that failed validation: which option, and what is allowed. The shell adds the
/// offending value when it builds the JavaScript `TypeError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionError {
    /// The option's JavaScript name, e.g. `"maxAttempts"`.
    pub option: &'static str,
    /// What is allowed, e.g. `"an integer from 1 to 100"`.
    pub expected: &'static str,
}

impl OptionError {
    /// An error for `option`, which must be `expected`.
    pub const fn new(option: &'static str, expected: &'static str) -> Self {
        OptionError { option, expected }
    }
}

/// What `maxAttempts` must be.
pub const MAX_ATTEMPTS_EXPECTED: &str = "an integer from 1 to 100";
/// What `baseDelayMs`, `maxDelayMs` and `maxRetryAfterMs` must be.
pub const NON_NEGATIVE_MS_EXPECTED: &str = "a finite number of milliseconds >= 0";
/// What `timeoutMs` and `deadlineMs` must be.
pub const POSITIVE_MS_EXPECTED: &str = "a number of milliseconds > 0 and <= 2147483647";
/// What `factor` must be.
pub const FACTOR_EXPECTED: &str = "a finite number from 1 to 100";
/// What `retryOnStatus` must be.
pub const STATUSES_EXPECTED: &str = "an array of integer HTTP statuses from 100 to 599";
/// What `jitter` must be.
pub const JITTER_EXPECTED: &str = "'none', 'full', 'equal', 'decorrelated' or 'additive'";
/// What `idempotencyKeyFormat` must be.
pub const KEY_FORMAT_EXPECTED: &str = "'plain' or 'sf-string'";
/// What `idempotencyHeader` must be.
pub const HEADER_NAME_EXPECTED: &str = "an HTTP header name (letters, digits and !#$%&'*+-.^_`|~) that is not a forbidden request header (content-length, host, cookie, sec-*, proxy-*, ...) nor one that already means something in a request (content-*, if-*, authorization, accept, range, x-retry-count, ...)";
/// What `maxBufferedBodyBytes` must be.
pub const BUFFERED_BYTES_EXPECTED: &str = "an integer number of bytes from 0 to 2147483647";

/// What each setting of a guard's constructor allows (`new RetryBudget({ maxTokens })`,
/// `AdaptiveThrottle`, `CircuitBreaker`), for its `TypeError`: the guards' `validate` and
/// the shell's type errors both say this (the `expected` of its [`GuardRange`];
/// `onStateChange` is a function).
pub fn guard_setting_expected(option: &str) -> &'static str {
    if option == "onStateChange" {
        return "a function";
    }
    [&BUDGET_RANGES[..], &THROTTLE_RANGES, &BREAKER_RANGES]
        .into_iter()
        .flatten()
        .find(|r| r.name == option)
        .map_or(GUARD_MS_EXPECTED, |r| r.expected)
}

/// The guard setting that bounds `option` (`tokenRatio` and `refillPerSecond` are at most
/// `maxTokens`, `minRate` at most `initialRate`), and what that setting must be: when the
/// caller gave the bounding one and left `option` at its default, the `TypeError` names the
/// one the caller gave (`new RetryBudget({ maxTokens: 0.05 })` is about `maxTokens`).
pub fn guard_setting_bound(option: &str) -> Option<(&'static str, &'static str)> {
    match option {
        "tokenRatio" => Some((
            "maxTokens",
            "a number > 0 and <= 1000000, and >= tokenRatio",
        )),
        "refillPerSecond" => Some((
            "maxTokens",
            "a number > 0 and <= 1000000, and >= refillPerSecond",
        )),
        "minRate" => Some(("initialRate", "a number of requests per second >= minRate")),
        _ => None,
    }
}

/// One guard setting's range: `name` must be a number from `lo` to `hi` (bounds included
/// unless `flags` says otherwise), as `expected` says. What each guard's `validate` checks,
/// one table per guard, in the order the settings are checked.
#[derive(Clone, Copy, Debug)]
pub struct GuardRange {
    /// The setting's JavaScript name.
    pub name: &'static str,
    /// What it must be, for its `TypeError` ([`guard_setting_expected`]).
    pub expected: &'static str,
    lo: f64,
    hi: f64,
    flags: u8,
}

/// [`GuardRange`] flag: `lo` itself is refused.
const ABOVE: u8 = 1;
/// [`GuardRange`] flag: `hi` itself is refused.
const BELOW: u8 = 2;
/// [`GuardRange`] flag: a whole number.
const INTEGER: u8 = 4;
/// [`GuardRange`] flag: also at most the first setting of the table.
const AT_MOST_FIRST: u8 = 8;

const fn range(
    name: &'static str,
    expected: &'static str,
    lo: f64,
    hi: f64,
    flags: u8,
) -> GuardRange {
    GuardRange {
        name,
        expected,
        lo,
        hi,
        flags,
    }
}

/// What a guard's duration setting (`maxWaitMs`, `openMs`) must be.
const GUARD_MS_EXPECTED: &str = "a number of milliseconds from 0 to 2147483647";

/// `RetryBudget`: `maxTokens` in `(0, 1000000]`, `tokenRatio` in `(0, maxTokens]`,
/// `refillPerSecond` in `[0, maxTokens]`.
pub const BUDGET_RANGES: [GuardRange; 3] = [
    range("maxTokens", "a number > 0 and <= 1000000", 0.0, 1e6, ABOVE),
    range(
        "tokenRatio",
        "a number > 0 and <= maxTokens",
        0.0,
        1e6,
        ABOVE | AT_MOST_FIRST,
    ),
    range(
        "refillPerSecond",
        "a number >= 0 and <= maxTokens",
        0.0,
        1e6,
        AT_MOST_FIRST,
    ),
];

/// `AdaptiveThrottle`: `initialRate`, `rampMs`, `scale` in `(0, 1e9]`, `beta` in `(0, 1)`,
/// `minRate` in `(0, initialRate]`, `maxWaitMs` in `[0, MAX_TIMER_MS]`.
pub const THROTTLE_RANGES: [GuardRange; 6] = [
    range(
        "initialRate",
        "a number of requests per second > 0",
        0.0,
        1e9,
        ABOVE,
    ),
    range("rampMs", "a number of milliseconds > 0", 0.0, 1e9, ABOVE),
    range(
        "beta",
        "a number between 0 and 1 (exclusive)",
        0.0,
        1.0,
        ABOVE | BELOW,
    ),
    range("scale", "a number > 0", 0.0, 1e9, ABOVE),
    range(
        "minRate",
        "a number of requests per second > 0 and <= initialRate",
        0.0,
        1e9,
        ABOVE | AT_MOST_FIRST,
    ),
    range("maxWaitMs", GUARD_MS_EXPECTED, 0.0, MAX_TIMER_MS, 0),
];

/// `CircuitBreaker`: `failureThreshold` and `halfOpenMaxCalls` whole numbers in
/// `[1, 1000]`, `openMs` in `[0, MAX_TIMER_MS]`.
pub const BREAKER_RANGES: [GuardRange; 3] = [
    range(
        "failureThreshold",
        "an integer from 1 to 1000",
        1.0,
        1000.0,
        INTEGER,
    ),
    range("openMs", GUARD_MS_EXPECTED, 0.0, MAX_TIMER_MS, 0),
    range(
        "halfOpenMaxCalls",
        "an integer from 1 to 1000",
        1.0,
        1000.0,
        INTEGER,
    ),
];

/// Check `values` (in the order of `ranges`) against `ranges`: the error of the first one
/// out of its range (its `expected`). NaN and the infinities are out of every range.
pub fn check_guard_settings(ranges: &[GuardRange], values: &[f64]) -> Result<(), OptionError> {
    let first = values.first().copied().unwrap_or(f64::NAN);
    for (r, &v) in ranges.iter().zip(values) {
        let above = if r.flags & ABOVE != 0 {
            v > r.lo
        } else {
            v >= r.lo
        };
        let below = if r.flags & BELOW != 0 {
            v < r.hi
        } else {
            v <= r.hi
        };
        let ok = above
            && below
            && (r.flags & INTEGER == 0 || v.fract() == 0.0)
            && (r.flags & AT_MOST_FIRST == 0 || v <= first);
        if !ok {
            return Err(OptionError::new(r.name, r.expected));
        }
    }
    Ok(())
}

fn is_integer(v: f64) -> bool {
    v.is_finite() && v.fract() == 0.0
}

/// `maxAttempts`: an integer from 1 to 100.
pub fn max_attempts(v: f64) -> Result<u32, OptionError> {
    if is_integer(v) && (1.0..=MAX_ATTEMPTS_LIMIT as f64).contains(&v) {
        Ok(v as u32)
    } else {
        Err(OptionError::new("maxAttempts", MAX_ATTEMPTS_EXPECTED))
    }
}

/// A non-negative finite duration in ms (`baseDelayMs`, `maxDelayMs`, `maxRetryAfterMs`),
/// clamped to [`MAX_TIMER_MS`].
pub fn non_negative_ms(option: &'static str, v: f64) -> Result<f64, OptionError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v.min(MAX_TIMER_MS))
    } else {
        Err(OptionError::new(option, NON_NEGATIVE_MS_EXPECTED))
    }
}

/// A positive finite duration in ms (`timeoutMs`, `deadlineMs`), at most [`MAX_TIMER_MS`].
pub fn positive_ms(option: &'static str, v: f64) -> Result<f64, OptionError> {
    if v.is_finite() && v > 0.0 && v <= MAX_TIMER_MS {
        Ok(v)
    } else {
        Err(OptionError::new(option, POSITIVE_MS_EXPECTED))
    }
}

/// `factor`: a finite number from 1 to 100.
pub fn factor(v: f64) -> Result<f64, OptionError> {
    if v.is_finite() && (1.0..=100.0).contains(&v) {
        Ok(v)
    } else {
        Err(OptionError::new("factor", FACTOR_EXPECTED))
    }
}

/// One entry of `retryOnStatus`: an integer HTTP status from 100 to 599.
pub fn status_code(v: f64) -> Result<u16, OptionError> {
    if is_integer(v) && (100.0..=599.0).contains(&v) {
        Ok(v as u16)
    } else {
        Err(OptionError::new("retryOnStatus", STATUSES_EXPECTED))
    }
}

/// `jitter`: one of the five mode names.
pub fn jitter(name: &str) -> Result<Jitter, OptionError> {
    Jitter::from_name(name).ok_or(OptionError::new("jitter", JITTER_EXPECTED))
}

/// `idempotencyKeyFormat`: `'plain'` or `'sf-string'`.
pub fn key_format(name: &str) -> Result<KeyFormat, OptionError> {
    match name {
        "plain" => Ok(KeyFormat::Plain),
        "sf-string" => Ok(KeyFormat::SfString),
        _ => Err(OptionError::new(
            "idempotencyKeyFormat",
            KEY_FORMAT_EXPECTED,
        )),
    }
}

/// `idempotencyKey` given as a string: `'auto'`, or a key of 1 to 255 visible ASCII
/// characters, `!` to `~`, no spaces (what an HTTP header and an RFC 8941 string can both
/// carry unchanged).
///
/// `'Auto'`, `'AUTO'` (any case but `'auto'`) are refused: sent as a literal key, one shared
/// by every call, a server that replays keys would answer every payment with the first one's.
pub fn key_mode(value: &str) -> Result<KeyMode, OptionError> {
    if value == "auto" {
        return Ok(KeyMode::Auto);
    }
    if !value.eq_ignore_ascii_case("auto") && crate::core::key::is_valid_key(value) {
        Ok(KeyMode::Fixed(value.to_string()))
    } else {
        Err(OptionError::new("idempotencyKey", KEY_MODE_EXPECTED))
    }
}

/// What `idempotencyKey` must be.
pub const KEY_MODE_EXPECTED: &str =
    "'auto' (lower-case), false, or a key of 1 to 255 visible ASCII characters";

/// The request header names a browser's `fetch` refuses to let a script set (the Fetch
/// Standard's forbidden request-header names), compared ASCII-case-insensitively; names that
/// start with `proxy-` or `sec-` are forbidden too.
pub const FORBIDDEN_REQUEST_HEADERS: [&str; 21] = [
    "accept-charset",
    "accept-encoding",
    "access-control-request-headers",
    "access-control-request-method",
    "connection",
    "content-length",
    "cookie",
    "cookie2",
    "date",
    "dnt",
    "expect",
    "host",
    "keep-alive",
    "origin",
    "referer",
    "set-cookie",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "via",
];

/// Is `name` a forbidden request-header name (see [`FORBIDDEN_REQUEST_HEADERS`])?
pub fn is_forbidden_request_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("proxy-") || lower.starts_with("sec-") || listed(&FORBIDDEN_PACKED, &lower)
}

/// [`FORBIDDEN_REQUEST_HEADERS`] as one list ([`pack`]).
const FORBIDDEN_PACKED: [u8; packed_len(&FORBIDDEN_REQUEST_HEADERS)] =
    pack(&FORBIDDEN_REQUEST_HEADERS);

/// The length of `names` packed ([`pack`]): each name and a comma.
const fn packed_len(names: &[&str]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < names.len() {
        len += names[i].len() + 1;
        i += 1;
    }
    len
}

/// `names` as one list, each name followed by a comma (none of them has one), made when
/// compiled: searched by [`listed`], it is the names' bytes alone in the binary, where a list of
/// `&str` is also a pointer and a length for each.
const fn pack<const N: usize>(names: &[&str]) -> [u8; N] {
    let mut out = [b','; N];
    let (mut i, mut at) = (0, 0);
    while i < names.len() {
        let name = names[i].as_bytes();
        let mut j = 0;
        while j < name.len() {
            assert!(name[j] != b',');
            out[at] = name[j];
            at += 1;
            j += 1;
        }
        at += 1;
        i += 1;
    }
    assert!(at == N);
    out
}

/// Is `name` one of the names `packed` ([`pack`]) holds?
fn listed(packed: &[u8], name: &str) -> bool {
    let name = name.as_bytes();
    // How much of `name` the current entry matches so far (`usize::MAX`: it does not).
    let mut at = 0;
    for &b in packed {
        if b == b',' {
            if at == name.len() {
                return true;
            }
            at = 0;
        } else if name.get(at) == Some(&b) {
            at += 1;
        } else {
            at = usize::MAX;
        }
    }
    false
}

/// The retry headers (`retryHeaders`): `X-Retry-Count` and `X-Original-Request-At`.
pub const RETRY_HEADERS: [&str; 2] = ["x-retry-count", "x-original-request-at"];

/// Request headers that already mean something else (besides the `Content-*` and `If-*`
/// families): a value a request carries there would be taken for the caller's key, so none
/// of them can be `idempotencyHeader`. The last two are the retry headers (`retryHeaders`).
pub const HEADERS_WITH_A_MEANING: [&str; 9] = [
    "authorization",
    "accept",
    "accept-language",
    "user-agent",
    "cache-control",
    "pragma",
    "range",
    RETRY_HEADERS[0],
    RETRY_HEADERS[1],
];

/// Does `name` already mean something in a request (`Content-*`, `If-*`, or one of
/// [`HEADERS_WITH_A_MEANING`])?
pub fn has_a_meaning(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.starts_with("content-") || lower.starts_with("if-") || listed(&MEANING_PACKED, &lower)
}

/// [`HEADERS_WITH_A_MEANING`] as one list ([`pack`]).
const MEANING_PACKED: [u8; packed_len(&HEADERS_WITH_A_MEANING)] = pack(&HEADERS_WITH_A_MEANING);

/// `idempotencyHeader`: an HTTP field name (RFC 9110 token characters) that a script may set
/// (not a forbidden request-header name such as `content-length` or `host`) and that means
/// nothing else in a request (not `content-type`, `authorization`, ...: see [`has_a_meaning`]).
pub fn header_name(value: &str) -> Result<String, OptionError> {
    // `matches!`, not `<[u8]>::contains`, which pulls in core's `memchr`.
    let token = |b: u8| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            )
    };
    if !value.is_empty()
        && value.bytes().all(token)
        && !is_forbidden_request_header(value)
        && !has_a_meaning(value)
    {
        Ok(value.to_string())
    } else {
        Err(OptionError::new("idempotencyHeader", HEADER_NAME_EXPECTED))
    }
}

/// Every option `retryFetch` takes, by its JavaScript name.
pub const RETRY_OPTION_NAMES: [&str; 28] = [
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
    "followAccepted",
    "signal",
    "shouldRetry",
    "onRetry",
    "beforeRetry",
    "onSettled",
    "headers",
    "fetch",
    "budget",
    "throttle",
    "breaker",
];

/// Names that do not belong in `init` (fetch's `RequestInit`) but are retry options: ours
/// (but `signal` and `headers`, which both take) and the usual names of other retry libraries (ky's
/// `retry`, `timeout`, `hooks`; axios-retry's `retries`, `retryDelay`, `retryCondition`;
/// fetch-retry's `retryOn`; p-retry's `onFailedAttempt`). Found in `init`, they would be
/// silently ignored, so the call is a `TypeError` that points at the third argument.
pub const FOREIGN_RETRY_NAMES: [&str; 9] = [
    "retry",
    "retries",
    "timeout",
    "retryDelay",
    "retryCondition",
    "retryOn",
    "hooks",
    "onFailedAttempt",
    "throwHttpErrors",
];

/// Is `name`, found in `init`, a retry option put there by mistake ([`FOREIGN_RETRY_NAMES`],
/// or one of ours but `signal` and `headers`)?
///
/// ```
/// use retry_fetch::core::options::misplaced_in_init;
/// assert!(misplaced_in_init("maxAttempts") && misplaced_in_init("retry") && misplaced_in_init("timeout"));
/// assert!(!misplaced_in_init("signal") && !misplaced_in_init("headers") && !misplaced_in_init("method"));
/// ```
pub fn misplaced_in_init(name: &str) -> bool {
    (name != "signal" && name != "headers" && RETRY_OPTION_NAMES.contains(&name))
        || listed(&FOREIGN_PACKED, name)
}

/// [`FOREIGN_RETRY_NAMES`] as one list ([`pack`]).
const FOREIGN_PACKED: [u8; packed_len(&FOREIGN_RETRY_NAMES)] = pack(&FOREIGN_RETRY_NAMES);

/// The known name closest to a misspelled `name` (`maxAttemps` -> `maxAttempts`), by
/// case-insensitive optimal-string-alignment distance (Levenshtein plus adjacent swaps); `None` when nothing is close (more than a
/// third of the name would have to change).
pub fn closest_name<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    let (best, distance) = known
        .iter()
        .map(|k| (*k, strsim::osa_distance(&lower, &k.to_ascii_lowercase())))
        .min_by_key(|(_, d)| *d)?;
    let limit = (name.chars().count().max(best.len()) / 3).max(2);
    (distance <= limit).then_some(best)
}

/// `maxBufferedBodyBytes`: an integer from 0 to 2^31 - 1.
pub fn body_limit(v: f64) -> Result<u32, OptionError> {
    if is_integer(v) && (0.0..=MAX_TIMER_MS).contains(&v) {
        Ok(v as u32)
    } else {
        Err(OptionError::new(
            "maxBufferedBodyBytes",
            BUFFERED_BYTES_EXPECTED,
        ))
    }
}

/// The `count` argument of `backoffDelays`: an integer from 0 to 10000.
pub fn delay_count(v: f64) -> Result<u32, OptionError> {
    if is_integer(v) && (0.0..=10_000.0).contains(&v) {
        Ok(v as u32)
    } else {
        Err(OptionError::new("count", "an integer from 0 to 10000"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_limit_is_timeout_shortened_to_the_deadline_left() {
        let timed = |timeout_ms| RetryPolicy {
            timeout_ms,
            ..RetryPolicy::default()
        };
        assert_eq!(timed(None).attempt_limit_ms(None), None);
        assert_eq!(timed(Some(500.0)).attempt_limit_ms(None), Some(500.0));
        assert_eq!(timed(None).attempt_limit_ms(Some(300.0)), Some(300.0));
        assert_eq!(
            timed(Some(500.0)).attempt_limit_ms(Some(300.0)),
            Some(300.0)
        );
        assert_eq!(
            timed(Some(200.0)).attempt_limit_ms(Some(300.0)),
            Some(200.0)
        );
        assert_eq!(timed(Some(200.0)).attempt_limit_ms(Some(0.0)), Some(0.0));
    }

    #[test]
    fn defaults_match_the_documented_contract() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_attempts, 3);
        assert_eq!(p.base_delay_ms, 500.0);
        assert_eq!(p.factor, 2.0);
        assert_eq!(p.max_delay_ms, 30_000.0);
        assert_eq!(p.jitter, Jitter::Full);
        assert_eq!(p.retry_on_status, vec![408, 429, 500, 502, 503, 504]);
        assert!(p.retry_on_network_error && p.retry_on_timeout && p.respect_retry_after);
        assert!(!p.retry_headers);
        assert_eq!(p.timeout_ms, None);
        assert_eq!(p.deadline_ms, None);
        assert_eq!(p.retry_after_cap_ms(), 30_000.0);
        assert_eq!(p.idempotency_key, KeyMode::Auto);
        assert_eq!(p.idempotency_header, "Idempotency-Key");
        assert_eq!(p.idempotency_key_format, KeyFormat::Plain);
        assert_eq!(p.max_buffered_body_bytes, 1_048_576);
        assert!(!p.follow_accepted);
    }

    #[test]
    fn max_attempts_accepts_only_integers_in_range() {
        assert_eq!(max_attempts(1.0), Ok(1));
        assert_eq!(max_attempts(100.0), Ok(100));
        for bad in [
            0.0,
            101.0,
            2.5,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let err = max_attempts(bad).unwrap_err();
            assert_eq!(err.option, "maxAttempts");
        }
    }

    #[test]
    fn durations_reject_nan_infinity_and_negatives() {
        for bad in [f64::NAN, f64::INFINITY, -1.0, -0.5] {
            assert!(non_negative_ms("baseDelayMs", bad).is_err());
            assert!(positive_ms("timeoutMs", bad).is_err());
        }
        assert!(positive_ms("timeoutMs", 0.0).is_err());
        assert!(positive_ms("deadlineMs", 2_147_483_648.0).is_err());
        assert_eq!(non_negative_ms("maxDelayMs", 1e300), Ok(MAX_TIMER_MS));
        assert_eq!(non_negative_ms("baseDelayMs", 0.0), Ok(0.0));
    }

    #[test]
    fn factor_and_statuses() {
        assert!(factor(0.5).is_err());
        assert!(factor(f64::NAN).is_err());
        assert_eq!(factor(1.5), Ok(1.5));
        assert_eq!(status_code(503.0), Ok(503));
        assert!(status_code(99.0).is_err());
        assert!(status_code(600.0).is_err());
        assert!(status_code(503.5).is_err());
    }

    #[test]
    fn names() {
        assert_eq!(jitter("decorrelated"), Ok(Jitter::Decorrelated));
        assert_eq!(jitter("Full").unwrap_err().option, "jitter");
        assert_eq!(key_format("sf-string"), Ok(KeyFormat::SfString));
        assert!(key_format("quoted").is_err());
        assert_eq!(key_mode("auto"), Ok(KeyMode::Auto));
        assert_eq!(key_mode("order-42"), Ok(KeyMode::Fixed("order-42".into())));
        assert!(key_mode("").is_err());
        assert!(key_mode("new\nline").is_err());
        assert!(key_mode("   ").is_err());
        assert!(key_mode("a b").is_err());
        assert!(key_mode(&"k".repeat(256)).is_err());
        // Another case of 'auto' would be one literal key shared by every call.
        for near in ["Auto", "AUTO", "aUTO"] {
            assert_eq!(
                key_mode(near).map_err(|e| e.expected),
                Err(KEY_MODE_EXPECTED),
                "{near}"
            );
        }
        assert_eq!(key_mode("autos"), Ok(KeyMode::Fixed("autos".into())));
        assert_eq!(header_name("X-Request-Key"), Ok("X-Request-Key".into()));
        assert!(header_name("Bad Header").is_err());
        assert!(header_name("").is_err());
        for forbidden in [
            "content-length",
            "Host",
            "COOKIE",
            "sec-fetch-mode",
            "Proxy-Authorization",
            "transfer-encoding",
            "Content-Type",
            "authorization",
            "If-Match",
            "X-Retry-Count",
        ] {
            assert_eq!(
                header_name(forbidden).unwrap_err().option,
                "idempotencyHeader",
                "{forbidden}"
            );
        }
        assert!(header_name("Idempotency-Key").is_ok());
    }

    #[test]
    fn which_requests_may_get_a_key_of_ours() {
        assert!(KeyMode::Fixed("k".into()).may_add_key(true));
        assert!(KeyMode::Auto.may_add_key(false));
        assert!(!KeyMode::Auto.may_add_key(true));
        assert!(!KeyMode::Off.may_add_key(false));
    }

    #[test]
    fn misspelled_names_find_the_closest_known_one() {
        assert_eq!(
            closest_name("maxAttemps", &RETRY_OPTION_NAMES),
            Some("maxAttempts")
        );
        assert_eq!(
            closest_name("timeout", &RETRY_OPTION_NAMES),
            Some("timeoutMs")
        );
        assert_eq!(
            closest_name("retryOnStatuses", &RETRY_OPTION_NAMES),
            Some("retryOnStatus")
        );
        assert_eq!(
            closest_name("maxtoken", &["maxTokens", "tokenRatio"]),
            Some("maxTokens")
        );
        assert_eq!(
            closest_name("completelyUnrelatedThing", &RETRY_OPTION_NAMES),
            None
        );
    }
}
