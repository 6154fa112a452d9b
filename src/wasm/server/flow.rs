//! The per-key flow both APIs share: claim the key in the store (the core decides what a
//! stored record means), hold it while the handler runs (renewing the lock, handing out
//! `ctx`), and end it: store the answer, or free the key.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Function, Object, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{spawn_local, JsFuture};

use super::context::Caller;
use super::runs::RunLog;
use super::settings::{rejects, Common};
use super::store::{
    completed_record, give_back, is_yielding, live_holder, lock_record, overdue_holder, Renewal,
    StoredRecord, StoredResponse, Written,
};
use crate::core::idempotency::{self as idem, Action};
use crate::core::key::uuid_v4;
use crate::core::options::MAX_TIMER_MS;
use crate::core::runs::Outcome;
use crate::wasm::errors::type_error;
use crate::wasm::js;

/// One request's (or job's) key, as the store sees it.
#[derive(Clone)]
pub struct Keyed {
    /// The key as the caller sent it.
    pub key: String,
    /// The key scoped by the identity (`core::idempotency::store_key`): the store's key.
    pub store_key: Rc<str>,
    /// What `ctx.keyFor(name)` derives from (`core::idempotency::key_for_base`): the key and
    /// a hash of the identity, not the secret, so the same on every instance and after a
    /// restart.
    pub key_for_base: Rc<str>,
    /// The request fingerprint.
    pub fingerprint: Rc<str>,
    /// This request's random lock token (a UUID).
    pub token: Rc<str>,
    /// Whether the caller was answered `202 Accepted` while the run goes on (`acceptAfterMs`):
    /// nobody waits for its answer then, and no header on it can tell a client not to run it
    /// again, so [`store_answer`] keeps trying while the lock may still be held.
    pub accepted: Rc<Cell<bool>>,
    /// Whether its caller waits for [`store_answer`] to keep trying through a store outage
    /// (while the lock would be held) before it is answered: an `idempotent()` job's (a queue
    /// consumer awaits the run, and what it does next, acknowledging or dead-lettering,
    /// depends on whether the result was kept). An HTTP request's caller is answered after
    /// the quick retries instead, the storing going on behind the answer. Default false.
    pub patient: bool,
}

impl Keyed {
    /// A request's key, with a fresh token. The secret (the HMAC key of the scope) is asked
    /// for only when there is an identity to scope by.
    pub async fn new(
        c: &Common,
        key: String,
        identity: Option<&[u8]>,
        fingerprint: String,
    ) -> Result<Keyed, JsValue> {
        let identity = identity.filter(|i| !i.is_empty());
        let secret = match identity {
            Some(_) => c.secret.get(&c.store).await?,
            None => Rc::from(&[][..]),
        };
        Ok(Keyed {
            store_key: idem::store_key(&secret, identity, &key).into(),
            key_for_base: idem::key_for_base(identity, &key).into(),
            key,
            fingerprint: fingerprint.into(),
            token: uuid_v4(random_16()).into(),
            accepted: Rc::default(),
            patient: false,
        })
    }
}

/// How many random bytes are drawn from `crypto.getRandomValues` at a time: one call (a few
/// microseconds in Node, whatever the length) serves this many tokens.
const RANDOM_POOL: usize = 1024;

thread_local! {
    /// Random bytes drawn ahead, and how many of them are used.
    static RANDOM: std::cell::RefCell<([u8; RANDOM_POOL], usize)> =
        const { std::cell::RefCell::new(([0; RANDOM_POOL], RANDOM_POOL)) };
}

/// 16 bytes of `crypto.getRandomValues` (a lock token's), drawn from a pool refilled
/// `RANDOM_POOL` bytes at a time; each byte is handed out once, then overwritten.
pub fn random_16() -> [u8; 16] {
    RANDOM.with(|pool| {
        let mut pool = pool.borrow_mut();
        let (bytes, used) = &mut *pool;
        if *used + 16 > RANDOM_POOL {
            let _ = getrandom::fill(bytes); // never fails in browsers and Node (crypto.getRandomValues)
            *used = 0;
        }
        let mut out = [0u8; 16];
        out.copy_from_slice(&bytes[*used..*used + 16]);
        bytes[*used..*used + 16].fill(0);
        *used += 16;
        out
    })
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
    sleep_held(ms, true).await
}

/// [`sleep`]; `held` false: the timer does not keep a Node process alive (`unref`): the wait
/// of work nobody waits for.
async fn sleep_held(ms: f64, held: bool) {
    let ms = ms.clamp(0.0, MAX_TIMER_MS);
    let promise = Promise::new(&mut |resolve, _| {
        let timer = js::set_timeout(&resolve, ms);
        if !held {
            unref(&timer);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// `timer.unref()` where the timer has it (Node's): it no longer keeps the process alive.
pub fn unref(timer: &JsValue) {
    if let Ok(f) = js::get(timer, "unref").dyn_into::<Function>() {
        let _ = f.call0(timer);
    }
}

/// Claim `k` in the store: take it, or find what holds it and decide (the core's state
/// machine); a live holder is waited for (polling every `pollMs`, up to `waitTimeoutMs`)
/// unless `concurrent: 'reject'`. `aborted` tells whether the caller went away.
pub async fn claim(
    c: &Common,
    k: &Keyed,
    aborted: &dyn Fn() -> Option<JsValue>,
) -> Result<Claim, ClaimError> {
    let o = &c.limits;
    // The wait is a span of this process: on the monotonic clock (a lock's expiry, read by
    // every instance, is the wall clock's).
    let wait_until = js::now_ms() + o.effective_wait_timeout_ms();
    loop {
        let now = js_sys::Date::now();
        let lock = lock_record(&k.token, &k.fingerprint, now + o.lock_timeout_ms);
        // A holder alive in this process whose renewal is overdue (the event loop was
        // blocked) still holds the key, whatever its lapsed lease in the store says: taking
        // the key then would run the handler twice. Its renewal takes the key again.
        let found = match overdue_holder(&c.store, &k.store_key, now) {
            Some((token, fingerprint)) => {
                lock_record(&token, &fingerprint, now + o.lock_timeout_ms).js()
            }
            None => match c
                .store
                .acquire_to_run(
                    &k.store_key,
                    &lock,
                    &k.token,
                    o.lock_timeout_ms,
                    &c.reporter,
                )
                .await
                .map_err(|e| ClaimError::Store(e, "acquire"))?
            {
                Some(found) => found,
                None => match if c.store.renews() {
                    live_holder(&c.store, &k.store_key)
                } else {
                    overdue_holder(&c.store, &k.store_key, js_sys::Date::now())
                } {
                    Some((token, fingerprint)) if !c.store.transactional => {
                        // Sent before the event loop blocked (or queued behind a store that
                        // paused), the acquire landed after the lease of a live holder here
                        // lapsed: the key is still that holder's. It is freed for the holder
                        // to take again (its renewal, or its answer's `store_answer`, does,
                        // asking again while this gives it back), and waited for.
                        give_back(&c.store, &k.store_key, &k.token, &c.reporter).await;
                        lock_record(
                            &token,
                            &fingerprint,
                            js_sys::Date::now() + o.lock_timeout_ms,
                        )
                        .js()
                    }
                    _ => return Ok(Claim::Held),
                },
            },
        };
        let record = StoredRecord::read(&found).map_err(|e| ClaimError::Store(e, "acquire"))?;
        let action = idem::claim_action(
            record
                .decision(&found)
                .map_err(|e| ClaimError::Store(e, "acquire"))?,
            &k.fingerprint,
            js_sys::Date::now(),
        );
        match action {
            Action::Replay => {
                if let Some(response) = record.take_response() {
                    return Ok(Claim::Replay(response));
                }
            }
            Action::Mismatch => return Ok(Claim::Mismatch),
            // The holder died: take its lock over (compare-and-swap on its token) and process.
            // A lock that could not be taken over is someone's (a store whose locks expire on
            // their own: our clock ran ahead of the holder's): in progress, as below.
            Action::LockExpired => {
                if c.store
                    .reclaim(
                        &k.store_key,
                        record.token(),
                        &lock,
                        &k.token,
                        o.lock_timeout_ms,
                        &c.reporter,
                    )
                    .await
                    .map_err(|e| ClaimError::Store(e, "reclaim"))?
                {
                    return Ok(Claim::Held);
                }
                if rejects(o) || o.accept_after_ms.is_some() {
                    return Ok(Claim::Busy);
                }
            }
            Action::Process => continue, // a store that answered with an absent record: ask again
            // With acceptAfterMs a repeat never waits: it is answered 202 at once.
            Action::InProgress if rejects(o) || o.accept_after_ms.is_some() => {
                return Ok(Claim::Busy)
            }
            Action::InProgress => {}
        }
        let left = wait_until - js::now_ms();
        if left <= 0.0 {
            return Ok(Claim::Busy);
        }
        sleep(o.poll_ms.min(left)).await;
        if let Some(reason) = aborted() {
            return Err(ClaimError::Aborted(reason));
        }
    }
}

thread_local! {
    /// `keyFor`'s one function, `(base, name) => derived key`: each context's `keyFor` is it
    /// bound to its key's `key_for_base` (`undefined` for a request without a key), no closure
    /// of its own.
    static KEY_FOR: Function = Closure::<dyn Fn(JsValue, JsValue) -> Result<JsValue, JsValue>>::new(
        |base: JsValue, name: JsValue| {
            let Some(base) = base.as_string() else {
                return Err(type_error("ctx.keyFor: this request has no idempotency key"));
            };
            match name.dyn_ref::<js_sys::JsString>().filter(|n| n.length() > 0) {
                Some(name) => Ok(idem::derived_key(&base, &js::wtf8(name)).into()),
                None => Err(type_error(
                    "ctx.keyFor(name): name must be a non-empty string (e.g. 'charge')",
                )),
            }
        },
    )
    .into_js_value()
    .unchecked_into();
}

/// The handler's second argument: `{ key, keyFor(name), tx, signal }`. Where `tx` can matter
/// (a transactional store, or a transaction to hand out) it is a getter, so reading it is known
/// (a throw after it is rolled back rather than stored); otherwise it is `undefined`, a plain
/// property.
pub struct Context {
    /// The JS object.
    pub object: JsValue,
    used_tx: Rc<Cell<bool>>,
}

impl Context {
    /// The context of a request holding `k` (`tx`: the store's transaction) or, for a request
    /// without a key, `{ key: null, keyFor() throws, tx: undefined }`. The own properties of
    /// `route` (the second argument the wrapped function was called with: Next.js's
    /// `{ params }`, an adapter's state) come first; the idempotency fields win over them.
    /// `signal` is the handler's request signal (for a framework route that never sees the
    /// request: `undefined` for an `idempotent` job). `transactional`: the store's `ctx.tx`
    /// writes are rolled back by a throw (reading `tx` is tracked even where it is `undefined`).
    pub fn new(
        k: Option<&Keyed>,
        tx: JsValue,
        transactional: bool,
        route: &JsValue,
        signal: &JsValue,
    ) -> Context {
        let object: JsValue = Object::new().into();
        if route.is_object() {
            // Object.assign reads the source's getters; one that throws leaves that field out.
            let _ = js_sys::Reflect::apply(
                &assign(),
                &JsValue::UNDEFINED,
                &js_sys::Array::of2(&object, route),
            );
        }
        let used_tx = Rc::new(Cell::new(false));
        js::set(
            &object,
            "key",
            &k.map_or(JsValue::NULL, |k| JsValue::from_str(&k.key)),
        );
        js::set(&object, "signal", signal);
        let base = k.map_or(JsValue::UNDEFINED, |k| JsValue::from_str(&k.key_for_base));
        let key_for = KEY_FOR.with(|f| f.bind1(&JsValue::UNDEFINED, &base));
        js::set(&object, "keyFor", &key_for);
        if tx.is_undefined() && !transactional {
            // Nothing to hand out, and reading it changes nothing.
            js::set(&object, "tx", &JsValue::UNDEFINED);
            return Context { object, used_tx };
        }
        let used = used_tx.clone();
        let getter = Closure::<dyn Fn() -> JsValue>::new(move || {
            used.set(true);
            tx.clone()
        });
        let descriptor: JsValue = Object::new().into();
        js::set(&descriptor, "get", &getter.into_js_value());
        js::set(&descriptor, "enumerable", &JsValue::TRUE);
        let _ = js_sys::Reflect::define_property(
            object.unchecked_ref::<Object>(),
            &JsValue::from_str("tx"),
            descriptor.unchecked_ref::<Object>(),
        );
        Context { object, used_tx }
    }

    /// Did the handler read `ctx.tx`?
    pub fn used_tx(&self) -> bool {
        self.used_tx.get()
    }
}

/// `Object.assign`.
fn assign() -> Function {
    js::get(&js::get(&js_sys::global(), "Object"), "assign").unchecked_into()
}

/// How the handler ended.
pub enum Ran {
    /// It resolved with this value.
    Resolved(JsValue),
    /// It threw or rejected with this error.
    Threw(JsValue),
    /// Its signal was aborted (`handlerTimeoutMs`) and it still had not settled a
    /// `lockTimeoutMs` later: given up on, as a holder that hung.
    Abandoned,
}

/// The handler's time limit: abort `controller` with a `TimeoutError` `ms` after `from_ms`.
pub struct Limit<'a> {
    /// `handlerTimeoutMs`.
    pub ms: f64,
    /// The controller of the handler's `request.signal`.
    pub controller: &'a web_sys::AbortController,
    /// When the handler was called ([`js::now_ms`]: a step of the wall clock does not move
    /// the limit).
    pub from_ms: f64,
}

impl Limit<'_> {
    /// `promise`'s outcome within the limit: once it is reached the handler's signal aborts
    /// (a `TimeoutError`), and `grace_ms` after it `None` when `promise` is still pending.
    /// What the handler does, and the reading of its answer's body, share one limit.
    pub async fn bound(
        &self,
        promise: &Promise,
        grace_ms: f64,
    ) -> Option<Result<JsValue, JsValue>> {
        let abort_at = self.from_ms + self.ms;
        let left = abort_at - js::now_ms();
        if left > 0.0 {
            if let Some(outcome) = within(promise, left).await {
                return Some(outcome);
            }
        }
        if !self.controller.signal().aborted() {
            let reason = web_sys::DomException::new_with_message_and_name(
                "the handler ran longer than handlerTimeoutMs",
                "TimeoutError",
            )
            .map(JsValue::from)
            .unwrap_or(JsValue::UNDEFINED);
            self.controller.abort_with_reason(&reason);
        }
        within(promise, abort_at + grace_ms - js::now_ms()).await
    }
}

/// What [`run_holding`] calls: `f(input, ctx)`, `ctx` made from `route` and `signal` (see
/// [`Context::new`]).
pub struct Invocation<'a> {
    /// The handler, or the job's function.
    pub f: &'a Function,
    /// Its first argument: the request, or the job's input.
    pub input: &'a JsValue,
    /// Whose own properties `ctx` starts with.
    pub route: &'a JsValue,
    /// `ctx.signal`.
    pub signal: &'a JsValue,
}

/// `promise`'s outcome, or `None` when it has not settled within `ms`.
pub async fn within(promise: &Promise, ms: f64) -> Option<Result<JsValue, JsValue>> {
    let sentinel: JsValue = Object::new().into();
    let mut handle = JsValue::UNDEFINED;
    let timer = Promise::new(&mut |resolve, _| {
        let bound: JsValue = resolve.bind1(&JsValue::UNDEFINED, &sentinel).into();
        handle = js::set_timeout(bound.unchecked_ref(), ms.clamp(0.0, MAX_TIMER_MS));
    });
    let outcome = JsFuture::from(Promise::race(&js_sys::Array::of2(promise, &timer))).await;
    js::clear_timeout(&handle);
    match outcome {
        Ok(v) if Object::is(&v, &sentinel) => None,
        other => Some(other),
    }
}

/// Renew `k`'s lock every third of `lockTimeoutMs` until the [`Renewal`] is dropped: while a
/// handler runs, or anything else that holds the key (a job's `onDeadLetter`).
pub fn renew_while_held(c: &Common, k: &Keyed) -> Renewal {
    Renewal::start(
        c.store.clone(),
        k.store_key.clone(),
        k.token.clone(),
        k.fingerprint.clone(),
        c.limits.lock_timeout_ms,
        c.limits.renew_interval_ms(),
        c.reporter.clone(),
    )
}

/// Run `f(input, ctx)` while holding `k`, renewing the lock every third of `lockTimeoutMs`.
/// Returns how it ended, the context (was `tx` used?) and the renewal (was the lock lost?),
/// which stops renewing when dropped. With a `limit`, the handler's signal is aborted after
/// `limit.ms`, and a handler that still has not settled `lockTimeoutMs` later is
/// [`Ran::Abandoned`] ([`Limit::bound`]). Once it has settled (or is abandoned), the store's transaction is
/// closed to it (`closeTransaction`): `ctx.tx` throws from then on.
pub async fn run_holding(
    c: &Common,
    k: &Keyed,
    call: Invocation<'_>,
    caller: &Caller,
    limit: Option<&Limit<'_>>,
) -> (Ran, Context, Renewal) {
    let Invocation {
        f,
        input,
        route,
        signal,
    } = call;
    let ctx = Context::new(
        Some(k),
        c.store.transaction(&k.store_key, &k.token),
        c.store.transactional,
        route,
        signal,
    );
    let renewal = renew_while_held(c, k);
    let outcome = match caller.call(f, &[input, &ctx.object]) {
        Err(e) => Some(Err(e)),
        Ok(v) => {
            let promise = js::promise_of(&v);
            match limit {
                None => Some(JsFuture::from(promise).await),
                Some(limit) => limit.bound(&promise, c.limits.lock_timeout_ms).await,
            }
        }
    };
    c.store.close_transaction(&k.store_key, &k.token);
    let ran = match outcome {
        Some(Ok(v)) => Ran::Resolved(v),
        Some(Err(e)) => Ran::Threw(e),
        None => Ran::Abandoned,
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

impl Stored {
    /// How the run that stored it ended: `kept` (stored, or a failure stored) when the store
    /// kept it, else not stored.
    pub fn outcome(&self, kept: Outcome) -> Outcome {
        match self {
            Stored::Kept => kept,
            Stored::LockLost | Stored::Failed => Outcome::NotStored,
        }
    }
}

/// How soon a run whose key a request of this process is giving back asks for it again.
pub const YIELD_POLL_MS: f64 = 20.0;

/// The waits before `complete` is called again after it failed (a non-transactional store).
const COMPLETE_RETRY_MS: [f64; 2] = [100.0, 400.0];

/// Store `response` as `k`'s answer, then write the run's end (`end`).
/// `renewal_lost`: a renewal was refused while the handler ran.
///
/// A lease that lapsed in the store while the run went on (the event loop or the store was held
/// past `lockTimeoutMs`, so the renewal came too late), with no renewal refused, is taken again
/// if nobody took the key meanwhile, as the renewal would have, and the answer stored: the run
/// is the key's only one. Not with a transactional store, whose lock is the run's transaction.
/// A key taken again whose answer still cannot be stored is freed, the run's end written
/// before it (the next holder finds the run ended, not open, which would read as crashed).
///
/// A store that fails (a dropped connection, a failover) is asked again after
/// `COMPLETE_RETRY_MS`; if it still fails the caller is answered ([`Stored::Failed`]: the
/// answer says not to retry) and the storing goes on in the background, once a renewal
/// interval, the lock renewed meanwhile, until it would have lapsed (`lockTimeoutMs`): a
/// store back by then keeps the answer, and a repeat of the request gets it instead of a
/// second run. Not with a transactional store, whose commit either happened or rolled the run
/// back. The run's end is then written when the caller is answered (not stored), and again,
/// the same run, if the storing behind it keeps the answer.
pub async fn store_answer(
    c: &Common,
    k: &Keyed,
    response: &StoredResponse,
    renewal_lost: bool,
    end: RunEnd,
) -> Stored {
    let mut storing = Storing {
        record: completed_record(&k.fingerprint, response),
        may_take_again: !renewal_lost && !c.store.transactional,
        taken_again: false,
        failed: None,
        renewal_lost,
        patient_until: js::now_ms() + c.limits.lock_timeout_ms,
    };
    let RunEnd { log, kept, unkept } = end;
    match storing.run(c, k, false).await {
        Err(Later(error, operation)) => {
            c.reporter.store_error(&error, operation);
            // The run's end is written now, not kept (as answered: a process that exits
            // meanwhile leaves that), and again, same run, if the storing keeps the answer.
            log.clone().end_later(unkept.0, unkept.1);
            // Its renewal starts now, before the caller's is dropped: the key always has a
            // live holder here, and a renewal of the caller's that ends meanwhile does not
            // give back a lock this one holds (same token).
            let renewal = renew_while_held(c, k);
            // Neither it nor the waits keep the process alive: a server that shuts down
            // meanwhile leaves the answer unkept, as before this went on.
            renewal.unref();
            let (c, k) = (c.clone(), k.clone());
            spawn_local(async move {
                let _renewal = renewal;
                sleep_held(patient_ms(&c), false).await;
                // The lease may lapse again during the outage: it may be taken again.
                storing.may_take_again = !storing.renewal_lost && !c.store.transactional;
                match storing.run(&c, &k, true).await.unwrap_or(Stored::Failed) {
                    Stored::Kept => log.end_later(kept.0, kept.1),
                    // Its end (not stored) was written when the caller was answered.
                    _ if storing.taken_again => free_key(&c, &k).await,
                    _ => {}
                }
            });
            Stored::Failed
        }
        Ok(stored) => {
            let (outcome, detail) = match stored {
                Stored::Kept => kept,
                Stored::Failed | Stored::LockLost => unkept,
            };
            if storing.taken_again && !matches!(stored, Stored::Kept) {
                log.end_before_freeing(c, outcome, detail).await;
                free_key(c, k).await;
            } else {
                log.end_later(outcome, detail);
            }
            stored
        }
    }
}

/// How a run's end is written to its history once its answer's storing is over.
pub struct RunEnd {
    log: RunLog,
    /// The outcome and detail when the answer is kept.
    kept: (Outcome, Option<String>),
    /// The outcome and detail when it is not: by default not stored, the same detail.
    unkept: (Outcome, Option<String>),
}

impl RunEnd {
    /// The run of `log` ends `kept` (with `detail`) if its answer is kept, else not stored.
    pub fn new(log: RunLog, kept: Outcome, detail: Option<String>) -> Self {
        RunEnd {
            log,
            unkept: (Outcome::NotStored, detail.clone()),
            kept: (kept, detail),
        }
    }

    /// It ends `outcome` (with `detail`) if its answer is not kept.
    pub fn or_else(mut self, outcome: Outcome, detail: Option<String>) -> Self {
        self.unkept = (outcome, detail);
        self
    }
}

/// How long a run waits before it asks a failing store again once the quick retries are
/// spent: a renewal interval (a third of `lockTimeoutMs`), at most a second.
fn patient_ms(c: &Common) -> f64 {
    (c.limits.lock_timeout_ms / 3.0).min(1000.0)
}

/// A store that still failed after the quick retries, for a run whose caller waits: the
/// storing goes on in the background (the last failure, and the store call that failed).
struct Later(JsValue, &'static str);

/// Where the storing of an answer is (it may go on in the background).
struct Storing {
    /// The completed record.
    record: Written,
    /// The lease lapsed, the key may be taken again (once, or again while another request of
    /// this process gives it back).
    may_take_again: bool,
    /// This run took the lapsed lock again: one it then cannot complete is freed (not left
    /// behind).
    taken_again: bool,
    /// The failure of a call made again: a refusal after it may be of an answer that call
    /// kept before it failed (its reply lost), so the failure is what is reported.
    failed: Option<JsValue>,
    /// A renewal was refused while the handler ran.
    renewal_lost: bool,
    /// Until when ([`js::now_ms`]) the store is asked again: while the lock would be held.
    patient_until: f64,
}

impl Storing {
    /// Call `complete` until the answer is kept, the lock is lost, or the store keeps failing.
    /// In the foreground (`background` false) a run whose caller waits stops after the quick
    /// retries with [`Later`]; one answered 202 (nobody waits for its answer, and no header on
    /// it can tell the caller's next repeat not to run it again) goes on here. In the
    /// background every failure is asked again while the lock would be held.
    async fn run(&mut self, c: &Common, k: &Keyed, background: bool) -> Result<Stored, Later> {
        // A store call that failed is made again after `COMPLETE_RETRY_MS` (not with a
        // transactional store), then once a renewal interval (a third of lockTimeoutMs, at
        // most a second) while the lock would be held.
        let mut retries = COMPLETE_RETRY_MS
            .iter()
            .filter(|_| !c.store.transactional && !background);
        let patient_ms = patient_ms(c);
        // `Ok(why)`: the lock was lost; `Err(e)`: the store failed.
        let ended = loop {
            match c
                .store
                .complete(&k.store_key, &k.token, &self.record, c.limits.ttl_ms)
                .await
            {
                Ok(true) => return Ok(Stored::Kept),
                // The lease lapsed (the handler, the event loop or the store held past it;
                // after a failure, during the outage): the key is taken again if nobody took
                // it (an answer an earlier call kept, its reply lost, refuses that too), then
                // stored.
                Ok(false) if self.may_take_again => {
                    self.may_take_again = false;
                    match take_key_again(c, k).await {
                        Ok(true) => self.taken_again = true,
                        // A request of this process that took the lapsed key is giving it back
                        // to this run: asked again once it has.
                        Ok(false) if is_yielding(&k.store_key) => {
                            self.may_take_again = true;
                            sleep(YIELD_POLL_MS).await;
                        }
                        // A store failing as the key is taken again is a failing store, as
                        // for `complete`: asked again while the lock would be held (for a
                        // caller that waits for no such thing, behind its answer).
                        Err(e) if js::now_ms() + patient_ms < self.patient_until => {
                            self.may_take_again = true;
                            let wait = (background, patient_ms, &mut retries as _);
                            if let Some(e) = self.failed_call(c, k, e, "acquire", wait).await? {
                                break Err(e);
                            }
                        }
                        // After a failure, that failure is what is reported: the refusal may be
                        // of an answer it kept.
                        Ok(false) | Err(_) if self.failed.is_some() => {
                            break Err(self.failed.take().unwrap_or_default())
                        }
                        Ok(false) => break Ok("the lock lapsed before the response could be stored (the handler, the event loop or the store was held past lockTimeoutMs), and another request took the key"),
                        Err(e) => {
                            c.reporter.store_error(&e, "acquire");
                            return Ok(Stored::Failed);
                        }
                    }
                }
                Ok(false) if self.failed.is_some() => {
                    break Err(self.failed.take().unwrap_or_default())
                }
                Ok(false) if self.renewal_lost => break Ok("the lock was lost before the response could be stored: a renewal was refused (the store lost the lock, or another request took it over)"),
                Ok(false) => break Ok("the lock was lost before the response could be stored (did the handler run longer than lockTimeoutMs, or the store lose the lock?)"),
                Err(e) => {
                    let wait = (background, patient_ms, &mut retries as _);
                    if let Some(e) = self.failed_call(c, k, e, "complete", wait).await? {
                        break Err(e);
                    }
                }
            }
        };
        let (error, stored) = match ended {
            Ok(why) => (js_sys::Error::new(why).into(), Stored::LockLost),
            Err(e) => (e, Stored::Failed),
        };
        // In the background the failure was reported when the caller was answered. A lock this
        // run took again is freed by its caller, once the run's end is written.
        if !background {
            c.reporter.store_error(&error, "complete");
        }
        Ok(stored)
    }
}

/// How [`Storing::failed_call`] waits: in the background or not, a renewal interval, and the
/// quick retries left.
type Wait<'a> = (bool, f64, &'a mut dyn Iterator<Item = &'static f64>);

impl Storing {
    /// A store call (`operation`) failed with `e`: wait to ask again, after a quick retry
    /// (`COMPLETE_RETRY_MS`), then once a renewal interval while the lock would be held;
    /// `Err(Later)` for a caller answered now, the storing going on behind it; `Ok(Some(e))`
    /// when it is given up (the time is spent, or a transactional store).
    async fn failed_call(
        &mut self,
        c: &Common,
        k: &Keyed,
        e: JsValue,
        operation: &'static str,
        (background, patient_ms, retries): Wait<'_>,
    ) -> Result<Option<JsValue>, Later> {
        if let Some(&ms) = retries.next() {
            self.failed = Some(e);
            sleep(ms).await;
            return Ok(None);
        }
        if c.store.transactional || js::now_ms() + patient_ms >= self.patient_until {
            return Ok(Some(e));
        }
        self.failed = Some(e.clone());
        if !background && !k.accepted.get() && !k.patient {
            // Its caller is answered now; the storing goes on behind it.
            return Err(Later(e, operation));
        }
        sleep_held(patient_ms, !background).await;
        Ok(None)
    }
}

/// Take `k`'s lapsed lock again for this run, if nobody took it (`Store::take_again`).
async fn take_key_again(c: &Common, k: &Keyed) -> Result<bool, JsValue> {
    c.store
        .take_again(
            &k.store_key,
            &k.token,
            &k.fingerprint,
            c.limits.lock_timeout_ms,
        )
        .await
}

/// Free `k` (with a transactional store: roll back what the handler wrote through `ctx.tx`).
pub async fn free_key(c: &Common, k: &Keyed) {
    if let Err(e) = c.store.release(&k.store_key, &k.token).await {
        c.reporter.store_error(&e, "release");
    }
}
