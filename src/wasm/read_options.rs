//! Reading an options object from JavaScript, for both halves (`retryFetch`, `createRetryFetch`
//! and the guards; `idempotency` and `idempotent` on the server).
//!
//! 1. [`given`]: the options object's own enumerable keys (`Object.keys`), each getter run
//!    once; `undefined` is "not given". An unknown name is a `TypeError` naming it and the
//!    closest known one (`maxAttemps` -> `maxAttempts`, `lockTimeout` -> `lockTimeoutMs`); a
//!    throwing getter's error is passed on. Only the keys given are read.
//! 2. The client converts each given value by its name, in one table (`client/policy.rs`,
//!    `client/guards.rs`): plain js-sys reads (`as_f64`, `as_string`, ...) and the core's
//!    validation and messages. The server's option structs are read by serde-wasm-bindgen
//!    from a [`snapshot`] of the given values (`server/settings.rs`); on a wrong type each
//!    option is read alone to find which one failed, so the `TypeError` names it.
//!
//! Why the client reads no option through serde: every use of serde-wasm-bindgen's
//! `Deserializer` links its `invalid_type` message, which formats any number with `f64`'s
//! `Display` (float formatting and `core::fmt`: about 7 kB gzip of the client's .wasm), and
//! its struct path reads every declared field (two calls into JS each) even when the object
//! has one. The client's serde-wasm-bindgen carries what crosses back to JS instead
//! (`client/records.rs`).

#[cfg(feature = "server")]
use js_sys::Object;
#[cfg(feature = "server")]
use serde::Deserialize;
use wasm_bindgen::prelude::*;

use crate::core::options::closest_name;
use crate::wasm::errors::{describe, type_error};
use crate::wasm::js;
use crate::wasm::js::object_keys;

/// The options given in `options`: each own enumerable key whose value is not `undefined`, by
/// its name in `known`, with its value (`null` included: the caller decides what it means),
/// each getter run once. `undefined` or `null` options give none; anything else that is not an
/// object (an array too) is a `TypeError`, as is an unknown name. `api` names the API in the
/// errors.
pub fn given(
    api: &str,
    options: &JsValue,
    known: &[&'static str],
) -> Result<Vec<(&'static str, JsValue)>, JsValue> {
    named(api, &own_values(api, options)?, known)
}

/// The own enumerable keys of `options` with their values, each getter run once, the keys as
/// JS strings (the first half of [`given`], for a caller that compares them with what it read
/// before without turning the names into Rust strings). A value may be `undefined` ("not
/// given": [`named`] skips it).
pub fn own_values(api: &str, options: &JsValue) -> Result<Vec<(JsValue, JsValue)>, JsValue> {
    let mut out = Vec::new();
    if let Some((keys, n)) = own_keys(api, options)? {
        values_by(options, &keys, n, &mut out)?;
    }
    Ok(out)
}

/// Each of the `n` names of `keys` (`Object.keys(options)`) with its value in `values`: the
/// first `values.len()` values were read already (by the same names, the JS strings of a
/// cache: each gets its name from `keys` here); the others are read now, each getter once.
pub fn values_by(
    options: &JsValue,
    keys: &js_sys::Array,
    n: u32,
    values: &mut Vec<(JsValue, JsValue)>,
) -> Result<(), JsValue> {
    for i in 0..n {
        let key = keys.get_unchecked(i);
        match values.get_mut(i as usize) {
            Some(read) => read.0 = key,
            None => {
                let value = js_sys::Reflect::get(options, &key)?; // a throwing getter rejects the call
                values.push((key, value));
            }
        }
    }
    Ok(())
}

/// `Object.keys(options)` and its length; `None` for `undefined` or `null` options. Anything
/// else that is not an object (an array too) is a `TypeError`, and so is a built-in object
/// with no own properties (a `Map`, a `Date`).
pub fn own_keys(api: &str, options: &JsValue) -> Result<Option<(js_sys::Array, u32)>, JsValue> {
    let object = options.is_object();
    if !object && (options.is_undefined() || options.is_null()) {
        return Ok(None);
    }
    if !object || js::is_array(options)? {
        return Err(invalid_options(api, &describe(options)));
    }
    let keys = object_keys(options)?;
    let n = keys.length();
    if n == 0 {
        // A Map's or a Date's entries are not properties: such an object (which has no own
        // ones) is refused, not read as no options at all. Asked only here, off the path of
        // options that have keys.
        if let Some(kind) = js::tag_name(options).filter(|t| t != "Object") {
            let mut got = String::from("a ");
            got.push_str(&kind);
            return Err(invalid_options(api, &got));
        }
    }
    Ok(Some((keys, n)))
}

/// `<api>: invalid options: got <got>; expected an object or undefined`, a `TypeError`.
#[cold]
fn invalid_options(api: &str, got: &str) -> JsValue {
    let mut msg = String::from(api);
    msg.push_str(": invalid options: got ");
    msg.push_str(got);
    msg.push_str("; expected an object or undefined");
    type_error(&msg)
}

/// Each of `values` by its name in `known` (the second half of [`given`]), but those given as
/// `undefined`: an unknown name is a `TypeError` naming the closest known one.
pub fn named(
    api: &str,
    values: &[(JsValue, JsValue)],
    known: &[&'static str],
) -> Result<Vec<(&'static str, JsValue)>, JsValue> {
    let mut out = Vec::with_capacity(values.len());
    for (key, value) in values {
        if value.is_undefined() {
            continue;
        }
        let Some(name) = key.as_string() else {
            continue;
        };
        let Some(&known_name) = known.iter().find(|k| **k == name) else {
            return Err(unknown_option(api, &name, known));
        };
        out.push((known_name, value.clone()));
    }
    Ok(out)
}

/// The given options ([`given`]) in a plain object serde can read without running a getter,
/// and the names given as `null` (not in the object).
#[cfg(feature = "server")]
pub fn snapshot(
    api: &str,
    options: &JsValue,
    known: &[&'static str],
) -> Result<(Object, Vec<&'static str>), JsValue> {
    let out = Object::new();
    let mut nulls = Vec::new();
    for (name, value) in given(api, options, known)? {
        if value.is_null() {
            nulls.push(name);
        } else {
            js::set(&out, name, &value);
        }
    }
    Ok((out, nulls))
}

/// `<api>: unknown option "maxAttemps" (did you mean "maxAttempts"?)`.
#[cold]
#[inline(never)]
pub fn unknown_option(api: &str, name: &str, known: &[&str]) -> JsValue {
    let mut msg = String::from(api);
    msg.push_str(": unknown option \"");
    msg.push_str(name);
    msg.push('"');
    match closest_name(name, known) {
        Some(close) => {
            msg.push_str(" (did you mean \"");
            msg.push_str(close);
            msg.push_str("\"?)");
        }
        None => {
            msg.push_str("; the options are ");
            for (i, k) in known.iter().enumerate() {
                if i > 0 {
                    msg.push_str(", ");
                }
                msg.push_str(k);
            }
        }
    }
    type_error(&msg)
}

/// The `TypeError` for a value serde could not read: the option and (in a list) the item,
/// found by reading each option of the snapshot alone; its value; and what is allowed.
/// Only on the error path: a valid read costs nothing more.
#[cfg(feature = "server")]
fn serde_error<T: for<'de> Deserialize<'de>>(
    api: &str,
    snapshot: &Object,
    expected: fn(&str) -> &'static str,
) -> JsValue {
    let mut option = String::new();
    if let Ok(keys) = object_keys(snapshot) {
        for key in keys.iter() {
            let alone = Object::new();
            let value = js_sys::Reflect::get(snapshot, &key).unwrap_or(JsValue::UNDEFINED);
            let _ = js_sys::Reflect::set(&alone, &key, &value);
            let de = serde_wasm_bindgen::Deserializer::from(JsValue::from(alone));
            if T::deserialize(de).is_err() {
                option = key.as_string().unwrap_or_default();
                break;
            }
        }
    }
    let value =
        js_sys::Reflect::get(snapshot, &JsValue::from_str(&option)).unwrap_or(JsValue::UNDEFINED);
    let mut msg = String::from(api);
    msg.push_str(": invalid option \"");
    msg.push_str(&option);
    msg.push_str("\": ");
    // In the list of statuses, the first item that is not a number.
    let bad_item = if option == "retryOnStatus" && matches!(js::array_length(&value), Ok(Some(_))) {
        js::array_copy(&value).ok().and_then(|items| {
            items
                .iter()
                .position(|item| item.as_f64().is_none())
                .map(|i| (i, items.get(i as u32)))
        })
    } else {
        None
    };
    match bad_item {
        Some((i, item)) => {
            msg.push_str("item [");
            msg.push_str(&i.to_string());
            msg.push_str("] is ");
            msg.push_str(&describe(&item));
        }
        None => {
            msg.push_str("got ");
            msg.push_str(&describe(&value));
        }
    }
    msg.push_str("; expected ");
    msg.push_str(expected(&option));
    type_error(&msg)
}

/// Deserialize the snapshot of `options` into `T` (`api` and `known` for the errors).
#[cfg(feature = "server")]
pub fn deserialize<T: for<'de> Deserialize<'de>>(
    api: &str,
    options: &JsValue,
    known: &[&'static str],
    expected: fn(&str) -> &'static str,
) -> Result<(T, Object, Vec<&'static str>), JsValue> {
    let (snap, nulls) = snapshot(api, options, known)?;
    let de = serde_wasm_bindgen::Deserializer::from(JsValue::from(snap.clone()));
    let raw = T::deserialize(de).map_err(|_| serde_error::<T>(api, &snap, expected))?;
    Ok((raw, snap, nulls))
}
