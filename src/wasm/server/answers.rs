//! The companion's answers: RFC 9457 problem responses (`application/problem+json`), and
//! responses to and from the store's `StoredResponse` (web-sys `Response` and `Headers`).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;
use web_sys::{Headers, Response, ResponseInit};

use super::flow::Limit;
use super::incoming::NodeSource;
use super::runs::error_text;
use super::store::StoredResponse;
use crate::core::idempotency::MAX_STORED_ANSWER_BYTES;
use crate::wasm::errors::{describe, type_error};
use crate::wasm::js;
use wasm_bindgen::JsCast;

/// The header added to a replayed response.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// The `type` of every problem answer: the draft that defines these errors.
const PROBLEM_TYPE: &str =
    "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/";

/// An RFC 9457 problem answer as the store keeps it: `{ type, title, status, detail, code }`,
/// `Cache-Control: no-store`, and `Retry-After: 1` when `retry_after` (header names as a
/// `Headers` lists them: lower-case, sorted).
pub fn problem_record(
    status: u16,
    code: &str,
    title: &str,
    detail: &str,
    retry_after: bool,
) -> Result<StoredResponse, JsValue> {
    answer_record(
        status,
        code,
        title,
        detail,
        "application/problem+json",
        retry_after.then_some(1),
    )
}

/// The `202 Accepted` of a keyed run that goes on: the problem answer's fields (it is not a
/// problem: `application/json`), `Cache-Control: no-store`, `Retry-After: retry_after_s`.
pub fn accepted_record(
    code: &str,
    title: &str,
    detail: &str,
    retry_after_s: u64,
) -> Result<StoredResponse, JsValue> {
    answer_record(
        202,
        code,
        title,
        detail,
        "application/json",
        Some(retry_after_s),
    )
}

/// The companion's own answers: `{ type, title, status, detail, code }` as `content_type`.
fn answer_record(
    status: u16,
    code: &str,
    title: &str,
    detail: &str,
    content_type: &str,
    retry_after_s: Option<u64>,
) -> Result<StoredResponse, JsValue> {
    let body: JsValue = js_sys::Object::new().into();
    js::set(&body, "type", &PROBLEM_TYPE.into());
    js::set(&body, "title", &title.into());
    js::set(&body, "status", &status.into());
    js::set(&body, "detail", &detail.into());
    js::set(&body, "code", &code.into());
    let text = js_sys::JSON::stringify(&body)?
        .as_string()
        .unwrap_or_default();
    let mut headers = vec![
        ("cache-control".to_string(), "no-store".to_string()),
        ("content-type".to_string(), content_type.to_string()),
    ];
    if let Some(s) = retry_after_s {
        headers.push(("retry-after".to_string(), s.to_string()));
    }
    Ok(StoredResponse {
        status,
        status_text: String::new(),
        headers,
        body: BASE64.encode(text.as_bytes()),
    })
}

/// An RFC 9457 problem answer (see [`problem_record`]), as a `Response`.
pub fn problem(
    status: u16,
    code: &str,
    title: &str,
    detail: &str,
    retry_after: bool,
) -> Result<Response, JsValue> {
    from_stored(
        &problem_record(status, code, title, detail, retry_after)?,
        false,
    )
}

/// Must a response with `status` have a null body?
fn null_body(status: u16) -> bool {
    matches!(status, 101 | 103 | 204 | 205 | 304)
}

/// A `Response` with `bytes` as its body (none when there are none) and `headers`.
fn response(
    status: u16,
    status_text: &str,
    headers: &Headers,
    bytes: &[u8],
) -> Result<Response, JsValue> {
    response_of(status, status_text, headers, Uint8Array::from(bytes))
}

/// [`response`] of bytes in JS (`body`, which the `Response` takes as its own).
fn response_of(
    status: u16,
    status_text: &str,
    headers: &Headers,
    body: Uint8Array,
) -> Result<Response, JsValue> {
    let init = ResponseInit::new();
    init.set_status(status);
    if !status_text.is_empty() {
        init.set_status_text(status_text);
    }
    init.set_headers(headers);
    // No bytes: no body, as the handler's `new Response(null)` (a framework adds no
    // `Content-Type` for it, as it would for an empty stream).
    if null_body(status) || body.length() == 0 {
        return Response::new_with_opt_buffer_source_and_init(None, &init);
    }
    let response = Response::new_with_opt_buffer_source_and_init(Some(&body), &init)?;
    // The bytes beside the body (which the Response copied): toNodeHandler writes them as
    // they are instead of reading the body back (js/server.js).
    ANSWER_BYTES.with(|key| js_sys::Reflect::set(&response, key, &body))?;
    Ok(response)
}

thread_local! {
    /// `Symbol.for('retry-fetch.answerBytes')`: where a companion's `Response` keeps its body's
    /// bytes.
    static ANSWER_BYTES: JsValue = js_sys::Symbol::for_("retry-fetch.answerBytes").into();
}

/// `bytes` in base64, or `None` when the wasm's memory cannot hold the text now.
fn try_base64(bytes: &[u8]) -> Option<String> {
    let len = base64::encoded_len(bytes.len(), true)?;
    let mut text = String::new();
    text.try_reserve_exact(len).ok()?;
    BASE64.encode_string(bytes, &mut text);
    Some(text)
}

/// The stored response as a `Response`; `replayed` adds `Idempotent-Replayed: true`.
pub fn from_stored(stored: &StoredResponse, replayed: bool) -> Result<Response, JsValue> {
    let headers = Headers::new()?;
    for (name, value) in &stored.headers {
        headers.append(name, value)?;
    }
    if replayed {
        headers.set(REPLAYED_HEADER, "true")?;
    }
    let bytes = BASE64.decode(stored.body.as_bytes()).map_err(|_| {
        crate::wasm::errors::type_error(
            "idempotency: the store returned a stored response whose body is not base64",
        )
    })?;
    response(stored.status, &stored.status_text, &headers, &bytes)
}

/// A handler's answer, read whole: what is stored, and the live response to send (the same
/// status, headers (every `Set-Cookie` kept) and bytes).
pub struct Answer {
    /// What the store keeps: never a `Set-Cookie` nor a hop-by-hop header
    /// (`core::idempotency::UNSTORED_HEADERS`).
    pub stored: StoredResponse,
    /// Whether it carried `Retry-After`.
    pub has_retry_after: bool,
    /// Whether it was too large to be stored (`stored` is then a 500 problem saying so).
    pub too_large: bool,
    /// The names of the headers left out because HTTP cannot send their values
    /// (`core::idempotency::sendable_header_value`), for `onError`.
    pub unsendable: Vec<String>,
    /// The response to send now: a `Response`, or for `toNodeHandler` what it writes (see
    /// [`node_answer`]).
    pub live: JsValue,
}

/// Read `response` whole into an [`Answer`]; `node`: the request `toNodeHandler` handed over,
/// for which the live response is what it writes ([`node_answer`]). Under `handlerTimeoutMs`
/// (`limit`, with its grace) the body is read within what is left of the handler's limit:
/// `Ok(None)` when it still has not ended then (a body that never ends is a handler that hangs).
pub async fn read_answer(
    response: &Response,
    node: Option<&NodeSource>,
    limit: Option<(&Limit<'_>, f64)>,
) -> Result<Option<Answer>, JsValue> {
    // The handler's Response is read through its own properties (an instance's getter may
    // shadow the prototype's, and throw): every read is bound with `catch`, and a failure is
    // the handler's, as a throw would be.
    let target: &JsValue = response.as_ref();
    let read = js::promise_of(response.array_buffer()?.as_ref());
    let Some(buffer) = body_within(read, limit).await? else {
        return Ok(None);
    };
    let body = js::bytes_of(&buffer).map_err(|e| unusable("its arrayBuffer()", &message(&e)))?;
    // Copied into the wasm only to be stored: an answer over the limit, or one the wasm's
    // memory cannot hold now, is sent from its own bytes and not kept (as too large).
    let bytes = match body.length() as usize > MAX_STORED_ANSWER_BYTES {
        true => None,
        false => js::try_copy(&body),
    };
    let given = js::get_or_throw(target, "headers")?;
    let source = match given.dyn_into::<Headers>() {
        Ok(headers) => headers,
        Err(given) => Headers::new_with_headers(given.unchecked_ref())
            .map_err(|e| unusable("its headers", &message(&e)))?,
    };
    // Name/value pairs as the headers iterate (lower-case names, one per name but for
    // Set-Cookie), in one call.
    let entries = js::array_copy(&source)?;
    let mut all = Vec::with_capacity(entries.length() as usize);
    for entry in entries.iter() {
        if !entry.is_object() {
            let got = format!(
                "got {} among its entries; expected [name, value] pairs",
                describe(&entry)
            );
            return Err(unusable("its headers", &got));
        }
        let name = js_sys::Reflect::get_u32(&entry, 0)?;
        let value = js_sys::Reflect::get_u32(&entry, 1)?;
        if let (Some(name), Some(value)) = (name.as_string(), value.as_string()) {
            all.push((name, value));
        }
    }
    // A value HTTP cannot send is left out of what is sent and stored (said to onError).
    let mut unsendable = Vec::new();
    all.retain(|(name, value)| {
        let sendable = crate::core::idempotency::sendable_header_value(value);
        if !sendable && !unsendable.contains(name) {
            unsendable.push(name.clone());
        }
        sendable
    });
    let source = if unsendable.is_empty() {
        source
    } else {
        let kept = Headers::new()?;
        for (name, value) in &all {
            kept.append(name, value)?;
        }
        kept
    };
    let connection = all
        .iter()
        .find(|(name, _)| name == "connection")
        .map(|(_, value)| value.clone());
    let has_retry_after = all.iter().any(|(name, _)| name == "retry-after");
    let headers: Vec<(String, String)> = all
        .into_iter()
        .filter(|(name, _)| crate::core::idempotency::stores_header(name, connection.as_deref()))
        .collect();
    let given = js::get_or_throw(target, "status")?;
    let status = match given.as_f64() {
        Some(s) if (200.0..=599.0).contains(&s) && s.fract() == 0.0 => s as u16,
        _ => {
            let got = format!(
                "got {}; expected an integer from 200 to 599",
                describe(&given)
            );
            return Err(unusable("its status", &got));
        }
    };
    // A status text HTTP cannot send (another fetch implementation's Response may hold any) is
    // left out: stored, it would fail every replay.
    let status_text = js::get_or_throw(target, "statusText")?
        .as_string()
        .filter(|t| {
            crate::core::idempotency::sendable_header_value(t) && t.chars().all(|c| c <= '\u{ff}')
        })
        .unwrap_or_default();
    let live = if let Some(node) = node {
        node_answer(node, status, &status_text, &source, body)
    } else {
        response_of(status, &status_text, &source, body)?.into()
    };
    let encoded = bytes.as_deref().and_then(try_base64);
    let too_large = encoded.is_none();
    let stored = match encoded {
        Some(body) => StoredResponse {
            status,
            status_text,
            headers,
            body,
        },
        // Sent whole now; what the key keeps says that it could not be kept.
        None => problem_record(500, "idempotency-answer-too-large", "The answer was too large to be stored",
            "The request was processed, but its answer (over 32 MiB, or more than the server could hold in memory at the time) was too large to be stored for replay; check the operation's state before trying again with a new key.", false)?,
    };
    Ok(Some(Answer {
        stored,
        has_retry_after,
        too_large,
        unsendable,
        live,
    }))
}

/// The `TypeError` for a handler's Response that cannot be read: `what` ("its status") and
/// `why`.
fn unusable(what: &str, why: &str) -> JsValue {
    type_error(&format!(
        "idempotency: the handler resolved with a Response that cannot be read: {what}: {why}"
    ))
}

/// An error's `message` (`''` where it has none).
fn message(error: &JsValue) -> String {
    error_text(error).unwrap_or_default()
}

/// What `toNodeHandler` writes for a handler's answer, without a second `Response`: `status`,
/// `statusText`, `headers` (the handler's `Headers`), `body` (`null` for a status without one)
/// and `bodyUsed: false`, its bytes at `Symbol.for('retry-fetch.answerBytes')` as a companion's
/// `Response` keeps them (`js/server.js` writes them as they are); made by `source` in one call.
fn node_answer(
    source: &NodeSource,
    status: u16,
    status_text: &str,
    headers: &Headers,
    bytes: Uint8Array,
) -> JsValue {
    let body: JsValue = if null_body(status) {
        JsValue::NULL
    } else {
        bytes.into()
    };
    source.answer(status, status_text, headers, &body)
}

/// What a handler resolved with, as [`as_response`] takes it.
pub enum Handed {
    /// A `Response`: of this realm, or rebuilt from a response-like one.
    Response(Response),
    /// Not a response.
    Other,
    /// A response-like one whose body had not ended when the handler's limit (and its grace)
    /// did.
    Pending,
}

/// The body of an answer being read (`read`), within the handler's limit when there is one
/// (`limit`, with its grace): `Ok(None)` when it still has not ended then.
async fn body_within(
    read: js_sys::Promise,
    limit: Option<(&Limit<'_>, f64)>,
) -> Result<Option<JsValue>, JsValue> {
    match limit {
        None => wasm_bindgen_futures::JsFuture::from(read).await.map(Some),
        Some((limit, grace_ms)) => limit.bound(&read, grace_ms).await.transpose(),
    }
}

/// A handler's result as a `Response`: a `Response` of this realm as it is; a response-like
/// object (a `Response` of another fetch implementation: `status`, `headers`, `arrayBuffer()`)
/// read (within `limit`, as [`read_answer`] reads) and rebuilt as one; anything else `Other`.
pub async fn as_response(
    value: JsValue,
    limit: Option<(&Limit<'_>, f64)>,
) -> Result<Handed, JsValue> {
    let value = match value.dyn_into::<Response>() {
        Ok(response) => return Ok(Handed::Response(response)),
        Err(value) => value,
    };
    let status = js::get(&value, "status").as_f64();
    let read = js::get(&value, "arrayBuffer")
        .dyn_into::<js_sys::Function>()
        .ok();
    let (Some(status), Some(read)) = (status, read) else {
        return Ok(Handed::Other);
    };
    if !js::get(&value, "headers").is_object()
        || !(200.0..=599.0).contains(&status)
        || status.fract() != 0.0
    {
        return Ok(Handed::Other);
    }
    let Some(buffer) = body_within(js::promise_of(&read.call0(&value)?), limit).await? else {
        return Ok(Handed::Pending);
    };
    // Its bytes stay in JS (the `Response` made of them is read as any other).
    let bytes = js::bytes_of(&buffer).map_err(|e| unusable("its arrayBuffer()", &message(&e)))?;
    let headers = Headers::new_with_headers(js::get(&value, "headers").unchecked_ref())
        .or_else(|_| Headers::new())?;
    let status_text = js::get(&value, "statusText")
        .as_string()
        .unwrap_or_default();
    response_of(status as u16, &status_text, &headers, bytes).map(Handed::Response)
}

/// A stored response of a value (`idempotent`): status 200, the value's JSON as the body.
pub fn stored_value(json: &str) -> StoredResponse {
    StoredResponse {
        status: 200,
        status_text: String::new(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: BASE64.encode(json.as_bytes()),
    }
}

/// The body of a stored response as text (for `idempotent`'s replays).
pub fn stored_text(stored: &StoredResponse) -> Result<String, JsValue> {
    let bytes = BASE64.decode(stored.body.as_bytes()).map_err(|_| {
        crate::wasm::errors::type_error(
            "idempotent: the store returned a stored result whose body is not base64",
        )
    })?;
    String::from_utf8(bytes).map_err(|_| {
        crate::wasm::errors::type_error("idempotent: the stored result is not UTF-8 JSON")
    })
}

/// The body of a problem as a stored response (a failure `idempotent` stores).
pub fn stored_problem(status: u16, json: &str) -> StoredResponse {
    StoredResponse {
        status,
        status_text: String::new(),
        headers: vec![("content-type".into(), "application/problem+json".into())],
        body: BASE64.encode(json.as_bytes()),
    }
}
