//! The per-key flow both APIs share: claim the key in the store (the core decides what a
//! stored record means), hold it while the handler runs (renewing the lock, handing out
//! `ctx`), and end it: store the answer, or free the key.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Function, Object, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::context::Caller;
use super::options::{rejects, Common};
use super::store::{completed_record, lock_record, Renewal, StoredRecord, StoredResponse};
use crate::core::idempotency::{self as idem, Action};
use crate::core::key::uuid_v4;
use crate::core::options::MAX_TIMER_MS;
use crate::wasm::errors::type_error;
use crate::wasm::js;

/// One request's (or job's) key, as the store sees it.
pub struct Keyed {
    /// The key as the caller sent it.
    pub key: String,
    /// The key scoped by the identity (`core::idempotency::store_key`): the store's key.
    pub store_key: Rc<str>,
    /// The request fingerprint.
    pub fingerprint: Rc<str>,
    /// This request's random lock token (a UUID).
    pub token: Rc<str>,
}

impl Keyed {
    /// A request's key, with a fresh token.
    pub fn new(key: String, identity: Option<&str>, fingerprint: String) -> Keyed {
        let mut bytes = [0u8; 16];
        let _ = getrandom::fill(&mut bytes); // never fails in browsers and Node (crypto.getRandomValues)
        Keyed {
            store_key: idem::store_key(identity, &key).into(),
            key,
            fingerprint: fingerprint.into(),
            token: uuid_v4(bytes).into(),
        }
    }
}

/// What the store said about the key.
pub enum Claim {
    /// This request holds the key: run the handler.
    Held,
    /// A response is stored for this key and this request: replay it.
    Replay(StoredResponse),
    /// The key was used for another request (422).
    Mismatch,
    /// Another request holds the key (and `concurrent: 'reject'`, or the wait ran out): 409.
    Busy,
}

/// Why a claim ended without an answer.
pub enum ClaimError {
    /// A store method threw or rejected, or returned a malformed record (the answer is a 503).
    Store(JsValue, &'static str),
    /// The caller went away while the request waited (the signal's reason).
    Aborted(JsValue),
}

/// Resolves after `ms` (clamped to what `setTimeout` takes).
pub async fn sleep(ms: f64) {
    let ms = ms.clamp(0.0, MAX_TIMER_MS);
    let promise = Promise::new(&mut |resolve, _| {
        js::set_timeout(&resolve, ms);
    });
    let _ = JsFuture::from(promise).await;
}

/// Claim `k` in the store: take it, or find what holds it and decide (the core's state
/// machine); a live holder is waited for (polling every `pollMs`, up to `waitTimeoutMs`)
/// unless `concurrent: 'reject'`. `aborted` tells whether the caller went away.
pub async fn claim(c: &Common, k: &Keyed, aborted: &dyn Fn() -> Option<JsValue>) -> Result<Claim, ClaimError> {
    let o = &c.limits;
    let wait_until = js_sys::Date::now() + o.effective_wait_timeout_ms();
    loop {
        let now = js_sys::Date::now();
        let lock = lock_record(&k.token, &k.fingerprint, now + o.lock_timeout_ms);
        let Some(found) = c.store.acquire(&k.store_key, &lock, o.lock_timeout_ms).await.map_err(|e| ClaimError::Store(e, "acquire"))? else {
            return Ok(Claim::Held);
        };
        let record = StoredRecord::read(&found).map_err(|e| ClaimError::Store(e, "acquire"))?;
        let action = idem::decide(record.decision(&found).map_err(|e| ClaimError::Store(e, "acquire"))?, &k.fingerprint, js_sys::Date::now());
        match action {
            Action::Replay => {
                if let Some(response) = record.take_response() {
                    return Ok(Claim::Replay(response));
                }
            }
            Action::Mismatch => return Ok(Claim::Mismatch),
            // The holder died: take its lock over (compare-and-swap on its token) and process.
            Action::LockExpired => {
                if c.store.reclaim(&k.store_key, record.token(), &lock, o.lock_timeout_ms).await.map_err(|e| ClaimError::Store(e, "reclaim"))? {
                    return Ok(Claim::Held);
                }
            }
            Action::Process => continue, // a store that answered with an absent record: ask again
            Action::InProgress if rejects(o) => return Ok(Claim::Busy),
            Action::InProgress => {}
        }
        let left = wait_until - js_sys::Date::now();
        if left <= 0.0 {
            return Ok(Claim::Busy);
        }
        sleep(o.poll_ms.min(left)).await;
        if let Some(reason) = aborted() {
            return Err(ClaimError::Aborted(reason));
        }
    }
}

/// The handler's second argument: `{ key, keyFor(name), tx }`. `tx` is a getter, so reading
/// it is known (a throw after it is rolled back rather than stored).
pub struct Context {
    /// The JS object.
    pub object: JsValue,
    used_tx: Rc<Cell<bool>>,
}

impl Context {
    /// The context of a request holding `k` (`tx`: the store's transaction) or, for a request
    /// without a key, `{ key: null, keyFor() throws, tx: undefined }`.
    pub fn new(k: Option<&Keyed>, tx: JsValue) -> Context {
        let object: JsValue = Object::new().into();
        let used_tx = Rc::new(Cell::new(false));
        js::set(&object, "key", &k.map_or(JsValue::NULL, |k| JsValue::from_str(&k.key)));
        let store_key = k.map(|k| k.store_key.clone());
        let key_for = Closure::<dyn Fn(JsValue) -> Result<JsValue, JsValue>>::new(move |name: JsValue| {
            let Some(store_key) = &store_key else {
                return Err(type_error("ctx.keyFor: this request has no idempotency key"));
            };
            match name.as_string().filter(|n| !n.is_empty()) {
                Some(name) => Ok(idem::derived_key(store_key, &name).into()),
                None => Err(type_error("ctx.keyFor(name): name must be a non-empty string (e.g. 'charge')")),
            }
        });
        js::set(&object, "keyFor", &key_for.into_js_value());
        let used = used_tx.clone();
        let getter = Closure::<dyn Fn() -> JsValue>::new(move || {
            used.set(true);
            tx.clone()
        });
        let descriptor: JsValue = Object::new().into();
        js::set(&descriptor, "get", &getter.into_js_value());
        js::set(&descriptor, "enumerable", &JsValue::TRUE);
        let _ = js_sys::Reflect::define_property(object.unchecked_ref::<Object>(), &JsValue::from_str("tx"), descriptor.unchecked_ref::<Object>());
        Context { object, used_tx }
    }

    /// Did the handler read `ctx.tx`?
    pub fn used_tx(&self) -> bool {
        self.used_tx.get()
    }
}

/// How the handler ended.
pub enum Ran {
    /// It resolved with this value.
    Resolved(JsValue),
    /// It threw or rejected with this error.
    Threw(JsValue),
}

/// Run `f(input, ctx)` while holding `k`, renewing the lock every third of `lockTimeoutMs`.
/// Returns how it ended, the context (was `tx` used?) and the renewal (was the lock lost?),
/// which stops renewing when dropped.
pub async fn run_holding(c: &Common, k: &Keyed, f: &Function, input: &JsValue, caller: &Caller) -> (Ran, Context, Renewal) {
    let ctx = Context::new(Some(k), c.store.transaction(&k.store_key, &k.token));
    let renewal = Renewal::start(
        c.store.clone(),
        k.store_key.clone(),
        k.token.clone(),
        k.fingerprint.clone(),
        c.limits.lock_timeout_ms,
        c.limits.renew_interval_ms(),
        c.reporter.clone(),
    );
    let ran = match caller.call(f, &[input, &ctx.object]) {
        Err(e) => Ran::Threw(e),
        Ok(v) => match JsFuture::from(Promise::resolve(&v)).await {
            Ok(v) => Ran::Resolved(v),
            Err(e) => Ran::Threw(e),
        },
    };
    (ran, ctx, renewal)
}

/// How storing the answer went.
pub enum Stored {
    /// It is stored (with a transactional store: committed, with the handler's writes).
    Kept,
    /// The store refused: the lock lapsed and may be someone else's (reported).
    LockLost,
    /// The store failed (reported). With a transactional store nothing was committed.
    Failed,
}

/// Store `response` as `k`'s answer.
/// `renewal_lost`: a renewal was refused while the handler ran.
pub async fn store_answer(c: &Common, k: &Keyed, response: &StoredResponse, renewal_lost: bool) -> Stored {
    let record = completed_record(&k.fingerprint, response);
    match c.store.complete(&k.store_key, &k.token, &record, c.limits.ttl_ms).await {
        Ok(true) => Stored::Kept,
        Ok(false) => {
            let why = if renewal_lost {
                "the lock was lost before the response could be stored: a renewal was refused (the store lost the lock, or another request took it over)"
            } else {
                "the lock was lost before the response could be stored (did the handler run longer than lockTimeoutMs with a store that cannot renew?)"
            };
            c.reporter.store_error(&js_sys::Error::new(why).into(), "complete");
            Stored::LockLost
        }
        Err(e) => {
            c.reporter.store_error(&e, "complete");
            Stored::Failed
        }
    }
}

/// Free `k` (with a transactional store: roll back what the handler wrote through `ctx.tx`).
pub async fn free_key(c: &Common, k: &Keyed) {
    if let Err(e) = c.store.release(&k.store_key, &k.token).await {
        c.reporter.store_error(&e, "release");
    }
}
