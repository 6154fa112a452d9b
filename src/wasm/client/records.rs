//! What crosses back to JavaScript as plain objects, serialized by serde-wasm-bindgen: the
//! context the hooks get (`shouldRetry`, `onRetry`, `beforeRetry`), `onSettled`'s info, each
//! attempt's record (`RetryError.attempts`) and a breaker's state change (the list
//! `backoffDelays` returns is pushed into a JS array as it is drawn). A JavaScript value inside
//! one (a response, an error, headers) is
//! carried as it is (`serde_wasm_bindgen::preserve`). An optional field that is `None` is
//! absent from the object, not `undefined`.
//!
//! Each record serializes as a map with `&'static str` keys (serialized by a
//! [`serde_wasm_bindgen::Serializer`] with `serialize_maps_as_objects`, so the result is the
//! same plain object a derived struct gives): serde-wasm-bindgen's struct path keeps a cache
//! of field names (a hash map) that these few small objects do not need.

use serde::ser::{Serialize, SerializeMap, Serializer};
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
pub struct RetryContext<'a> {
    /// The attempt that failed (1 for the first).
    pub attempt: u32,
    /// The wait before the retry, in ms.
    pub delay_ms: f64,
    /// Why it is retried (`'status'`, `'network'`, `'timeout'`, ...).
    pub reason: &'a str,
    /// `shouldRetry` only: a clone of the newest response, to read as the hook likes.
    pub response: Option<Js>,
    /// The newest response's `headers` (a `Retry-After` or a request id to log), if any.
    pub headers: Option<Js>,
    /// The newest response's status, if the attempt got one.
    pub status: Option<u16>,
    /// The newest attempt's error, if it got no response.
    pub error: Option<Js>,
    /// The key the call's attempts carry, if any.
    pub idempotency_key: Option<&'a str>,
}

/// `onSettled`'s info: how many attempts the call sent, how long it took, and its answer or
/// error (the loop adds `idempotencyKey`, the key the attempts carried, when they had one).
pub struct SettledInfo {
    /// Attempts sent.
    pub attempts: u32,
    /// From the call to its end, in ms.
    pub duration_ms: f64,
    /// The answer, if the call resolved.
    pub response: Option<Js>,
    /// The error, if the call rejected.
    pub error: Option<Js>,
}

/// One attempt of a call, as `RetryError.attempts` lists it (the loop adds `delayMs`, the wait
/// after it, once it is known).
pub struct AttemptRecord {
    /// Its number (1 for the first).
    pub attempt: u32,
    /// When it was sent (`Date.now()`).
    pub started_at: f64,
    /// How long it took, in ms.
    pub duration_ms: f64,
    /// The status it got, if any.
    pub status: Option<u16>,
    /// Its error, if it got no response.
    pub error: Option<Js>,
}

/// `onStateChange`'s event: a breaker's circuit for `origin` went from `from` to `to`.
pub struct StateChange<'a> {
    /// The origin whose circuit changed.
    pub origin: &'a str,
    /// `'closed'`, `'open'` or `'half-open'`.
    pub from: &'a str,
    /// `'closed'`, `'open'` or `'half-open'`.
    pub to: &'a str,
}

/// One value of a record: a number, a string or a JavaScript value carried as it is.
enum V<'a> {
    Num(f64),
    Str(&'a str),
    Js(&'a Js),
}

impl Serialize for V<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            V::Num(n) => s.serialize_f64(*n),
            V::Str(v) => s.serialize_str(v),
            V::Js(v) => v.serialize(s),
        }
    }
}

/// `fields` in order as one object, leaving out those that are `None`.
fn object<S: Serializer>(s: S, fields: &[(&'static str, Option<V>)]) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(fields.len()))?;
    for (key, value) in fields {
        if let Some(value) = value {
            map.serialize_entry(key, value)?;
        }
    }
    map.end()
}

impl Serialize for RetryContext<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        object(
            s,
            &[
                ("attempt", Some(V::Num(self.attempt.into()))),
                ("delayMs", Some(V::Num(self.delay_ms))),
                ("reason", Some(V::Str(self.reason))),
                ("response", self.response.as_ref().map(V::Js)),
                ("headers", self.headers.as_ref().map(V::Js)),
                ("status", self.status.map(|n| V::Num(n.into()))),
                ("error", self.error.as_ref().map(V::Js)),
                ("idempotencyKey", self.idempotency_key.map(V::Str)),
            ],
        )
    }
}

impl Serialize for SettledInfo {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        object(
            s,
            &[
                ("attempts", Some(V::Num(self.attempts.into()))),
                ("durationMs", Some(V::Num(self.duration_ms))),
                ("response", self.response.as_ref().map(V::Js)),
                ("error", self.error.as_ref().map(V::Js)),
            ],
        )
    }
}

impl Serialize for AttemptRecord {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        object(
            s,
            &[
                ("attempt", Some(V::Num(self.attempt.into()))),
                ("startedAt", Some(V::Num(self.started_at))),
                ("durationMs", Some(V::Num(self.duration_ms))),
                ("status", self.status.map(|n| V::Num(n.into()))),
                ("error", self.error.as_ref().map(V::Js)),
            ],
        )
    }
}

impl Serialize for StateChange<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        object(
            s,
            &[
                ("origin", Some(V::Str(self.origin))),
                ("from", Some(V::Str(self.from))),
                ("to", Some(V::Str(self.to))),
            ],
        )
    }
}

/// `value` as a JavaScript value (a map becomes a plain object). None of the records above
/// can fail to serialize (string keys only, no integer beyond 2^53); if one ever did, the
/// hook would get `undefined`.
pub fn to_js<T: Serialize + ?Sized>(value: &T) -> JsValue {
    // A static (not a temporary): its settings are then known where the map is made, and the
    // path to an ES `Map` is not linked.
    static OBJECTS: serde_wasm_bindgen::Serializer =
        serde_wasm_bindgen::Serializer::new().serialize_maps_as_objects(true);
    value.serialize(&OBJECTS).unwrap_or(JsValue::UNDEFINED)
}
