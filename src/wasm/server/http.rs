//! `idempotency(handler, options)`: one request through the companion.
//!
//! 1. No key: a 400 when one is required, else the handler at once (`ctx.key` is `null`).
//! 2. The key is parsed (400 when invalid), scoped by the identity (by default the request's
//!    credentials), and the body read for the fingerprint, at most `maxBodyBytes` (413).
//! 3. The key is claimed (`flow::claim`): replay (422 for another request), wait or 409, or
//!    hold it and run `handler(request, ctx)` with the lock renewed.
//! 4. The answer is stored, unless it says the request was not processed (408, 425, 429, 503
//!    with `Retry-After`: the key is freed). A handler that throws after it started ends as
//!    a stored 500, unless its writes were rolled back with the store's transaction.

use std::rc::Rc;

use js_sys::{Function, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{ReadableStreamDefaultReader, Request, RequestInit, Response};

use super::context::Caller;
use super::answers::{as_response, from_stored, problem, problem_record, read_answer};
use super::flow::{claim, free_key, run_holding, store_answer, Claim, ClaimError, Context, Keyed, Ran, Stored};
use super::options::{HttpSettings, Identity, Required};
use crate::core::idempotency::{self as idem, after_throw, stores_answer, AfterThrow};
use crate::wasm::errors::{describe, type_error};
use crate::wasm::js;

/// Handle one request (the function `idempotency` returns).
pub async fn handle(s: Rc<HttpSettings>, handler: Function, request: JsValue, caller: Caller) -> Result<JsValue, JsValue> {
    let req: Request = request
        .dyn_into()
        .map_err(|v| type_error(&format!("idempotency: the wrapped handler takes a Request; got {}", describe(&v))))?;
    let header = &s.common.limits.header;
    let headers = req.headers();
    let Some(raw) = headers.get(header)? else {
        if is_required(&s.required, &req, &caller).await? {
            let path = web_sys::Url::new(&req.url()).map(|u| u.pathname()).unwrap_or_default();
            let detail = format!("{} {} requires an {header} header (a unique key per operation, the same on every retry).", req.method(), path);
            return Ok(problem(400, "idempotency-key-missing", &format!("{header} is missing"), &detail, false)?.into());
        }
        let ctx = Context::new(None, JsValue::UNDEFINED);
        return JsFuture::from(Promise::resolve(&caller.call(&handler, &[&req, &ctx.object])?)).await;
    };
    let key = match idem::parse_key(&raw) {
        Ok(key) => key,
        Err(e) => {
            let detail = format!("{}.", e.message());
            return Ok(problem(400, "idempotency-key-invalid", &format!("{header} is invalid"), &detail, false)?.into());
        }
    };
    let identity = identity(&s.identity, &req, &caller).await?;
    let limit = s.common.limits.max_body_bytes;
    let Some((body, req)) = read_body(req, limit).await? else {
        let detail = format!("The request body is larger than {limit} bytes, the most this endpoint reads for an {header}.");
        return Ok(problem(413, "idempotency-body-too-large", "Request body too large", &detail, false)?.into());
    };
    let url = web_sys::Url::new(&req.url())?;
    let mut path = url.pathname();
    path.push_str(&url.search());
    let k = Keyed::new(key, identity.as_deref(), idem::fingerprint(&req.method(), &path, &body));

    let signal = req.signal();
    let aborted = || signal.aborted().then(|| signal.reason());
    let answer = match claim(&s.common, &k, &aborted).await {
        Ok(Claim::Held) => return process(&s, &k, &handler, &req, &caller).await.map(JsValue::from),
        Ok(Claim::Replay(stored)) => match from_stored(&stored, true) {
            Ok(response) => response,
            Err(error) => return unavailable(&s, &error, "acquire"),
        },
        Ok(Claim::Mismatch) => problem(422, "idempotency-key-reused", &format!("{header} is already used"),
            &format!("This {header} was already used for a different request (method, path, query or body); use a new key for a new operation."), false)?,
        Ok(Claim::Busy) => problem(409, "idempotency-key-in-progress", &format!("A request is outstanding for this {header}"),
            &format!("A request with this {header} is still being processed; retry later with the same key."), true)?,
        Err(ClaimError::Aborted(reason)) => return Err(reason),
        Err(ClaimError::Store(error, operation)) => return unavailable(&s, &error, operation),
    };
    Ok(answer.into())
}

/// The store failed (or returned what cannot be answered) before the handler ran: told to
/// `onStoreError`, answered 503 (nothing ran, nothing stored).
fn unavailable(s: &HttpSettings, error: &JsValue, operation: &str) -> Result<JsValue, JsValue> {
    s.common.reporter.store_error(error, operation);
    let header = &s.common.limits.header;
    Ok(problem(503, "idempotency-store-unavailable", "The idempotency store is unavailable",
        &format!("The request was not processed and nothing was stored; retry later with the same {header}."), true)?.into())
}

/// Holding the key: run the handler, then store its answer or free the key.
async fn process(s: &HttpSettings, k: &Keyed, handler: &Function, req: &Request, caller: &Caller) -> Result<Response, JsValue> {
    let c = &s.common;
    let (ran, ctx, renewal) = run_holding(c, k, handler, req, caller).await;
    let failure = match ran {
        Ran::Resolved(value) => match as_response(value.clone()).await {
            Err(error) => error, // its body failed
            Ok(Some(response)) => match read_answer(&response).await {
                Ok(answer) => {
                    if !stores_answer(answer.stored.status, answer.has_retry_after) {
                        // "Not processed": the key is freed so that the client's retry runs it.
                        free_key(c, k).await;
                        return Ok(answer.live);
                    }
                    return match store_answer(c, k, &answer.stored, renewal.lost()).await {
                        Stored::Kept => Ok(answer.live),
                        // With a transactional store nothing was committed, the handler's
                        // ctx.tx writes neither: the handler's answer would be a lie. Say so.
                        Stored::Failed | Stored::LockLost if c.store.transactional => problem(503, "idempotency-store-unavailable",
                            "The result could not be committed",
                            "The idempotency store failed to commit the result; nothing was kept. Retry with the same key.", true),
                        // The effect happened; the answer is the truth even if it is not stored.
                        Stored::Failed | Stored::LockLost => Ok(answer.live),
                    };
                }
                Err(error) => error, // its body failed
            },
            Ok(None) => type_error(&format!("idempotency: the handler must resolve with a Response; got {}", describe(&value))),
        },
        Ran::Threw(error) => error,
    };
    let lost = renewal.lost();
    drop(renewal);
    c.reporter.handler_error(&failure);
    let header = &c.limits.header;
    match after_throw(c.store.transactional, ctx.used_tx()) {
        AfterThrow::Release => {
            free_key(c, k).await;
            problem(500, "idempotency-handler-failed", "The request failed",
                &format!("The handler failed and its writes were rolled back; nothing is stored for this {header}, so a retry with the same key runs it again."), false)
        }
        AfterThrow::StoreFailure => {
            let detail = format!("The handler failed after it started and may have had effects; this answer is stored for this {header} and replayed. Check the operation's state before trying again with a new key.");
            let stored = problem_record(500, "idempotency-handler-failed", "The request failed", &detail, false)?;
            // Whether or not the store kept it, this request's answer is the 500.
            store_answer(c, k, &stored, lost).await;
            from_stored(&stored, false)
        }
    }
}

/// Is a key required for `req` (the `required` option)?
async fn is_required(required: &Required, req: &Request, caller: &Caller) -> Result<bool, JsValue> {
    match required {
        Required::Default => Ok(idem::key_required_by_default(&req.method())),
        Required::Always(b) => Ok(*b),
        Required::Ask(f) => {
            let v = JsFuture::from(Promise::resolve(&caller.call(f, &[req])?)).await?;
            v.as_bool().ok_or_else(|| {
                type_error(&format!("idempotency: option \"required\" returned {}; expected true or false", describe(&v)))
            })
        }
    }
}

/// The identity that scopes the key (the `identity` option; by default the credentials).
async fn identity(identity: &Identity, req: &Request, caller: &Caller) -> Result<Option<String>, JsValue> {
    match identity {
        Identity::Unscoped => Ok(None),
        Identity::Credentials => {
            let h = req.headers();
            Ok(idem::default_identity(h.get("authorization")?.as_deref(), h.get("cookie")?.as_deref()))
        }
        Identity::Ask(f) => {
            let v = JsFuture::from(Promise::resolve(&caller.call(f, &[req])?)).await?;
            if v.is_undefined() || v.is_null() {
                return Ok(None);
            }
            v.as_string().map(Some).ok_or_else(|| {
                type_error(&format!("idempotency: option \"identity\" returned {}; expected a string or undefined", describe(&v)))
            })
        }
    }
}

/// Read `req`'s body, at most `limit` bytes: the bytes and the request the handler gets (a
/// new `Request` over the same bytes), or `None` when the body is longer (a declared
/// `Content-Length` over the limit is refused before anything is read).
async fn read_body(req: Request, limit: f64) -> Result<Option<(Vec<u8>, Request)>, JsValue> {
    let declared = req.headers().get("content-length")?.and_then(|v| v.trim().parse::<f64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Ok(None);
    }
    let Some(stream) = req.body() else {
        return Ok(Some((Vec::new(), req)));
    };
    let reader: ReadableStreamDefaultReader = stream.get_reader().dyn_into()?;
    let mut bytes = Vec::new();
    loop {
        let chunk = JsFuture::from(reader.read()).await?;
        if js::get(&chunk, "done").as_bool() == Some(true) {
            break;
        }
        let value = js::get(&chunk, "value");
        let Some(part) = value.dyn_ref::<Uint8Array>() else {
            return Err(type_error("idempotency: the request body produced a chunk that is not a Uint8Array"));
        };
        if (bytes.len() + part.length() as usize) as f64 > limit {
            let _ = reader.cancel();
            return Ok(None);
        }
        bytes.extend_from_slice(&part.to_vec());
    }
    // The handler reads the body again: a Request over the bytes read (same URL, method,
    // headers and signal).
    let init = RequestInit::new();
    init.set_body(&Uint8Array::from(bytes.as_slice()));
    let again = Request::new_with_request_and_init(&req, &init)?;
    Ok(Some((bytes, again)))
}
