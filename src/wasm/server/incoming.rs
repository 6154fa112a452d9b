//! The request as the companion receives it: a fetch `Request` (whoever calls the wrapped
//! handler), or a node:http request as `toNodeHandler` hands it over (`js/server.js`'s
//! `NodeSource`): its method, headers and target, its body read once as bytes, and the one
//! `Request` the handler gets built from them, so that a keyed request builds no `Request`
//! of its own before the handler's.

use js_sys::{Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, Headers, ReadableStreamDefaultReader, Request, RequestInit};

use crate::core::classify::method_can_have_body;
use crate::wasm::errors::type_error;
use crate::wasm::js;

#[wasm_bindgen]
extern "C" {
    /// `NodeSource` of `js/server.js`: a node:http request not yet turned into a `Request`.
    #[derive(Clone)]
    pub type NodeSource;

    /// The request's method.
    #[wasm_bindgen(method, getter)]
    fn method(this: &NodeSource) -> String;

    /// Its headers (the `Headers` the handler's `Request` is built with).
    #[wasm_bindgen(method, getter)]
    fn headers(this: &NodeSource) -> Headers;

    /// Its URL's path and query, as `new URL(request.url)` reads them.
    #[wasm_bindgen(method, getter)]
    fn target(this: &NodeSource) -> String;

    /// Aborted when the client goes away.
    #[wasm_bindgen(method, getter)]
    fn signal(this: &NodeSource) -> AbortSignal;

    /// The names its headers hold, as sent, one a line.
    #[wasm_bindgen(method, getter, js_name = headerNames)]
    fn header_names(this: &NodeSource) -> String;

    /// The body read whole: `null` (longer than `limit`), or its bytes (none when its stream
    /// already ended).
    #[wasm_bindgen(method, js_name = readBody)]
    fn read_body(this: &NodeSource, limit: f64) -> Promise;

    /// The node:http request itself (an `IncomingMessage`, a readable stream).
    #[wasm_bindgen(method, getter)]
    fn stream(this: &NodeSource) -> JsValue;

    /// The request as it came, its body streamed, following the client's signal.
    #[wasm_bindgen(method, catch)]
    fn request(this: &NodeSource) -> Result<Request, JsValue>;

    /// What `toNodeHandler` writes for the handler's answer: `{ status, statusText, headers,
    /// body, bodyUsed: false }`, `body` (bytes, or `null`) also at
    /// `Symbol.for('retry-fetch.answerBytes')`.
    #[wasm_bindgen(method)]
    pub fn answer(
        this: &NodeSource,
        status: u16,
        status_text: &str,
        headers: &Headers,
        body: &JsValue,
    ) -> JsValue;

    /// The request with `body` (read before) as its body and `signal` (`null`: none).
    #[wasm_bindgen(method, catch, js_name = requestWith)]
    fn request_with(
        this: &NodeSource,
        body: &JsValue,
        signal: &JsValue,
    ) -> Result<Request, JsValue>;
}

/// The request the companion handles.
#[derive(Clone)]
pub enum Incoming {
    /// A fetch `Request`.
    Web(Request),
    /// A node:http request from `toNodeHandler`; its `Request` not built yet.
    Node(NodeSource),
}

thread_local! {
    /// Where a `Request` an adapter builds carries its node:http target, as received.
    static TARGET: JsValue = js_sys::Symbol::for_("retry-fetch.target").into();
}

impl Incoming {
    /// The method.
    pub fn method(&self) -> String {
        match self {
            Incoming::Web(req) => req.method(),
            Incoming::Node(src) => src.method(),
        }
    }

    /// Its headers as the companion reads them, name by name.
    pub fn header_reader(&self) -> HeaderReader {
        match self {
            Incoming::Web(req) => HeaderReader {
                headers: req.headers(),
                names: None,
            },
            Incoming::Node(src) => HeaderReader {
                headers: src.headers(),
                names: Some(src.header_names()),
            },
        }
    }

    /// What aborts when the client goes away.
    pub fn signal(&self) -> AbortSignal {
        match self {
            Incoming::Web(req) => req.signal(),
            Incoming::Node(src) => src.signal(),
        }
    }

    /// The request as it came (a node:http one is built now, its body streamed): for what
    /// gets the request itself (an unkeyed handler, `required` and `identity` functions).
    /// From then on this is that `Request`.
    pub fn request(&mut self) -> Result<Request, JsValue> {
        if let Incoming::Node(src) = self {
            *self = Incoming::Web(src.request()?);
        }
        match self {
            Incoming::Web(req) => Ok(Clone::clone(req)),
            Incoming::Node(_) => Err(type_error("idempotency: no request")),
        }
    }

    /// Was the body read (or locked) by something else before the companion? A node:http
    /// request's is when its stream handed out data (`readableDidRead`: a body parser mounted
    /// before `toNodeHandler` read it, in part or whole), or ended while its headers declare a
    /// body; never for a method without a body. A stream that ended without handing out a
    /// byte of a body its headers do not declare (`Content-Length: 0`, or neither it nor
    /// `Transfer-Encoding`) held an empty body, which is what the companion fingerprints.
    pub fn body_taken(&self) -> Result<bool, JsValue> {
        match self {
            Incoming::Web(req) => Ok(req.body_used() || req.body().is_some_and(|b| b.locked())),
            Incoming::Node(src) => {
                if !method_can_have_body(&src.method()) {
                    return Ok(false);
                }
                let stream = src.stream();
                if js::get(&stream, "readableDidRead").is_truthy() {
                    return Ok(true);
                }
                Ok(js::get(&stream, "readableEnded").is_truthy()
                    && declares_body(&self.header_reader())?)
            }
        }
    }

    /// The path and query the fingerprint covers: a node:http request's as received (a
    /// router reads `/a/../b` as another path than `/b`), carried by the `Request` a framework
    /// adapter builds at `Symbol.for('retry-fetch.target')`; a fetch `Request`'s, as its URL
    /// says.
    pub fn target(&self) -> Result<String, JsValue> {
        match self {
            Incoming::Web(req) => {
                let given = TARGET.with(|key| js_sys::Reflect::get(req, key));
                if let Some(target) = given.ok().and_then(|t| t.as_string()) {
                    return Ok(target);
                }
                let url = web_sys::Url::new(&req.url())?;
                let mut path = url.pathname();
                path.push_str(&url.search());
                Ok(path)
            }
            Incoming::Node(src) => Ok(src.target()),
        }
    }

    /// The path alone (for the 400 of a missing key).
    pub fn pathname(&self) -> String {
        match self {
            Incoming::Web(req) => web_sys::Url::new(&req.url())
                .map(|u| u.pathname())
                .unwrap_or_default(),
            Incoming::Node(src) => {
                let target = src.target();
                match target.find('?') {
                    Some(i) => target[..i].to_string(),
                    None => target,
                }
            }
        }
    }

    /// Read the body, at most `limit` bytes: `Some(None)` for a request without a body,
    /// `Some(Some(bytes))`, or `None` when the body is longer (a declared `Content-Length`
    /// over the limit is refused before anything is read). The caller checked that the body
    /// is neither used nor locked.
    pub async fn read_body(
        &self,
        headers: &HeaderReader,
        limit: f64,
    ) -> Result<Option<Option<Vec<u8>>>, BodyError> {
        let declared = headers
            .get("content-length")?
            .and_then(|v| v.trim().parse::<f64>().ok());
        if declared.is_some_and(|n| n > limit) {
            // Not read: a `Request`'s stream is cancelled before the answer (a server that made
            // it on first use, as `@hono/node-server` does, then drops the rest of the upload
            // and keeps the connection; left alone, it resets the connection); toNodeHandler's
            // request reads and drops it after the answer. A cancel that fails changes nothing.
            if let Incoming::Web(req) = self {
                if let Some(stream) = req.body().filter(|b| !b.locked()) {
                    let _ = JsFuture::from(stream.cancel()).await;
                }
            }
            return Ok(None);
        }
        match self {
            Incoming::Web(req) => read_web_body(req, limit).await,
            Incoming::Node(src) => {
                if !method_can_have_body(&src.method()) {
                    return Ok(Some(None));
                }
                let v = JsFuture::from(src.read_body(limit)).await?;
                if v.is_null() {
                    return Ok(None);
                }
                match v.dyn_ref::<Uint8Array>() {
                    Some(bytes) => copied(bytes),
                    None => Err(type_error(
                        "idempotency: the request body produced a chunk that is not a Uint8Array",
                    )
                    .into()),
                }
            }
        }
    }

    /// The request the handler gets: the same URL, method and headers, `body` (read before)
    /// as its body, and `signal` (`None`: a signal that never aborts).
    pub fn for_handler(
        &self,
        body: Option<&[u8]>,
        signal: Option<&AbortSignal>,
    ) -> Result<Request, JsValue> {
        // `undefined` would make the request follow the client's signal.
        let signal: JsValue = signal.map_or(JsValue::NULL, |s| s.clone().into());
        match self {
            Incoming::Web(req) => {
                let init = RequestInit::new();
                if let Some(bytes) = body {
                    init.set_body(&Uint8Array::from(bytes));
                }
                js::set(&init, "signal", &signal);
                Request::new_with_request_and_init(req, &init)
            }
            Incoming::Node(src) => {
                let body = body.map_or(JsValue::UNDEFINED, |b| Uint8Array::from(b).into());
                src.request_with(&body, &signal)
            }
        }
    }
}

/// Do a request's headers declare a body: a `Transfer-Encoding`, or a `Content-Length` other
/// than 0? (Without either, an HTTP/1.1 request has none.)
fn declares_body(headers: &HeaderReader) -> Result<bool, JsValue> {
    if headers.get("transfer-encoding")?.is_some() {
        return Ok(true);
    }
    Ok(headers
        .get("content-length")?
        .is_some_and(|v| !matches!(v.trim().parse::<f64>(), Ok(n) if n == 0.0)))
}

/// A request's headers, read by name; where the names they hold are known (a node:http
/// request's), an absent name is answered without asking the `Headers`.
pub struct HeaderReader {
    headers: Headers,
    /// The names the headers hold, as sent, one a line.
    names: Option<String>,
}

impl HeaderReader {
    /// `headers.get(name)`: the value, or `None` when the header is absent.
    pub fn get(&self, name: &str) -> Result<Option<String>, JsValue> {
        if let Some(names) = &self.names {
            if !names.split('\n').any(|n| n.eq_ignore_ascii_case(name)) {
                return Ok(None);
            }
        }
        self.headers.get(name)
    }
}

/// Why [`Incoming::read_body`] has no body to give.
pub enum BodyError {
    /// Reading it failed (the client went away, a chunk that is not bytes).
    Js(JsValue),
    /// The wasm's memory cannot grow to hold it now (many large bodies in flight at once):
    /// nothing was processed, and the request may come again.
    OutOfMemory,
}

impl From<JsValue> for BodyError {
    fn from(e: JsValue) -> Self {
        BodyError::Js(e)
    }
}

/// The body's bytes in the wasm's memory, if it can hold them.
fn copied(bytes: &Uint8Array) -> Result<Option<Option<Vec<u8>>>, BodyError> {
    match js::try_copy(bytes) {
        Some(bytes) => Ok(Some(Some(bytes))),
        None => Err(BodyError::OutOfMemory),
    }
}

/// [`Incoming::read_body`] of a `Request`'s stream.
async fn read_web_body(req: &Request, limit: f64) -> Result<Option<Option<Vec<u8>>>, BodyError> {
    let Some(stream) = req.body() else {
        return Ok(Some(None));
    };
    let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    match js::read_limited(&reader, limit).await? {
        js::Limited::Bytes(bytes) => copied(&bytes),
        js::Limited::TooLong => Ok(None),
        js::Limited::NotBytes => Err(type_error(
            "idempotency: the request body produced a chunk that is not a Uint8Array",
        )
        .into()),
    }
}
