//! `idempotent(fn, options)`: one effect per key for any async function (a queue consumer, a
//! cron job) under at-least-once delivery, with the same stores and state machine as the HTTP
//! companion.
//!
//! The key comes from `options.key(input)` (e.g. the message id), scoped by `options.scope`;
//! the fingerprint is the input's JSON. The result is stored as JSON and a repeat with the
//! same key gets it back without running `fn`; a repeat with another input under the key, a
//! run still going on (after `waitTimeoutMs`) and a stored failure are `IdempotencyError`s
//! with a `code`.

use std::rc::Rc;

use js_sys::{Function, JSON};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::answers::{stored_problem, stored_text, stored_value};
use super::context::Caller;
use super::flow::{
    claim, free_key, run_holding, store_answer, Claim, ClaimError, Invocation, Keyed, Ran, RunEnd,
    Stored,
};
use super::runs::{self, error_text, RunLog};
use super::settings::JobSettings;
use crate::core::idempotency::{self as idem, after_throw, AfterThrow};
use crate::core::runs::{dead_lettered, event, Outcome};
use crate::wasm::errors::{describe, type_error};
use crate::wasm::js;

/// `new Error(message)` named `IdempotencyError`, with `code`.
fn idempotency_error(code: &str, message: &str) -> JsValue {
    let e = js_sys::Error::new(message);
    e.set_name("IdempotencyError");
    js::set(&e, "code", &code.into());
    e.into()
}

/// `JSON.stringify(value)`, `None` for `undefined` (and functions); a throw (a cycle, a
/// BigInt) is passed on.
fn json(value: &JsValue) -> Result<Option<String>, JsValue> {
    let text = JSON::stringify(value)?;
    Ok(text.as_string())
}

/// The built-in objects whose JSON is `{}` whatever they hold (their content is not in own
/// enumerable properties): two inputs that differ only inside one would share a fingerprint,
/// so a key reused with another input would get the first one's result instead of
/// `key-reused`. Told by their tag (`Object.prototype.toString`), so another realm's count too.
const OPAQUE_TO_JSON: [&str; 17] = [
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "WeakRef",
    "ArrayBuffer",
    "SharedArrayBuffer",
    "DataView",
    "RegExp",
    "Error",
    "Promise",
    "Blob",
    "File",
    "FormData",
    "Headers",
    "URLSearchParams",
    "ReadableStream",
];

/// The input's JSON, its fingerprint's source: as [`json`], and a `TypeError` for an input
/// that holds, at any depth, what JSON cannot tell apart (after a `toJSON`, which
/// JSON.stringify applies first, so one with a `toJSON` is taken as that): an object whose JSON
/// is `{}` whatever it holds ([`OPAQUE_TO_JSON`], and an instance of a class whose state is not
/// in own enumerable properties: private fields, getters), or a number JSON writes as `null`
/// (`NaN`, `Infinity`). Two inputs that differ there would share a fingerprint, and a key
/// reused with the second would get the first one's result instead of `key-reused`.
fn input_json(input: &JsValue) -> Result<Option<String>, JsValue> {
    let found: Rc<std::cell::RefCell<Option<String>>> = Rc::default();
    let seen = found.clone();
    let replacer = Closure::<dyn FnMut(JsValue, JsValue) -> JsValue>::new(
        move |_key: JsValue, value: JsValue| {
            if seen.borrow().is_none() {
                *seen.borrow_mut() = unrepresented(&value);
            }
            value
        },
    );
    let text = JSON::stringify_with_replacer(input, replacer.as_ref().unchecked_ref())?;
    if let Some(what) = found.take() {
        let mut msg = String::from("idempotent: the input holds ");
        msg.push_str(&what);
        msg.push_str(": the input's JSON is its fingerprint, so two inputs that differ inside it would look the same; pass plain objects, arrays and primitives (e.g. Object.fromEntries(map), [...set])");
        return Err(type_error(&msg));
    }
    Ok(text.as_string())
}

/// What JSON cannot represent in `value` (one value as JSON.stringify visits it), said for
/// [`input_json`]'s error; `None` when its JSON is what it holds.
fn unrepresented(value: &JsValue) -> Option<String> {
    if let Some(n) = value.as_f64().filter(|n| !n.is_finite()) {
        let name = if n.is_nan() { "NaN" } else { "Infinity" };
        return Some(format!("{name}, whose JSON is null"));
    }
    if !value.is_object() || js::is_array(value).unwrap_or(true) {
        return None;
    }
    if let Some(kind) = js::tag_name(value).filter(|t| OPAQUE_TO_JSON.contains(&t.as_str())) {
        return Some(format!("a {kind}, whose JSON is {{}} whatever it holds"));
    }
    // A plain object's prototype is `null` or an `Object.prototype` (of any realm), whose own
    // is `null`. Anything else with no own enumerable property writes `{}`, but a boxed
    // primitive (written as its value: `null` for NaN) and an empty typed array (equal to any
    // other), both told by what they are, not by a tag a class can set.
    let proto = js::prototype_of(value).ok()?;
    let plain = proto.is_null() || js::prototype_of(&proto).ok()?.is_null();
    if plain || js::object_keys(value).ok()?.length() > 0 {
        return None;
    }
    if let Some(primitive) = unboxed(value) {
        return primitive
            .as_f64()
            .filter(|n| !n.is_finite())
            .map(|_| "a Number object of NaN or Infinity, whose JSON is null".into());
    }
    if js_sys::ArrayBuffer::is_view(value) && js::get(value, "byteLength").as_f64() == Some(0.0) {
        return None;
    }
    let class = js::get(&js::get(&proto, "constructor"), "name").as_string();
    let class = class
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "a class".into());
    Some(format!("an instance of {class} whose JSON is {{}} (its state is not in own enumerable properties: private fields, getters; give it a toJSON)"))
}

/// `value`'s primitive if it is a boxed number, string or boolean: their `valueOf` throws for
/// anything else, whatever its tag says.
fn unboxed(value: &JsValue) -> Option<JsValue> {
    let global = js_sys::global();
    ["Number", "String", "Boolean"]
        .into_iter()
        .find_map(|class| {
            let value_of = js::get(&js::get(&js::get(&global, class), "prototype"), "valueOf");
            value_of.dyn_ref::<Function>()?.call0(value).ok()
        })
}

/// Run one job (the function `idempotent` returns), settling once the history writes of its
/// run are done (at most the history's wait, a second): a process that exits after
/// `await handle(message)` leaves its run written.
pub async fn run(
    s: Rc<JobSettings>,
    f: Function,
    input: JsValue,
    caller: Caller,
) -> Result<JsValue, JsValue> {
    let ms = s.common.limits.history_wait_ms();
    let writes = runs::Writes::default();
    let result = run_once(s, f, input, caller, &writes).await;
    runs::settled(&writes, ms).await;
    result
}

/// One job, the history writes of its run counted in `writes`.
async fn run_once(
    s: Rc<JobSettings>,
    f: Function,
    input: JsValue,
    caller: Caller,
    writes: &runs::Writes,
) -> Result<JsValue, JsValue> {
    let c = &s.common;
    let raw = JsFuture::from(js::promise_of(&caller.call(&s.key, &[&input])?)).await?;
    let key = raw.as_string().filter(|k| idem::validate_key(k).is_ok()).ok_or_else(|| {
        type_error(&format!(
            "idempotent: option \"key\" returned {}; expected a key of 1 to 255 visible ASCII characters",
            describe(&raw)
        ))
    })?;
    let body = input_json(&input)?.unwrap_or_default();
    let mut k = Keyed::new(
        c,
        key,
        s.scope.as_deref(),
        idem::fingerprint("JOB", "", body.as_bytes()),
    )
    .await?;
    // The delivery waits while a failing store is asked again: whether its result (or its
    // failure, to be dead-lettered) was kept decides what the consumer does next.
    k.patient = true;
    // With maxRuns the run is made now and written once it holds the key (its start, and the
    // key's history read then); a delivery that does not get the key is recorded when it ends.
    let announced = s.max_runs.map(|_| {
        let mut log = RunLog::announce(c, &k);
        log.awaited_by(writes);
        log
    });
    let refused = |announced: Option<RunLog>, outcome| {
        if let Some(log) = announced {
            log.end_later(outcome, None);
        }
    };
    match claim(c, &k, &|| None).await {
        Ok(Claim::Held) => {}
        Ok(Claim::Replay(stored)) => {
            runs::replayed(c, &k, Some(writes));
            return replay(&stored);
        }
        Ok(Claim::Mismatch) => {
            refused(announced, Outcome::Refused);
            return Err(idempotency_error(
                "key-reused",
                "idempotent: this key was already used with a different input",
            ));
        }
        Ok(Claim::Busy) => {
            refused(announced, Outcome::Refused);
            return Err(idempotency_error(
                "in-progress",
                "idempotent: a run with this key is still in progress",
            ));
        }
        Err(ClaimError::Aborted(reason)) => {
            refused(announced, Outcome::Refused);
            return Err(reason);
        }
        Err(ClaimError::Store(error, _)) => {
            refused(announced, Outcome::Refused);
            return Err(error);
        }
    }
    let (log, history) = match announced {
        Some(mut log) => {
            // The history as it is now that this run holds the key: every run still open in
            // it held the key before and died.
            let history = log.held(c).await;
            let failed = log.failed_runs(&history);
            if dead_lettered(failed, s.max_runs) {
                return dead_letter(&s, &k, log, &input, &history, failed, &caller).await;
            }
            (log, history)
        }
        None => {
            let mut log = RunLog::start(c, &k);
            log.awaited_by(writes);
            (log, Vec::new())
        }
    };
    let call = Invocation {
        f: &f,
        input: &input,
        route: &JsValue::UNDEFINED,
        signal: &JsValue::UNDEFINED,
    };
    let (ran, ctx, renewal) = run_holding(c, &k, call, &caller, None).await;
    let lost = renewal.lost();
    match ran {
        Ran::Resolved(value) => {
            // A result that is not JSON cannot be replayed: the effect happened, so keep what
            // can be kept (a failure record) and tell the caller.
            match json(&value) {
                Ok(text) => {
                    let answer = stored_value(text.as_deref().unwrap_or(""));
                    let stored = store_answer(
                        c,
                        &k,
                        &answer,
                        lost,
                        RunEnd::new(log, Outcome::Stored, None),
                    )
                    .await;
                    match stored {
                        // The first call returns what a repeat returns: the result's JSON, parsed
                        // (a Date is its string, NaN null, as on every replay).
                        Stored::Kept => match text {
                            Some(text) => JSON::parse(&text),
                            None => Ok(JsValue::UNDEFINED),
                        },
                        // With a transactional store nothing was committed, fn's ctx.tx writes
                        // neither: the caller must not acknowledge the message. (Writes of its
                        // own, outside ctx.tx, happened: below.)
                        Stored::Failed | Stored::LockLost
                            if c.store.transactional && ctx.used_tx() =>
                        {
                            Err(not_committed())
                        }
                        // The effect happened; its result is the truth even if it is not stored.
                        Stored::Failed | Stored::LockLost => Ok(value),
                    }
                }
                // fn wrote through ctx.tx: its writes must not commit without a result a
                // redelivery can get back. Rolled back; the error says why.
                Err(error) if c.store.transactional && ctx.used_tx() => {
                    drop(renewal);
                    log.end_before_freeing(c, Outcome::RolledBack, error_text(&error))
                        .await;
                    free_key(c, &k).await;
                    Err(not_storable(&error))
                }
                Err(error) => {
                    let stored = store_failure(c, &k, &error, lost, failed_end(&log, &error)).await;
                    let ended = stored_failure_ends(&s, &k, &log, &stored, &error, &input, history);
                    ended.hand_over(&s, &caller).await?;
                    match stored {
                        Stored::Failed | Stored::LockLost
                            if c.store.transactional && ctx.used_tx() =>
                        {
                            Err(not_committed())
                        }
                        _ => Err(error),
                    }
                }
            }
        }
        // Jobs have no time limit of the companion's: never abandoned.
        Ran::Abandoned => {
            log.end_later(Outcome::NotStored, None);
            Err(not_committed())
        }
        Ran::Threw(error) => {
            match after_throw(c.store.transactional, ctx.used_tx(), false) {
                AfterThrow::Release => {
                    drop(renewal);
                    log.end_before_freeing(c, Outcome::RolledBack, error_text(&error))
                        .await;
                    free_key(c, &k).await;
                }
                AfterThrow::StoreFailure => {
                    // The lock renewed while the failure is stored.
                    let stored = store_failure(c, &k, &error, lost, failed_end(&log, &error)).await;
                    drop(renewal);
                    let ended = stored_failure_ends(&s, &k, &log, &stored, &error, &input, history);
                    ended.hand_over(&s, &caller).await?;
                }
            }
            Err(error)
        }
    }
}

/// A dead letter to hand to `onDeadLetter` after the run that made it ended: the record, and
/// the run's (for the `dead-lettered` event).
struct Ended(Option<(JsValue, runs::RunRecord)>);

impl Ended {
    /// `onDeadLetter(record)`, if there is a record. Its throw (or rejection) is the
    /// delivery's error, as when a dead letter is handed on later; the failure is stored
    /// already (the run is never made again), so no later delivery hands it on.
    /// The `dead-lettered` event follows once it is handed on.
    async fn hand_over(self, s: &JobSettings, caller: &Caller) -> Result<(), JsValue> {
        let Some((record, run)) = self.0 else {
            return Ok(());
        };
        if let Some(f) = &s.on_dead_letter {
            let handed = match caller.call(f, &[&record]) {
                Ok(v) => JsFuture::from(js::promise_of(&v)).await,
                Err(e) => Err(e),
            };
            handed?;
        }
        runs::tell(&s.common.reporter, event::DEAD_LETTERED, &run);
        Ok(())
    }
}

/// The run ended with its failure stored (a throw without `ctx.tx`, a result that is not
/// JSON): it is never run again, so with `maxRuns` the job's chain ends here and it is a
/// dead letter at once, whatever the count (`failedRuns` counts this run): its record, for
/// `onDeadLetter`, and the `dead-lettered` event. Without `maxRuns`, or when the failure
/// could not be stored (a later delivery may run it), nothing more.
fn stored_failure_ends(
    s: &JobSettings,
    k: &Keyed,
    log: &RunLog,
    stored: &Stored,
    error: &JsValue,
    input: &JsValue,
    mut history: Vec<runs::RunRecord>,
) -> Ended {
    let Some(max) = s.max_runs.filter(|_| matches!(stored, Stored::Kept)) else {
        return Ended(None);
    };
    let failed = log.failed_runs(&history).saturating_add(1);
    let mut this = log.record().clone();
    this.ended(stored.outcome(Outcome::Failed), error_text(error));
    history.push(this.clone());
    let record = dead_letter_record(k, &this.scope, input, &history, failed, max);
    Ended(Some((record, this)))
}

/// What `onDeadLetter` is given: `{ key, scope, input, failedRuns, maxRuns, runs }`.
fn dead_letter_record(
    k: &Keyed,
    scope: &str,
    input: &JsValue,
    history: &[runs::RunRecord],
    failed: u32,
    max: u32,
) -> JsValue {
    let record: JsValue = js_sys::Object::new().into();
    js::set(&record, "key", &k.key.as_str().into());
    js::set(&record, "scope", &scope.into());
    js::set(&record, "input", input);
    js::set(&record, "failedRuns", &failed.into());
    js::set(&record, "maxRuns", &max.into());
    js::set(&record, "runs", &super::store::to_js(&history));
    record
}

/// A job whose key has `failed` failed runs (at least `maxRuns`): not run. `onDeadLetter` is
/// given `{ key, scope, input, failedRuns, maxRuns, runs }` (the key's history); once it has
/// returned, a failure is stored for the key, so every later delivery gets
/// `previous-run-failed` at once and it is never called again for the key. If it throws, the
/// key is freed and its error is this delivery's: the next one tries again.
async fn dead_letter(
    s: &JobSettings,
    k: &Keyed,
    log: RunLog,
    input: &JsValue,
    history: &[runs::RunRecord],
    failed: u32,
    caller: &Caller,
) -> Result<JsValue, JsValue> {
    let c = &s.common;
    let max = s.max_runs.unwrap_or_default();
    let record = dead_letter_record(k, &log.record().scope, input, history, failed, max);
    // The key stays held (renewed) through the hand-off and the write of the dead letter: an
    // onDeadLetter slower than lockTimeoutMs is not taken for a crash by the next delivery.
    let renewal = super::flow::renew_while_held(c, k);
    if let Some(f) = &s.on_dead_letter {
        let handed = match caller.call(f, &[&record]) {
            Ok(v) => JsFuture::from(js::promise_of(&v)).await,
            Err(e) => Err(e),
        };
        if let Err(error) = handed {
            drop(renewal);
            log.end_before_freeing(c, Outcome::Freed, error_text(&error))
                .await;
            free_key(c, k).await;
            return Err(error);
        }
    }
    let message = format!("idempotent: the job was dead-lettered after {failed} failed runs (maxRuns {max}) and is not run again");
    // Stored as a failed run is: every later delivery gets 'previous-run-failed' with it. A
    // store that fails to keep it leaves the key to a later delivery, which hands it to
    // onDeadLetter again: the run's record says so (a hand-off, not a failed run of fn).
    runs::tell(&c.reporter, event::DEAD_LETTERED, log.record());
    let unkept = format!("{message}; the dead letter could not be stored, so a later delivery hands it to onDeadLetter again");
    let end = RunEnd::new(log, Outcome::DeadLettered, Some(message.clone()))
        .or_else(Outcome::DeadLettered, Some(unkept));
    let error = idempotency_error("previous-run-failed", &message);
    store_failure(c, k, &error, false, end).await;
    drop(renewal);
    let mut msg = String::from(
        "idempotent: the run with this key failed after it started and is not run again: ",
    );
    msg.push_str(&message);
    let e = idempotency_error("previous-run-failed", &msg);
    js::set(&e, "deadLetter", &record);
    Err(e)
}

/// The error of a run whose result a transactional store could not commit.
fn not_committed() -> JsValue {
    idempotency_error(
        "not-committed",
        "idempotent: the result could not be committed; nothing was kept (fn's ctx.tx writes were rolled back): run it again",
    )
}

/// The error of a run whose result cannot be stored (not JSON) while its `ctx.tx` writes were
/// rolled back.
fn not_storable(cause: &JsValue) -> JsValue {
    let mut msg = String::from("idempotent: fn's result cannot be stored as JSON (");
    msg.push_str(
        &crate::wasm::js::to_js_string(cause)
            .map(String::from)
            .unwrap_or_default(),
    );
    msg.push_str("), so its ctx.tx writes were rolled back and nothing is kept: return a JSON-serialisable result (no BigInt, no cycles)");
    let e = idempotency_error("not-storable", &msg);
    js::set(&e, "cause", cause);
    e
}

/// Store a failed run as a 500 whose body names the error, so a repeat does not run again.
/// A thrown value that is not an `Error` (`throw 'declined'`) is kept as its string.
async fn store_failure(
    c: &super::settings::Common,
    k: &Keyed,
    error: &JsValue,
    lost: bool,
    end: RunEnd,
) -> Stored {
    let body: JsValue = js_sys::Object::new().into();
    let message = js::get(error, "message");
    let message = if message.is_string() {
        message
    } else {
        crate::wasm::js::to_js_string(error)
            .map(JsValue::from)
            .unwrap_or_else(|_| "a thrown value".into())
    };
    js::set(&body, "name", &js::get(error, "name"));
    js::set(&body, "message", &message);
    let text = JSON::stringify(&body)
        .ok()
        .and_then(|t| t.as_string())
        .unwrap_or_else(|| "{}".into());
    store_answer(c, k, &stored_problem(500, &text), lost, end).await
}

/// A run that failed with `error` ends failed if its failure is stored, else not stored.
fn failed_end(log: &RunLog, error: &JsValue) -> RunEnd {
    RunEnd::new(log.clone(), Outcome::Failed, error_text(error))
}

/// The result of a stored run: its value, or an `IdempotencyError` for a stored failure.
fn replay(stored: &super::store::StoredResponse) -> Result<JsValue, JsValue> {
    let text = stored_text(stored)?;
    if stored.status != 200 {
        let failure = JSON::parse(&text).unwrap_or(JsValue::UNDEFINED);
        let message = js::get(&failure, "message").as_string().unwrap_or_default();
        let mut msg = String::from(
            "idempotent: the run with this key failed after it started and is not run again: ",
        );
        msg.push_str(&message);
        return Err(idempotency_error("previous-run-failed", &msg));
    }
    if text.is_empty() {
        return Ok(JsValue::UNDEFINED);
    }
    JSON::parse(&text)
}
