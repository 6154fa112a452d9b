//! Classification: which outcomes are transient, and when a retry is safe.
//!
//! The safe-to-retry matrix (retry only what is idempotent, by method or by key):
//!
//! | request | status in `retryOnStatus` | 409 | network error | timeout |
//! |---|---|---|---|---|
//! | idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) | retry | no | retry | retry |
//! | any method with an idempotency key | retry | retry | retry | retry |
//! | non-idempotent method, no key | only 408 and 429 | no | never | never |
//!
//! A non-idempotent request without a key is retried only when the server stated that it
//! did not process it (408 Request Timeout, 429 Too Many Requests): after a network error, a
//! timeout or a 5xx it is unknown whether it took effect, and a retry may charge twice.

use super::options::RetryPolicy;

/// What one attempt produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response with this status.
    Status(u16),
    /// The transport failed (connection refused or reset, DNS, CORS): fetch rejected.
    NetworkError,
    /// The per-attempt timeout (or the deadline) fired before a response arrived.
    Timeout,
}

/// Why an attempt is retried (the `reason` given to `onRetry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryReason {
    /// `'status'`: a retryable status code.
    Status,
    /// `'network'`: a network error.
    Network,
    /// `'timeout'`: the attempt timed out.
    Timeout,
}

impl RetryReason {
    /// The JavaScript name: `'status'`, `'network'` or `'timeout'`.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryReason::Status => "status",
            RetryReason::Network => "network",
            RetryReason::Timeout => "timeout",
        }
    }
}

/// The verdict on one outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A success or a permanent failure: hand it to the caller as it is.
    Final,
    /// A transient failure that is safe to retry.
    Retryable(RetryReason),
    /// A transient failure that is not safe to retry: a non-idempotent request without a key
    /// whose effect is unknown.
    UnsafeToRetry(RetryReason),
}

/// Is `method` idempotent per RFC 9110 section 9.2.2 (GET, HEAD, OPTIONS, TRACE, PUT,
/// DELETE)? Compared ASCII-case-insensitively, as fetch normalises these names. POST, PATCH
/// and every non-standard method are not.
pub fn is_idempotent_method(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]
        .iter()
        .any(|m| m.eq_ignore_ascii_case(method))
}

/// Status codes a server uses to say "I did not process this, try again": safe to retry even
/// for a non-idempotent request without a key.
fn status_says_not_processed(status: u16) -> bool {
    status == 408 || status == 429
}

/// The response headers by which a server says whether a request may be sent again:
/// `X-Should-Retry` (OpenAI's, Anthropic's and other APIs') and `Stripe-Should-Retry`
/// (Stripe's).
pub const SHOULD_RETRY_HEADERS: [&str; 2] = ["x-should-retry", "stripe-should-retry"];

/// The response header by which a server says an answer is the one it stored for the
/// request's idempotency key, replayed (Stripe's, the IETF draft's servers', the companion's):
/// `Idempotent-Replayed: true`.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Is a keyed request's failed answer the server's stored answer for its key (its
/// [`REPLAYED_HEADER`] says `true`, any case, surrounding spaces ignored)? Then it is final:
/// the same key sent again gets the same answer again, replayed, and a call following a `202`
/// by repeating the request has its result (a failure the server stored, not a passing one).
///
/// ```
/// use retry_fetch::core::classify::answer_is_replayed;
/// assert!(answer_is_replayed(Some(" True ")) && answer_is_replayed(Some("true, true")));
/// assert!(!answer_is_replayed(Some("false")) && !answer_is_replayed(None));
/// ```
pub fn answer_is_replayed(value: Option<&str>) -> bool {
    value.is_some_and(|v| list_has(v, "true"))
}

/// Does the header value `value`, a list (`a, b`: a header sent twice reaches fetch joined so),
/// hold `token` (any case, the spaces around an item ignored)?
fn list_has(value: &str, token: &str) -> bool {
    value
        .as_bytes()
        .split(|b| *b == b',')
        .any(|item| item.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Does a failed answer's `X-Should-Retry` (or `Stripe-Should-Retry`) value say not to retry?
/// Only `false` (any case, surrounding spaces ignored; the header sent twice, `false, false`,
/// or any item of a list `false`) does: the server knows the request
/// must not be sent again (it may have taken effect), and a veto can only send less. `true`
/// changes nothing: which statuses are retried is the caller's `retryOnStatus`, and whether a
/// retry is safe the method's and the key's.
///
/// ```
/// use retry_fetch::core::classify::server_refuses_retry;
/// assert!(server_refuses_retry(Some(" False ")));
/// assert!(server_refuses_retry(Some("false, false")) && server_refuses_retry(Some("true,false")));
/// assert!(!server_refuses_retry(Some("true")) && !server_refuses_retry(Some("no")) && !server_refuses_retry(None));
/// ```
pub fn server_refuses_retry(value: Option<&str>) -> bool {
    value.is_some_and(|v| list_has(v, "false"))
}

/// Is `outcome` a transient failure (a status in `retryOnStatus`, a network error, a
/// timeout), whatever the method? This is what the retry budget and the circuit breaker count
/// as a failure.
pub fn is_transient(policy: &RetryPolicy, outcome: Outcome) -> bool {
    match outcome {
        Outcome::Status(status) => policy.retry_on_status.contains(&status),
        Outcome::NetworkError | Outcome::Timeout => true,
    }
}

/// Classify one outcome of a request with the given method safety and key.
///
/// `idempotent`: the method is idempotent; `has_key`: the request carries an idempotency key
/// (added by us or by the caller).
pub fn classify(
    policy: &RetryPolicy,
    outcome: Outcome,
    idempotent: bool,
    has_key: bool,
) -> Verdict {
    let safe = idempotent || has_key;
    match outcome {
        Outcome::Status(status) => {
            let keyed_conflict = has_key && status == 409 && policy.retry_keyed_conflict;
            let transient = policy.retry_on_status.contains(&status) || keyed_conflict;
            if !transient {
                Verdict::Final
            } else if safe || status_says_not_processed(status) {
                Verdict::Retryable(RetryReason::Status)
            } else {
                Verdict::UnsafeToRetry(RetryReason::Status)
            }
        }
        Outcome::NetworkError | Outcome::Timeout => {
            let (reason, enabled) = if outcome == Outcome::Timeout {
                (RetryReason::Timeout, policy.retry_on_timeout)
            } else {
                (RetryReason::Network, policy.retry_on_network_error)
            };
            if !enabled {
                Verdict::Final
            } else if safe {
                Verdict::Retryable(reason)
            } else {
                Verdict::UnsafeToRetry(reason)
            }
        }
    }
}

/// The ports fetch refuses to connect to (the Fetch Standard's "bad ports"): a request to one
/// fails every time, so it is a `TypeError` before anything is sent, never retried.
pub const BAD_PORTS: [u16; 81] = [
    0, 1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101,
    102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427,
    465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990,
    993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667,
    6668, 6669, 6679,
];

/// Why fetch can never send to `url` (an absolute, normalised URL, as `Request.url` gives
/// it), if it cannot: a scheme other than `http:`, `https:`, `data:` and `blob:` (`ftp:`,
/// `file:` in Node), or a bad port. Such a request fails every time, so it is refused before
/// anything is sent rather than retried as a network error.
///
/// ```
/// use retry_fetch::core::classify::unfetchable;
/// assert_eq!(unfetchable("https://example.com/"), None);
/// assert_eq!(unfetchable("http://[::1]:8080/x"), None);
/// assert!(unfetchable("ftp://example.com/").is_some());
/// assert!(unfetchable("about:blank").is_some());
/// assert!(unfetchable("http://127.0.0.1:6000/").is_some());
/// assert!(unfetchable("http://user:6000@example.com/").is_none());
/// ```
pub fn unfetchable(url: &str) -> Option<&'static str> {
    let (scheme, rest) = cut(url, b':', false)?;
    match scheme.to_ascii_lowercase().as_str() {
        "http" | "https" => {}
        "data" | "blob" => return None,
        _ => return Some("fetch cannot send a request with this URL scheme"),
    }
    let authority = authority(rest)?;
    let host_port = cut(authority, b'@', true).map_or(authority, |(_, h)| h);
    let port = match cut(host_port, b':', true) {
        Some((host, port))
            if !has_byte(port, b']')
                && (host.as_bytes().first() != Some(&b'[')
                    || host.as_bytes().last() == Some(&b']')) =>
        {
            port
        }
        _ => return None,
    };
    match port.parse::<u16>() {
        Ok(p) if BAD_PORTS.contains(&p) => {
            Some("fetch refuses this port (a Fetch Standard \"bad port\")")
        }
        _ => None,
    }
}

/// The codes (a fetch `TypeError`'s `cause.code`) by which Node's fetch refuses, before it
/// connects, a request it will never send: a header its HTTP client never sends
/// (`Transfer-Encoding`, `Connection`, `Keep-Alive`, `Upgrade`: `UND_ERR_INVALID_ARG`;
/// `Expect`: `UND_ERR_NOT_SUPPORTED`). (A `Content-Length` that is not the body's is found
/// only once the request was sent: not one of them.)
pub const UNSENT_CAUSE_CODES: [&str; 2] = ["UND_ERR_INVALID_ARG", "UND_ERR_NOT_SUPPORTED"];

/// The most a `keepalive` request's body may hold, in bytes (the Fetch Standard's 64 KiB
/// for every keepalive request in flight: one body over it is refused whatever else is).
pub const KEEPALIVE_BODY_MAX: f64 = 65_536.0;

/// What a browser's fetch is given, as far as its refusals go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BrowserRequest<'a> {
    /// `request.mode`: `'cors'`, `'no-cors'`, `'same-origin'`, `'navigate'`.
    pub mode: &'a str,
    /// `request.redirect`: `'follow'`, `'error'`, `'manual'`.
    pub redirect: &'a str,
    /// The URL's origin is the page's (or the worker's).
    pub same_origin: bool,
    /// `request.keepalive`.
    pub keepalive: bool,
    /// The body's length in bytes, at least (`None`: no body, or not known).
    pub body_bytes: Option<f64>,
}

/// Why a browser's fetch refuses `r` every time, before anything is sent (the Fetch
/// Standard's network errors that depend on the request alone), if it does: `mode:
/// 'same-origin'` to another origin, `mode: 'no-cors'` to another origin with a `redirect`
/// other than `'follow'`, a `keepalive` body over [`KEEPALIVE_BODY_MAX`]. Such a failure
/// reads as a network error (`TypeError: Failed to fetch`) but is none: it is not retried.
///
/// ```
/// use retry_fetch::core::classify::{refused_by_browser, BrowserRequest};
/// let r = BrowserRequest { mode: "cors", redirect: "follow", same_origin: false, keepalive: false, body_bytes: None };
/// assert_eq!(refused_by_browser(r), None);
/// assert!(refused_by_browser(BrowserRequest { mode: "same-origin", ..r }).is_some());
/// assert!(refused_by_browser(BrowserRequest { mode: "no-cors", redirect: "manual", ..r }).is_some());
/// let same = BrowserRequest { same_origin: true, ..r };
/// assert_eq!(refused_by_browser(BrowserRequest { mode: "no-cors", redirect: "manual", ..same }), None);
/// assert!(refused_by_browser(BrowserRequest { keepalive: true, body_bytes: Some(70_000.0), ..r }).is_some());
/// assert_eq!(refused_by_browser(BrowserRequest { keepalive: true, body_bytes: Some(65_536.0), ..r }), None);
/// ```
pub fn refused_by_browser(r: BrowserRequest<'_>) -> Option<&'static str> {
    if r.mode == "same-origin" && !r.same_origin {
        Some("mode 'same-origin' to another origin")
    } else if r.mode == "no-cors" && r.redirect != "follow" && !r.same_origin {
        Some("mode 'no-cors' to another origin with a redirect other than 'follow'")
    } else if r.keepalive && r.body_bytes.is_some_and(|n| n > KEEPALIVE_BODY_MAX) {
        Some("a keepalive request's body over 64 KiB")
    } else {
        None
    }
}

/// `s` split around its first (`last`: its last) `byte`, an ASCII one, which neither part
/// keeps. A byte loop: `str::split_once` with a `char` pulls in core's `memchr`.
pub(crate) fn cut(s: &str, byte: u8, last: bool) -> Option<(&str, &str)> {
    let mut bytes = s.as_bytes().iter();
    let at = if last {
        bytes.rposition(|b| *b == byte)
    } else {
        bytes.position(|b| *b == byte)
    }?;
    Some((s.get(..at)?, s.get(at + 1..)?))
}

/// `s` without the whitespace around it: the same as `str::trim` for every input (the same
/// characters, Unicode's `White_Space`, as [`is_space`] lists them), as a loop over its
/// characters: `str::trim` links core's `White_Space` table and a pattern searcher.
pub(crate) fn trim(s: &str) -> &str {
    let mut chars = trim_start(s).chars();
    let mut kept = chars.as_str();
    while chars.next_back().is_some_and(is_space) {
        kept = chars.as_str();
    }
    kept
}

/// `s` without its leading whitespace: the same as `str::trim_start`, as [`trim`].
pub(crate) fn trim_start(s: &str) -> &str {
    let mut chars = s.chars();
    let mut rest = chars.as_str();
    while chars.next().is_some_and(is_space) {
        rest = chars.as_str();
    }
    rest
}

/// `char::is_whitespace`, spelled out: Unicode's `White_Space` characters.
fn is_space(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// Does `s` contain `byte` (an ASCII one)? A byte loop, as [`cut`].
fn has_byte(s: &str, byte: u8) -> bool {
    s.bytes().any(|b| b == byte)
}

/// Is `status` one a response can have: a whole number from 100 to 999 (three digits, as
/// HTTP writes it), or 0 (a browser's opaque response)? A custom `fetch` that resolves with a
/// `status` of `NaN`, 42 or 200.5 did not give a response.
///
/// ```
/// use retry_fetch::core::classify::is_response_status;
/// assert!(is_response_status(503.0) && is_response_status(0.0));
/// assert!(!is_response_status(f64::NAN) && !is_response_status(42.0) && !is_response_status(200.5));
/// ```
pub fn is_response_status(status: f64) -> bool {
    status == 0.0 || ((100.0..=999.0).contains(&status) && status.fract() == 0.0)
}

/// Can a request of `method` carry a body? Not a GET nor a HEAD (fetch refuses a body on
/// either; node:http ignores one). Compared without case.
///
/// ```
/// use retry_fetch::core::classify::method_can_have_body;
/// assert!(method_can_have_body("POST") && !method_can_have_body("get"));
/// ```
pub fn method_can_have_body(method: &str) -> bool {
    !method.eq_ignore_ascii_case("GET") && !method.eq_ignore_ascii_case("HEAD")
}

/// Why fetch would not follow a redirect to `url` (the Fetch Standard: only to an `http:` or
/// `https:` URL, and not to a port [`unfetchable`] refuses), or `None`.
///
/// ```
/// use retry_fetch::core::classify::redirect_refused;
/// assert_eq!(redirect_refused("https://example.com/next"), None);
/// assert!(redirect_refused("data:text/plain,paid").is_some());
/// assert!(redirect_refused("http://127.0.0.1:6000/").is_some());
/// ```
pub fn redirect_refused(url: &str) -> Option<&'static str> {
    let scheme = cut(url, b':', false).map_or("", |(s, _)| s);
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Some("fetch follows a redirect only to an http: or https: URL");
    }
    unfetchable(url)
}

/// Does the absolute `url` carry a user name or password (`https://user:pass@host/`)? A
/// `Request` of such a URL cannot be made (the Fetch Standard), so a URL a server names (a
/// 202's poll URL) that has them names nothing fetch can send.
///
/// ```
/// use retry_fetch::core::classify::has_credentials;
/// assert!(has_credentials("https://user:pass@api.example/op"));
/// assert!(has_credentials("http://token@api.example/"));
/// assert!(!has_credentials("https://api.example/op?by=a@b#c@d"));
/// ```
pub fn has_credentials(url: &str) -> bool {
    cut(url, b':', false)
        .and_then(|(_, rest)| authority(rest))
        .is_some_and(|a| has_byte(a, b'@'))
}

/// The authority (user info, host and port) of what follows a URL's scheme and its `:`
/// (`//user@host:port/path`), or `None` when it has none.
fn authority(after_scheme: &str) -> Option<&str> {
    let rest = after_scheme.strip_prefix("//")?;
    let end = rest
        .bytes()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    rest.get(..end)
}

/// The Fetch Standard's request-body header names: not sent when a redirect turns a request
/// into a `GET` without a body, nor by a poll after a 202.
pub const REQUEST_BODY_HEADERS: [&str; 5] = [
    "content-type",
    "content-length",
    "content-encoding",
    "content-language",
    "content-location",
];

/// The credentials not sent to another origin after a redirect or by a poll of another
/// origin: `Authorization` (the Fetch Standard), `Cookie` and `Proxy-Authorization` (as
/// Node's fetch drops them too).
pub const CROSS_ORIGIN_DROPPED_HEADERS: [&str; 3] =
    ["authorization", "proxy-authorization", "cookie"];

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::*;
    use RetryReason as R;
    use Verdict::*;

    fn p() -> RetryPolicy {
        RetryPolicy::default()
    }

    #[test]
    fn trim_is_str_trim() {
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            assert_eq!(is_space(c), c.is_whitespace(), "{:x}", c as u32);
        }
        for s in [
            "",
            " ",
            "a",
            " a ",
            "\t\u{a0}x y\u{3000}\n",
            "\u{85}",
            "\u{2029}é\u{200b}",
            "x\u{180e}",
        ] {
            assert_eq!(trim(s), s.trim(), "{s:?}");
            assert_eq!(trim_start(s), s.trim_start(), "{s:?}");
        }
    }

    #[test]
    fn idempotent_methods_per_rfc_9110() {
        for m in [
            "GET", "get", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "delete",
        ] {
            assert!(is_idempotent_method(m), "{m}");
        }
        for m in ["POST", "PATCH", "CONNECT", "PURGE", "LOCK", ""] {
            assert!(!is_idempotent_method(m), "{m}");
        }
    }

    #[test]
    fn seed_000_status_table_for_idempotent_requests() {
        for s in [408, 429, 500, 502, 503, 504] {
            assert_eq!(
                classify(&p(), Status(s), true, false),
                Retryable(R::Status),
                "{s}"
            );
        }
        for s in [200, 201, 301, 400, 401, 403, 404, 409, 422, 501] {
            assert_eq!(classify(&p(), Status(s), true, false), Final, "{s}");
        }
        assert_eq!(
            classify(&p(), NetworkError, true, false),
            Retryable(R::Network)
        );
        assert_eq!(classify(&p(), Timeout, true, false), Retryable(R::Timeout));
    }

    #[test]
    fn non_idempotent_without_key_retries_only_not_processed() {
        assert_eq!(
            classify(&p(), Status(429), false, false),
            Retryable(R::Status)
        );
        assert_eq!(
            classify(&p(), Status(408), false, false),
            Retryable(R::Status)
        );
        for s in [500, 502, 503, 504] {
            assert_eq!(
                classify(&p(), Status(s), false, false),
                UnsafeToRetry(R::Status),
                "{s}"
            );
        }
        assert_eq!(
            classify(&p(), NetworkError, false, false),
            UnsafeToRetry(R::Network)
        );
        assert_eq!(
            classify(&p(), Timeout, false, false),
            UnsafeToRetry(R::Timeout)
        );
        assert_eq!(classify(&p(), Status(409), false, false), Final);
    }

    #[test]
    fn a_key_makes_everything_transient_retryable_including_409() {
        for s in [408, 409, 429, 500, 502, 503, 504] {
            assert_eq!(
                classify(&p(), Status(s), false, true),
                Retryable(R::Status),
                "{s}"
            );
        }
        assert_eq!(
            classify(&p(), NetworkError, false, true),
            Retryable(R::Network)
        );
        assert_eq!(classify(&p(), Timeout, false, true), Retryable(R::Timeout));
        assert_eq!(classify(&p(), Status(400), false, true), Final);
    }

    #[test]
    fn a_list_the_caller_gives_is_the_whole_list() {
        let given = RetryPolicy {
            retry_on_status: vec![503],
            retry_keyed_conflict: false,
            ..p()
        };
        assert_eq!(classify(&given, Status(409), false, true), Final);
        let empty = RetryPolicy {
            retry_on_status: vec![],
            retry_keyed_conflict: false,
            ..p()
        };
        assert_eq!(classify(&empty, Status(409), false, true), Final);
        let with_409 = RetryPolicy {
            retry_on_status: vec![409],
            retry_keyed_conflict: false,
            ..p()
        };
        assert_eq!(
            classify(&with_409, Status(409), false, true),
            Retryable(R::Status)
        );
    }

    #[test]
    fn switches_turn_off_error_retries() {
        let policy = RetryPolicy {
            retry_on_network_error: false,
            retry_on_timeout: false,
            ..p()
        };
        assert_eq!(classify(&policy, NetworkError, true, true), Final);
        assert_eq!(classify(&policy, Timeout, true, true), Final);
        let only_503 = RetryPolicy {
            retry_on_status: vec![503],
            ..p()
        };
        assert_eq!(classify(&only_503, Status(502), true, false), Final);
        assert_eq!(
            classify(&only_503, Status(503), true, false),
            Retryable(R::Status)
        );
    }
}
