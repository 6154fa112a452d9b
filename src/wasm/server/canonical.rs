//! The canonical JSON of a body a framework's parser has already read (`canonicalBody`, for the
//! Express and Fastify adapters), and of a JSON body the companion reads itself (parsed
//! first), so both fingerprint one value alike: byte for byte what `JSON.stringify(value, sortKeys)` makes,
//! where `sortKeys` rebuilds every object that is not an array with its own enumerable keys
//! sorted (`Object.fromEntries` of them, so that `"__proto__"` stays a member and array-index
//! keys come first, as a JavaScript object orders them). That form is fixed: a stored
//! fingerprint must still match the repeat of its request after an upgrade.
//!
//! It is walked with an explicit stack, not by recursion: `JSON.parse` reads a body nested
//! thousands of levels deep without recursing, and `JSON.stringify` (or a recursive walk in
//! the wasm) would overflow the stack on it. Each step follows `JSON.stringify`'s own
//! (ECMA-262 `SerializeJSONProperty`): a `toJSON` method is called with the member's key, then
//! an object is sorted (each getter read once, in key order; one that throws leaves its key
//! out, as `sortKeys` did). Keys, strings and integers are written here; other numbers, and a
//! string or key with a lone surrogate, by `JSON.stringify` itself. A cycle is a `TypeError`,
//! as `JSON.stringify`'s own; a value nested deeper than [`MAX_DEPTH`] levels, which only a
//! `toJSON` that makes a new level every time can reach, a `RangeError`.

use std::cmp::Ordering;

use js_sys::{Array, Function, JsString, Object, Reflect, Set};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::wasm::errors::type_error;
use crate::wasm::js;

/// How deep a value may be nested: twice as deep as 1 MiB of JSON (`[` after `[`) can nest, so
/// that no parsed body ever reaches it.
pub const MAX_DEPTH: usize = 1 << 20;

/// From this depth on, each object and array is in the cycle check (a JS `Set` of those being
/// written) while it is written: shallower ones are not, as a cycle through them repeats until
/// it is deeper than this, then is found there.
const CHECKED_DEPTH: usize = 32;

#[wasm_bindgen]
extern "C" {
    /// `Object(value)`: a primitive boxed (to read a method of its prototype), an object as it is.
    #[wasm_bindgen(js_name = Object)]
    fn boxed(value: &JsValue) -> JsValue;
    /// `Number(value)`, which a `valueOf` or a symbol can make throw.
    #[wasm_bindgen(js_name = Number, catch)]
    fn to_number(value: &JsValue) -> Result<f64, JsValue>;
}

/// One member of an object being written: its key as JSON text, the key, its value.
struct Member {
    quoted: String,
    key: JsValue,
    value: JsValue,
}

/// An object or an array being written, member after member.
enum Frame {
    /// An object's members in the order `sortKeys` gives them; `original` is the object (in
    /// the cycle check while it is written, if `checked`).
    Object {
        members: std::vec::IntoIter<Member>,
        wrote: bool,
        original: JsValue,
        checked: bool,
    },
    /// An array (in the cycle check while it is written, if `checked`): items `next` to
    /// `length`.
    Array {
        array: JsValue,
        next: f64,
        length: f64,
        checked: bool,
    },
}

impl Frame {
    /// What the cycle check holds for this frame, if anything.
    fn checked(&self) -> Option<&JsValue> {
        match self {
            Frame::Object {
                original, checked, ..
            } => checked.then_some(original),
            Frame::Array { array, checked, .. } => checked.then_some(array),
        }
    }
}

/// What one member's value serialises to.
enum Step {
    /// Nothing: `undefined`, a function, a symbol (left out of an object; `null` in an array).
    Omit,
    /// This JSON text.
    Text(String),
    /// An object or array: opened (`{` or `[`), its members next.
    Open(Frame),
}

/// The canonical JSON of `value` (`None` where `JSON.stringify` gives `undefined`), or the
/// error `JSON.stringify(value, sortKeys)` would throw (a `toJSON`'s, a proxy's, a
/// `TypeError` for a `BigInt` or a cycle).
pub fn canonical_json(value: &JsValue) -> Result<Option<String>, JsValue> {
    let mut out = String::new();
    let ancestors = Set::new(&JsValue::UNDEFINED);
    let mut stack: Vec<Frame> = Vec::new();
    match step(value.clone(), &JsValue::from_str(""), &ancestors, false)? {
        Step::Omit => return Ok(None),
        Step::Text(text) => return Ok(Some(text)),
        Step::Open(frame) => open(&mut out, &mut stack, frame)?,
    }
    // Each turn writes one member of the innermost open object or array, or closes it.
    loop {
        let check = stack.len() >= CHECKED_DEPTH;
        let Some(frame) = stack.last_mut() else {
            break;
        };
        match frame {
            Frame::Array {
                array,
                next,
                length,
                ..
            } => {
                if *next >= *length {
                    out.push(']');
                    close(&mut stack, &ancestors);
                    continue;
                }
                if *next > 0.0 {
                    out.push(',');
                }
                // The index as a string: what `toJSON` is given, as JSON.stringify gives it.
                let key = JsValue::from_str(&(*next as u64).to_string());
                *next += 1.0;
                let item = Reflect::get(array, &key)?;
                match step(item, &key, &ancestors, check)? {
                    Step::Omit => out.push_str("null"),
                    Step::Text(text) => out.push_str(&text),
                    Step::Open(frame) => open(&mut out, &mut stack, frame)?,
                }
            }
            Frame::Object { members, wrote, .. } => {
                let Some(member) = members.next() else {
                    out.push('}');
                    close(&mut stack, &ancestors);
                    continue;
                };
                let step = step(member.value, &member.key, &ancestors, check)?;
                if matches!(step, Step::Omit) {
                    continue;
                }
                if *wrote {
                    out.push(',');
                }
                *wrote = true;
                out.push_str(&member.quoted);
                out.push(':');
                match step {
                    Step::Omit => {}
                    Step::Text(text) => out.push_str(&text),
                    Step::Open(frame) => open(&mut out, &mut stack, frame)?,
                }
            }
        }
    }
    Ok(Some(out))
}

/// Write `frame`'s opening bracket and make it the innermost one.
fn open(out: &mut String, stack: &mut Vec<Frame>, frame: Frame) -> Result<(), JsValue> {
    if stack.len() >= MAX_DEPTH {
        let mut msg = String::from("canonicalBody: the value is nested deeper than ");
        msg.push_str(&MAX_DEPTH.to_string());
        msg.push_str(" levels");
        return Err(js_sys::RangeError::new(&msg).into());
    }
    out.push(match frame {
        Frame::Object { .. } => '{',
        Frame::Array { .. } => '[',
    });
    stack.push(frame);
    Ok(())
}

/// The innermost object or array is written: out of the cycle check, off the stack.
fn close(stack: &mut Vec<Frame>, ancestors: &Set) {
    if let Some(frame) = stack.pop() {
        if let Some(value) = frame.checked() {
            ancestors.delete(value);
        }
    }
}

/// What the member `key` whose value is `value` serialises to (`SerializeJSONProperty` with
/// the `sortKeys` replacer). With `check`, an object or array already in `ancestors` is a
/// cycle, and one that is not is added (and taken out when its frame closes).
fn step(value: JsValue, key: &JsValue, ancestors: &Set, check: bool) -> Result<Step, JsValue> {
    if let Some(step) = primitive(&value)? {
        return Ok(step);
    }
    // An object, a function, a BigInt or a symbol: `toJSON` first (not for a symbol).
    let mut value = value;
    let to_json = if value.is_bigint() {
        js::get_or_throw(&boxed(&value), "toJSON")?
    } else {
        js::get_or_throw(&value, "toJSON")? // `undefined` for a symbol
    };
    if let Some(to_json) = to_json.dyn_ref::<Function>() {
        value = to_json.call1(&value, key)?;
        if let Some(step) = primitive(&value)? {
            return Ok(step);
        }
    }
    if value.is_bigint() {
        return Ok(Step::Text(stringified(&value)?)); // its TypeError
    }
    if !value.is_object() {
        return Ok(Step::Omit); // a function, a symbol
    }
    if check {
        if ancestors.has(&value) {
            return Err(type_error(
                "canonicalBody: Converting circular structure to JSON",
            ));
        }
        ancestors.add(&value);
    }
    if js::is_array(&value)? {
        // LengthOfArrayLike: a proxy's `length` may be anything.
        let length = js::get_or_throw(&value, "length")?;
        let length = to_length(match length.as_f64() {
            Some(n) => n,
            None => to_number(&length)?,
        });
        return Ok(Step::Open(Frame::Array {
            array: value,
            next: 0.0,
            length,
            checked: check,
        }));
    }
    let members = sorted_members(&value)?;
    Ok(Step::Open(Frame::Object {
        members: members.into_iter(),
        wrote: false,
        original: value,
        checked: check,
    }))
}

/// The JSON of a number, a string, `null` or a boolean; `Omit` for `undefined`; `None` for
/// anything else (what may have a `toJSON`, or be an object).
fn primitive(value: &JsValue) -> Result<Option<Step>, JsValue> {
    if let Some(n) = value.as_f64() {
        return Ok(Some(Step::Text(number_text(n, value)?)));
    }
    if let Some(text) = value.as_string() {
        let mut out = String::with_capacity(text.len() + 2);
        if text.contains('\u{FFFD}') {
            out.push_str(&stringified(value)?); // maybe a lone surrogate, lost in the copy
        } else {
            push_quoted(&mut out, &text);
        }
        return Ok(Some(Step::Text(out)));
    }
    if value.is_null() {
        return Ok(Some(Step::Text("null".into())));
    }
    if value.is_undefined() {
        return Ok(Some(Step::Omit));
    }
    if let Some(b) = value.as_bool() {
        return Ok(Some(Step::Text(if b { "true" } else { "false" }.into())));
    }
    Ok(None)
}

/// The members of `object` as `sortKeys` rebuilt it: its own enumerable keys (`Object.keys`)
/// sorted as JavaScript sorts strings (by UTF-16 code units), each value read once in that
/// order (a getter that throws leaves its key out), then in the order of the object
/// `Object.fromEntries` makes of them: array indices (`"0"` to `"4294967294"`) first, in
/// numeric order, then the others, sorted. Where a key has a lone surrogate (which the copy
/// into Rust would lose), `sortKeys`' own steps are run in JavaScript instead.
fn sorted_members(object: &JsValue) -> Result<Vec<Member>, JsValue> {
    let keys = js::object_keys(object)?;
    let mut named: Vec<(String, JsValue)> = Vec::with_capacity(keys.length() as usize);
    for key in keys.iter() {
        match key.as_string() {
            Some(name) if !name.contains('\u{FFFD}') => named.push((name, key)),
            _ => return sorted_members_in_js(object, &keys),
        }
    }
    named.sort_by(|(a, _), (b, _)| utf16_order(a, b));
    let mut members = Vec::with_capacity(named.len());
    for (name, key) in named {
        // A getter that throws: its key left out.
        if let Ok(value) = Reflect::get(object, &key) {
            let mut quoted = String::with_capacity(name.len() + 2);
            push_quoted(&mut quoted, &name);
            members.push((array_index(&name), Member { quoted, key, value }));
        }
    }
    // Stable: the other keys keep their sorted order after the indices.
    members.sort_by_key(|(index, _)| index.map_or((1, 0), |i| (0, i)));
    Ok(members.into_iter().map(|(_, member)| member).collect())
}

/// [`sorted_members`] by `sortKeys`' own steps: `keys` sorted by `Array.prototype.sort`, the
/// values read into `Object.fromEntries`, and that object's keys, in its order.
fn sorted_members_in_js(object: &JsValue, keys: &Array) -> Result<Vec<Member>, JsValue> {
    keys.sort();
    let entries = Array::new();
    for key in keys.iter() {
        if let Ok(value) = Reflect::get(object, &key) {
            entries.push(&Array::of2(&key, &value));
        }
    }
    let sorted: JsValue = Object::from_entries(&entries)?.into();
    let mut members = Vec::new();
    for key in js::object_keys(&sorted)?.iter() {
        let value = Reflect::get(&sorted, &key)?;
        members.push(Member {
            quoted: stringified(&key)?,
            key,
            value,
        });
    }
    Ok(members)
}

/// How `Array.prototype.sort` orders two strings: by UTF-16 code units.
fn utf16_order(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `name` as an array index (ECMA-262: the canonical form of an integer from 0 to 2^32 - 2),
/// or `None`.
fn array_index(name: &str) -> Option<u32> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 10 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes.first() == Some(&b'0') {
        return None;
    }
    let n: u64 = name.parse().ok()?;
    if n <= 4_294_967_294 {
        u32::try_from(n).ok()
    } else {
        None
    }
}

/// `JSON.stringify(value)`: a primitive's JSON text, by the engine (a `BigInt`: its
/// `TypeError`).
fn stringified(value: &JsValue) -> Result<String, JsValue> {
    let text: JsString = js_sys::JSON::stringify(value)?;
    Ok(text.as_string().unwrap_or_default())
}

/// Append `text` as a JSON string, as `JSON.stringify` writes it: `"` and `\` escaped,
/// `\b \f \n \r \t`, other control characters as `\u00xx`, the rest as it is.
fn push_quoted(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let b = u32::from(c) as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[(b >> 4) & 0xf]));
                out.push(char::from(HEX[b & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as JSON: an integer of magnitude up to 2^53 written here (`-0` as `0`, as
/// `JSON.stringify` does), any other by `JSON.stringify` itself (its shortest form, an
/// exponent, `null` for `NaN` and the infinities).
fn number_text(n: f64, value: &JsValue) -> Result<String, JsValue> {
    if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 {
        return Ok((n as i64).to_string());
    }
    stringified(value)
}

/// ECMA-262 `ToLength`: an integer from 0 to 2^53 - 1 (NaN: 0).
fn to_length(n: f64) -> f64 {
    if n.is_nan() || n <= 0.0 {
        return 0.0;
    }
    n.trunc().min(9_007_199_254_740_991.0)
}
