//! The request of one call, prepared once and replayed intact on every attempt.
//!
//! - `input` may be a string, a `URL` or a `Request`; a `Request` is cloned per attempt.
//! - Bodies that fetch can send again (string, `ArrayBuffer`, typed arrays, `DataView`, `Blob`,
//!   `URLSearchParams`, `FormData`) are passed as they are on every attempt.
//! - A `ReadableStream` body is read into memory up to `maxBufferedBodyBytes` (default 1 MiB)
//!   and replayed from there; a longer stream is sent once, whole, and not retried.
//! - Headers are merged once (fetch semantics: `init.headers` replaces a `Request`'s headers),
//!   then the idempotency key is added; each attempt gets its own copy.

use js_sys::{Object, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::errors::{decimal, type_error};
use super::js::{self, AbortSignal, Headers, ReadableStream, Request};
use super::options::{is_abort_signal, CallOptions};
use crate::core::classify::is_idempotent_method;
use crate::core::key::{header_value, uuid_v4};
use crate::core::options::KeyMode;

/// A request body, in the form that lets it be sent again.
enum Body {
    /// No body in `init` (a `Request` input carries its own, cloned per attempt).
    Absent,
    /// A body fetch can send any number of times (left in the caller's `init`).
    Reusable,
    /// A stream read to its end.
    Buffered(Uint8Array),
    /// A stream longer than the limit: the whole of it, sendable once.
    OneShot(ReadableStream),
}

/// Everything needed to send attempt after attempt of the same request.
pub struct RequestTemplate {
    input: JsValue,
    request: Option<Request>,
    /// The caller's `init`, as given (copied per attempt only when something must change).
    init: JsValue,
    /// Where the caller's headers are: `init.headers`, the `Request`'s, or `undefined`.
    header_source: JsValue,
    /// The headers to send when we add a key: the caller's plus the key. `None`: the caller's
    /// headers go as they are.
    send_headers: Option<Headers>,
    body: Body,
    /// The caller's signals: `options.signal`, `init.signal`, the `Request`'s signal.
    pub signals: Vec<AbortSignal>,
    /// The method is idempotent per RFC 9110.
    pub idempotent: bool,
    /// The idempotency key the request carries (ours or the caller's), unquoted.
    pub key: Option<String>,
}

/// 16 bytes from the platform CSPRNG (`crypto.getRandomValues`), nothing weaker.
fn random_key() -> Result<String, JsValue> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|_| {
        type_error(
            "retryFetch: crypto.getRandomValues is unavailable, so no idempotency key can be made",
        )
    })?;
    Ok(uuid_v4(bytes))
}

impl RequestTemplate {
    /// Prepare `input` + `init` under `options`. Reads a stream body (up to the limit).
    pub async fn new(
        input: JsValue,
        init: &JsValue,
        options: &CallOptions,
    ) -> Result<Self, JsValue> {
        if !(init.is_undefined() || init.is_null() || init.is_object()) {
            return Err(type_error(
                "retryFetch: init must be an object (a RequestInit) or undefined",
            ));
        }
        let request = input
            .dyn_ref::<Request>()
            .cloned()
            .filter(|_| input.is_instance_of::<Request>());
        if let Some(r) = &request {
            if r.body_used().is_truthy() {
                return Err(type_error(
                    "retryFetch: the Request's body was already used, so it cannot be sent",
                ));
            }
        }
        let method_value = js::get(init, "method");
        let method = if let Some(m) = method_value.as_string() {
            m
        } else if !method_value.is_undefined() && !method_value.is_null() {
            js::to_js_string(&method_value)
                .map(String::from)
                .unwrap_or_default()
        } else if let Some(r) = &request {
            r.method().as_string().unwrap_or_else(|| "GET".into())
        } else {
            "GET".into()
        };

        let header_source = match js::get(init, "headers") {
            v if !v.is_undefined() && !v.is_null() => v,
            _ => request
                .as_ref()
                .map(|r| r.headers())
                .unwrap_or(JsValue::UNDEFINED),
        };
        // The caller's headers, read only when there are some (to find a key they set).
        let caller_headers = if header_source.is_undefined() {
            None
        } else {
            Some(Headers::new(&header_source)?)
        };

        let mut signals: Vec<AbortSignal> = Vec::new();
        for candidate in [
            options.signal.clone().map(JsValue::from),
            Some(js::get(init, "signal")),
            request.as_ref().map(|r| r.signal()),
        ]
        .into_iter()
        .flatten()
        {
            if is_abort_signal(&candidate) {
                signals.push(candidate.unchecked_into());
            }
        }

        let policy = &options.policy;
        let idempotent = is_idempotent_method(&method);
        let header = policy.idempotency_header.as_str();
        let existing = caller_headers.as_ref().and_then(|h| h.get(header).ok().flatten());
        let with_key = |k: &str| -> Result<Headers, JsValue> {
            let h = match &caller_headers {
                Some(h) => h.clone(),
                None => Headers::new(&JsValue::UNDEFINED)?,
            };
            h.set(header, &header_value(k, policy.idempotency_key_format))?;
            Ok(h)
        };
        let (key, send_headers) = match (&policy.idempotency_key, existing) {
            (KeyMode::Fixed(k), _) => (Some(k.clone()), Some(with_key(k)?)),
            (_, Some(theirs)) => (Some(theirs), None),
            (KeyMode::Auto, None) if !idempotent => {
                let k = random_key()?;
                let h = with_key(&k)?;
                (Some(k), Some(h))
            }
            _ => (None, None),
        };

        let body_value = js::get(init, "body");
        let body = if body_value.is_undefined() || body_value.is_null() {
            Body::Absent
        } else if body_value.is_instance_of::<ReadableStream>() {
            buffer_stream(body_value.unchecked_ref(), policy.max_buffered_body_bytes).await?
        } else {
            Body::Reusable
        };

        Ok(RequestTemplate {
            input,
            request,
            init: init.clone(),
            header_source,
            send_headers,
            body,
            signals,
            idempotent,
            key,
        })
    }

    /// The request URL as a string (`Request.url`, `String(URL)` or the string given).
    pub fn url(&self) -> String {
        match &self.request {
            Some(r) => r.url().as_string().unwrap_or_default(),
            None => self
                .input
                .as_string()
                .or_else(|| js::to_js_string(&self.input).ok().map(String::from))
                .unwrap_or_default(),
        }
    }

    /// Can the request be sent more than once?
    pub fn replayable(&self) -> bool {
        !matches!(self.body, Body::OneShot(_))
    }

    /// The `(input, init)` pair for one attempt, aborted through `signal` when there is one.
    /// `retry_headers`: the `X-Retry-Count` / `X-Original-Request-At` pair to add, if any.
    /// When nothing needs to change, the caller's `init` is passed as it is (the fast path).
    pub fn attempt(
        &self,
        signal: Option<&AbortSignal>,
        retry_headers: Option<(u32, &str)>,
    ) -> Result<(JsValue, JsValue), JsValue> {
        let input = match &self.request {
            Some(r) => r.clone_request()?.into(),
            None => self.input.clone(),
        };
        let body_to_set = matches!(self.body, Body::Buffered(_) | Body::OneShot(_));
        if signal.is_none() && self.send_headers.is_none() && retry_headers.is_none() && !body_to_set {
            return Ok((input, self.init.clone()));
        }
        let init: JsValue = if self.init.is_object() {
            Object::assign(&Object::new(), self.init.unchecked_ref()).into()
        } else {
            Object::new().into()
        };
        if let Some((count, first_at)) = retry_headers {
            let headers = match &self.send_headers {
                Some(h) => Headers::new(h)?,
                None => Headers::new(&self.header_source)?,
            };
            headers.set("X-Retry-Count", &decimal(u64::from(count)))?;
            headers.set("X-Original-Request-At", first_at)?;
            js::set(&init, "headers", &headers);
        } else if let Some(h) = &self.send_headers {
            // fetch copies the headers it is given, so one object serves every attempt
            js::set(&init, "headers", h);
        }
        if let Some(signal) = signal {
            js::set(&init, "signal", signal);
        }
        match &self.body {
            Body::Absent | Body::Reusable => {} // as in the caller's init
            Body::Buffered(bytes) => js::set(&init, "body", bytes),
            Body::OneShot(stream) => {
                js::set(&init, "body", stream);
                js::set(&init, "duplex", &JsValue::from_str("half"));
            }
        }
        Ok((input, init))
    }
}

/// Read `stream` through one branch of a tee, up to `limit` bytes. Within the limit the
/// bytes are kept for replay; beyond it the other branch (which still holds every byte) is
/// sent once.
async fn buffer_stream(stream: &ReadableStream, limit: u32) -> Result<Body, JsValue> {
    let branches = stream.tee()?;
    let probe: ReadableStream = branches.get(0).unchecked_into();
    let whole: ReadableStream = branches.get(1).unchecked_into();
    let reader = probe.get_reader()?;
    let mut bytes: Vec<u8> = Vec::new();
    loop {
        let step = JsFuture::from(reader.read()?).await?;
        if js::get(&step, "done").is_truthy() {
            break;
        }
        let chunk = js::get(&step, "value");
        let Some(chunk) = chunk.dyn_ref::<Uint8Array>() else {
            js::ignore_rejection(&reader.cancel()?);
            return Err(type_error(
                "retryFetch: a ReadableStream body must yield Uint8Array chunks",
            ));
        };
        let len = chunk.length() as usize;
        if bytes.len().saturating_add(len) > limit as usize {
            // Not awaited: a tee branch's cancel settles only once the other branch is done.
            js::ignore_rejection(&reader.cancel()?);
            return Ok(Body::OneShot(whole));
        }
        let start = bytes.len();
        bytes.resize(start + len, 0);
        chunk.copy_to(&mut bytes[start..]);
    }
    js::ignore_rejection(&whole.cancel()?);
    Ok(Body::Buffered(Uint8Array::from(bytes.as_slice())))
}
