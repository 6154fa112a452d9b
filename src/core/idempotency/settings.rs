//! The options of `idempotency()` and `idempotent()`: defaults, bounds, and the `TypeError`
//! texts of each (`*_EXPECTED`), shared by the shell and the JavaScript stores.

use crate::core::options::OptionError;

pub use crate::core::options::MAX_TIMER_MS;

/// Default header that carries the key: `Idempotency-Key` (the IETF draft's, and Stripe's).
pub const DEFAULT_HEADER: &str = "Idempotency-Key";

/// Default time a completed response is kept: 24 hours (what Stripe keeps).
pub const DEFAULT_TTL_MS: f64 = 86_400_000.0;

/// Default lifetime of a lock: 60 s. A lock whose holder died (crash, hang) stops counting
/// after this, and the next request with the key runs the handler.
pub const DEFAULT_LOCK_TIMEOUT_MS: f64 = 60_000.0;

/// Default interval at which a waiting request polls the store: 25 ms.
pub const DEFAULT_POLL_MS: f64 = 25.0;

/// Default `storeTimeoutMs`: 5 s. A store call made before the handler runs (taking the key,
/// reading the secret, polling a held key) that has not answered after this gets the request
/// a 503 with `Retry-After`, nothing run: a store that hangs (a paused Redis, a connection that
/// went silent, a pool with no free connection) sheds the requests it cannot serve instead of
/// holding every one of them for as long as it hangs.
pub const DEFAULT_STORE_TIMEOUT_MS: f64 = 5_000.0;

/// Default `maxBodyBytes`: 1 MiB. The body is read (to fingerprint it) before the handler
/// runs, so the limit bounds the memory one request can take.
pub const DEFAULT_MAX_BODY_BYTES: f64 = 1_048_576.0;

/// The longest `ttlMs` accepted: 365 days.
pub const MAX_TTL_MS: f64 = 31_536_000_000.0;

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
    /// `storeTimeoutMs`: how long a store call made before the handler runs may take before
    /// the request is answered 503 (`Retry-After`), nothing run. Calls made after the handler
    /// ran (storing its answer, renewing, releasing) are waited for: their outcome is what
    /// tells whether the answer was kept. Default [`DEFAULT_STORE_TIMEOUT_MS`] (5 s).
    pub store_timeout_ms: f64,
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
            store_timeout_ms: DEFAULT_STORE_TIMEOUT_MS,
            accept_after_ms: None,
        }
    }
}

/// Is a live holder's renewal overdue at `now` (ms): has no lease of its begun in the last two
/// renewal intervals (`leased_at`: when the last one began)? A holder renewing every interval
/// misses two only when the event loop was blocked, and its lease (three intervals) may lapse
/// in the store before the late renewal runs; a duplicate in the same process must not take
/// the key meanwhile (the holder's renewal takes it again).
///
/// ```
/// use retry_fetch::core::idempotency::renewal_overdue;
/// assert!(!renewal_overdue(0.0, 333.0, 665.0) && renewal_overdue(0.0, 333.0, 666.0));
/// ```
pub fn renewal_overdue(leased_at: f64, interval_ms: f64, now: f64) -> bool {
    now - leased_at >= 2.0 * interval_ms
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

    /// How long a holder waits for a write or read of the run history that should land while
    /// it holds the key (a job's start and its key's runs before `fn` runs; a run's end before
    /// it frees the key): the renewal interval, at most a second. With a store whose history
    /// shares a pool with the keys in progress, a holder must never wait for it without end
    /// (every connection could be a holder's); past this the holder goes on and the write
    /// finishes in the background.
    pub fn history_wait_ms(&self) -> f64 {
        self.renew_interval_ms().min(1000.0)
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

/// What `pollMs`, `handlerTimeoutMs` and `storeTimeoutMs` must be.
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

/// `storeTimeoutMs`: an integer from 1 to 2^31 - 1.
pub fn store_timeout_ms(v: f64) -> Result<f64, OptionError> {
    if integer_in(v, 1.0, MAX_TIMER_MS) {
        Ok(v)
    } else {
        Err(OptionError::new("storeTimeoutMs", POSITIVE_MS_EXPECTED))
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
pub const SERVER_OPTION_NAMES: [&str; 19] = [
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
    "storeTimeoutMs",
    "ignoredMethods",
    "acceptAfterMs",
    "history",
    "onStoreError",
    "onError",
    "onEvent",
];

/// Every option `idempotent(fn, options)` takes, by its JavaScript name.
pub const JOB_OPTION_NAMES: [&str; 15] = [
    "store",
    "key",
    "scope",
    "secret",
    "ttlMs",
    "lockTimeoutMs",
    "concurrent",
    "waitTimeoutMs",
    "pollMs",
    "storeTimeoutMs",
    "maxRuns",
    "history",
    "onStoreError",
    "onEvent",
    "onDeadLetter",
];

/// Should `method` carry a key when the `required` option is not given? POST and PATCH (the
/// methods RFC 9110 does not make idempotent that APIs use for side effects), in any case.
pub fn key_required_by_default(method: &str) -> bool {
    method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PATCH")
}
