//! Bindings to the JavaScript globals both halves use: `String`, `Object.keys`,
//! `setTimeout`/`clearTimeout`, `Reflect` (with property names made into JS
//! strings once).
//!
//! Everything is bound as a global, never through `window`, so the same module runs in
//! browsers, Node and workers. Calls that can throw on foreign input are bound with `catch`,
//! so a throw becomes an `Err` instead of an exception unwinding through the wasm.

use js_sys::JsString;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

#[wasm_bindgen]
extern "C" {
    /// `String(value)`; throws for e.g. a null-prototype object.
    #[wasm_bindgen(js_name = String, catch)]
    pub fn to_js_string(value: &JsValue) -> Result<JsString, JsValue>;

    /// The global `setTimeout(callback, ms)`; Node returns an object, browsers a number.
    #[wasm_bindgen(js_name = setTimeout)]
    pub fn set_timeout(callback: &js_sys::Function, ms: f64) -> JsValue;

    /// `setTimeout(callback, ms, arg)`: `callback(arg)` after `ms`.
    #[wasm_bindgen(js_name = setTimeout)]
    pub fn set_timeout_with(callback: &js_sys::Function, ms: f64, arg: &JsValue) -> JsValue;

    /// The global `clearTimeout(handle)`.
    #[wasm_bindgen(js_name = clearTimeout)]
    pub fn clear_timeout(handle: &JsValue);

    /// `Object.prototype.toString.call(value)`: `"[object Map]"`, `"[object Date]"`... for a
    /// built-in object, `"[object Object]"` for others (a proxy's trap or a `Symbol.toStringTag`
    /// getter can make it throw).
    #[wasm_bindgen(js_namespace = ["Object", "prototype", "toString"], js_name = call, catch)]
    pub fn object_tag(value: &JsValue) -> Result<JsString, JsValue>;

    /// `Object.keys(value)`, which a proxy can make throw.
    #[wasm_bindgen(js_namespace = Object, js_name = keys, catch)]
    pub fn object_keys(value: &JsValue) -> Result<js_sys::Array, JsValue>;

    /// `Object.getOwnPropertyNames(value)`: the own string keys, enumerable or not (a proxy
    /// can make it throw).
    #[wasm_bindgen(js_namespace = Object, js_name = getOwnPropertyNames, catch)]
    pub fn own_property_names(value: &JsValue) -> Result<js_sys::Array, JsValue>;

    /// `Object.getPrototypeOf(value)` (a proxy can make it throw).
    #[wasm_bindgen(js_namespace = Object, js_name = getPrototypeOf, catch)]
    pub fn prototype_of(value: &JsValue) -> Result<JsValue, JsValue>;

    /// `Array.isArray(value)` (a proxy of an array is one), which throws for a revoked proxy.
    #[wasm_bindgen(js_namespace = Array, js_name = isArray, catch)]
    pub fn is_array(value: &JsValue) -> Result<bool, JsValue>;

    /// `Array.from(value)`: a list's items copied into a plain array of ours (a proxy's traps
    /// and the items' getters run once; a throw is the `Err`), to be read without anything of
    /// the caller's running again.
    #[wasm_bindgen(js_namespace = Array, js_name = from, catch)]
    pub fn array_copy(value: &JsValue) -> Result<js_sys::Array, JsValue>;
}

#[cfg(feature = "server")]
#[wasm_bindgen]
extern "C" {
    /// `structuredClone(value)`: a copy of plain data that is ours (the original's getters and
    /// a proxy's traps run once; a throw, or a value that cannot be cloned such as a proxy or a
    /// function, is the `Err`), to be read without anything of the caller's running again.
    #[wasm_bindgen(js_name = structuredClone, catch)]
    pub fn data_copy(value: &JsValue) -> Result<JsValue, JsValue>;
}

#[wasm_bindgen]
extern "C" {
    /// The `Uint8Array` constructor, bound with `catch`.
    #[wasm_bindgen(js_name = Uint8Array)]
    type ByteView;
    /// `new Uint8Array(source)`: a view of an `ArrayBuffer`, or a copy of a typed array (of any
    /// realm); throws for a detached buffer, or a length it cannot allocate.
    #[wasm_bindgen(constructor, catch, js_class = "Uint8Array")]
    fn new(source: &JsValue) -> Result<ByteView, JsValue>;
}

/// `new Uint8Array(source)`: a view of an `ArrayBuffer` (a copy of a typed array); one the
/// constructor refuses is the `Err`.
pub fn bytes_view(source: &JsValue) -> Result<js_sys::Uint8Array, JsValue> {
    ByteView::new(source).map(JsCast::unchecked_into)
}

/// `new Uint8Array(buffer)` over `buffer`, an object a caller's code gave (an `ArrayBuffer`);
/// anything it cannot view is the `Err`.
#[cfg(feature = "server")]
pub fn bytes_of(buffer: &JsValue) -> Result<js_sys::Uint8Array, JsValue> {
    if !buffer.is_object() {
        return Err(crate::wasm::errors::type_error(&format!(
            "got {} instead of an ArrayBuffer",
            crate::wasm::errors::describe(buffer)
        )));
    }
    bytes_view(buffer)
}

/// `bytes` copied into the wasm's memory, or `None` when the memory cannot grow to hold them
/// (an allocation that fails would abort the instance, and with it the process's every later
/// request): the caller answers without them.
#[cfg(feature = "server")]
pub fn try_copy(bytes: &js_sys::Uint8Array) -> Option<Vec<u8>> {
    let len = bytes.length() as usize;
    let mut copy = Vec::new();
    copy.try_reserve_exact(len).ok()?;
    copy.resize(len, 0);
    bytes.copy_to(&mut copy);
    Some(copy)
}

#[wasm_bindgen]
extern "C" {
    /// A `ReadableStream` or its reader: both have `cancel()`.
    type Cancellable;
    /// `stream.cancel()`, `reader.cancel()`.
    #[wasm_bindgen(method)]
    fn cancel(this: &Cancellable) -> js_sys::Promise;
}

/// Start cancelling `stream` (a `ReadableStream` or its reader), not awaited: a rejection of
/// the cancel is marked handled (a tee branch's cancel settles only once the other branch is
/// done).
pub fn cancel(stream: &JsValue) {
    ignore_rejection(&stream.unchecked_ref::<Cancellable>().cancel());
}

/// A promise of ours that settles as `value` does (a promise, a thenable or a plain value):
/// `new Promise((resolve) => resolve(value))`. Awaiting a caller's promise itself calls its own
/// `then`, and `Promise.resolve(value)` reads its `constructor`: either may throw, and would
/// unwind through the wasm. Here they run in a promise job, and a throw is the rejection.
pub fn promise_of(value: &JsValue) -> js_sys::Promise {
    js_sys::Promise::new(&mut |resolve, _| {
        let _ = resolve.call1(&JsValue::UNDEFINED, value);
    })
}

#[wasm_bindgen]
extern "C" {
    /// `performance.now()`: ms since the time origin on a monotonic clock (a throw where the
    /// runtime has no `performance`).
    #[wasm_bindgen(js_namespace = performance, js_name = now, catch)]
    fn performance_now() -> Result<f64, JsValue>;
}

thread_local! {
    /// `Date.now() - performance.now()` at the first [`now_ms`] (NaN until then).
    static CLOCK_ORIGIN: core::cell::Cell<f64> = const { core::cell::Cell::new(f64::NAN) };
}

/// How far the wall clock may be from the monotonic one before [`now_ms`] takes it for a step
/// (NTP stepping, a resumed VM, the date set by hand): 1 s.
const CLOCK_STEP_MS: f64 = 1_000.0;

/// Now, in ms since the Unix epoch: the wall clock (`Date.now()`) while it keeps pace with a
/// monotonic one (`performance.now()` from the wall clock's time at the first read), and the
/// monotonic one once the wall clock is more than [`CLOCK_STEP_MS`] away from it. Every time
/// the client keeps (deadlines, durations, the guards' windows and refills), and every span
/// the server companion measures in its own process (`handlerTimeoutMs`, `waitTimeoutMs`), is
/// read here, so a step of the wall clock neither ends a deadline early nor holds a breaker
/// open for the length of the step; what must be the wall clock's (a record's `startedAt`, a
/// server's date, a lock's expiry that other instances read) is not. The wall clock alone
/// where there is no `performance`.
pub fn now_ms() -> f64 {
    now_at(js_sys::Date::now())
}

/// How far the wall clock is ahead of [`now_ms`]: 0 until the wall clock steps, then the
/// step. Added to a time of [`now_ms`] where it must be the wall clock's (an attempt
/// record's `startedAt`, a header of the time, a server's HTTP-date).
#[cfg(feature = "client")]
pub fn wall_offset_ms() -> f64 {
    now_and_wall_offset_ms().1
}

/// [`now_ms`] and [`wall_offset_ms`] from one read of each clock.
#[cfg(feature = "client")]
pub fn now_and_wall_offset_ms() -> (f64, f64) {
    let wall = js_sys::Date::now();
    let now = now_at(wall);
    (now, wall - now)
}

/// [`now_ms`], given the wall clock's time now.
fn now_at(wall: f64) -> f64 {
    let Ok(elapsed) = performance_now() else {
        return wall;
    };
    CLOCK_ORIGIN.with(|origin| {
        if origin.get().is_nan() {
            origin.set(wall - elapsed);
        }
        let steady = origin.get() + elapsed;
        match (wall - steady).abs() <= CLOCK_STEP_MS {
            true => wall,
            false => steady,
        }
    })
}

#[cfg(feature = "client")]
thread_local! {
    /// `Object.prototype`, read once.
    static OBJECT_PROTOTYPE: JsValue = prototype_of(&js_sys::Object::new()).unwrap_or(JsValue::NULL);
}

/// Is `value`'s prototype `Object.prototype` or `null` (an object literal, `Object.create(null)`),
/// so that its own properties are all it has? `false` for anything else and when a proxy
/// throws.
#[cfg(feature = "client")]
pub fn has_plain_prototype(value: &JsValue) -> bool {
    match prototype_of(value) {
        Ok(p) => OBJECT_PROTOTYPE.with(|o| *o == p) || p.is_null(),
        Err(_) => false,
    }
}

/// Strings a client reads or compares on every call, made once (with the client) and lent
/// where they are used (a handle from [`name`] is a copy, made and dropped by two calls into
/// JS).
#[cfg(feature = "client")]
pub struct Hot {
    pub length: JsValue,
    pub method: JsValue,
    pub get: JsValue,
}

#[cfg(feature = "client")]
impl Hot {
    #[inline(never)]
    pub fn new() -> Hot {
        Hot {
            length: JsValue::from_str("length"),
            method: JsValue::from_str("method"),
            get: JsValue::from_str("GET"),
        }
    }
}

/// The `length` of `value` if it is an array (`Ok(None)` for anything else, and for an
/// array's proxy whose `length` is not a whole number from 0), read as a property (a proxy's
/// trap may throw: the `Err`).
pub fn array_length(value: &JsValue) -> Result<Option<f64>, JsValue> {
    array_length_by(value, &JsValue::from_str("length"))
}

/// [`array_length`], with the name `length` given.
pub fn array_length_by(value: &JsValue, length: &JsValue) -> Result<Option<f64>, JsValue> {
    if !is_array(value)? {
        return Ok(None);
    }
    let length = js_sys::Reflect::get(value, length)?;
    Ok(length.as_f64().filter(|n| n.fract() == 0.0 && *n >= 0.0))
}

/// `Reflect.get(target, key)` (the name made once), with `undefined` for anything that is not
/// an object or throws.
pub fn get(target: &JsValue, key: &'static str) -> JsValue {
    if !target.is_object() && !target.is_function() {
        return JsValue::UNDEFINED;
    }
    js_sys::Reflect::get(target, &name(key)).unwrap_or(JsValue::UNDEFINED)
}

/// `Reflect.get(target, key)` (the name made once), passing on a throwing getter's error.
#[cfg(feature = "server")]
pub fn get_or_throw(target: &JsValue, key: &'static str) -> Result<JsValue, JsValue> {
    if !target.is_object() && !target.is_function() {
        return Ok(JsValue::UNDEFINED);
    }
    js_sys::Reflect::get(target, &name(key))
}

/// `target[key] = value` (the name made once) on an object we created; failures are ignored
/// (they cannot happen on a plain extensible object).
pub fn set(target: &JsValue, key: &'static str, value: &JsValue) {
    let _ = js_sys::Reflect::set(target, &name(key), value);
}

thread_local! {
    /// Property names as JS strings, each made once (a name given as Rust text is decoded
    /// into a new JS string at every read).
    static NAMES: std::cell::RefCell<Vec<(&'static str, JsValue)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `name` as a JS string, made once per name (the names are the few property names the
/// wasm reads and writes; decoding one into a new JS string costs more than finding it).
pub fn name(name: &'static str) -> JsValue {
    NAMES.with(|names| {
        // Making a JS string runs nothing of the caller's: the list stays borrowed meanwhile.
        let mut names = names.borrow_mut();
        if let Some((_, v)) = names.iter().find(|(n, _)| *n == name) {
            return v.clone();
        }
        let value = JsValue::from_str(name);
        names.push((name, value.clone()));
        value
    })
}

thread_local! {
    /// `() => {}`, made once, to mark a promise's rejection as handled.
    /// (Of the type of wasm-bindgen-futures' own queue callback, so that both share one
    /// closure shim.)
    static NOOP: Closure<dyn FnMut(JsValue) -> Result<(), JsError>> = Closure::new(|_| Ok(()));
}

/// Is `value` a promise or a thenable (an object or function with a `then` function)?
#[cfg(feature = "server")]
pub fn is_thenable(value: &JsValue) -> bool {
    (value.is_object() || value.is_function()) && get(value, "then").is_function()
}

/// Mark `promise`'s rejection as handled (a cancel we do not wait for, an abort promise
/// nobody may be waiting on).
pub fn ignore_rejection(promise: &js_sys::Promise) {
    NOOP.with(|noop| {
        let _ = promise.catch_map(noop);
    });
}

/// Call a callback of the caller's whose result nobody awaits (a listener such as
/// `onStateChange`, a reporter such as `onStoreError`): a throw is ignored, and so is a
/// rejection of the promise it may return, which would otherwise be an unhandled rejection
/// (in Node, the end of the process).
#[cfg(feature = "server")]
pub fn call_detached(f: &js_sys::Function, args: &[&JsValue]) {
    let list = js_sys::Array::new();
    for a in args {
        list.push(a);
    }
    detach(f.apply(&JsValue::UNDEFINED, &list));
}

/// What a callback nobody awaits returned ([`call_detached`]; the client calls its one-argument
/// listeners with `call1`): a throw is ignored, and a thenable's rejection is marked handled.
pub fn detach(returned: Result<JsValue, JsValue>) {
    let Ok(value) = returned else {
        return;
    };
    if !value.is_object() {
        return;
    }
    // A thenable: `then(undefined, () => {})`, through its own `then` (which may throw).
    if let Some(then) = get(&value, "then").dyn_ref::<js_sys::Function>() {
        NOOP.with(|noop| {
            let _ = then.call2(&value, &JsValue::UNDEFINED, noop.as_ref());
        });
    }
}

/// What [`read_limited`] read.
pub enum Limited {
    /// Every byte, `limit` or fewer.
    Bytes(js_sys::Uint8Array),
    /// More than `limit` bytes: the reader was cancelled (not awaited).
    TooLong,
    /// A chunk that is not a `Uint8Array`: the reader was cancelled (not awaited).
    NotBytes,
}

/// Is `value` a `Uint8Array` of any realm (an iframe's, a `vm` context's as Jest runs
/// tests in: `instanceof` sees only this realm's)? The internal slot `ArrayBuffer.isView`
/// reads, and the type name its tag gives, cannot be lent by a plain object.
pub fn is_bytes(value: &JsValue) -> bool {
    value.is_instance_of::<js_sys::Uint8Array>()
        || (js_sys::ArrayBuffer::is_view(value) && has_tag(value, "[object Uint8Array]"))
}

/// Is `Object.prototype.toString.call(value)` `tag` (a throw: no)? Tells a built-in object
/// of another realm apart, where `instanceof` cannot.
pub fn has_tag(value: &JsValue, tag: &str) -> bool {
    object_tag(value).is_ok_and(|t| t == tag)
}

/// The name in `value`'s tag (`"Map"` of `"[object Map]"`, `"Object"` of a plain object);
/// `None` when reading it throws (a proxy's trap, a `Symbol.toStringTag` getter).
pub fn tag_name(value: &JsValue) -> Option<String> {
    let tag = String::from(object_tag(value).ok()?);
    Some(tag.strip_prefix("[object ")?.strip_suffix(']')?.to_string())
}

/// Read `reader` to its end, keeping at most `limit` bytes: the request body the client
/// buffers for replay and the one the server companion fingerprints are read by this.
pub async fn read_limited(
    reader: &web_sys::ReadableStreamDefaultReader,
    limit: f64,
) -> Result<Limited, JsValue> {
    let chunks = js_sys::Array::new();
    let mut size = 0.0;
    loop {
        let step = wasm_bindgen_futures::JsFuture::from(reader.read()).await?;
        if get(&step, "done").as_bool() == Some(true) {
            break;
        }
        let chunk = get(&step, "value");
        if !is_bytes(&chunk) {
            cancel(reader);
            return Ok(Limited::NotBytes);
        }
        // Measured before it is copied: a chunk past the limit is never copied.
        let length = get(&chunk, "byteLength").as_f64().unwrap_or(0.0);
        size += length;
        if size > limit {
            // Not awaited: a tee branch's cancel settles only once the other branch is done.
            cancel(reader);
            return Ok(Limited::TooLong);
        }
        // A copy of ours (the stream's owner may reuse its chunk), made by this realm's
        // constructor, which copies a `Uint8Array` of any realm; a detached one is the `Err`.
        // A copy of another length was no `Uint8Array` (a wider typed array under its tag).
        let copied = ByteView::new(&chunk).map(JsCast::unchecked_into::<js_sys::Uint8Array>);
        let bytes = match copied {
            Ok(bytes) if f64::from(bytes.length()) == length => bytes,
            Ok(_) => {
                cancel(reader);
                return Ok(Limited::NotBytes);
            }
            Err(e) => {
                cancel(reader);
                return Err(e);
            }
        };
        chunks.push(&bytes);
    }
    let out = js_sys::Uint8Array::new_with_length(size as u32);
    let mut at = 0;
    for c in chunks.iter() {
        let c: js_sys::Uint8Array = c.unchecked_into();
        out.set(&c, at);
        at += c.length();
    }
    Ok(Limited::Bytes(out))
}

#[cfg(feature = "server")]
/// A JS string's bytes for hashing: its UTF-8 when it is well-formed UTF-16; else WTF-8, where
/// a lone surrogate takes the three bytes UTF-8 would give its code point. A lossy conversion
/// would turn every lone surrogate into U+FFFD, and two different strings into one.
pub fn wtf8(value: &js_sys::JsString) -> Vec<u8> {
    if value.is_valid_utf16() {
        return String::from(value).into_bytes();
    }
    let mut out = Vec::with_capacity(value.length() as usize * 3);
    for unit in char::decode_utf16(value.iter()) {
        match unit {
            Ok(c) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            Err(lone) => {
                let u = lone.unpaired_surrogate();
                out.extend_from_slice(&[
                    0xE0 | (u >> 12) as u8,
                    0x80 | ((u >> 6) & 0x3F) as u8,
                    0x80 | (u & 0x3F) as u8,
                ]);
            }
        }
    }
    out
}
