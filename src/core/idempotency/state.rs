//! The per-key state machine: what a claim does with the record the store already holds
//! (replay, 422, wait or 409, take over a dead holder's lock).

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
    /// As [`Record::Held`], and the store can tell that the holder's request has another
    /// fingerprint than this one (`PostgresStore`: through the advisory locks each claim
    /// takes), though not which.
    HeldForOther,
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
/// | held by a live transaction, for another fingerprint (the store can tell) | — | mismatch (422) |
///
/// An expired lock is treated as absent whatever its fingerprint: its holder died before
/// storing anything, so nothing was answered under this key (Redis deletes such a lock by
/// itself through its `PX` expiry; this covers stores that do not, and clocks that differ).
/// A live lock with another fingerprint is a 422 at once rather than a wait, as the answer
/// cannot be anything else; so is a key held for another fingerprint, where the store can
/// tell that much without showing the holder's record.
///
/// ```
/// use retry_fetch::core::idempotency::{claim_action, Action, Record};
/// assert_eq!(claim_action(Record::Absent, "f", 0.0), Action::Process);
/// assert_eq!(claim_action(Record::Completed { fingerprint: "f" }, "f", 0.0), Action::Replay);
/// assert_eq!(claim_action(Record::Completed { fingerprint: "g" }, "f", 0.0), Action::Mismatch);
/// let lock = Record::InProgress { fingerprint: "f", lock_expires_at_ms: 1000.0 };
/// assert_eq!(claim_action(lock, "f", 999.0), Action::InProgress);
/// assert_eq!(claim_action(lock, "f", 1000.0), Action::LockExpired);
/// assert_eq!(claim_action(Record::Held, "f", 0.0), Action::InProgress);
/// assert_eq!(claim_action(Record::HeldForOther, "f", 0.0), Action::Mismatch);
/// ```
pub fn claim_action(record: Record<'_>, fingerprint: &str, now_ms: f64) -> Action {
    match record {
        Record::Absent => Action::Process,
        // `>=` or NaN: a lock with a nonsense expiry must not block the key forever.
        Record::InProgress {
            lock_expires_at_ms: exp,
            ..
        } if now_ms >= exp || exp.is_nan() => Action::LockExpired,
        Record::InProgress { fingerprint: f, .. } if f != fingerprint => Action::Mismatch,
        Record::InProgress { .. } | Record::Held => Action::InProgress,
        Record::HeldForOther => Action::Mismatch,
        Record::Completed { fingerprint: f } if f != fingerprint => Action::Mismatch,
        Record::Completed { .. } => Action::Replay,
    }
}
