//! What crosses back to JavaScript as plain objects, serialized by serde-wasm-bindgen: the
//! context the hooks get (`shouldRetry`, `onRetry`, `beforeRetry`), `onSettled`'s info, each
//! attempt's record (`RetryError.attempts`) and a breaker's state change (the list
//! `backoffDelays` returns is pushed into a JS array as it is drawn). A JavaScript value inside
//! one (a response, an error, headers) is
//! carried as it is (`serde_wasm_bindgen::preserve`). An optional field that is `None` is
//! absent from the object, not `undefined`.

use serde::{Serialize, Serializer};
use wasm_bindgen::prelude::*;

/// A JavaScript value, carried into the object as it is.
pub struct Js(pub JsValue);

impl Serialize for Js {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_wasm_bindgen::preserve::serialize(&self.0, s)
    }
}

/// The object given to `shouldRetry` (with `response`, a clone of the newest response),
/// `onRetry` and `beforeRetry`: the retry of `attempt` after `delayMs`, and why.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryContext<'a> {
    /// The attempt that failed (1 for the first).
    pub attempt: u32,
    /// The wait before the retry, in ms.
    pub delay_ms: f64,
    /// Why it is retried (`'status'`, `'network'`, `'timeout'`, ...).
    pub reason: &'a str,
    /// `shouldRetry` only: a clone of the newest response, to read as the hook likes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<Js>,
    /// The newest response's `headers` (a `Retry-After` or a request id to log), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<Js>,
    /// The newest response's status, if the attempt got one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The newest attempt's error, if it got no response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Js>,
    /// The key the call's attempts carry, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<&'a str>,
}

/// `onSettled`'s info: how many attempts the call sent, how long it took, and its answer or
/// error (the loop adds `idempotencyKey`, the key the attempts carried, when they had one).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SettledInfo {
    /// Attempts sent.
    pub attempts: u32,
    /// From the call to its end, in ms.
    pub duration_ms: f64,
    /// The answer, if the call resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<Js>,
    /// The error, if the call rejected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Js>,
}

/// One attempt of a call, as `RetryError.attempts` lists it (the loop adds `delayMs`, the wait
/// after it, once it is known).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    /// Its number (1 for the first).
    pub attempt: u32,
    /// When it was sent (`Date.now()`).
    pub started_at: f64,
    /// How long it took, in ms.
    pub duration_ms: f64,
    /// The status it got, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Its error, if it got no response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Js>,
}

/// `onStateChange`'s event: a breaker's circuit for `origin` went from `from` to `to`.
#[derive(Serialize)]
pub struct StateChange<'a> {
    /// The origin whose circuit changed.
    pub origin: &'a str,
    /// `'closed'`, `'open'` or `'half-open'`.
    pub from: &'a str,
    /// `'closed'`, `'open'` or `'half-open'`.
    pub to: &'a str,
}

/// `value` as a JavaScript value. None of the records above can fail to serialize (no map,
/// no integer beyond 2^53); if one ever did, the hook would get `undefined`.
pub fn to_js<T: Serialize + ?Sized>(value: &T) -> JsValue {
    value
        .serialize(&serde_wasm_bindgen::Serializer::new())
        .unwrap_or(JsValue::UNDEFINED)
}
