//! The store, as the companion calls it: an `IdempotencyStore` JavaScript object
//! (`MemoryStore`, `RedisStore`, `PostgresStore` or the caller's own) whose methods may return
//! a value or a promise; the records it keeps, read and written with serde; and the renewal of
//! a live holder's lock.
//!
//! A record is a plain JSON-serialisable object (`store.d.ts`):
//! `{ state: 'in-progress', token, fingerprint, lockExpiresAt }` (a lock),
//! `{ state: 'completed', fingerprint, response, completedAt }` (a stored answer), or
//! `{ state: 'held', mismatch? }` (a live transaction holds the key; its details are not
//! visible, but `mismatch: true` when the store can tell it is for another fingerprint:
//! `PostgresStore`).

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Array, Function, Object};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{spawn_local, JsFuture};

use super::flow::within;
use super::settings::Reporter;
use crate::core::idempotency::{renewal_overdue, Record, DEFAULT_STORE_TIMEOUT_MS};
use crate::wasm::errors::{describe, type_error};
use crate::wasm::js;

#[wasm_bindgen]
extern "C" {
    /// The global `setInterval(callback, ms)`.
    #[wasm_bindgen(js_name = setInterval)]
    fn set_interval(callback: &Function, ms: f64) -> JsValue;
    /// The global `clearInterval(handle)`.
    #[wasm_bindgen(js_name = clearInterval)]
    fn clear_interval(handle: &JsValue);
}

thread_local! {
    /// `Symbol.for('retry-fetch.syncStore')`: where a store's method carries its synchronous twin.
    static SYNC_KEY: JsValue = js_sys::Symbol::for_("retry-fetch.syncStore").into();
    /// `Symbol.for('retry-fetch.startRun')`: where a store's `runs` and `recordRun` carry both in one call.
    static START_RUN_KEY: JsValue = js_sys::Symbol::for_("retry-fetch.startRun").into();
    /// `Symbol.for('retry-fetch.textStore')`: where a store's method carries its twin that takes
    /// the record as JSON text.
    static TEXT_KEY: JsValue = js_sys::Symbol::for_("retry-fetch.textStore").into();
}

/// The methods every store has (`IdempotencyStore` in `store.d.ts`); `renew` and
/// `transaction` are optional.
pub const STORE_METHODS: [&str; 4] = ["acquire", "reclaim", "complete", "release"];

/// A response as the store keeps it.
#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct StoredResponse {
    /// The status, 200 to 599.
    pub status: u16,
    /// The reason phrase (`''` for the default one).
    #[serde(default)]
    pub status_text: String,
    /// Header name/value pairs in order, lower-case names, never `Set-Cookie`.
    pub headers: Vec<(String, String)>,
    /// The body bytes, base64.
    pub body: String,
}

/// A lock, as written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LockRecord<'a> {
    state: &'static str,
    token: &'a str,
    fingerprint: &'a str,
    lock_expires_at: f64,
}

/// A completed record, as written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CompletedRecord<'a> {
    state: &'static str,
    fingerprint: &'a str,
    response: &'a StoredResponse,
    completed_at: f64,
}

/// Any record, as read back (every field optional; [`StoredRecord::decision`] checks them).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRecord {
    state: String,
    #[serde(default)]
    fingerprint: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    lock_expires_at: Option<f64>,
    #[serde(default)]
    response: Option<StoredResponse>,
    #[serde(default)]
    mismatch: Option<bool>,
}

impl StoredRecord {
    /// Read a record a store returned; a value that is not one is a `TypeError`.
    pub fn read(value: &JsValue) -> Result<StoredRecord, JsValue> {
        serde_wasm_bindgen::from_value(value.clone())
            .map_err(|_| malformed(value, "not an IdempotencyRecord"))
    }

    /// The record as the core's state machine sees it.
    pub fn decision(&self, value: &JsValue) -> Result<Record<'_>, JsValue> {
        match self.state.as_str() {
            "held" if self.mismatch == Some(true) => Ok(Record::HeldForOther),
            "held" => Ok(Record::Held),
            "in-progress" => {
                // The token is what `reclaim` compares on; a lock without one cannot be taken over.
                if self.token.is_none() {
                    return Err(malformed(value, "a lock without a string token"));
                }
                Ok(Record::InProgress {
                    fingerprint: self
                        .fingerprint
                        .as_deref()
                        .ok_or_else(|| malformed(value, "no string fingerprint"))?,
                    lock_expires_at_ms: self
                        .lock_expires_at
                        .ok_or_else(|| malformed(value, "no number lockExpiresAt"))?,
                })
            }
            "completed" => {
                if self.response.is_none() {
                    return Err(malformed(value, "a completed record without a response"));
                }
                Ok(Record::Completed {
                    fingerprint: self
                        .fingerprint
                        .as_deref()
                        .ok_or_else(|| malformed(value, "no string fingerprint"))?,
                })
            }
            _ => Err(malformed(
                value,
                "state is not 'in-progress', 'completed' or 'held'",
            )),
        }
    }

    /// The lock's token (for `reclaim`).
    pub fn token(&self) -> &str {
        self.token.as_deref().unwrap_or_default()
    }

    /// The stored response of a completed record.
    pub fn take_response(self) -> Option<StoredResponse> {
        self.response
    }
}

/// The `TypeError` for a record a store returned that is not an `IdempotencyRecord`.
fn malformed(record: &JsValue, what: &str) -> JsValue {
    let mut msg = String::from("idempotency: the store returned a malformed record (");
    msg.push_str(what);
    msg.push_str("): ");
    msg.push_str(&describe(record));
    type_error(&msg)
}

/// A Rust value as a plain JS object (structs as objects, tuples as arrays).
pub fn to_js<T: Serialize>(value: &T) -> JsValue {
    value
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .unwrap_or(JsValue::UNDEFINED)
}

/// A record built as JSON text and made a JS object by one `JSON.parse`: the same object
/// [`to_js`] makes (fields in the same order, `null` for `None`), without a crossing into JS
/// per field and per string. `None` where a number is not finite (JSON has no such number).
pub struct JsonText(String);

impl JsonText {
    /// `{` and the first field's name.
    pub fn object(first: &str) -> JsonText {
        let mut text = JsonText(String::with_capacity(256));
        text.0.push('{');
        text.name(first);
        text
    }

    /// `"name":`.
    fn name(&mut self, name: &str) {
        self.string(name);
        self.0.push(':');
    }

    /// `,"name":`.
    pub fn field(&mut self, name: &str) -> &mut JsonText {
        self.0.push(',');
        self.name(name);
        self
    }

    /// Raw JSON text (a structural character, a nested value's start).
    pub fn raw(&mut self, text: &str) -> &mut JsonText {
        self.0.push_str(text);
        self
    }

    /// A JSON string.
    pub fn string(&mut self, value: &str) -> &mut JsonText {
        self.0.push('"');
        // What needs escaping is ASCII: the runs between such bytes are whole UTF-8 text.
        let mut from = 0;
        for (i, &b) in value.as_bytes().iter().enumerate() {
            if b != b'"' && b != b'\\' && b >= 0x20 {
                continue;
            }
            self.0.push_str(value.get(from..i).unwrap_or_default());
            match b {
                b'"' => self.0.push_str("\\\""),
                b'\\' => self.0.push_str("\\\\"),
                _ => {
                    self.0.push_str("\\u00");
                    self.0.push_str(&crate::core::key::hex(&[b]));
                }
            }
            from = i + 1;
        }
        self.0.push_str(value.get(from..).unwrap_or_default());
        self.0.push('"');
        self
    }

    /// A string, or `null`.
    pub fn option(&mut self, value: Option<&str>) -> &mut JsonText {
        match value {
            Some(v) => self.string(v),
            None => self.raw("null"),
        }
    }

    /// A finite number; `None` for another.
    pub fn number(&mut self, value: f64) -> Option<&mut JsonText> {
        if !value.is_finite() {
            return None;
        }
        self.0.push_str(&value.to_string());
        Some(self)
    }

    /// `}` and the object.
    pub fn end(self) -> Option<JsValue> {
        js_sys::JSON::parse(&self.end_text()).ok()
    }

    /// `}` and the text.
    fn end_text(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

/// A record the companion writes: its JSON text, made a JS object (one `JSON.parse`) only for
/// a store method without a text twin (see [`Store`]).
pub enum Written {
    /// The record's JSON text.
    Text(String),
    /// The record as a JS object (a number JSON cannot carry).
    Value(JsValue),
}

impl Written {
    /// The record as JSON `text`, or (a number JSON cannot carry made it `None`) the JS value
    /// `value` makes.
    fn text_or(text: Option<String>, value: impl FnOnce() -> JsValue) -> Written {
        match text {
            Some(text) => Written::Text(text),
            None => Written::Value(value()),
        }
    }

    /// The record as a JS object.
    pub fn js(&self) -> JsValue {
        match self {
            Written::Text(text) => js_sys::JSON::parse(text).unwrap_or(JsValue::UNDEFINED),
            Written::Value(value) => value.clone(),
        }
    }
}

/// The lock record of `token`, live until `expires_at` (ms since the Unix epoch).
pub fn lock_record(token: &str, fingerprint: &str, expires_at: f64) -> Written {
    let text = || {
        let mut j = JsonText::object("state");
        j.string("in-progress");
        j.field("token").string(token);
        j.field("fingerprint").string(fingerprint);
        j.field("lockExpiresAt").number(expires_at)?;
        Some(j.end_text())
    };
    Written::text_or(text(), || {
        to_js(&LockRecord {
            state: "in-progress",
            token,
            fingerprint,
            lock_expires_at: expires_at,
        })
    })
}

/// The completed record for `response`.
pub fn completed_record(fingerprint: &str, response: &StoredResponse) -> Written {
    let completed_at = js_sys::Date::now();
    let text = || {
        let mut j = JsonText::object("state");
        j.string("completed");
        j.field("fingerprint").string(fingerprint);
        j.field("response").raw("{\"status\":");
        j.number(f64::from(response.status))?;
        j.field("statusText").string(&response.status_text);
        j.field("headers").raw("[");
        for (i, (name, value)) in response.headers.iter().enumerate() {
            j.raw(if i == 0 { "[" } else { ",[" });
            j.string(name).raw(",").string(value).raw("]");
        }
        j.raw("]");
        j.field("body").string(&response.body).raw("}");
        j.field("completedAt").number(completed_at)?;
        Some(j.end_text())
    };
    Written::text_or(text(), || {
        to_js(&CompletedRecord {
            state: "completed",
            fingerprint,
            response,
            completed_at,
        })
    })
}

/// An `IdempotencyStore`, checked when the companion is made.
#[derive(Clone)]
pub struct Store {
    object: JsValue,
    /// `store.transactional === true`: `release` rolls back what the handler wrote through
    /// `ctx.tx` (`PostgresStore`).
    pub transactional: bool,
    /// `storeTimeoutMs`: how long a call made before the handler runs (`acquire` and `reclaim`
    /// while claiming, `secret`) may take; it fails with a `TimeoutError` then. Default
    /// [`DEFAULT_STORE_TIMEOUT_MS`] (5 s).
    pub claim_timeout_ms: f64,
}

/// What is left to do when a store call that timed out (`storeTimeoutMs`) answers after all.
enum Late {
    /// Nothing: what it answers is not this request's any more (its rejection is ignored).
    Ignore,
    /// A lock it took (`granted` reads that from its value) is this request's, which was
    /// answered 503 without running: it is given back, so that the request's retry does not
    /// find its own key held until `lockTimeoutMs`. A holder of the key in this process is
    /// told it is being given back ([`Yielding`]), as a duplicate's release does.
    GiveBack {
        key: Rc<str>,
        token: Rc<str>,
        granted: Grant,
        reporter: Reporter,
    },
}

/// How a store call's value says it gave the caller the lock.
#[derive(Clone, Copy)]
enum Grant {
    /// `acquire`'s: `null`, or a lock record of the caller's own token (a store that sent
    /// the call again after a lost reply, and found the lock its first send took).
    Acquire,
    /// `reclaim`'s: `true`.
    Reclaim,
}

impl Grant {
    fn granted(self, value: &JsValue, token: &str) -> bool {
        match self {
            Grant::Acquire => value.is_null() || own_lock(value, token),
            Grant::Reclaim => value.is_truthy(),
        }
    }
}

/// Is `record` (what `acquire` returned) a lock held by `token`?
fn own_lock(record: &JsValue, token: &str) -> bool {
    record.is_object()
        && js::get(record, "state").as_string().as_deref() == Some("in-progress")
        && js::get(record, "token").as_string().as_deref() == Some(token)
}

impl Late {
    /// Wait for `promise` in the background and do what is left.
    fn after(self, store: Store, promise: js_sys::Promise) {
        let Late::GiveBack {
            key,
            token,
            granted,
            reporter,
        } = self
        else {
            js::ignore_rejection(&promise);
            return;
        };
        spawn_local(async move {
            if !JsFuture::from(promise)
                .await
                .is_ok_and(|v| granted.granted(&v, &token))
            {
                return;
            }
            give_back(&store, &key, &token, &reporter).await;
        });
    }
}

/// The error of a store call that did not answer within `storeTimeoutMs`.
fn timed_out(method: &str, ms: f64) -> JsValue {
    let message = format!("idempotency: the store did not answer {method}() within storeTimeoutMs ({ms} ms); the request was answered 503 and not processed");
    let error = js_sys::Error::new(&message);
    error.set_name("TimeoutError");
    error.into()
}

impl Store {
    /// Check that `value` has the store methods.
    pub fn new(value: JsValue) -> Option<Store> {
        let ok = value.is_object()
            && STORE_METHODS
                .iter()
                .all(|m| js::get(&value, m).is_function());
        ok.then(|| Store {
            transactional: js::get(&value, "transactional").as_bool() == Some(true),
            claim_timeout_ms: DEFAULT_STORE_TIMEOUT_MS,
            object: value,
        })
    }

    /// `store[method](...args)`, awaited when it returns a promise or a thenable; a throw or a
    /// rejection is an `Err` with its error. A method that carries a synchronous twin at
    /// `Symbol.for('retry-fetch.syncStore')` (`MemoryStore`'s) is called through it, and what
    /// that returns is not awaited.
    async fn call(&self, method: &'static str, args: &[&JsValue]) -> Result<JsValue, JsValue> {
        self.call_within(method, args, None, None).await
    }

    /// [`Store::call`], given up after `claim_timeout_ms` when `late` says what to do if it
    /// answers after that (a call made before the handler runs); waited for when `None`.
    /// `abort` (whose signal the call was given) is aborted when it is given up.
    async fn call_within(
        &self,
        method: &'static str,
        args: &[&JsValue],
        late: Option<&dyn Fn() -> Late>,
        abort: Option<&web_sys::AbortController>,
    ) -> Result<JsValue, JsValue> {
        let f: Function = js::get_or_throw(&self.object, method)?
            .dyn_into()
            .map_err(|_| type_error("idempotency: the store lost one of its methods"))?;
        let twin = SYNC_KEY.with(|key| js_sys::Reflect::get(&f, key).ok());
        let (f, sync) = match twin.map(|t| t.dyn_into::<Function>()) {
            Some(Ok(twin)) => (twin, true),
            _ => (f, false),
        };
        let target = &self.object;
        let value = match args {
            [] => f.call0(target)?,
            [a] => f.call1(target, a)?,
            [a, b] => f.call2(target, a, b)?,
            [a, b, c] => f.call3(target, a, b, c)?,
            _ => {
                let list = Array::new();
                for a in args {
                    list.push(a);
                }
                f.apply(target, &list)?
            }
        };
        if sync || !(value.is_object() || value.is_function()) {
            // Not a promise nor a thenable: nothing to wait for.
            return Ok(value);
        }
        let promise = js::promise_of(&value);
        let Some(late) = late else {
            return JsFuture::from(promise).await;
        };
        match within(&promise, self.claim_timeout_ms).await {
            Some(outcome) => outcome,
            None => {
                let error = timed_out(method, self.claim_timeout_ms);
                if let Some(controller) = abort {
                    controller.abort_with_reason(&error);
                }
                late().after(self.clone(), promise);
                Err(error)
            }
        }
    }

    /// The twin of `method` that takes the record as its JSON text, where the store's method
    /// carries one at `Symbol.for('retry-fetch.textStore')` (`MemoryStore`'s, which keeps
    /// records as JSON text: no `JSON.parse` here and no `JSON.stringify` there). It is
    /// synchronous, and takes the method's arguments with the record's text in the record's
    /// place; `acquire`'s takes the lock's token after them.
    fn text_twin(&self, method: &'static str) -> Option<Function> {
        let f = js::get(&self.object, method);
        if !f.is_function() {
            return None;
        }
        TEXT_KEY
            .with(|key| js_sys::Reflect::get(&f, key).ok())?
            .dyn_into::<Function>()
            .ok()
    }

    /// `acquire(key, lock, lockTimeoutMs)` (`token`: the lock's) for a request whose handler
    /// has not run, within `storeTimeoutMs` (else a `TimeoutError`, and a lock the call takes
    /// after it is given back): `None` when the caller now holds the key.
    pub async fn acquire_to_run(
        &self,
        key: &Rc<str>,
        lock: &Written,
        token: &Rc<str>,
        lock_ms: f64,
        reporter: &Reporter,
    ) -> Result<Option<JsValue>, JsValue> {
        let late = || Late::GiveBack {
            key: key.clone(),
            token: token.clone(),
            granted: Grant::Acquire,
            reporter: reporter.clone(),
        };
        self.acquire_within(key, lock, token, lock_ms, Some(&late))
            .await
    }

    /// `acquire(key, lock, lockTimeoutMs)` (`token`: the lock's), waited for: `None` when the
    /// caller now holds the key.
    pub async fn acquire(
        &self,
        key: &str,
        lock: &Written,
        token: &str,
        lock_ms: f64,
    ) -> Result<Option<JsValue>, JsValue> {
        self.acquire_within(key, lock, token, lock_ms, None).await
    }

    async fn acquire_within(
        &self,
        key: &str,
        lock: &Written,
        token: &str,
        lock_ms: f64,
        late: Option<&dyn Fn() -> Late>,
    ) -> Result<Option<JsValue>, JsValue> {
        let v = match (lock, self.text_twin("acquire")) {
            (Written::Text(text), Some(twin)) => twin.call4(
                &self.object,
                &key.into(),
                &text.into(),
                &lock_ms.into(),
                &token.into(),
            )?,
            _ => {
                // `{ signal }`, aborted if the call is given up (a store may skip work it has
                // not begun: `PostgresStore` a claim whose connection comes after that).
                let controller = late.and_then(|_| web_sys::AbortController::new().ok());
                let options: JsValue = Object::new().into();
                if let Some(controller) = &controller {
                    js::set(&options, "signal", &controller.signal());
                }
                let args = [&key.into(), &lock.js(), &lock_ms.into(), &options];
                let v = self
                    .call_within("acquire", &args, late, controller.as_ref())
                    .await?;
                if v.is_null() {
                    return Ok(None);
                }
                // A copy of ours, read without the store's getters or traps running again.
                js::data_copy(&v)?
            }
        };
        // Only `null` grants the lock: `undefined` (a store that forgot a `return`) would run
        // every repeat of a key again. It is a store failure: nothing runs.
        if v.is_undefined() {
            return Err(malformed(
                &v,
                "acquire() must give null when the lock is taken, or the key's record",
            ));
        }
        // The caller's own lock (a store that sent the call again after its reply was lost,
        // and found the lock the first send took) is the caller's: granted.
        Ok((!v.is_null() && !own_lock(&v, token)).then_some(v))
    }

    /// `method(key, token, record, ms)` (`renew`, `complete`), through its text twin where it
    /// has one.
    async fn call_written(
        &self,
        method: &'static str,
        key: &str,
        token: &str,
        record: &Written,
        ms: f64,
    ) -> Result<JsValue, JsValue> {
        match (record, self.text_twin(method)) {
            (Written::Text(text), Some(twin)) => twin.call4(
                &self.object,
                &key.into(),
                &token.into(),
                &text.into(),
                &ms.into(),
            ),
            _ => {
                self.call(
                    method,
                    &[&key.into(), &token.into(), &record.js(), &ms.into()],
                )
                .await
            }
        }
    }

    /// `reclaim(key, staleToken, lock, lockTimeoutMs)` for a request whose handler has not
    /// run (`token`: its lock's), within `storeTimeoutMs` as [`Store::acquire_to_run`].
    pub async fn reclaim(
        &self,
        key: &Rc<str>,
        stale: &str,
        lock: &Written,
        token: &Rc<str>,
        lock_ms: f64,
        reporter: &Reporter,
    ) -> Result<bool, JsValue> {
        let late = || Late::GiveBack {
            key: key.clone(),
            token: token.clone(),
            granted: Grant::Reclaim,
            reporter: reporter.clone(),
        };
        let v = self
            .call_within(
                "reclaim",
                &[
                    &key.as_ref().into(),
                    &stale.into(),
                    &lock.js(),
                    &lock_ms.into(),
                ],
                Some(&late),
                None,
            )
            .await?;
        Ok(v.is_truthy())
    }

    /// Whether the store renews locks (has `renew`): without it, a holder's lock lapses after
    /// `lockTimeoutMs` however alive the holder is, by design.
    pub fn renews(&self) -> bool {
        js::get(&self.object, "renew").is_function()
    }

    /// `renew(key, token, lock, lockTimeoutMs)`; a store without `renew` keeps the lock for
    /// `lockTimeoutMs` only (`true`: nothing to tell).
    pub async fn renew(
        &self,
        key: &str,
        token: &str,
        lock: &Written,
        lock_ms: f64,
    ) -> Result<bool, JsValue> {
        if !self.renews() {
            return Ok(true);
        }
        let v = self
            .call_written("renew", key, token, lock, lock_ms)
            .await?;
        Ok(v.is_truthy())
    }

    /// Take `key` again for the holder `token` whose lease lapsed in the store while it ran
    /// (an event loop or a store held past the lease), with a fresh lock of `lock_ms`: `true`
    /// when nobody else took it meanwhile (it was free, or is this holder's lock again, taken
    /// by its renewal or its answer), `false` when another request holds it.
    pub async fn take_again(
        &self,
        key: &str,
        token: &str,
        fingerprint: &str,
        lock_ms: f64,
    ) -> Result<bool, JsValue> {
        let lock = lock_record(token, fingerprint, js_sys::Date::now() + lock_ms);
        Ok(match self.acquire(key, &lock, token, lock_ms).await? {
            None => true,
            Some(found) => StoredRecord::read(&found).is_ok_and(|r| r.token() == token),
        })
    }

    /// `complete(key, token, record, ttlMs)`.
    pub async fn complete(
        &self,
        key: &str,
        token: &str,
        record: &Written,
        ttl_ms: f64,
    ) -> Result<bool, JsValue> {
        let v = self
            .call_written("complete", key, token, record, ttl_ms)
            .await?;
        Ok(v.is_truthy())
    }

    /// `release(key, token)`.
    pub async fn release(&self, key: &str, token: &str) -> Result<bool, JsValue> {
        let v = self.call("release", &[&key.into(), &token.into()]).await?;
        Ok(v.is_truthy())
    }

    /// Does the store keep a run history (`recordRun` and `runs`)?
    pub fn keeps_history(&self) -> bool {
        js::get(&self.object, "recordRun").is_function()
            && js::get(&self.object, "runs").is_function()
    }

    /// `recordRun(run)`: store `run`, replacing the record with its id.
    pub async fn record_run(&self, run: &JsValue) -> Result<(), JsValue> {
        self.call("recordRun", &[run]).await.map(drop)
    }

    /// Does `recordRun` carry a synchronous twin (`MemoryStore`'s), so that
    /// [`Store::record_run_now`] writes a run at once?
    pub fn records_runs_now(&self) -> bool {
        let f = js::get(&self.object, "recordRun");
        f.is_function()
            && SYNC_KEY
                .with(|key| js_sys::Reflect::get(&f, key).ok())
                .is_some_and(|twin| twin.is_function())
    }

    /// `recordRun(run)` through its synchronous twin, at once (see
    /// [`Store::records_runs_now`]).
    pub fn record_run_now(&self, run: &JsValue) -> Result<(), JsValue> {
        let f = js::get(&self.object, "recordRun");
        let twin: Function = SYNC_KEY
            .with(|key| js_sys::Reflect::get(&f, key))?
            .dyn_into()
            .map_err(|_| type_error("idempotency: the store lost one of its methods"))?;
        twin.call1(&self.object, run).map(drop)
    }

    /// `runs(run.key)` and then `recordRun(run)` in one call, where the store offers it: the
    /// function its `runs` and `recordRun` both carry at `Symbol.for('retry-fetch.startRun')`
    /// (`PostgresStore`'s: one statement; `MemoryStore`'s: synchronous), so a wrapper or
    /// subclass that replaces either is called through its own methods. What it returned (the
    /// key's runs as they were before `run`, or a promise of them), not awaited; `None` for a
    /// store without it.
    pub fn start_run(&self, run: &JsValue) -> Option<Result<JsValue, JsValue>> {
        let twin = |method: &'static str| {
            START_RUN_KEY.with(|key| js_sys::Reflect::get(&js::get(&self.object, method), key).ok())
        };
        let f = twin("runs")?.dyn_into::<Function>().ok()?;
        if !Object::is(&f, &twin("recordRun")?) {
            return None;
        }
        Some(f.call1(&self.object, run))
    }

    /// `runs(key)`: the recorded runs of `key` (every scope), oldest first.
    pub async fn runs(&self, key: &str) -> Result<JsValue, JsValue> {
        self.call("runs", &[&key.into()]).await
    }

    /// Does the store keep a secret (`secret()`)?
    pub fn has_secret(&self) -> bool {
        js::get(&self.object, "secret").is_function()
    }

    /// `secret()`: the store's HMAC key for scopes, the same for every instance sharing it; a
    /// value that is not a string of [`crate::core::idempotency::MIN_SECRET_LEN`] characters
    /// or more is a `TypeError`. `bounded`: within `storeTimeoutMs` (a request waits for it);
    /// else waited for as long as it takes, with no timer (a read nobody waits for).
    pub async fn secret(&self, bounded: bool) -> Result<String, JsValue> {
        let late: &dyn Fn() -> Late = &|| Late::Ignore;
        let v = self
            .call_within("secret", &[], bounded.then_some(late), None)
            .await?;
        match v.as_string() {
            Some(s) if crate::core::idempotency::secret(&s).is_ok() => Ok(s),
            _ => Err(type_error(&format!(
                "idempotency: the store's secret() returned {}; expected {}",
                describe(&v),
                crate::core::idempotency::SECRET_EXPECTED
            ))),
        }
    }

    /// `closeTransaction(key, token)`, if the store has it: the handler settled, so what
    /// `transaction()` handed out (`ctx.tx`) must refuse further use. A throw is ignored.
    pub fn close_transaction(&self, key: &str, token: &str) {
        if let Ok(f) = js::get(&self.object, "closeTransaction").dyn_into::<Function>() {
            let _ = f.call2(&self.object, &key.into(), &token.into());
        }
    }

    /// `transaction(key, token)`: the store's transaction that holds the key (`ctx.tx`), or
    /// `undefined` for a store without one.
    pub fn transaction(&self, key: &str, token: &str) -> JsValue {
        match js::get(&self.object, "transaction").dyn_into::<Function>() {
            Ok(f) => f
                .call2(&self.object, &key.into(), &token.into())
                .unwrap_or(JsValue::UNDEFINED),
            Err(_) => JsValue::UNDEFINED,
        }
    }
}

/// A renewal's state, kept by id while it runs (see [`Renewal`]).
struct Renewing {
    store: Store,
    key: Rc<str>,
    token: Rc<str>,
    fingerprint: Rc<str>,
    lock_ms: f64,
    /// Every how many ms it renews.
    interval: f64,
    reporter: Reporter,
    /// When (ms since the epoch) the last lease it holds began: its acquisition, then each
    /// renewal the store accepted.
    leased_at: Cell<f64>,
    /// A renewal is in flight.
    busy: Cell<bool>,
    /// The store refused one: the lock is gone.
    lost: Rc<Cell<bool>>,
}

thread_local! {
    /// The renewals running, by id, and the next id.
    static RENEWALS: std::cell::RefCell<(std::collections::BTreeMap<u64, Rc<Renewing>>, u64)> =
        const { std::cell::RefCell::new((std::collections::BTreeMap::new(), 0)) };
    /// The one function every renewal's interval calls, bound to the renewal's id: no closure
    /// per holder.
    static TICK: Function = Closure::<dyn Fn(f64)>::new(|id: f64| tick(id as u64))
        .into_js_value()
        .unchecked_into();
}

/// One tick of renewal `id`: renew its lock, unless the last renewal is still running or the
/// lock is gone (or the renewal has stopped).
fn tick(id: u64) {
    let Some(r) = RENEWALS.with(|all| all.borrow().0.get(&id).cloned()) else {
        return;
    };
    if r.busy.get() || r.lost.get() {
        return;
    }
    r.busy.set(true);
    spawn_local(async move {
        let now = js_sys::Date::now();
        let lock = lock_record(&r.token, &r.fingerprint, now + r.lock_ms);
        match r.store.renew(&r.key, &r.token, &lock, r.lock_ms).await {
            Ok(true) => r.leased_at.set(now),
            // The lease lapsed before this renewal could run (the event loop was blocked):
            // the key is taken again if nobody took it meanwhile, which is all a renewal does.
            // Not with a transactional store, whose lock lives in the handler's transaction,
            // nor once the run has ended (its renewal dropped meanwhile): that would leave a
            // lock nobody holds.
            Ok(false)
                if !r.store.transactional
                    && RENEWALS.with(|all| all.borrow().0.contains_key(&id)) =>
            {
                let alive = || RENEWALS.with(|all| all.borrow().0.contains_key(&id));
                loop {
                    let taken = r
                        .store
                        .take_again(&r.key, &r.token, &r.fingerprint, r.lock_ms)
                        .await;
                    match taken {
                        Ok(true) if alive() => r.leased_at.set(now),
                        // The run ended while this asked (it freed the key, or stored its
                        // answer): the lock this took is nobody's, given back; unless another
                        // renewal of the same holder runs (the storing that goes on behind an
                        // answer), whose lock it is.
                        Ok(true) if !renewed_elsewhere(&r.store, &r.key, &r.token) => {
                            if let Err(error) = r.store.release(&r.key, &r.token).await {
                                r.reporter.store_error(&error, "release");
                            }
                        }
                        Ok(true) => {}
                        // Taken by a request of this process that is giving it back (it found
                        // this holder alive): asked again as soon as it may have, not at the
                        // next tick (the key is free meanwhile, for any instance to take),
                        // while the run goes on.
                        Ok(false) if is_yielding(&r.key) && alive() => {
                            super::flow::sleep(super::flow::YIELD_POLL_MS).await;
                            if alive() {
                                continue;
                            }
                        }
                        Ok(false) => r.lost.set(true),
                        Err(error) => {
                            r.lost.set(true);
                            r.reporter.store_error(&error, "renew");
                        }
                    }
                    break;
                }
            }
            Ok(false) => r.lost.set(true),
            Err(error) => r.reporter.store_error(&error, "renew"),
        }
        r.busy.set(false);
    });
}

thread_local! {
    /// Keys that a request of this process took from a holder alive here (whose lease had
    /// lapsed in the store: the event loop blocked, or the store paused past it and answered
    /// the request's queued `acquire` first) and is giving back, with how many such requests.
    static YIELDING: std::cell::RefCell<std::collections::BTreeMap<Rc<str>, u32>> =
        std::cell::RefCell::default();
}

/// While alive, a request of this process is giving `key` back to its holder here: the
/// holder's renewal (or the storing of its answer), finding the key held by that request's
/// token, asks again instead of counting its lock lost.
pub struct Yielding(Rc<str>);

impl Yielding {
    /// `key` is being given back from now until this is dropped.
    pub fn start(key: &Rc<str>) -> Yielding {
        YIELDING.with(|all| *all.borrow_mut().entry(key.clone()).or_insert(0) += 1);
        Yielding(key.clone())
    }
}

impl Drop for Yielding {
    fn drop(&mut self) {
        YIELDING.with(|all| {
            let mut all = all.borrow_mut();
            if let Some(n) = all.get_mut(&self.0) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    all.remove(&self.0);
                }
            }
        });
    }
}

/// Give `key`, held by `token`, back (`release`, a failure told to `onStoreError`) as a
/// request of this process that took it from a holder here does: marked [`Yielding`] while
/// it is, and a moment past the release, since the holder's own calls answered in the same
/// read as it may be handled after it.
pub async fn give_back(store: &Store, key: &Rc<str>, token: &str, reporter: &Reporter) {
    let _yielding = Yielding::start(key);
    if let Err(e) = store.release(key, token).await {
        reporter.store_error(&e, "release");
    }
    super::flow::sleep(super::flow::YIELD_POLL_MS).await;
}

/// Whether a request of this process is giving `key` back to its holder here ([`Yielding`]).
pub fn is_yielding(key: &str) -> bool {
    YIELDING.with(|all| all.borrow().contains_key(key))
}

/// The token and fingerprint of a holder of `key` in `store` alive in this process (it runs
/// and no renewal was refused), whatever its lease in the store says.
pub fn live_holder(store: &Store, key: &str) -> Option<(Rc<str>, Rc<str>)> {
    holder_where(store, key, |_| true)
}

/// The token and fingerprint of the holder of `key` in `store` that is alive in this process
/// (it runs and no renewal was refused) and whose renewal is overdue (`core::idempotency`'s
/// `renewal_overdue`): its lease may have lapsed in the store only because the event loop was
/// blocked, and its renewal, about to run, will take the key again. `None` otherwise.
pub fn overdue_holder(store: &Store, key: &str, now: f64) -> Option<(Rc<str>, Rc<str>)> {
    holder_where(store, key, |r| {
        renewal_overdue(r.leased_at.get(), r.interval, now)
    })
}

/// Is a renewal of `token`'s lock on `key` in `store` running in this process?
fn renewed_elsewhere(store: &Store, key: &str, token: &str) -> bool {
    RENEWALS.with(|all| {
        all.borrow().0.values().any(|r| {
            &*r.key == key && &*r.token == token && Object::is(&r.store.object, &store.object)
        })
    })
}

/// The first live holder of `key` in `store` in this process for which `also` holds.
fn holder_where(
    store: &Store,
    key: &str,
    also: impl Fn(&Renewing) -> bool,
) -> Option<(Rc<str>, Rc<str>)> {
    RENEWALS.with(|all| {
        all.borrow().0.values().find_map(|r| {
            (!r.lost.get()
                && &*r.key == key
                && Object::is(&r.store.object, &store.object)
                && also(r))
            .then(|| (r.token.clone(), r.fingerprint.clone()))
        })
    })
}

/// Keeps a live holder's lock: every `interval` ms, `renew` with the holder's token (the
/// fence: a holder whose lock lapsed and was taken over cannot extend its successor's). Stops
/// when dropped. `lost()` tells whether the store refused a renewal.
pub struct Renewal {
    handle: JsValue,
    id: u64,
    lost: Rc<Cell<bool>>,
}

impl Renewal {
    /// Start renewing `key`'s lock held by `token`.
    pub fn start(
        store: Store,
        key: Rc<str>,
        token: Rc<str>,
        fingerprint: Rc<str>,
        lock_ms: f64,
        interval: f64,
        reporter: Reporter,
    ) -> Renewal {
        let leased_at = js_sys::Date::now();
        let lost = Rc::new(Cell::new(false));
        let renewing = Rc::new(Renewing {
            store,
            key,
            token,
            fingerprint,
            lock_ms,
            interval,
            reporter,
            leased_at: Cell::new(leased_at),
            busy: Cell::new(false),
            lost: lost.clone(),
        });
        let id = RENEWALS.with(|all| {
            let (map, next) = &mut *all.borrow_mut();
            let id = *next;
            *next += 1;
            map.insert(id, renewing);
            id
        });
        // Ids are below 2^53 (one a request): exact as a JS number.
        let bound: JsValue = TICK.with(|f| {
            f.bind1(&JsValue::UNDEFINED, &JsValue::from_f64(id as f64))
                .into()
        });
        let handle = set_interval(bound.unchecked_ref(), interval);
        Renewal { handle, id, lost }
    }

    /// Let the renewal's timer not keep a Node process alive.
    pub fn unref(&self) {
        super::flow::unref(&self.handle);
    }

    /// Did the store refuse a renewal (the lock lapsed and is someone else's now)?
    pub fn lost(&self) -> bool {
        self.lost.get()
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        clear_interval(&self.handle);
        RENEWALS.with(|all| all.borrow_mut().0.remove(&self.id));
    }
}
