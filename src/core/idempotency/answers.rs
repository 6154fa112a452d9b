//! What becomes of a handler's answer or throw: stored and replayed, or the key freed (and
//! with a transactional store the handler's writes rolled back); which headers are kept.

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
    /// The companion stopped the handler (`handlerTimeoutMs`) and the answer is a failure
    /// that stop led to (a framework's error handler rendering the abort's throw as a 500):
    /// ended as that throw ([`after_throw`] with the companion's abort): the key freed, the
    /// caller answered the companion's 503 with `Retry-After`, nothing stored.
    Stopped,
}

/// The answer with `status` (with `Retry-After` or not) is stored ([`stores_answer`]),
/// except:
/// - a "not processed" answer ([`NOT_PROCESSED_STATUSES`], a `503` with `Retry-After`): freed;
/// - a `500` from a handler that wrote through a transactional store's `ctx.tx`: freed, its
///   writes rolled back. A 500 is what a framework answers for a handler that threw
///   half-way; committing its writes would keep half an operation under a failed answer;
/// - an answer that cannot be stored (`storable` false: too large, not JSON) from a handler
///   that wrote through a transactional store's `ctx.tx`: freed, so the effect is never
///   committed without its answer;
/// - a failure (a `5xx`) given after the companion aborted the handler's signal
///   (`aborted_by_companion`: `handlerTimeoutMs`): [`Ending::Stopped`]. A framework turns the
///   abort's throw into its error handler's 500, so such an answer is that throw, not the
///   handler's own: stored, it would replay a failure the companion caused. An answer the
///   handler still gave below 500 is its own, kept by the rules above.
///
/// ```
/// use retry_fetch::core::idempotency::{ending, Ending};
/// assert_eq!(ending(201, false, true, true, true, false), Ending::Store);
/// assert_eq!(ending(500, false, true, true, true, false), Ending::Free);
/// assert_eq!(ending(500, false, false, false, true, false), Ending::Store);
/// assert_eq!(ending(429, false, false, false, true, false), Ending::Free);
/// assert_eq!(ending(201, false, true, true, false, false), Ending::Free);
/// assert_eq!(ending(500, false, false, false, true, true), Ending::Stopped);
/// assert_eq!(ending(201, false, false, false, true, true), Ending::Store);
/// ```
pub fn ending(
    status: u16,
    has_retry_after: bool,
    transactional_store: bool,
    used_transaction: bool,
    storable: bool,
    aborted_by_companion: bool,
) -> Ending {
    let rolled_back = transactional_store && used_transaction && (status == 500 || !storable);
    if aborted_by_companion && status >= 500 {
        Ending::Stopped
    } else if rolled_back || !stores_answer(status, has_retry_after) {
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

/// Whether a header value can be sent in an HTTP/1.1 answer (RFC 9110 `field-value`: visible
/// ASCII, bytes above 0x7F, spaces and tabs): fetch's `Headers` takes some values node:http
/// refuses (a control byte such as ESC or DEL, in a file name put in `Content-Disposition`),
/// and an answer stored with one could never be sent, its replays neither. The companion leaves
/// such a header out of the answer it sends and stores, and says so to `onError`.
///
/// ```
/// use retry_fetch::core::idempotency::sendable_header_value;
/// assert!(sendable_header_value("attachment; filename=\"r\u{e9}sum\u{e9}.pdf\""));
/// assert!(sendable_header_value("a\tb"));
/// assert!(!sendable_header_value("a\u{1b}b"));
/// assert!(!sendable_header_value("a\u{7f}"));
/// ```
pub fn sendable_header_value(value: &str) -> bool {
    !value
        .chars()
        .any(|c| c != '\t' && (c < ' ' || c == '\u{7f}'))
}

/// The largest answer body the companion stores: 32 MiB. A larger answer is still sent, but
/// what is stored (and replayed) for its key is a 500 problem saying it was too large: the
/// store's record is one JSON string, and a body near V8's string limit would fail to encode.
pub const MAX_STORED_ANSWER_BYTES: usize = 32 * 1024 * 1024;
