//! The run history as the companion writes it: each run of a keyed handler or job, and each
//! delivery answered from the store, becomes a [`RunRecord`] kept by the store (`recordRun`,
//! `runs`: MemoryStore, RedisStore, PostgresStore) and an event for `onEvent`. A run's start
//! is written once it holds the key, in the background (a job with `maxRuns`: before `fn`
//! runs), reading the key's history first: a run of the key that never ended has lost its
//! holder, and is marked `'crashed'`. Its end is written after its start,
//! and before the key is freed when the run frees it, so the next holder never finds it open.
//! What each outcome means, and which count against `maxRuns`: `crate::core::runs`.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Object, Promise};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{future_to_promise, spawn_local, JsFuture};

use super::flow::Keyed;
use super::settings::{Common, Reporter};
use super::store::{to_js, JsonText, Store};
use crate::core::runs::{self as rules, event, Outcome, PastRun};
use crate::wasm::js;

thread_local! {
    /// This server instance's name in the history (`setInstance`), by default random.
    static INSTANCE: RefCell<Option<Rc<str>>> = const { RefCell::new(None) };
}

/// The history writes of one job's run (its start, its end, a replay's record), which the job
/// waits for before it settles ([`settled`]): shared by the run's [`RunLog`] and its clones.
#[derive(Clone, Default)]
pub struct Writes(Rc<RefCell<Vec<Promise>>>);

impl Writes {
    /// Count `write` among them.
    fn add(&self, write: &Promise) {
        self.0.borrow_mut().push(write.clone());
    }
}

/// Wait, at most `ms`, for the history writes of a job's run: an `idempotent()` job settles
/// after them, so a process that exits once `await handle(message)` is done leaves its run's
/// start and end written. Only its own: other runs' writes never hold it.
pub async fn settled(writes: &Writes, ms: f64) {
    let pending: js_sys::Array = writes.0.borrow().iter().map(JsValue::from).collect();
    if pending.length() > 0 {
        let _ = super::flow::within(&Promise::all_settled(&pending), ms).await;
    }
}

/// Run `write`, a history write, in the background: counted in `writes` when a job waits
/// for it.
fn in_background(writes: Option<&Writes>, write: impl std::future::Future<Output = ()> + 'static) {
    match writes {
        Some(writes) => writes.add(&future_to_promise(async move {
            write.await;
            Ok(JsValue::UNDEFINED)
        })),
        None => spawn_local(write),
    }
}

/// `setInstance(name)`: how `js/server.js` names this process in the run history
/// (`host:pid`). Not part of the public API.
#[wasm_bindgen(js_name = setInstance, skip_typescript)]
pub fn set_instance(name: &str) {
    INSTANCE.with(|i| *i.borrow_mut() = Some(name.into()));
}

/// This instance's name: the one `js/server.js` gave, else a random one made once.
fn instance() -> Rc<str> {
    INSTANCE.with(|i| {
        i.borrow_mut()
            .get_or_insert_with(|| {
                let mut bytes = [0u8; 6];
                let _ = getrandom::fill(&mut bytes);
                let mut name = String::from("instance-");
                name.push_str(&crate::core::key::hex(&bytes));
                name.into()
            })
            .clone()
    })
}

/// One run, as the store keeps it (`RunRecord` in `store.d.ts`).
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The run's id: its lock token (a replay: the request's own).
    pub id: String,
    /// The key as the caller gave it.
    pub key: String,
    /// The scope: 64 hex digits, or `-` when keys are not scoped.
    pub scope: String,
    /// The server instance that ran it.
    pub instance: String,
    /// When it started, ms since the Unix epoch.
    pub started_at: f64,
    /// When it ended; `null` while it runs.
    pub ended_at: Option<f64>,
    /// How it ended ([`Outcome::name`]); `null` while it runs.
    pub outcome: Option<String>,
    /// A short text: the error of a failed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl RunRecord {
    /// The record of a run (or a delivery) of `k`, starting now.
    pub fn new(k: &Keyed) -> RunRecord {
        let scope = k.store_key.split(':').next().unwrap_or("-").to_string();
        RunRecord {
            id: k.token.to_string(),
            key: k.key.clone(),
            scope,
            instance: instance().to_string(),
            started_at: js_sys::Date::now(),
            ended_at: None,
            outcome: None,
            detail: None,
        }
    }

    /// As a JS object (`to_js`'s, made from JSON text).
    fn js(&self) -> JsValue {
        let text = || {
            let mut j = JsonText::object("id");
            j.string(&self.id);
            j.field("key").string(&self.key);
            j.field("scope").string(&self.scope);
            j.field("instance").string(&self.instance);
            j.field("startedAt").number(self.started_at)?;
            j.field("endedAt");
            match self.ended_at {
                Some(at) => j.number(at)?,
                None => j.raw("null"),
            };
            j.field("outcome").option(self.outcome.as_deref());
            if let Some(detail) = &self.detail {
                j.field("detail").string(detail);
            }
            j.end()
        };
        text().unwrap_or_else(|| to_js(self))
    }

    /// Ended now so (also a copy's end, for a record handed on before the run's own is
    /// written).
    pub fn ended(&mut self, outcome: Outcome, detail: Option<String>) {
        self.ended_at = Some(js_sys::Date::now());
        self.outcome = Some(outcome.name().to_string());
        self.detail = detail;
    }
}

/// `{ type, run }` for `onEvent`.
pub fn tell(reporter: &Reporter, kind: &str, run: &RunRecord) {
    if !reporter.listens() {
        return;
    }
    let e: JsValue = Object::new().into();
    js::set(&e, "type", &kind.into());
    js::set(&e, "run", &run.js());
    reporter.event(&e);
}

/// Write `run` to the store, a failure told to `onStoreError`.
async fn write(store: &Store, reporter: &Reporter, run: &RunRecord) {
    if let Err(e) = store.record_run(&run.js()).await {
        reporter.store_error(&e, "recordRun");
    }
}

/// The history's records of a key, as read (malformed ones left out).
fn read_runs(value: &JsValue) -> Vec<RunRecord> {
    // A copy of ours: a store's list (a proxy, a getter) is read once, and a throw is "none".
    let Ok(Some(_)) = crate::wasm::js::array_length(value) else {
        return Vec::new();
    };
    let Ok(list) = crate::wasm::js::array_copy(value) else {
        return Vec::new();
    };
    // Each record copied too: serde reads what it is given through bindings without `catch`.
    list.iter()
        .filter_map(|v| crate::wasm::js::data_copy(&v).ok())
        .filter_map(|v| serde_wasm_bindgen::from_value(v).ok())
        .collect()
}

/// Mark the runs of `runs` that lost their holder (open, in `own`'s scope, not `own`: `own`
/// holds the key) crashed: written, told, and returned so.
async fn mark_crashed(
    store: &Store,
    reporter: &Reporter,
    mut runs: Vec<RunRecord>,
    own: &RunRecord,
) {
    let dead: Vec<String> = rules::crashed(&past(&runs), &own.scope, &own.id)
        .into_iter()
        .map(String::from)
        .collect();
    for r in runs.iter_mut().filter(|r| dead.contains(&r.id)) {
        r.ended(Outcome::Crashed, None);
        tell(reporter, event::CRASHED, r);
        write(store, reporter, r).await;
    }
}

/// `run`'s start written and the key's runs before it read: `one_call` (what
/// [`Store::start_run`] returned for `run`) where it answers, else `runs(key)` and then
/// `recordRun(run)`, each failure told to `onStoreError`. The runs as the store returned them
/// (`undefined` when they could not be read).
async fn begin(
    store: &Store,
    reporter: &Reporter,
    run: &RunRecord,
    one_call: Option<Result<JsValue, JsValue>>,
) -> JsValue {
    if let Some(Ok(found)) = one_call {
        if let Ok(found) = JsFuture::from(js::promise_of(&found)).await {
            return found;
        }
    }
    let found = match store.runs(&run.key).await {
        Ok(v) if matches!(js::array_length(&v), Ok(Some(_))) => v,
        // Not a list (a store that forgot a `return`): no earlier runs are known, and the
        // store is told failing, as when `runs()` throws, rather than "none" in silence.
        Ok(v) => {
            let mut message = String::from("idempotency: the store's runs() gave ");
            message.push_str(&crate::wasm::errors::describe(&v));
            message.push_str(", not an array of run records; this run counts no earlier runs of the key (maxRuns)");
            reporter.store_error(&crate::wasm::errors::type_error(&message), "runs");
            JsValue::UNDEFINED
        }
        Err(e) => {
            reporter.store_error(&e, "runs");
            JsValue::UNDEFINED
        }
    };
    write(store, reporter, run).await;
    found
}

/// The records as the core's rules read them.
fn past(runs: &[RunRecord]) -> Vec<PastRun<'_>> {
    runs.iter()
        .map(|r| PastRun {
            id: &r.id,
            scope: &r.scope,
            outcome: r.outcome.as_deref(),
        })
        .collect()
}

/// A run that holds a key: started when it claimed the key, ended with its outcome (once; or
/// again, the same run, when the storing behind an unkept answer keeps it).
#[derive(Clone)]
pub struct RunLog {
    store: Store,
    reporter: Reporter,
    /// Is the history written (`history` option, and a store that keeps one)?
    writes: bool,
    record: RunRecord,
    /// The background start (its end is written after it).
    started: Option<Promise>,
    /// Where its writes are counted for a job that waits for them ([`RunLog::awaited_by`]).
    awaited: Option<Writes>,
}

impl RunLog {
    /// The run holding `k` starts: told to `onEvent`, and (in the background) the key's
    /// history read, its open runs marked crashed, and this run's start written. A store
    /// whose one-call start answers at once (`MemoryStore`) has it done now.
    pub fn start(c: &Common, k: &Keyed) -> RunLog {
        let record = RunRecord::new(k);
        tell(&c.reporter, event::STARTED, &record);
        let writes = c.history && c.store.keeps_history();
        let mut started = None;
        if writes {
            // One call where the store can: the key's runs before this one, and its start.
            // Where it fails, nothing of it happened: the two calls below tell their own.
            let one_call = c.store.start_run(&record.js());
            match one_call {
                Some(Ok(found)) if !js::is_thenable(&found) => {
                    let runs = read_runs(&found);
                    if !rules::crashed(&past(&runs), &record.scope, &record.id).is_empty() {
                        let (store, reporter, run) =
                            (c.store.clone(), c.reporter.clone(), record.clone());
                        in_background(None, async move {
                            mark_crashed(&store, &reporter, runs, &run).await;
                        });
                    }
                }
                one_call => {
                    let (store, reporter, run) =
                        (c.store.clone(), c.reporter.clone(), record.clone());
                    started = Some(future_to_promise(async move {
                        let found = begin(&store, &reporter, &run, one_call).await;
                        mark_crashed(&store, &reporter, read_runs(&found), &run).await;
                        Ok(JsValue::UNDEFINED)
                    }));
                }
            }
        }
        RunLog {
            store: c.store.clone(),
            reporter: c.reporter.clone(),
            writes,
            record,
            started,
            awaited: None,
        }
    }

    /// A job waits for this run's writes before it settles: they are counted in `writes`
    /// (those of this log and its clones from now on, and its start if it is being written).
    pub fn awaited_by(&mut self, writes: &Writes) {
        if let Some(started) = &self.started {
            writes.add(started);
        }
        self.awaited = Some(writes.clone());
    }

    /// A job's run (with `maxRuns`), made before it claims its key and written nowhere until it
    /// holds it ([`RunLog::held`]): a delivery that waits for the key is not in the history
    /// while it waits, so the run that holds the key next never takes it for a run whose
    /// holder died. A delivery that does not get the key is recorded when it ends
    /// ([`RunLog::end_later`] with [`Outcome::Refused`]).
    pub fn announce(c: &Common, k: &Keyed) -> RunLog {
        RunLog {
            store: c.store.clone(),
            reporter: c.reporter.clone(),
            writes: c.history && c.store.keeps_history(),
            record: RunRecord::new(k),
            started: None,
            awaited: None,
        }
    }

    /// An announced run now holds its key: told to `onEvent`, its start written and the key's
    /// runs before it read (one call where the store offers it), before `fn` runs, so that a
    /// process that dies in `fn` leaves an open run the next holder counts (`maxRuns`).
    /// Returns the key's history as read now, the runs that lost their holder shown crashed
    /// (and marked so in the store, in the background). A store that has not answered within
    /// [`ServerOptions::history_wait_ms`](crate::core::idempotency::ServerOptions::history_wait_ms)
    /// is told to `onStoreError` and the run goes on with no earlier runs known, its start
    /// still written in the background.
    pub async fn held(&mut self, c: &Common) -> Vec<RunRecord> {
        tell(&self.reporter, event::STARTED, &self.record);
        if !self.writes {
            return Vec::new();
        }
        let (store, reporter, run) = (
            self.store.clone(),
            self.reporter.clone(),
            self.record.clone(),
        );
        let one_call = store.start_run(&run.js());
        let beginning =
            future_to_promise(async move { Ok(begin(&store, &reporter, &run, one_call).await) });
        if let Some(writes) = &self.awaited {
            writes.add(&beginning);
        }
        self.started = Some(beginning.clone());
        let ms = c.limits.history_wait_ms();
        let runs = match super::flow::within(&beginning, ms).await {
            Some(Ok(found)) => read_runs(&found),
            _ => {
                let message = format!(
                    "idempotent: the run history did not answer within {ms} ms of taking the key; this run counts no earlier runs of it (maxRuns)"
                );
                self.reporter
                    .store_error(&crate::wasm::errors::type_error(&message), "runs");
                return Vec::new();
            }
        };
        if !rules::crashed(&past(&runs), &self.record.scope, &self.record.id).is_empty() {
            let (store, reporter, own, found) = (
                self.store.clone(),
                self.reporter.clone(),
                self.record.clone(),
                runs.clone(),
            );
            in_background(self.awaited.as_ref(), async move {
                mark_crashed(&store, &reporter, found, &own).await;
            });
        }
        self.with_crashed(runs)
    }

    /// `runs` (this key's history) with the runs that lost their holder shown crashed, as
    /// [`RunLog::held`] marks them in the store.
    fn with_crashed(&self, mut runs: Vec<RunRecord>) -> Vec<RunRecord> {
        let dead: Vec<String> = rules::crashed(&past(&runs), &self.record.scope, &self.record.id)
            .into_iter()
            .map(String::from)
            .collect();
        for r in runs.iter_mut().filter(|r| dead.contains(&r.id)) {
            r.ended(Outcome::Crashed, None);
        }
        runs
    }

    /// How many of the key's earlier runs in this run's scope failed (`maxRuns`).
    pub fn failed_runs(&self, runs: &[RunRecord]) -> u32 {
        rules::failed_runs(&past(runs), &self.record.scope, &self.record.id)
    }

    /// This run's record so far.
    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// The run ended so: told to `onEvent`, and written once its start is.
    pub async fn end(mut self, outcome: Outcome, detail: Option<String>) {
        self.record.ended(outcome, detail);
        tell(&self.reporter, event::ENDED, &self.record);
        if !self.writes {
            return;
        }
        if let Some(p) = &self.started {
            let _ = JsFuture::from(p.clone()).await;
        }
        write(&self.store, &self.reporter, &self.record).await;
    }

    /// [`RunLog::end`] before the run frees its key, so that the next holder finds it
    /// ended (not open, which would read as crashed). Bounded by the lock's renewal interval
    /// (at most a second): a store that cannot write it by then (a pool with no connection
    /// to spare beside the ones keys in progress hold) finishes it in the background, and the
    /// key is freed anyway.
    pub async fn end_before_freeing(self, c: &Common, outcome: Outcome, detail: Option<String>) {
        let ms = c.limits.history_wait_ms();
        let awaited = self.awaited.clone();
        let writing = future_to_promise(async move {
            self.end(outcome, detail).await;
            Ok(JsValue::UNDEFINED)
        });
        if let Some(writes) = awaited {
            writes.add(&writing);
        }
        let _ = super::flow::within(&writing, ms).await;
    }

    /// [`RunLog::end`], in the background: for a run whose key is stored (no later run
    /// reads the history before it is written). Where its start is written and the store
    /// writes at once (`MemoryStore`), it is done now, without a task.
    pub fn end_later(mut self, outcome: Outcome, detail: Option<String>) {
        if self.started.is_some() || (self.writes && !self.store.records_runs_now()) {
            let awaited = self.awaited.clone();
            in_background(awaited.as_ref(), self.end(outcome, detail));
            return;
        }
        self.record.ended(outcome, detail);
        tell(&self.reporter, event::ENDED, &self.record);
        if self.writes {
            if let Err(e) = self.store.record_run_now(&self.record.js()) {
                self.reporter.store_error(&e, "recordRun");
            }
        }
    }
}

/// A delivery of `k` answered from the store: recorded and told, in the background (counted
/// in `writes` for a job that waits for it).
pub fn replayed(c: &Common, k: &Keyed, writes: Option<&Writes>) {
    let mut record = RunRecord::new(k);
    record.ended(Outcome::Replayed, None);
    tell(&c.reporter, event::REPLAYED, &record);
    if c.history && c.store.keeps_history() {
        let (store, reporter) = (c.store.clone(), c.reporter.clone());
        in_background(
            writes,
            async move { write(&store, &reporter, &record).await },
        );
    }
}

/// An error's `message` (or the thrown value as a string): a failed run's `detail`.
pub fn error_text(error: &JsValue) -> Option<String> {
    js::get(error, "message")
        .as_string()
        .or_else(|| error.as_string())
}
