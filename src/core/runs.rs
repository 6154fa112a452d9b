//! Long work and its trace, on the server: when a keyed request is answered `202 Accepted`
//! while its handler goes on, what each run's outcome is called, which earlier runs of a key
//! died with their holder, and when a job that keeps failing goes to the dead letters.
//!
//! The rules: *for long work, answer "accepted" and let the caller poll for "done"*; *every
//! run leaves a trace that can be analysed*; *when the retries of a job finally fail, it goes
//! to a dead-letter queue for a person to look at* (SQS's and RabbitMQ's redrive after a
//! maximum receive count). Pure: the shell (`src/wasm/server/`) brings the store and the clock.

use crate::core::options::OptionError;

/// How a run (or a delivery answered from the store) ended, as the run history records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handler's answer (the job's result) was stored and is replayed for the key.
    Stored,
    /// The delivery was answered from the store; nothing ran.
    Replayed,
    /// The handler threw after it started (or its answer was a failure kept for the key): the
    /// failure is stored and replayed.
    Failed,
    /// The handler failed (threw, answered 500, or an answer that cannot be stored) and its
    /// writes through the store's transaction were rolled back: the key is free again.
    RolledBack,
    /// The handler answered "not processed" (408, 425, 429, 503 with `Retry-After`), or the
    /// companion stopped it (`handlerTimeoutMs`): the key is free again.
    Freed,
    /// The result could not be stored (the store failed or the lock was lost).
    NotStored,
    /// The run's holder died (its process crashed) before it ended; a later run took the key.
    Crashed,
    /// The job failed [`max_runs`] times and was not run again: handed to `onDeadLetter`.
    DeadLettered,
    /// The delivery was not run: another run held the key (`'in-progress'`), or the key was
    /// used with another input (`'key-reused'`). Recorded for a job with `maxRuns`.
    Refused,
}

impl Outcome {
    /// The name the history and `onEvent` use (`'rolled-back'`).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Stored => "stored",
            Outcome::Replayed => "replayed",
            Outcome::Failed => "failed",
            Outcome::RolledBack => "rolled-back",
            Outcome::Freed => "freed",
            Outcome::NotStored => "not-stored",
            Outcome::Crashed => "crashed",
            Outcome::DeadLettered => "dead-lettered",
            Outcome::Refused => "refused",
        }
    }

    /// Does a run that ended so count against a job's `maxRuns`? A failure, a rollback, a
    /// result that was not stored and a holder's crash do; a stored result, a replay and a
    /// "not processed" answer do not.
    pub fn counts_as_failed(self) -> bool {
        matches!(
            self,
            Outcome::Failed | Outcome::RolledBack | Outcome::NotStored | Outcome::Crashed
        )
    }

    /// The outcome named `name`, if it is one.
    pub fn from_name(name: &str) -> Option<Outcome> {
        [
            Outcome::Stored,
            Outcome::Replayed,
            Outcome::Failed,
            Outcome::RolledBack,
            Outcome::Freed,
            Outcome::NotStored,
            Outcome::Crashed,
            Outcome::DeadLettered,
            Outcome::Refused,
        ]
        .into_iter()
        .find(|o| o.name() == name)
    }
}

/// What `onEvent(event)` is told, by `event.type`.
pub mod event {
    /// A run started: this request or job holds the key and its handler is about to run.
    pub const STARTED: &str = "run-started";
    /// A run ended (`event.run.outcome` says how).
    pub const ENDED: &str = "run-ended";
    /// A delivery was answered from the store.
    pub const REPLAYED: &str = "replayed";
    /// An earlier run of the key was found without an end while this one holds the key: its
    /// holder crashed.
    pub const CRASHED: &str = "holder-crashed";
    /// A keyed request's handler outlived `acceptAfterMs`: the caller was answered `202`.
    pub const ACCEPTED: &str = "accepted";
    /// A job reached `maxRuns` failed runs: not run again, handed to `onDeadLetter`.
    pub const DEAD_LETTERED: &str = "dead-lettered";
}

/// One earlier run of a key, as the history holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PastRun<'a> {
    /// The run's id.
    pub id: &'a str,
    /// Its scope.
    pub scope: &'a str,
    /// How it ended; `None` while it runs or if its holder died.
    pub outcome: Option<&'a str>,
}

/// The runs of `runs` (a key's history, read by a run that now holds the key) whose holders
/// crashed: those of the same scope without an outcome, other than `own_id`. A run is
/// recorded without an outcome only once it holds the key (a delivery that waits for the key
/// is recorded when it ends, not while it waits), and a run that holds the key has it alone:
/// so an earlier run that never ended held the key, and can no longer end.
///
/// ```
/// use retry_fetch::core::runs::{crashed, PastRun};
/// let runs = [
///     PastRun { id: "a", scope: "s", outcome: Some("freed") },
///     PastRun { id: "b", scope: "s", outcome: None },
///     PastRun { id: "c", scope: "other", outcome: None },
///     PastRun { id: "me", scope: "s", outcome: None },
/// ];
/// assert_eq!(crashed(&runs, "s", "me"), vec!["b"]);
/// ```
pub fn crashed<'a>(runs: &[PastRun<'a>], scope: &str, own_id: &str) -> Vec<&'a str> {
    runs.iter()
        .filter(|r| r.scope == scope && r.outcome.is_none() && r.id != own_id)
        .map(|r| r.id)
        .collect()
}

/// How many runs of the key in `scope` failed ([`Outcome::counts_as_failed`]), counting a run
/// without an end other than `own_id` as crashed ([`crashed`]). `runs` must be read once
/// this run holds the key: a copy read before it waited for the key shows runs that ended
/// since (a "not processed" one among them) as open.
pub fn failed_runs(runs: &[PastRun<'_>], scope: &str, own_id: &str) -> u32 {
    let failed = runs
        .iter()
        .filter(|r| r.scope == scope && r.id != own_id)
        .filter(|r| match r.outcome {
            None => true,
            Some(name) => Outcome::from_name(name).is_some_and(Outcome::counts_as_failed),
        })
        .count();
    u32::try_from(failed).unwrap_or(u32::MAX)
}

/// Is a job whose key has `failed` failed runs dead-lettered instead of run (`maxRuns`)?
///
/// ```
/// use retry_fetch::core::runs::dead_lettered;
/// assert!(!dead_lettered(2, Some(3)));
/// assert!(dead_lettered(3, Some(3)));
/// assert!(!dead_lettered(1000, None));
/// ```
pub fn dead_lettered(failed: u32, max_runs: Option<u32>) -> bool {
    max_runs.is_some_and(|max| failed >= max)
}

/// The `Retry-After` (whole seconds) of a `202 Accepted` answered after `accept_after_ms`: as
/// long again, at least one second. The caller's repeat then finds the run a little further on
/// without polling faster than the server chose to wait.
///
/// ```
/// use retry_fetch::core::runs::accepted_retry_after_s;
/// assert_eq!(accepted_retry_after_s(200.0), 1);
/// assert_eq!(accepted_retry_after_s(2500.0), 3);
/// ```
pub fn accepted_retry_after_s(accept_after_ms: f64) -> u64 {
    let s = (accept_after_ms / 1000.0).ceil();
    if s.is_finite() && s >= 1.0 {
        s.min(86_400.0) as u64
    } else {
        1
    }
}

/// What `acceptAfterMs` must be.
pub const ACCEPT_AFTER_EXPECTED: &str = "an integer number of milliseconds from 1 to 2147483647";

/// `acceptAfterMs`: an integer from 1 to 2^31 - 1.
pub fn accept_after_ms(v: f64) -> Result<f64, OptionError> {
    if v.is_finite() && v.fract() == 0.0 && (1.0..=2_147_483_647.0).contains(&v) {
        Ok(v)
    } else {
        Err(OptionError::new("acceptAfterMs", ACCEPT_AFTER_EXPECTED))
    }
}

/// The most `maxRuns` takes.
pub const MAX_MAX_RUNS: u32 = 1000;

/// What `maxRuns` must be.
pub const MAX_RUNS_EXPECTED: &str = "an integer from 1 to 1000";

/// `maxRuns`: an integer from 1 to [`MAX_MAX_RUNS`].
pub fn max_runs(v: f64) -> Result<u32, OptionError> {
    if v.is_finite() && v.fract() == 0.0 && (1.0..=f64::from(MAX_MAX_RUNS)).contains(&v) {
        Ok(v as u32)
    } else {
        Err(OptionError::new("maxRuns", MAX_RUNS_EXPECTED))
    }
}

/// What `onDeadLetter` needs beside it.
pub const DEAD_LETTER_EXPECTED: &str =
    "maxRuns beside it: onDeadLetter needs maxRuns (it is called when a job reaches maxRuns)";

/// `onDeadLetter` is called when a job reaches `maxRuns`: set without `maxRuns`, it never
/// would be.
pub fn on_dead_letter(max_runs: Option<u32>) -> Result<(), OptionError> {
    match max_runs {
        Some(_) => Ok(()),
        None => Err(OptionError::new("onDeadLetter", DEAD_LETTER_EXPECTED)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_dead_letter_needs_max_runs() {
        assert!(on_dead_letter(Some(3)).is_ok());
        let e = on_dead_letter(None).err().map(|e| (e.option, e.expected));
        assert_eq!(e, Some(("onDeadLetter", DEAD_LETTER_EXPECTED)));
    }

    fn run<'a>(id: &'a str, scope: &'a str, outcome: Option<&'a str>) -> PastRun<'a> {
        PastRun { id, scope, outcome }
    }

    #[test]
    fn outcome_names_round_trip() {
        for name in [
            "stored",
            "replayed",
            "failed",
            "rolled-back",
            "freed",
            "not-stored",
            "crashed",
            "dead-lettered",
            "refused",
        ] {
            assert_eq!(Outcome::from_name(name).map(Outcome::name), Some(name));
        }
        assert_eq!(Outcome::from_name("Stored"), None);
    }

    #[test]
    fn only_failures_and_crashes_count() {
        let runs = [
            run("1", "s", Some("stored")),
            run("2", "s", Some("replayed")),
            run("3", "s", Some("freed")),
            run("4", "s", Some("failed")),
            run("5", "s", Some("rolled-back")),
            run("6", "s", Some("not-stored")),
            run("7", "s", Some("crashed")),
            run("8", "s", None),               // its holder died
            run("me", "s", None),              // this run
            run("9", "other", Some("failed")), // another scope
            run("10", "s", Some("something-new")),
        ];
        assert_eq!(failed_runs(&runs, "s", "me"), 5);
        assert_eq!(failed_runs(&runs, "other", "me"), 1);
        assert_eq!(crashed(&runs, "s", "me"), vec!["8"]);
    }

    #[test]
    fn deliveries_that_waited_for_the_key_do_not_count() {
        // Delivery 1 ran and was rolled back; 2 and 3 waited for the key meanwhile. 3 now
        // holds it: 2, still waiting, has no record; an earlier delivery that waited and was
        // answered from the store (or refused) ended without running.
        let runs = [
            run("1", "s", Some("rolled-back")),
            run("0", "s", Some("replayed")),
            run("w", "s", Some("refused")),
            run("3", "s", None),
        ];
        assert_eq!(failed_runs(&runs, "s", "3"), 1);
        assert!(!dead_lettered(failed_runs(&runs, "s", "3"), Some(2)));
        assert!(crashed(&runs, "s", "3").is_empty());
    }

    #[test]
    fn dead_letters_at_max_runs() {
        for max in 1..=5u32 {
            for failed in 0..=6u32 {
                assert_eq!(dead_lettered(failed, Some(max)), failed >= max);
            }
            assert!(!dead_lettered(u32::MAX, None));
        }
    }

    #[test]
    fn options_are_checked() {
        assert_eq!(accept_after_ms(1.0), Ok(1.0));
        assert!(accept_after_ms(0.0).is_err());
        assert!(accept_after_ms(1.5).is_err());
        assert!(accept_after_ms(f64::NAN).is_err());
        assert!(accept_after_ms(2_147_483_648.0).is_err());
        assert_eq!(max_runs(3.0), Ok(3));
        assert!(max_runs(0.0).is_err());
        assert!(max_runs(1001.0).is_err());
        assert!(max_runs(2.5).is_err());
    }

    #[test]
    fn accepted_retry_after_is_at_least_a_second() {
        assert_eq!(accepted_retry_after_s(1.0), 1);
        assert_eq!(accepted_retry_after_s(1000.0), 1);
        assert_eq!(accepted_retry_after_s(1001.0), 2);
        assert_eq!(accepted_retry_after_s(2_147_483_647.0), 86_400);
    }
}
