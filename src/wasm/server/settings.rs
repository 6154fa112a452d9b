//! The options of `idempotency(handler, options)` and `idempotent(fn, options)`, read with
//! serde-wasm-bindgen from a snapshot of the object's own options (`crate::wasm::read_options`):
//! an unknown name is a `TypeError` naming the closest known one (`lockTimeout` ->
//! `lockTimeoutMs`), a wrong value a `TypeError` naming the option, the value and what is
//! allowed. The numbers are checked by `crate::core::idempotency`; the store, the functions
//! and the key stay JavaScript values.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::Function;
use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::store::Store;
use crate::core::idempotency::{
    self as idem, Concurrent, ServerOptions, JOB_OPTION_NAMES, SERVER_OPTION_NAMES,
};
use crate::core::options::OptionError;
use crate::core::runs;
use crate::wasm::errors::invalid_option;
use crate::wasm::read_options::deserialize;

#[wasm_bindgen]
extern "C" {
    /// `console.error(a, b)`; bound with `catch`: printing a value whose inspection throws
    /// must not throw through the wasm.
    #[wasm_bindgen(js_namespace = console, js_name = error, catch)]
    fn console_error(a: &JsValue, b: &JsValue) -> Result<(), JsValue>;
    /// `console.warn(message)`, bound with `catch`.
    #[wasm_bindgen(js_namespace = console, js_name = warn, catch)]
    pub fn console_warn(message: &str) -> Result<(), JsValue>;
}

thread_local! {
    /// Makes the default store (`new MemoryStore()`), given by `js/server.js` when it loads:
    /// the store classes are JavaScript.
    static DEFAULT_STORE: RefCell<Option<Function>> = const { RefCell::new(None) };
}

/// `setDefaultStore(factory)`: how `js/server.js` gives the wasm the default store,
/// `() => new MemoryStore()`. Not part of the public API.
#[wasm_bindgen(js_name = setDefaultStore, skip_typescript)]
pub fn set_default_store(factory: Function) {
    DEFAULT_STORE.with(|s| *s.borrow_mut() = Some(factory));
}

/// What `store` must be.
const STORE_EXPECTED: &str = "an IdempotencyStore: an object with acquire, reclaim, complete and release methods (MemoryStore, RedisStore, PostgresStore)";

/// What each option of either API allows, for the `TypeError` of a value of the wrong type.
fn expected(option: &str) -> &'static str {
    match option {
        "store" => STORE_EXPECTED,
        "header" => idem::HEADER_EXPECTED,
        "required" => "true, false or a function (request) => boolean",
        "identity" => "a function (request) => string | undefined, or false (keys not scoped)",
        "ttlMs" => idem::TTL_EXPECTED,
        "lockTimeoutMs" => idem::LOCK_TIMEOUT_EXPECTED,
        "pollMs" | "handlerTimeoutMs" | "storeTimeoutMs" => idem::POSITIVE_MS_EXPECTED,
        "acceptAfterMs" => runs::ACCEPT_AFTER_EXPECTED,
        "maxRuns" => runs::MAX_RUNS_EXPECTED,
        "history" => "true or false",
        "secret" => idem::SECRET_EXPECTED,
        "ignoredMethods" => idem::IGNORED_METHODS_EXPECTED,
        "waitTimeoutMs" => idem::WAIT_MS_EXPECTED,
        "concurrent" => idem::CONCURRENT_EXPECTED,
        "maxBodyBytes" => idem::BODY_BYTES_EXPECTED,
        "key" => "a function (input) => string, the job's key (1 to 255 visible ASCII characters)",
        "scope" => idem::SCOPE_EXPECTED,
        _ => "a function",
    }
}

/// Where failures are told: `onStoreError(error, operation)` and `onError(error)`, by
/// default `console.error`.
#[derive(Clone, Default)]
pub struct Reporter {
    on_store_error: Option<Function>,
    on_error: Option<Function>,
    on_event: Option<Function>,
}

impl Reporter {
    /// A store method failed where the answer can go on without it (`renew`, `complete`,
    /// `release`), or before the handler ran (`acquire`: the answer is a 503).
    pub fn store_error(&self, error: &JsValue, operation: &str) {
        match &self.on_store_error {
            // A throwing (or rejecting) callback must not become the request's error.
            Some(f) => crate::wasm::js::call_detached(f, &[error, &operation.into()]),
            None => {
                let mut msg = String::from("retry-fetch/server: idempotency store ");
                msg.push_str(operation);
                msg.push_str("() failed:");
                let _ = console_error(&msg.into(), error);
            }
        }
    }

    /// `onEvent(event)`, if given: a run started or ended, a replay, a crashed holder found,
    /// a `202`, a dead letter (`core::runs::event`). A throw or a rejection is ignored.
    pub fn event(&self, event: &JsValue) {
        if let Some(f) = &self.on_event {
            crate::wasm::js::call_detached(f, &[event]);
        }
    }

    /// Is anyone listening to events (`onEvent`)?
    pub fn listens(&self) -> bool {
        self.on_event.is_some()
    }

    /// The handler threw (or did not resolve with a Response) after it started.
    pub fn handler_error(&self, error: &JsValue) {
        match &self.on_error {
            Some(f) => crate::wasm::js::call_detached(f, &[error]),
            None => drop(console_error(
                &"retry-fetch/server: the handler failed:".into(),
                error,
            )),
        }
    }
}

/// The HMAC key that scopes store keys (`core::idempotency::store_key`): the `secret` option,
/// else the store's `secret()`, asked when the handler or job is made ([`Secret::prefetch`])
/// or, failing that, on the first request with an identity, and kept (shared by clones).
#[derive(Clone, Default)]
pub struct Secret(Rc<RefCell<Option<Rc<[u8]>>>>);

impl Secret {
    /// Ask the store for its secret now, in the background (a failure is left to the first
    /// request that needs it): an instance running when the store loses it (a Redis restart
    /// without persistence) has it, and puts it back as it was, rather than making a new one
    /// other instances do not hash callers with.
    fn prefetch(&self, store: &Store) {
        if self.0.borrow().is_some() || !store.has_secret() {
            return;
        }
        // No time limit (a timer would keep a Node process alive for `storeTimeoutMs` after a
        // handler was made whose store does not answer): a request that comes first asks too.
        let (secret, store) = (self.clone(), store.clone());
        wasm_bindgen_futures::spawn_local(async move {
            if let Ok(got) = store.secret(false).await {
                secret
                    .0
                    .borrow_mut()
                    .get_or_insert_with(|| got.into_bytes().into());
            }
        });
    }

    /// The secret, from the option or (once) from the store.
    pub async fn get(&self, store: &Store) -> Result<Rc<[u8]>, JsValue> {
        if let Some(s) = self.0.borrow().as_ref() {
            return Ok(s.clone());
        }
        let got: Rc<[u8]> = store.secret(true).await?.into_bytes().into();
        *self.0.borrow_mut() = Some(got.clone());
        Ok(got)
    }
}

/// What both APIs share: the store, the limits, the reporting.
#[derive(Clone)]
pub struct Common {
    /// `store`. Default `new MemoryStore()`.
    pub store: Store,
    /// `secret`. Default: the store's own (`store.secret()`).
    pub secret: Secret,
    /// `ttlMs`, `lockTimeoutMs`, `concurrent`, `waitTimeoutMs`, `pollMs`, `maxBodyBytes` and
    /// `header`, checked by the core (defaults in `ServerOptions::default()`).
    pub limits: ServerOptions,
    /// `onStoreError`, `onError`, `onEvent`.
    pub reporter: Reporter,
    /// `history`: record every run in the store (`recordRun`), if it keeps a history.
    /// Default `true`.
    pub history: bool,
}

/// `required`.
pub enum Required {
    /// Not given: POST and PATCH need a key.
    Default,
    /// `true` or `false`.
    Always(bool),
    /// `(request) => boolean | Promise<boolean>`.
    Ask(Function),
}

/// `identity`.
pub enum Identity {
    /// Not given: the request's credentials (`core::idempotency::default_identity`).
    Credentials,
    /// `false`: keys are not scoped.
    Unscoped,
    /// `(request) => string | null | undefined | Promise<...>` (`null`, `undefined`: no scope).
    Ask(Function),
}

/// The options of `idempotency(handler, options)`.
pub struct HttpSettings {
    /// Store, limits, reporting.
    pub common: Common,
    /// `required`. Default: POST and PATCH.
    pub required: Required,
    /// `identity`. Default: the request's credentials.
    pub identity: Identity,
    /// Was the warning about a keyed request without a recognised credential shown?
    pub warned_unscoped: Cell<bool>,
    /// The warning about a session cookie the default identity left out (a credential header
    /// came first) was given. Default false.
    pub warned_shadowed: Cell<bool>,
}

/// The options of `idempotent(fn, options)`.
pub struct JobSettings {
    /// Store, limits, reporting.
    pub common: Common,
    /// `key`: `(input) => string`. Required.
    pub key: Function,
    /// `scope`: scopes the keys (a queue's or a tenant's name), as the bytes it is hashed
    /// from (WTF-8). Default none.
    pub scope: Option<Vec<u8>>,
    /// `maxRuns`: a job whose runs failed (or whose holder crashed) this many times is not run
    /// again. Default none: no limit.
    pub max_runs: Option<u32>,
    /// `onDeadLetter(record)`: told once when a job reaches `maxRuns`. Default none.
    pub on_dead_letter: Option<Function>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawOptions {
    #[serde(with = "serde_wasm_bindgen::preserve")]
    store: JsValue,
    header: Option<String>,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    required: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    identity: JsValue,
    ttl_ms: Option<f64>,
    lock_timeout_ms: Option<f64>,
    concurrent: Option<String>,
    wait_timeout_ms: Option<f64>,
    poll_ms: Option<f64>,
    max_body_bytes: Option<f64>,
    handler_timeout_ms: Option<f64>,
    store_timeout_ms: Option<f64>,
    ignored_methods: Option<Vec<String>>,
    secret: Option<String>,
    accept_after_ms: Option<f64>,
    history: Option<bool>,
    max_runs: Option<f64>,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    on_store_error: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    on_event: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    on_dead_letter: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    on_error: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    key: JsValue,
    #[serde(with = "serde_wasm_bindgen::preserve")]
    scope: JsValue,
}

/// Read `options` for `api` (`idempotency` or `idempotent`), whose option names are `known`.
fn read_raw(
    api: &'static str,
    options: &JsValue,
    known: &[&'static str],
) -> Result<(RawOptions, Common), JsValue> {
    let (raw, _snap, nulls): (RawOptions, _, _) = deserialize(api, options, known, expected)?;
    let error = |option: &'static str, value: &JsValue| {
        invalid_option(api, OptionError::new(option, expected(option)), value)
    };
    if let Some(name) = nulls.first() {
        return Err(error(name, &JsValue::NULL));
    }
    let check =
        |r: Result<f64, OptionError>, v: f64| r.map_err(|e| invalid_option(api, e, &v.into()));
    let mut limits = ServerOptions::default();
    if let Some(h) = &raw.header {
        limits.header = idem::header(h).map_err(|e| invalid_option(api, e, &h.into()))?;
    }
    if let Some(n) = raw.ttl_ms {
        limits.ttl_ms = check(idem::ttl_ms(n), n)?;
    }
    if let Some(n) = raw.lock_timeout_ms {
        limits.lock_timeout_ms = check(idem::lock_timeout_ms(n), n)?;
    }
    if let Some(c) = &raw.concurrent {
        limits.concurrent = idem::concurrent(c).map_err(|e| invalid_option(api, e, &c.into()))?;
    }
    if let Some(n) = raw.wait_timeout_ms {
        limits.wait_timeout_ms = Some(check(idem::wait_timeout_ms(n), n)?);
    }
    if let Some(n) = raw.poll_ms {
        limits.poll_ms = check(idem::poll_ms(n), n)?;
    }
    if let Some(n) = raw.max_body_bytes {
        limits.max_body_bytes = check(idem::max_body_bytes(n), n)?;
    }
    if let Some(n) = raw.handler_timeout_ms {
        limits.handler_timeout_ms = Some(check(idem::handler_timeout_ms(n), n)?);
    }
    if let Some(n) = raw.store_timeout_ms {
        limits.store_timeout_ms = check(idem::store_timeout_ms(n), n)?;
    }
    if let Some(n) = raw.accept_after_ms {
        limits.accept_after_ms = Some(check(runs::accept_after_ms(n), n)?);
    }
    if let Some(list) = &raw.ignored_methods {
        let mut methods = Vec::with_capacity(list.len());
        for m in list {
            methods.push(idem::ignored_method(m).map_err(|e| invalid_option(api, e, &m.into()))?);
        }
        limits.ignored_methods = methods;
    }
    let secret = Secret::default();
    if let Some(v) = &raw.secret {
        let ok = idem::secret(v).map_err(|e| invalid_option(api, e, &v.into()))?;
        *secret.0.borrow_mut() = Some(ok.as_bytes().into());
    }
    let mut store = if raw.store.is_undefined() {
        let made =
            DEFAULT_STORE.with(|s| s.borrow().as_ref().map(|f| f.call0(&JsValue::UNDEFINED)));
        match made {
            Some(made) => Store::new(made?),
            None => None,
        }
        .ok_or_else(|| crate::wasm::errors::type_error("retry-fetch/server: no default store (load the package through 'retry-fetch/server')"))?
    } else {
        Store::new(raw.store.clone()).ok_or_else(|| error("store", &raw.store))?
    };
    store.claim_timeout_ms = limits.store_timeout_ms;
    let function = |name: &'static str, v: &JsValue| -> Result<Option<Function>, JsValue> {
        if v.is_undefined() {
            return Ok(None);
        }
        v.clone()
            .dyn_into::<Function>()
            .map(Some)
            .map_err(|v| error(name, &v))
    };
    let reporter = Reporter {
        on_store_error: function("onStoreError", &raw.on_store_error)?,
        on_error: function("onError", &raw.on_error)?,
        on_event: function("onEvent", &raw.on_event)?,
    };
    let history = raw.history.unwrap_or(true);
    Ok((
        raw,
        Common {
            store,
            secret,
            limits,
            reporter,
            history,
        },
    ))
}

/// A `TypeError` when keys may be scoped but no secret can be had: neither the `secret` option
/// nor a store that keeps one (`secret()`).
fn check_secret(api: &str, common: &Common, may_scope: bool) -> Result<(), JsValue> {
    if !may_scope || common.secret.0.borrow().is_some() || common.store.has_secret() {
        return Ok(());
    }
    Err(crate::wasm::errors::invalid_value(
        api,
        "secret",
        &JsValue::UNDEFINED,
        idem::SECRET_MISSING_EXPECTED,
    ))
}

/// Read the options of `idempotency(handler, options)`.
pub fn read_http(options: &JsValue) -> Result<HttpSettings, JsValue> {
    let api = "idempotency";
    let (raw, common) = read_raw(api, options, &SERVER_OPTION_NAMES)?;
    let error = |option: &'static str, value: &JsValue| {
        invalid_option(api, OptionError::new(option, expected(option)), value)
    };
    let required = match (raw.required.as_bool(), raw.required.is_undefined()) {
        (_, true) => Required::Default,
        (Some(b), _) => Required::Always(b),
        _ => Required::Ask(
            raw.required
                .clone()
                .dyn_into()
                .map_err(|v| error("required", &v))?,
        ),
    };
    let identity = match (raw.identity.as_bool(), raw.identity.is_undefined()) {
        (_, true) => Identity::Credentials,
        (Some(false), _) => Identity::Unscoped,
        _ => Identity::Ask(
            raw.identity
                .clone()
                .dyn_into()
                .map_err(|v| error("identity", &v))?,
        ),
    };
    let may_scope = !matches!(identity, Identity::Unscoped);
    check_secret(api, &common, may_scope)?;
    if may_scope {
        common.secret.prefetch(&common.store);
    }
    Ok(HttpSettings {
        common,
        required,
        identity,
        warned_unscoped: Cell::new(false),
        warned_shadowed: Cell::new(false),
    })
}

/// Read the options of `idempotent(fn, options)`.
pub fn read_job(options: &JsValue) -> Result<JobSettings, JsValue> {
    let api = "idempotent";
    if options.is_undefined() || options.is_null() {
        return Err(invalid_option(
            api,
            OptionError::new("key", expected("key")),
            &JsValue::UNDEFINED,
        ));
    }
    let (raw, common) = read_raw(api, options, &JOB_OPTION_NAMES)?;
    let key = raw
        .key
        .clone()
        .dyn_into::<Function>()
        .map_err(|v| invalid_option(api, OptionError::new("key", expected("key")), &v))?;
    // Hashed from its WTF-8 bytes, as an identity is: two scopes are never taken for one.
    let scope = match raw.scope.dyn_ref::<js_sys::JsString>() {
        _ if raw.scope.is_undefined() || raw.scope.is_null() => None,
        Some(s) if s.length() > 0 => Some(crate::wasm::js::wtf8(s)),
        _ => {
            return Err(invalid_option(
                api,
                OptionError::new("scope", idem::SCOPE_EXPECTED),
                &raw.scope,
            ))
        }
    };
    check_secret(api, &common, scope.is_some())?;
    if scope.is_some() {
        common.secret.prefetch(&common.store);
    }
    let max_runs = match raw.max_runs {
        None => None,
        Some(n) => Some(runs::max_runs(n).map_err(|e| invalid_option(api, e, &n.into()))?),
    };
    // Counting a key's failed runs needs its history.
    if max_runs.is_some() && !(common.history && common.store.keeps_history()) {
        return Err(crate::wasm::errors::invalid_value(
            api,
            "maxRuns",
            &raw.max_runs.unwrap_or_default().into(),
            "a store that keeps a run history (recordRun and runs: MemoryStore, RedisStore, PostgresStore) and history not false",
        ));
    }
    let on_dead_letter = if raw.on_dead_letter.is_undefined() {
        None
    } else {
        Some(
            raw.on_dead_letter
                .clone()
                .dyn_into::<Function>()
                .map_err(|v| {
                    invalid_option(
                        api,
                        OptionError::new("onDeadLetter", expected("onDeadLetter")),
                        &v,
                    )
                })?,
        )
    };
    if on_dead_letter.is_some() {
        runs::on_dead_letter(max_runs).map_err(|e| invalid_option(api, e, &raw.on_dead_letter))?;
    }
    Ok(JobSettings {
        common,
        key,
        scope,
        max_runs,
        on_dead_letter,
    })
}

/// Is `concurrent` `'reject'`?
pub fn rejects(limits: &ServerOptions) -> bool {
    limits.concurrent == Concurrent::Reject
}
