//! `idempotency(handler, options)`: one request through the companion.
//!
//! 1. No key (or a key on an ignored method: GET, HEAD, OPTIONS): a 400 when one is required,
//!    else the handler at once (`ctx.key` is `null`).
//! 2. The key is parsed (400 when invalid), scoped by the identity (by default the request's
//!    credentials, HMAC'd with the secret), and the body read for the fingerprint, at most
//!    `maxBodyBytes` (413); a body something else already read is a 500 problem.
//! 3. The key is claimed (`flow::claim`): replay (422 for another request), wait or 409, or
//!    hold it and run `handler(request, ctx)` with the lock renewed. The handler's request
//!    carries the companion's own signal: the client going away does not stop it (its answer
//!    is stored for the retry); only `handlerTimeoutMs` aborts it.
//! 4. The answer is stored, unless it says the request was not processed (408, 425, 429, 503
//!    with `Retry-After`) or was rolled back (a 500, or an answer too large to store, after
//!    `ctx.tx` writes): the key is freed. A handler that throws after it started ends as a
//!    stored 500, unless its writes were rolled back with the store's transaction or the
//!    companion aborted it; a 5xx answer after the companion's abort (a framework's error
//!    handler answering that throw) ends as the throw does.

use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Request, Response};

use super::answers::{
    accepted_record, as_response, from_stored, problem, problem_record, read_answer, Answer, Handed,
};
use super::canonical;
use super::context::Caller;
use super::flow::{
    claim, free_key, run_holding, store_answer, within, Claim, ClaimError, Context, Invocation,
    Keyed, Limit, Ran, RunEnd, Stored,
};
use super::incoming::{BodyError, HeaderReader, Incoming, NodeSource};
use super::runs::{self, error_text, RunLog};
use super::settings::{HttpSettings, Identity, Required};
use crate::core::idempotency::{self as idem, after_throw, ending, AfterThrow, Ending};
use crate::core::runs::{accepted_retry_after_s, event, Outcome};
use crate::wasm::errors::{describe, type_error};
use crate::wasm::js;

/// Handle one request (the function `idempotency` returns): `request`, and `route`, the
/// second argument it was called with (Next.js's `{ params }`), whose fields `ctx` carries.
pub async fn handle(
    s: Rc<HttpSettings>,
    handler: Function,
    request: JsValue,
    route: JsValue,
    caller: Caller,
) -> Result<JsValue, JsValue> {
    let req: Request = request.dyn_into().map_err(|v| {
        type_error(&format!(
            "idempotency: the wrapped handler takes a Request; got {}",
            describe(&v)
        ))
    })?;
    serve(s, handler, Incoming::Web(req), route, caller).await
}

/// Handle one node:http request `toNodeHandler` hands over (`js/server.js`'s `NodeSource`).
pub async fn handle_node(
    s: Rc<HttpSettings>,
    handler: Function,
    source: JsValue,
    caller: Caller,
) -> Result<JsValue, JsValue> {
    let source: NodeSource = source.unchecked_into();
    serve(
        s,
        handler,
        Incoming::Node(source),
        JsValue::UNDEFINED,
        caller,
    )
    .await
}

/// [`handle`], whatever form the request came in.
async fn serve(
    s: Rc<HttpSettings>,
    handler: Function,
    mut req: Incoming,
    route: JsValue,
    caller: Caller,
) -> Result<JsValue, JsValue> {
    let header = &s.common.limits.header;
    let headers = req.header_reader();
    let method = req.method();
    // A key on a safe method (GET, HEAD, OPTIONS by default) is ignored: nothing to prevent,
    // and storing reads would let any client fill the store.
    let ignored = s.common.limits.ignores_key(&method);
    let raw = match headers.get(header)? {
        Some(raw) if !ignored => raw,
        _ => {
            // `required` applies to the methods whose keys count.
            if !ignored && is_required(&s.required, &method, &mut req, &caller).await? {
                let path = req.pathname();
                let detail = format!("{method} {path} requires an {header} header (a unique key per operation, the same on every retry).");
                return Ok(problem(
                    400,
                    "idempotency-key-missing",
                    &format!("{header} is missing"),
                    &detail,
                    false,
                )?
                .into());
            }
            let request = req.request()?;
            let ctx = Context::new(None, JsValue::UNDEFINED, false, &route, &request.signal());
            return JsFuture::from(js::promise_of(
                &caller.call(&handler, &[&request, &ctx.object])?,
            ))
            .await;
        }
    };
    let key = match idem::parse_key(&raw) {
        Ok(key) => key,
        Err(e) => {
            let detail = format!("{}.", e.message());
            return Ok(problem(
                400,
                "idempotency-key-invalid",
                &format!("{header} is invalid"),
                &detail,
                false,
            )?
            .into());
        }
    };
    if req.body_taken()? {
        // A body parser or validator read it first: it cannot be fingerprinted, and the
        // handler could not read it either. A server setup error, answered, never a crash.
        let detail = format!("The request body was read before the idempotency companion could fingerprint it (a body parser or validator ran first). Wrap the handler before anything reads the body, or use the adapter for your framework (retry-fetch/express, retry-fetch/fastify, retry-fetch/hono), which fingerprints what the parser left (an upload parser's fields leave too little: mount the adapter before it). Nothing was processed for this {header}.");
        return Ok(problem(
            500,
            "idempotency-body-already-read",
            "The request body was already read",
            &detail,
            false,
        )?
        .into());
    }
    let identity = identity(&s, &headers, &mut req, &caller).await?;
    let limit = s.common.limits.max_body_bytes;
    let read = match req.read_body(&headers, limit).await {
        Ok(read) => read,
        Err(BodyError::Js(e)) => return Err(e),
        Err(BodyError::OutOfMemory) => {
            let detail = format!("The server cannot hold this request's body in memory now (too many large requests at once). The request was not processed and nothing was stored; retry later with the same {header}.");
            return Ok(problem(
                503,
                "idempotency-out-of-memory",
                "The server is out of memory",
                &detail,
                true,
            )?
            .into());
        }
    };
    let Some(body) = read else {
        let detail = format!("The request body is larger than {limit} bytes, the most this endpoint reads for an {header}.");
        return Ok(problem(
            413,
            "idempotency-body-too-large",
            "Request body too large",
            &detail,
            false,
        )?
        .into());
    };
    let path = req.target()?;
    let bytes = body.as_deref().unwrap_or_default();
    let json = match headers.get("content-type")? {
        Some(t) if idem::fingerprints_json(&t) => canonical_json_of(bytes),
        _ => None,
    };
    let k = match Keyed::new(
        &s.common,
        key,
        identity.as_deref(),
        idem::fingerprint(
            &method,
            &path,
            json.as_ref().map_or(bytes, |j| j.as_bytes()),
        ),
    )
    .await
    {
        Ok(k) => k,
        Err(error) => return unavailable(&s, &error, "secret"),
    };

    // Read only while the request waits: toNodeHandler's signal is made on first use.
    let aborted = || {
        let signal = req.signal();
        signal.aborted().then(|| signal.reason())
    };
    let answer = match claim(&s.common, &k, &aborted).await {
        Ok(Claim::Held) => match s.common.limits.accept_after_ms {
            None => return process(&s, &k, &handler, &req, body, &route, &caller).await,
            Some(ms) => return accept_after(s, k, handler, req, body, route, caller, ms).await,
        },
        Ok(Claim::Replay(stored)) => match from_stored(&stored, true) {
            Ok(response) => {
                runs::replayed(&s.common, &k, None);
                response
            }
            Err(error) => return unavailable(&s, &error, "acquire"),
        },
        Ok(Claim::Mismatch) => problem(422, "idempotency-key-reused", &format!("{header} is already used"),
            &format!("This {header} was already used for a different request (method, path, query or body); use a new key for a new operation."), false)?,
        Ok(Claim::Busy) if s.common.limits.accept_after_ms.is_some() => accepted(&s, runs::RunRecord::new(&k))?,
        Ok(Claim::Busy) => problem(409, "idempotency-key-in-progress", &format!("A request is outstanding for this {header}"),
            &format!("A request with this {header} is still being processed; retry later with the same key."), true)?,
        Err(ClaimError::Aborted(reason)) => return Err(reason),
        Err(ClaimError::Store(error, operation)) => return unavailable(&s, &error, operation),
    };
    Ok(answer.into())
}

/// Run the handler holding `k`, answering `202 Accepted` if it has not settled after `ms`:
/// then it goes on to its end (its answer stored, or its key freed) while the caller repeats
/// the request with the same key, which gets `202` until the answer is stored, then the answer.
#[allow(clippy::too_many_arguments)]
async fn accept_after(
    s: Rc<HttpSettings>,
    k: Keyed,
    handler: Function,
    req: Incoming,
    body: Option<Vec<u8>>,
    route: JsValue,
    caller: Caller,
    ms: f64,
) -> Result<JsValue, JsValue> {
    let record = runs::RunRecord::new(&k);
    let settings = s.clone();
    let accepted_202 = k.accepted.clone();
    let run = wasm_bindgen_futures::future_to_promise(async move {
        process(&settings, &k, &handler, &req, body, &route, &caller).await
    });
    match within(&run, ms).await {
        Some(outcome) => outcome,
        None => {
            // Nobody awaits the run from here on: its failure is the handler's, reported
            // (`onError`) where it happens; the rejection itself must not go unhandled.
            js::ignore_rejection(&run);
            accepted_202.set(true);
            Ok(accepted(&s, record)?.into())
        }
    }
}

/// `202 Accepted` for a keyed request whose run goes on (this request's, or one a repeat
/// found running), with `Retry-After`; never stored.
fn accepted(s: &HttpSettings, run: runs::RunRecord) -> Result<Response, JsValue> {
    let c = &s.common;
    let header = &c.limits.header;
    let wait_s = accepted_retry_after_s(c.limits.accept_after_ms.unwrap_or(1000.0));
    runs::tell(&c.reporter, event::ACCEPTED, &run);
    let detail = format!("The request is being processed. Send it again with the same {header} (and the same body) to get its answer once it is done; until then the answer is 202.");
    let stored = accepted_record(
        "idempotency-accepted",
        "Accepted: still processing",
        &detail,
        wait_s,
    )?;
    from_stored(&stored, false)
}

/// The store failed (or returned what cannot be answered) before the handler ran: told to
/// `onStoreError`, answered 503 (nothing ran, nothing stored).
fn unavailable(s: &HttpSettings, error: &JsValue, operation: &str) -> Result<JsValue, JsValue> {
    s.common.reporter.store_error(error, operation);
    let header = &s.common.limits.header;
    Ok(problem(503, "idempotency-store-unavailable", "The idempotency store is unavailable",
        &format!("The request was not processed and nothing was stored; retry later with the same {header}."), true)?.into())
}

/// How a keyed handler ended, its answer read.
enum Answered {
    /// It answered, and its answer was read whole.
    Answer(Answer),
    /// It threw, or its answer cannot be read (or its body failed).
    Failed(JsValue),
    /// It (or its answer's body) was still pending `lockTimeoutMs` after its signal aborted.
    Abandoned,
}

/// Holding the key: run the handler, then store its answer or free the key.
async fn process(
    s: &HttpSettings,
    k: &Keyed,
    handler: &Function,
    req: &Incoming,
    body: Option<Vec<u8>>,
    route: &JsValue,
    caller: &Caller,
) -> Result<JsValue, JsValue> {
    let c = &s.common;
    let header = &c.limits.header;
    let log = RunLog::start(c, k);
    // A controller only where something aborts the handler: handlerTimeoutMs.
    let controller = match c
        .limits
        .handler_timeout_ms
        .map(|_| web_sys::AbortController::new())
        .transpose()
    {
        Ok(controller) => controller,
        Err(error) => {
            log.end_before_freeing(c, Outcome::Freed, None).await;
            free_key(c, k).await;
            return Err(error);
        }
    };
    // The request the handler gets: the same URL, method and headers, the bytes read as its
    // body, and a signal of the companion's own. The client going away does not abort it: a
    // keyed handler runs to its end (a charge that went through is stored, and the client's
    // retry gets it), as Stripe's API does. Only `handlerTimeoutMs` aborts it (the signal of
    // its controller); without it, the request follows no signal (`signal: null`), and its
    // own never aborts.
    let request = match req.for_handler(
        body.as_deref(),
        controller.as_ref().map(|c| c.signal()).as_ref(),
    ) {
        Ok(request) => request,
        Err(error) => {
            log.end_before_freeing(c, Outcome::Freed, None).await;
            free_key(c, k).await;
            return Err(error);
        }
    };
    let limit = c
        .limits
        .handler_timeout_ms
        .zip(controller.as_ref())
        .map(|(ms, controller)| Limit {
            ms,
            controller,
            from_ms: js::now_ms(),
        });
    let signal = request.signal();
    let call = Invocation {
        f: handler,
        input: &request,
        route,
        signal: &signal,
    };
    let (ran, ctx, renewal) = run_holding(c, k, call, caller, limit.as_ref()).await;
    let node = match req {
        Incoming::Node(source) => Some(source),
        Incoming::Web(_) => None,
    };
    // Its answer's body is read within the handler's limit, with the same grace: one that
    // never ends holds the key no longer than a handler that hangs.
    let bound = limit.as_ref().map(|l| (l, c.limits.lock_timeout_ms));
    let answered = match ran {
        Ran::Resolved(value) => match as_response(value.clone(), bound).await {
            Err(error) => Answered::Failed(error), // its body failed
            Ok(Handed::Response(response)) => match read_answer(&response, node, bound).await {
                Ok(Some(answer)) => {
                    if !answer.unsendable.is_empty() {
                        c.reporter.handler_error(&type_error(&format!(
                            "idempotency: the handler's answer had headers whose values HTTP cannot send (a control character): {}; they were left out of the answer sent and stored",
                            answer.unsendable.join(", ")
                        )));
                    }
                    Answered::Answer(answer)
                }
                Ok(None) => Answered::Abandoned,
                Err(error) => Answered::Failed(error), // its body failed
            },
            Ok(Handed::Pending) => Answered::Abandoned,
            Ok(Handed::Other) => Answered::Failed(type_error(&format!(
                "idempotency: the handler must resolve with a Response; got {}",
                describe(&value)
            ))),
        },
        Ran::Threw(error) => Answered::Failed(error),
        Ran::Abandoned => Answered::Abandoned,
    };
    let aborted = controller.as_ref().is_some_and(|c| c.signal().aborted());
    let failure = match answered {
        Answered::Answer(answer) => {
            let storable = !answer.too_large;
            match ending(
                answer.stored.status,
                answer.has_retry_after,
                c.store.transactional,
                ctx.used_tx(),
                storable,
                aborted,
            ) {
                // A failure the companion's abort led to (a framework's error handler
                // answering the abort's throw): ended as that throw, below.
                Ending::Stopped => controller
                    .as_ref()
                    .map(|c| c.signal().reason())
                    .unwrap_or(JsValue::UNDEFINED),
                Ending::Free => {
                    // "Not processed", or rolled back: the key is freed so that the
                    // client's retry runs it.
                    drop(renewal);
                    log.end_before_freeing(c, freed(c, &ctx), None).await;
                    free_key(c, k).await;
                    if !storable {
                        return problem(500, "idempotency-answer-too-large", "The answer was too large to be stored",
                                    &format!("The answer (over 32 MiB) could not be stored for replay, so the handler's writes through ctx.tx were rolled back and nothing is kept for this {header}."), false).map(JsValue::from);
                    }
                    return Ok(answer.live);
                }
                Ending::Store => {
                    let end = RunEnd::new(log, Outcome::Stored, None);
                    let stored = store_answer(c, k, &answer.stored, renewal.lost(), end).await;
                    return match stored {
                                Stored::Kept => Ok(answer.live),
                                // With a transactional store nothing was committed, the handler's
                                // ctx.tx writes neither: the handler's answer would be a lie. Say so.
                                // (A handler that wrote nothing through ctx.tx had its effects
                                // outside it: they happened, as below.)
                                Stored::Failed | Stored::LockLost if c.store.transactional && ctx.used_tx() => problem(503, "idempotency-store-unavailable",
                                    "The result could not be committed",
                                    "The idempotency store failed to commit the result; nothing was kept. Retry with the same key.", true).map(JsValue::from),
                                // The effect happened; the answer is the truth even if it is not
                                // stored, and a retry would run the handler again once the lock
                                // lapses: whatever its status, the client is told not to retry.
                                Stored::Failed | Stored::LockLost => {
                                    not_to_be_retried(&answer.live)?;
                                    Ok(answer.live)
                                }
                            };
                }
            }
        }
        Answered::Failed(error) => error,
        Answered::Abandoned => {
            // A handler that ignores its aborted signal (or an answer whose body does not end)
            // is treated as one that hung: with a
            // transactional store its transaction is rolled back now; otherwise its lock is
            // no longer renewed and lapses after lockTimeoutMs (the time it has to finish),
            // then the retry runs it.
            drop(renewal);
            let wait_s = if c.store.transactional {
                log.end_before_freeing(c, Outcome::RolledBack, None).await;
                free_key(c, k).await;
                1.0
            } else {
                log.end_later(Outcome::Freed, None);
                (c.limits.lock_timeout_ms / 1000.0).ceil()
            };
            c.reporter.handler_error(&js_sys::Error::new("idempotency: the handler (or its answer's body) ran past handlerTimeoutMs and did not stop when its signal was aborted").into());
            let stored = problem_record(503, "idempotency-handler-timeout", "The request took too long",
                &format!("The handler did not finish within its time limit and was stopped; nothing is stored for this {header}. Retry later with the same key."), false)?;
            let response = from_stored(&stored, false)?;
            response.headers().set("retry-after", &wait_s.to_string())?;
            return Ok(response.into());
        }
    };
    let lost = renewal.lost();
    if !aborted {
        c.reporter.handler_error(&failure);
    }
    let error_detail = error_text(&failure);
    match after_throw(c.store.transactional, ctx.used_tx(), aborted) {
        AfterThrow::Release => {
            // Not renewed any more: the key is freed.
            drop(renewal);
            log.end_before_freeing(
                c,
                if aborted {
                    freed(c, &ctx)
                } else {
                    Outcome::RolledBack
                },
                error_detail,
            )
            .await;
            free_key(c, k).await;
            if aborted {
                return problem(503, "idempotency-handler-timeout", "The request took too long",
                    &format!("The handler did not finish within its time limit and was stopped; nothing is stored for this {header}, so a retry with the same key runs it again."), true).map(JsValue::from);
            }
            problem(500, "idempotency-handler-failed", "The request failed",
                &format!("The handler failed and its writes were rolled back; nothing is stored for this {header}, so a retry with the same key runs it again."), false).map(JsValue::from)
        }
        AfterThrow::StoreFailure => {
            let detail = format!("The handler failed after it started and may have had effects; this answer is stored for this {header} and replayed. Check the operation's state before trying again with a new key.");
            let stored = problem_record(
                500,
                "idempotency-handler-failed",
                "The request failed",
                &detail,
                false,
            )?;
            // Whether or not the store kept it, this request's answer is a 500; one the store
            // did not keep says so (the history too: not stored, so not replayed).
            // The lock renewed while the answer is stored, as for a handler's own answer.
            let end = RunEnd::new(log, Outcome::Failed, error_detail);
            let outcome = store_answer(c, k, &stored, lost, end)
                .await
                .outcome(Outcome::Failed);
            drop(renewal);
            if outcome == Outcome::Failed {
                return from_stored(&stored, false).map(JsValue::from);
            }
            let response = problem(500, "idempotency-handler-failed", "The request failed",
                &format!("The handler failed after it started and may have had effects, and this answer could not be stored for this {header} yet (the store failed, or the lock was lost): unless the store keeps it before the key's lock lapses, a retry with the same key runs the handler again. Check the operation's state before trying again."), false)?;
            let response: JsValue = response.into();
            not_to_be_retried(&response)?;
            Ok(response)
        }
    }
}

/// The canonical JSON of a JSON body's bytes (`core::idempotency::fingerprints_json`), as
/// the adapters fingerprint a value a framework parsed (`canonicalBody`): JSON.parse, then
/// `JSON.stringify(value, sortKeys)`, which the `canonical` walker writes byte for byte, made
/// here by V8 itself (a body of a megabyte in milliseconds). `None`, and the bytes are
/// fingerprinted as they are, when they are not UTF-8 JSON, when a number in them would not
/// read back exactly (`core::idempotency::json_numbers_exact`), or when the value is nested
/// too deep for JSON.stringify.
fn canonical_json_of(bytes: &[u8]) -> Option<String> {
    if !idem::json_numbers_exact(bytes) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    // A byte order mark before the JSON, which `JSON.parse` refuses and body parsers
    // (`express.json()`) skip: the same value, as they read it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let value = js_sys::JSON::parse(text).ok()?;
    SORT_KEYS.with(|sort_keys| match sort_keys {
        Some(sort_keys) => js_sys::JSON::stringify_with_replacer(&value, sort_keys)
            .ok()?
            .as_string(),
        // No code made from strings here (`--disallow-code-generation-from-strings`, a
        // hardened realm): the `canonical` walker writes the same bytes, slower.
        None => canonical::canonical_json(&value).ok().flatten(),
    })
}

thread_local! {
    /// `sortKeys`: the replacer of the canonical form (module `canonical`), made by the
    /// `Function` constructor; `None` where the realm refuses to make code from strings.
    static SORT_KEYS: Option<JsValue> = js_sys::Reflect::construct(
        js::get(&js_sys::global(), "Function").unchecked_ref::<Function>(),
        &js_sys::Array::of2(
            &"key, value".into(),
            &"if (typeof value !== 'object' || value === null || Array.isArray(value)) return value; \
              return Object.fromEntries(Object.keys(value).sort().map((k) => [k, value[k]]));"
                .into(),
        ),
    )
    .ok();
}

/// Headers that tell a client not to send a request again: `X-Should-Retry` (retryFetch, the
/// OpenAI SDK) and `Stripe-Should-Retry` (Stripe's SDK reads that one only), both `false`.
const SHOULD_NOT_RETRY: [&str; 2] = ["x-should-retry", "stripe-should-retry"];

/// Say on `live` (a `Response` of ours, or what `toNodeHandler` writes) that it must not be
/// retried: sent when the handler ran and nothing protects a retry from running it again (its
/// answer could not be stored). A client that honours the headers returns the answer.
fn not_to_be_retried(live: &JsValue) -> Result<(), JsValue> {
    if let Some(response) = live.dyn_ref::<Response>() {
        // Ours (answers.rs builds every live Response): its headers can be changed.
        for name in SHOULD_NOT_RETRY {
            response.headers().set(name, "false")?;
        }
        return Ok(());
    }
    // toNodeHandler's answer holds the handler's own Headers, which may be immutable (a
    // fetch response's): a copy with the two added.
    let given = js::get_or_throw(live, "headers")?;
    let headers = web_sys::Headers::new_with_headers(given.unchecked_ref())?;
    for name in SHOULD_NOT_RETRY {
        headers.set(name, "false")?;
    }
    js_sys::Reflect::set(live, &"headers".into(), &headers)?;
    Ok(())
}

/// How a run that frees its key ended: rolled back when its writes through `ctx.tx` were
/// (a transactional store whose transaction it used), else freed.
fn freed(c: &super::settings::Common, ctx: &Context) -> Outcome {
    if c.store.transactional && ctx.used_tx() {
        Outcome::RolledBack
    } else {
        Outcome::Freed
    }
}

/// Is a key required for `req` (the `required` option)?
async fn is_required(
    required: &Required,
    method: &str,
    req: &mut Incoming,
    caller: &Caller,
) -> Result<bool, JsValue> {
    match required {
        Required::Default => Ok(idem::key_required_by_default(method)),
        Required::Always(b) => Ok(*b),
        Required::Ask(f) => {
            let request = req.request()?;
            let v = JsFuture::from(js::promise_of(&caller.call(f, &[&request])?)).await?;
            v.as_bool().ok_or_else(|| {
                type_error(&format!(
                    "idempotency: option \"required\" returned {}; expected true or false",
                    describe(&v)
                ))
            })
        }
    }
}

/// What the warning about a keyed request without a recognised credential says.
const UNSCOPED_WARNING: &str = "retry-fetch/server: idempotency: a keyed request carried no credential the default identity recognises (Authorization, X-API-Key, Api-Key, X-Auth-Token, X-Access-Token, X-Session-Token, or a session or token cookie), so its key is not scoped to a caller: two callers who send the same key get one stored answer. Set the \"identity\" option to the authenticated caller (identity: (request) => userId), or identity: false if keys are shared on purpose. (Shown once for each idempotency() wrapper.)";

/// What the warning about a session cookie the default identity left out says.
const SHADOWED_WARNING: &str = "retry-fetch/server: idempotency: a keyed request carried a credential header (Authorization, X-API-Key, ...) and a session cookie; the default identity scopes keys by the header alone. If that header is the same for every caller (a front end's publishable key, a gateway's or a staging site's Basic auth), every caller is one and they read each other's stored answers: set the \"identity\" option to the authenticated caller (identity: (request) => userId). (Shown once for each idempotency() wrapper.)";

/// The identity that scopes the key (the `identity` option; by default the credentials), as
/// the bytes it is hashed from: UTF-8, or WTF-8 for a string with a lone surrogate
/// ([`js::wtf8`]), so two identities are never taken for one.
async fn identity(
    s: &HttpSettings,
    headers: &HeaderReader,
    req: &mut Incoming,
    caller: &Caller,
) -> Result<Option<Vec<u8>>, JsValue> {
    match &s.identity {
        Identity::Unscoped => Ok(None),
        Identity::Credentials => {
            let found = idem::default_identity(|name| headers.get(name).ok().flatten());
            if found.is_none() && !s.warned_unscoped.replace(true) {
                let _ = super::settings::console_warn(UNSCOPED_WARNING);
            }
            // A credential header came first: is a session cookie left out? (Asked until the
            // warning is given, once.)
            if found.as_deref().is_some_and(|f| !f.starts_with("cookie:"))
                && !s.warned_shadowed.get()
                && idem::default_identity(|name| match name {
                    "cookie" => headers.get(name).ok().flatten(),
                    _ => None,
                })
                .is_some()
            {
                s.warned_shadowed.set(true);
                let _ = super::settings::console_warn(SHADOWED_WARNING);
            }
            Ok(found.map(String::into_bytes))
        }
        Identity::Ask(f) => {
            let request = req.request()?;
            let v = JsFuture::from(js::promise_of(&caller.call(f, &[&request])?)).await?;
            if v.is_undefined() || v.is_null() {
                return Ok(None);
            }
            v.dyn_ref::<js_sys::JsString>()
                .map(|v| Some(js::wtf8(v)))
                .ok_or_else(|| {
                    type_error(&format!(
                    "idempotency: option \"identity\" returned {}; expected a string or undefined",
                    describe(&v)
                ))
                })
        }
    }
}
