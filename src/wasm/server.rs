//! The server build's exports (cargo feature `server`), used by `js/server.js` for
//! `idempotency(handler, options)`: option validation, key parsing, fingerprint, store key and
//! the per-key decision, over [`crate::core::idempotency`].
//!
//! Every export takes `JsValue`s and checks them, so nothing a caller or a custom store passes
//! can panic: a wrong value is a `TypeError` naming it, a refused key an `Error` whose message
//! becomes the 400 answer's `detail`.

use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::errors::{describe, invalid_option, type_error};
use super::js;
use crate::core::idempotency::{self as idem, Record, ServerOptions};
use crate::core::options::OptionError;

/// The methods a store must have (`IdempotencyStore` in `server.d.ts`).
const STORE_METHODS: [&str; 4] = ["acquire", "reclaim", "complete", "release"];

/// `idempotency: invalid option "ttlMs": got -1; expected an integer number of ...`.
fn option_error(err: OptionError, value: &JsValue) -> JsValue {
    invalid_option("idempotency", err, value)
}

fn number(option: &'static str, v: &JsValue, expected: &'static str) -> Result<f64, JsValue> {
    v.as_f64()
        .ok_or_else(|| option_error(OptionError::new(option, expected), v))
}

fn string(option: &'static str, v: &JsValue, expected: &'static str) -> Result<String, JsValue> {
    v.as_string()
        .ok_or_else(|| option_error(OptionError::new(option, expected), v))
}

fn function_or_undefined(option: &'static str, v: &JsValue) -> Result<(), JsValue> {
    if v.is_undefined() || v.is_function() {
        Ok(())
    } else {
        Err(option_error(OptionError::new(option, "a function"), v))
    }
}

/// `readServerOptions(options)`: validate the options of `idempotency(handler, options)` and
/// return the plain ones with their defaults filled in:
/// `{ header, ttlMs, lockTimeoutMs, concurrent, waitTimeoutMs, pollMs }`. The JavaScript
/// parts (`store`, `required`, `identity`, `onStoreError`) are only type-checked here; the
/// caller keeps them. `undefined` means the default. An invalid value is a `TypeError` naming
/// the option, the value and what is allowed.
#[wasm_bindgen(js_name = readServerOptions, skip_typescript)]
pub fn read_server_options(options: &JsValue) -> Result<JsValue, JsValue> {
    let mut o = ServerOptions::default();
    if !options.is_undefined() && !options.is_null() {
        if !options.is_object() {
            return Err(option_error(
                OptionError::new("options", "an object"),
                options,
            ));
        }
        let field = |name: &str| -> Result<Option<JsValue>, JsValue> {
            let v = js::get_or_throw(options, name)?;
            Ok(if v.is_undefined() { None } else { Some(v) })
        };
        if let Some(v) = field("store")? {
            let ok = v.is_object() && STORE_METHODS.iter().all(|m| js::get(&v, m).is_function());
            if !ok {
                let expected = "an IdempotencyStore: an object with acquire, reclaim, complete and release methods";
                return Err(option_error(OptionError::new("store", expected), &v));
            }
        }
        if let Some(v) = field("header")? {
            let s = string("header", &v, idem::HEADER_EXPECTED)?;
            o.header = idem::header(&s).map_err(|e| option_error(e, &v))?;
        }
        if let Some(v) = field("required")? {
            if v.as_bool().is_none() && !v.is_function() {
                let expected = "true, false or a function (request) => boolean";
                return Err(option_error(OptionError::new("required", expected), &v));
            }
        }
        if let Some(v) = field("identity")? {
            function_or_undefined("identity", &v)?;
        }
        if let Some(v) = field("onStoreError")? {
            function_or_undefined("onStoreError", &v)?;
        }
        if let Some(v) = field("ttlMs")? {
            let n = number("ttlMs", &v, idem::TTL_EXPECTED)?;
            o.ttl_ms = idem::ttl_ms(n).map_err(|e| option_error(e, &v))?;
        }
        if let Some(v) = field("lockTimeoutMs")? {
            let n = number("lockTimeoutMs", &v, idem::POSITIVE_MS_EXPECTED)?;
            o.lock_timeout_ms = idem::lock_timeout_ms(n).map_err(|e| option_error(e, &v))?;
        }
        if let Some(v) = field("concurrent")? {
            let s = string("concurrent", &v, idem::CONCURRENT_EXPECTED)?;
            o.concurrent = idem::concurrent(&s).map_err(|e| option_error(e, &v))?;
        }
        if let Some(v) = field("waitTimeoutMs")? {
            let n = number("waitTimeoutMs", &v, idem::WAIT_MS_EXPECTED)?;
            o.wait_timeout_ms = Some(idem::wait_timeout_ms(n).map_err(|e| option_error(e, &v))?);
        }
        if let Some(v) = field("pollMs")? {
            let n = number("pollMs", &v, idem::POSITIVE_MS_EXPECTED)?;
            o.poll_ms = idem::poll_ms(n).map_err(|e| option_error(e, &v))?;
        }
    }
    let out: JsValue = js_sys::Object::new().into();
    js::set(&out, "header", &JsValue::from_str(&o.header));
    js::set(&out, "ttlMs", &JsValue::from_f64(o.ttl_ms));
    js::set(&out, "lockTimeoutMs", &JsValue::from_f64(o.lock_timeout_ms));
    js::set(&out, "concurrent", &JsValue::from_str(o.concurrent.name()));
    js::set(
        &out,
        "waitTimeoutMs",
        &JsValue::from_f64(o.effective_wait_timeout_ms()),
    );
    js::set(&out, "pollMs", &JsValue::from_f64(o.poll_ms));
    Ok(out)
}

/// `parseIdempotencyKey(headerValue)`: the key in a header value (plain or sf-string form),
/// or an `Error` named `IdempotencyKeyError` whose message says what is wrong (the 400
/// answer's `detail`).
#[wasm_bindgen(js_name = parseIdempotencyKey, skip_typescript)]
pub fn parse_idempotency_key(value: &JsValue) -> Result<String, JsValue> {
    let Some(s) = value.as_string() else {
        return Err(type_error(
            "idempotency: the key header value must be a string",
        ));
    };
    idem::parse_key(&s).map_err(|e| named_error("IdempotencyKeyError", e.message()).into())
}

/// `requestFingerprint(method, pathAndQuery, body)`: the fingerprint of a request, 64 hex
/// digits (see `core::idempotency::fingerprint`). `body` is a `Uint8Array` (empty for none).
#[wasm_bindgen(js_name = requestFingerprint, skip_typescript)]
pub fn request_fingerprint(
    method: &JsValue,
    path_and_query: &JsValue,
    body: &JsValue,
) -> Result<String, JsValue> {
    let (Some(method), Some(path)) = (method.as_string(), path_and_query.as_string()) else {
        return Err(type_error(
            "idempotency: the method and the path must be strings",
        ));
    };
    let bytes = match body.dyn_ref::<Uint8Array>() {
        Some(b) => b.to_vec(),
        None if body.is_undefined() || body.is_null() => Vec::new(),
        None => return Err(type_error("idempotency: the body must be a Uint8Array")),
    };
    Ok(idem::fingerprint(&method, &path, &bytes))
}

/// `storeKey(identity, key)`: the key scoped by the caller's identity (`undefined` or `''`:
/// none). An identity that is neither a string nor `undefined` is a `TypeError` (it comes
/// from the `identity` option).
#[wasm_bindgen(js_name = storeKey, skip_typescript)]
pub fn store_key(identity: &JsValue, key: &JsValue) -> Result<String, JsValue> {
    let Some(key) = key.as_string() else {
        return Err(type_error("idempotency: the key must be a string"));
    };
    if identity.is_undefined() || identity.is_null() {
        return Ok(idem::store_key(None, &key));
    }
    match identity.as_string() {
        Some(id) => Ok(idem::store_key(Some(&id), &key)),
        None => {
            let mut msg = String::from("idempotency: option \"identity\" returned ");
            msg.push_str(&describe(identity));
            msg.push_str("; expected a string or undefined");
            Err(type_error(&msg))
        }
    }
}

/// `keyRequiredByDefault(method)`: does `method` need a key when `required` is not given
/// (POST and PATCH)?
#[wasm_bindgen(js_name = keyRequiredByDefault, skip_typescript)]
pub fn key_required_by_default(method: &JsValue) -> bool {
    method
        .as_string()
        .is_some_and(|m| idem::key_required_by_default(&m))
}

/// The `TypeError` for a record a store returned that is not an `IdempotencyRecord`.
fn malformed(record: &JsValue, what: &str) -> JsValue {
    let mut msg = String::from("idempotency: the store returned a malformed record (");
    msg.push_str(what);
    msg.push_str("): ");
    msg.push_str(&describe(record));
    type_error(&msg)
}

/// `decideAction(record, fingerprint, nowMs)`: what to do with a request whose key has
/// `record` in the store (`null`/`undefined` for none): `'process'`, `'replay'`,
/// `'mismatch'`, `'in-progress'` or `'lock-expired'`. A record that is not an
/// `IdempotencyRecord` is a `TypeError`.
#[wasm_bindgen(js_name = decideAction, skip_typescript)]
pub fn decide_action(
    record: &JsValue,
    fingerprint: &JsValue,
    now_ms: &JsValue,
) -> Result<String, JsValue> {
    let (Some(fp), Some(now)) = (fingerprint.as_string(), now_ms.as_f64()) else {
        return Err(type_error(
            "idempotency: decideAction(record, fingerprint: string, nowMs: number)",
        ));
    };
    let action = if record.is_undefined() || record.is_null() {
        idem::decide(Record::Absent, &fp, now)
    } else {
        if !record.is_object() {
            return Err(malformed(record, "not an object"));
        }
        let stored_fp = js::get_or_throw(record, "fingerprint")?
            .as_string()
            .ok_or_else(|| malformed(record, "no string fingerprint"))?;
        let state = js::get_or_throw(record, "state")?.as_string();
        match state.as_deref() {
            Some("completed") => idem::decide(
                Record::Completed {
                    fingerprint: &stored_fp,
                },
                &fp,
                now,
            ),
            Some("in-progress") => {
                // The token is what `reclaim` compares on; a lock without one cannot be taken over.
                if js::get_or_throw(record, "token")?.as_string().is_none() {
                    return Err(malformed(record, "a lock without a string token"));
                }
                let exp = js::get_or_throw(record, "lockExpiresAt")?
                    .as_f64()
                    .ok_or_else(|| malformed(record, "no number lockExpiresAt"))?;
                idem::decide(
                    Record::InProgress {
                        fingerprint: &stored_fp,
                        lock_expires_at_ms: exp,
                    },
                    &fp,
                    now,
                )
            }
            _ => {
                return Err(malformed(
                    record,
                    "state is neither 'in-progress' nor 'completed'",
                ))
            }
        }
    };
    Ok(action.name().to_string())
}

/// An `Error` whose `name` is `name` (`IdempotencyKeyError`).
fn named_error(name: &str, message: &str) -> js_sys::Error {
    let e = js_sys::Error::new(message);
    e.set_name(name);
    e
}
