//! The request, fixed when `retryFetch` is called and replayed intact on every attempt.
//!
//! `new Request(input, init)` at the call: the platform's own `TypeError` for a request fetch
//! can never accept rejects the call before anything is sent, and what the call sends is taken
//! once (method, URL, headers, body, mode, credentials ...): changing `init` afterwards
//! changes nothing; a plain `init` (an object literal) is copied first, each member read
//! once, and the request made from the copy. The idempotency key is set on that request's
//! headers. The body:
//!
//! - a `string` in a plain `init`: sent as it is on every attempt (it cannot change);
//! - `ArrayBuffer`, typed arrays, `DataView`, `Blob`, `FormData`, `URLSearchParams`,
//!   a `Request` input's body: serialised once (`request.arrayBuffer()`, so a `FormData`
//!   keeps one multipart boundary, the one in the request's `Content-Type`), and every
//!   attempt sends those bytes;
//! - a `ReadableStream`: read into memory up to `maxBufferedBodyBytes` and replayed from
//!   there; a longer one is sent once, whole, and not retried;
//! - a `Request` input's body: read the same way; a longer one is sent once as a copy of the
//!   request (`request.clone()`, made before the reading), so as fetch sends the request's
//!   own body (from a string or a `Blob`: not as a stream, which Chromium refuses over
//!   HTTP/1.1);
//! - an async iterable (Node's `body: gen(), duplex: 'half'`): sent once and not retried
//!   (it cannot be read again).

use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Headers, ReadableStream, ReadableStreamDefaultReader, Request};

use super::bindings::{HeadersJs, RequestConstructor};
use super::policy::Policy;
use crate::core::classify::is_idempotent_method;
use crate::core::key::{header_value, is_valid_key, key_of_header, uuid_v4, KEY_EXPECTED};
use crate::core::options::{KeyMode, RetryPolicy};
use crate::wasm::errors::type_error;
use crate::wasm::js;

/// How the body of each attempt is sent.
pub enum Body {
    /// No body, or the request's own body, sent as the request carries it (once, for a
    /// one-shot body).
    AsIs,
    /// These bytes, on every attempt.
    Bytes(Uint8Array),
    /// This string (the caller's `init.body`), on every attempt: a string cannot change, and
    /// fetch sends it again to a 307/308's target, so it needs no copy.
    Text(JsValue),
    /// This stream, on the first attempt only.
    Stream(ReadableStream),
    /// This copy of the call's request, sent as it is, on the first attempt only: a `Request`
    /// input's body over the limit.
    Spare(Request),
}

/// A body sent once that was not sent (the call ended first: an open circuit, an abort, the
/// throttle) is cancelled, so the caller's stream is not left open; one fetch took is locked,
/// and left to it.
impl Drop for Body {
    fn drop(&mut self) {
        let unsent = match self {
            Body::Stream(stream) => Some(stream.clone()),
            Body::Spare(request) => request.body(),
            _ => None,
        };
        if let Some(stream) = unsent.filter(|s| !s.locked()) {
            js::cancel(&stream);
        }
    }
}

/// What the body still needs before the first attempt.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// Nothing: no body.
    None,
    /// Serialise it once (`request.arrayBuffer()`).
    Serialise,
    /// Buffer a stream up to the limit.
    Stream,
    /// Buffer a `Request` input's body up to the limit, a copy of the request kept to send it
    /// beyond.
    Input,
    /// Send it once as it is (an async iterable).
    OneShot,
}

/// The request of one call.
pub struct Template {
    /// The request as the call fixed it; its headers carry the key.
    pub request: Request,
    /// The method is idempotent (RFC 9110).
    pub idempotent: bool,
    /// The idempotency key the request carries (ours or the caller's), if any.
    pub key: Option<String>,
    /// What the body needs.
    pub body_kind: BodyKind,
    /// `init.body` when it is a string (and `init` the call's own copy, so the value the
    /// request was made from): sent as it is, never read back from the request.
    text: Option<JsValue>,
    /// The call's input, held until the call ends. The request's signal follows a `Request`
    /// input's, and Node's fetch keeps that link only while the input lives: an input the
    /// caller let go (`retryFetch(new Request(url, { signal }))`) would be collected during a
    /// wait, and its abort would no longer end the call.
    _input: JsValue,
    /// The caller's `init.signal`, which the request's signal follows: Node's fetch keeps that
    /// link only while the request lives, so every attempt is sent with this signal itself
    /// (joined with the attempt's own, if any: [`Template::abort_signal`]), and an abort still cancels reading the body
    /// after the call settled and the request was collected.
    pub signal: Option<JsValue>,
}

/// A call that ended before its request's body was read or sent (an abort before the first
/// attempt, an open circuit, the throttle or the deadline refusing it) cancels it, as fetch
/// cancels the body of a request it aborts: the caller's stream (or a `Request` input's) is
/// not left open. A body read, or taken by fetch, is locked or used, and left as it is.
impl Drop for Template {
    fn drop(&mut self) {
        let unread = self
            .request
            .body()
            .filter(|s| !s.locked() && !self.request.body_used());
        if let Some(stream) = unread {
            js::cancel(&stream);
        }
    }
}

/// `init.signal` as given, when it is an object (a `Request` took it, so an `AbortSignal`).
pub fn init_signal(init: &JsValue) -> Option<JsValue> {
    match init.is_object() {
        true => Some(js::get(init, "signal")).filter(JsValue::is_object),
        false => None,
    }
}

/// The `TypeError` for a URL fetch can never send (`why`: from `core::classify`), before
/// anything is sent: `retryFetch: <why>: <url>`.
#[cold]
pub fn unsendable_url(why: &str, url: &str) -> JsValue {
    let mut msg = String::from("retryFetch: ");
    msg.push_str(why);
    msg.push_str(": ");
    msg.push_str(url);
    type_error(&msg)
}

/// `new Request(input, init)`: the platform's `TypeError` when fetch could never send it.
pub fn fix_request(input: &JsValue, init: &JsValue) -> Result<Request, JsValue> {
    Ok(RequestConstructor::new(input, init)?.unchecked_into())
}

/// What kind of body `init.body` (or a `Request` input's body) is. A `Request` input's body
/// is a stream whatever made it (a string or a `ReadableStream` that may never end): it is
/// buffered as one, up to the limit and within the call's abort and deadline.
fn body_kind(request: &Request, body: &JsValue) -> BodyKind {
    if request.body().is_none() {
        return BodyKind::None;
    }
    // A stream of another realm (an iframe's, a `vm` context's) is one too: the request's own
    // body (this realm's) is what is read.
    if body.is_undefined() {
        BodyKind::Input
    } else if body.is_instance_of::<ReadableStream>()
        || js::has_tag(body, "[object ReadableStream]")
    {
        BodyKind::Stream
    } else if body.is_object()
        && !body.is_instance_of::<web_sys::Blob>()
        && !body.is_instance_of::<web_sys::FormData>()
        && !js_sys::ArrayBuffer::is_view(body)
        && js_sys::Reflect::has(body, &js_sys::Symbol::async_iterator()).unwrap_or(false)
    {
        BodyKind::OneShot
    } else {
        BodyKind::Serialise
    }
}

impl Template {
    /// The signal that aborts the request: the caller's `init.signal` itself where one was
    /// given, else the request's own.
    pub fn abort_signal(&self) -> JsValue {
        match &self.signal {
            Some(s) => s.clone(),
            None => self.request.signal().into(),
        }
    }

    /// The call's request: `request` (already fixed from `input` and `init`, and following
    /// `signal`, the caller's `init.signal`), the key added per `policy`.
    pub fn new(
        policy: &Policy,
        request: Request,
        input: &JsValue,
        init: &JsValue,
        init_copied: bool,
        signal: Option<JsValue>,
    ) -> Result<Template, JsValue> {
        // A request fetch can never send (an ftp: URL, a bad port) fails every time: refused
        // here, before anything is sent, rather than retried as a network error.
        let url = request.url();
        if let Some(why) = crate::core::classify::unfetchable(&url) {
            return Err(unsendable_url(why, &url));
        }
        let idempotent = is_idempotent_method(&request.method());
        let p = &policy.retry;
        let header = p.idempotency_header.as_str();
        let headers = request.headers();
        let (key, add) = call_key(p, idempotent, &headers)?;
        // Headers that drop it (a `mode: 'no-cors'` request keeps only CORS-safelisted ones)
        // send no key: the request is held to the rule of one without.
        let key = key.filter(|_| headers.has(header).unwrap_or(false));
        // A key the caller put in the header decides, as ours does, that a non-idempotent
        // request is safe to retry: it is held to the same rule (an empty or blank value, or
        // 300 characters, must not make a POST look safe).
        if let (false, false, Some(k)) = (add, idempotent, &key) {
            if !is_valid_key(k) {
                let mut msg = String::from("retryFetch: the ");
                msg.push_str(header);
                msg.push_str(" header is ");
                msg.push_str(&crate::wasm::errors::describe(&JsValue::from_str(k)));
                msg.push_str("; expected ");
                msg.push_str(KEY_EXPECTED);
                msg.push_str(" (it is what makes retrying this request safe)");
                return Err(type_error(&msg));
            }
        }
        let body = js::get(init, "body");
        Ok(Template {
            body_kind: body_kind(&request, &body),
            text: (init_copied && body.is_string()).then_some(body),
            request,
            idempotent,
            key,
            _input: input.clone(),
            signal,
        })
    }

    /// Read the body as [`BodyKind`] says (before the first attempt).
    pub async fn body(&self, limit: u32) -> Result<Body, JsValue> {
        match self.body_kind {
            BodyKind::None | BodyKind::OneShot => Ok(Body::AsIs),
            BodyKind::Serialise => match &self.text {
                Some(text) => Ok(Body::Text(text.clone())),
                None => {
                    let buffer = JsFuture::from(self.request.array_buffer()?).await?;
                    Ok(Body::Bytes(js::bytes_view(&buffer)?))
                }
            },
            BodyKind::Stream | BodyKind::Input => {
                // `Request.clone()`, not `Clone::clone`: a request of its own, with the whole
                // body, taken before the reading starts (and before the body is taken: a clone
                // tees it, and the request's body is a new stream after).
                let spare = match self.body_kind {
                    BodyKind::Input => Some(self.request.clone()?),
                    _ => None,
                };
                match self.request.body() {
                    Some(stream) => buffer_stream(stream, spare, limit).await,
                    None => Ok(Body::AsIs),
                }
            }
        }
    }
}

/// The key a call's request carries, and whether it is ours (then set on `headers`, the
/// request's or the lean path's, in the header's format): under a fixed key, that key (it
/// replaces the caller's); else a key the caller put in the header (as the header's format
/// carries it); else, where the mode adds one to a request of this method, a new UUID v4 from
/// the platform's CSPRNG (a `TypeError` when it has none).
pub fn call_key(
    p: &RetryPolicy,
    idempotent: bool,
    headers: &Headers,
) -> Result<(Option<String>, bool), JsValue> {
    let existing = || {
        headers
            .get(&p.idempotency_header)
            .ok()
            .flatten()
            .map(|v| key_of_header(&v, p.idempotency_key_format))
    };
    let ours = match &p.idempotency_key {
        mode if !mode.may_add_key(idempotent) => return Ok((existing(), false)),
        KeyMode::Fixed(k) => k.clone(),
        _ => match existing() {
            Some(k) => return Ok((Some(k), false)),
            None => {
                let bytes = key_bytes().ok_or_else(|| {
                    type_error("retryFetch: crypto.getRandomValues is unavailable, so no idempotency key can be made")
                })?;
                uuid_v4(bytes)
            }
        },
    };
    headers.set(
        &p.idempotency_header,
        &header_value(&ours, p.idempotency_key_format),
    )?;
    Ok((Some(ours), true))
}

/// How many keys' random bytes one `crypto.getRandomValues` call draws: a call costs Node
/// about 3 µs whatever its length, so keys are taken from a pool (as Node's own
/// `crypto.randomUUID` does).
const KEYS_PER_DRAW: usize = 16;

thread_local! {
    /// Random bytes not used yet, and how many of them are left (taken from the end).
    static KEY_POOL: std::cell::RefCell<([u8; 16 * KEYS_PER_DRAW], usize)> =
        const { std::cell::RefCell::new(([0; 16 * KEYS_PER_DRAW], 0)) };
}

/// 16 bytes from the platform's CSPRNG (`crypto.getRandomValues`, through `getrandom`), each
/// used for one key only; `None` when the platform has none.
fn key_bytes() -> Option<[u8; 16]> {
    KEY_POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let (bytes, left) = &mut *pool;
        if *left < 16 {
            getrandom::fill(bytes).ok()?;
            *left = bytes.len();
        }
        *left -= 16;
        // Used bytes are wiped: what stays in memory is only what no key has used.
        let chunk = bytes.get_mut(*left..*left + 16)?;
        let key: [u8; 16] = (*chunk).try_into().ok()?;
        chunk.fill(0);
        Some(key)
    })
}

/// Read `stream` up to `limit` bytes, kept for replay within the limit. Beyond it the whole
/// body is sent once: `spare`, a copy of the request made before the reading (a `Request`
/// input's), or else the other branch of a tee of `stream` (which still holds every byte).
async fn buffer_stream(
    stream: ReadableStream,
    spare: Option<Request>,
    limit: u32,
) -> Result<Body, JsValue> {
    // The body kept to send the whole once, if the reading finds it too long: dropped unsent,
    // it is cancelled ([`Body`]'s `Drop`).
    let (probe, whole) = match spare {
        Some(request) => (stream, Body::Spare(request)),
        None => {
            let branches: Array = stream.unchecked_ref::<super::bindings::StreamJs>().tee()?;
            (
                branches.get_unchecked(0).unchecked_into(),
                Body::Stream(branches.get_unchecked(1).unchecked_into()),
            )
        }
    };
    let reader: ReadableStreamDefaultReader = probe.get_reader().unchecked_into();
    let mut reading = Unfinished {
        reader: reader.clone(),
        whole: Some(whole),
    };
    let read = js::read_limited(&reader, f64::from(limit)).await?;
    match (read, reading.whole.take()) {
        (js::Limited::TooLong, Some(whole)) => Ok(whole),
        (js::Limited::Bytes(bytes), _) => Ok(Body::Bytes(bytes)),
        _ => Err(type_error(
            "retryFetch: a ReadableStream body must yield Uint8Array chunks",
        )),
    }
}

/// A stream body being buffered: dropped before the reading ended (a time limit, the deadline
/// or an abort ended the call, or the stream failed), the reader is cancelled and what holds
/// the whole body with it (dropped: [`Body`]'s `Drop`), which cancels the caller's stream:
/// nothing is left locked and open.
struct Unfinished {
    reader: ReadableStreamDefaultReader,
    whole: Option<Body>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(whole) = self.whole.take() {
            js::cancel(&self.reader);
            drop(whole);
        }
    }
}

/// Headers given as an option (`headers`, or what `beforeRetry` returns): a `Headers` (of any
/// realm), an object of strings, or `[name, value]` pairs of strings in an array or any other
/// iterable (a `Map`), as `new Headers` takes them; `Ok(None)` for anything else. A value that
/// is not a string is refused, where `new Headers` would send its text (`Authorization:
/// undefined` for a token not set); a getter, a proxy trap or an iterator runs once, and what
/// it throws is the `Err`, passed on as it is (as an option's own getter's throw is).
pub fn strict_headers(value: &JsValue) -> Result<Option<Headers>, JsValue> {
    if value.is_instance_of::<Headers>() || js::has_tag(value, "[object Headers]") {
        return Headers::new_with_headers(value.unchecked_ref()).map(Some);
    }
    if !value.is_object() {
        return Ok(None);
    }
    let out = Headers::new()?;
    // A name and a value, both strings (passed on as they are), or `None`.
    let add = |name: JsValue, value: JsValue| {
        (name.is_string() && value.is_string())
            .then(|| out.unchecked_ref::<HeadersJs>().append(&name, &value).ok())
            .flatten()
    };
    // Pairs from anything iterable: a `Map` has no own keys, and read as an object of strings
    // it would add nothing, silently.
    let iterable = js::is_array(value)?
        || js_sys::Reflect::get(value, &js_sys::Symbol::iterator())?.is_function();
    if iterable {
        for entry in js::array_copy(value)?.iter() {
            // A pair is a list (a string of two characters is not one: `new Headers` refuses it).
            if !entry.is_object() {
                return Ok(None);
            }
            let pair = js::array_copy(&entry)?;
            if pair.length() != 2 || add(pair.get_unchecked(0), pair.get_unchecked(1)).is_none() {
                return Ok(None);
            }
        }
    } else {
        for name in js::object_keys(value)?.iter() {
            let given = js_sys::Reflect::get(value, &name)?;
            if add(name, given).is_none() {
                return Ok(None);
            }
        }
    }
    Ok(Some(out))
}

/// Set every header of `from` (a `Headers` of ours, so every name and value is a string) on
/// `to`, but those `skip` has. One helper for the client's default headers, `beforeRetry`'s and
/// an attempt's. The pairs are taken at once (`Array.from(from)`), and the strings passed on as
/// they are.
pub fn copy_headers(from: &Headers, to: &Headers, skip: Option<&Headers>) -> Result<(), JsValue> {
    if let Ok(entries) = js::array_copy(from) {
        for entry in entries.iter() {
            let pair: &Array = entry.unchecked_ref();
            let name = pair.get_unchecked(0);
            let skipped = skip.map_or(Ok(false), |s| s.unchecked_ref::<HeadersJs>().has(&name))?;
            if !skipped {
                to.unchecked_ref::<HeadersJs>()
                    .set(&name, &pair.get_unchecked(1))?;
            }
        }
    }
    Ok(())
}

/// The body of one send: a fresh copy of the bytes where the runtime will not follow a
/// redirect with it (the call follows them itself, or does not follow), else a `Blob` over them:
/// Node's fetch detaches a byte body once sent, so it could not send the same bytes again to a
/// 307/308's target, and a `Blob` costs Node about 30 µs more a send than bytes.
pub fn body_value(bytes: &Uint8Array, runtime_follows: bool) -> Result<JsValue, JsValue> {
    Ok(if runtime_follows {
        web_sys::Blob::new_with_u8_array_sequence(&Array::of1(bytes))?.into()
    } else {
        bytes.slice(0, bytes.length()).into()
    })
}
