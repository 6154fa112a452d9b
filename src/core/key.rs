//! Idempotency keys: UUID v4 from 16 random bytes, and the header forms.
//!
//! The bytes come from the caller; the shell takes them from the platform CSPRNG
//! (`crypto.getRandomValues`, through `getrandom`) and nothing weaker: a key must be unique per operation, or a server would answer one payment with another's result.

use super::options::KeyFormat;

/// The longest idempotency key, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// What an idempotency key must be (the `idempotencyKey` option, and a key the caller put in
/// the header itself): 1 to 255 visible ASCII characters, `!` to `~`, no spaces (what an HTTP
/// header and an RFC 8941 string can both carry unchanged).
pub const KEY_EXPECTED: &str = "a key of 1 to 255 visible ASCII characters";

/// Why a key header value was refused (the request is answered 400).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The value is empty (or only whitespace), or an empty sf-string `""`.
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] characters.
    TooLong,
    /// The key has a character outside visible ASCII (`!` to `~`): a space, a control
    /// character, a non-ASCII character, or several keys joined by `", "`.
    NotVisibleAscii,
    /// The value starts with `"` but is not one RFC 8941 string: no closing quote, a
    /// backslash not followed by `"` or `\`, or something after the closing quote.
    BadSfString,
}

impl KeyError {
    /// A sentence for the `detail` of the 400 problem answer.
    pub fn message(self) -> &'static str {
        match self {
            KeyError::Empty => "the idempotency key is empty",
            KeyError::TooLong => "the idempotency key is longer than 255 characters",
            KeyError::NotVisibleAscii => {
                "the idempotency key must be visible ASCII characters only (no spaces, no commas between several keys)"
            }
            KeyError::BadSfString => {
                "the idempotency key starts with '\"' but is not a valid structured-field string (RFC 8941: one quoted string, only \\\" and \\\\ escapes)"
            }
        }
    }
}

/// Is `key` acceptable: 1 to 255 visible ASCII characters (`!` to `~`)?
///
/// This is what the client sends (its `idempotencyKey` option has the same rule).
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        Err(KeyError::Empty)
    } else if !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        Err(KeyError::NotVisibleAscii)
    } else if key.len() > MAX_KEY_LEN {
        Err(KeyError::TooLong)
    } else {
        Ok(())
    }
}

/// Is `key` a valid idempotency key ([`KEY_EXPECTED`])?
///
/// ```
/// use retry_fetch::core::key::is_valid_key;
/// assert!(is_valid_key("8e03978e-40d5-43e8-bc93-6894a57f9324"));
/// assert!(!is_valid_key("") && !is_valid_key("   ") && !is_valid_key("a b"));
/// assert!(!is_valid_key(&"k".repeat(256)));
/// ```
pub fn is_valid_key(key: &str) -> bool {
    validate_key(key).is_ok()
}

/// Format 16 random bytes as a UUID version 4 (RFC 9562), lower-case, 36 characters.
///
/// ```
/// use retry_fetch::core::key::uuid_v4;
/// assert_eq!(uuid_v4([0; 16]), "00000000-0000-4000-8000-000000000000");
/// assert_eq!(uuid_v4([0xff; 16]), "ffffffff-ffff-4fff-bfff-ffffffffffff");
/// ```
pub fn uuid_v4(bytes: [u8; 16]) -> String {
    uuid(bytes, 4)
}

/// Format 16 bytes as a UUID of `version` (RFC 9562: the version in the high nibble of byte 6,
/// the variant `10` in the high bits of byte 8), lower-case, 36 characters: version 4 for
/// random bytes, version 8 for bytes of the caller's own derivation (a hash).
///
/// ```
/// use retry_fetch::core::key::uuid;
/// assert_eq!(uuid([0; 16], 8), "00000000-0000-8000-8000-000000000000");
/// ```
pub fn uuid(mut bytes: [u8; 16], version: u8) -> String {
    bytes[6] = (bytes[6] & 0x0f) | (version << 4);
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // variant 10xx
    let digits = hex(&bytes);
    let mut out = String::with_capacity(36);
    for (i, pair) in digits.as_bytes().chunks(2).enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        out.extend(pair.iter().map(|&c| char::from(c)));
    }
    out
}

/// `bytes` as lower-case hex digits, two per byte.
///
/// ```
/// use retry_fetch::core::key::hex;
/// assert_eq!(hex(&[0x0f, 0xa0]), "0fa0");
/// ```
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Is `s` a lower- or upper-case UUID v4 with the RFC 9562 variant?
pub fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            14 => *c == b'4',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b' | b'A' | b'B'),
            _ => c.is_ascii_hexdigit(),
        })
}

/// The header value for `key` in `format`: as is (`plain`), or an RFC 8941 sf-string with
/// `"` and `\` escaped (`sf-string`).
///
/// ```
/// use retry_fetch::core::key::header_value;
/// use retry_fetch::core::options::KeyFormat;
/// assert_eq!(header_value("abc", KeyFormat::Plain), "abc");
/// assert_eq!(header_value("abc", KeyFormat::SfString), "\"abc\"");
/// ```
pub fn header_value(key: &str, format: KeyFormat) -> String {
    match format {
        KeyFormat::Plain => key.to_string(),
        KeyFormat::SfString => {
            let mut out = String::with_capacity(key.len() + 2);
            out.push('"');
            for c in key.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
            out
        }
    }
}

/// The key a header value carries, as [`header_value`] wrote it: with `sf-string`, a quoted
/// string's content (its `\"` and `\\` unescaped); anything else (a value that is not a
/// well-formed sf-string, or the `plain` format) as it is. `RetryError.idempotencyKey` and the
/// hooks report this, so that passing it back as `idempotencyKey` sends the same header.
///
/// ```
/// use retry_fetch::core::key::{header_value, key_of_header};
/// use retry_fetch::core::options::KeyFormat;
/// assert_eq!(key_of_header("\"order-42\"", KeyFormat::SfString), "order-42");
/// assert_eq!(key_of_header(&header_value("a\"b", KeyFormat::SfString), KeyFormat::SfString), "a\"b");
/// assert_eq!(key_of_header("order-42", KeyFormat::SfString), "order-42");
/// assert_eq!(key_of_header("\"x\"", KeyFormat::Plain), "\"x\"");
/// ```
pub fn key_of_header(value: &str, format: KeyFormat) -> String {
    match (format, value.strip_prefix('"')) {
        (KeyFormat::SfString, Some(rest)) => {
            parse_sf_string(rest).unwrap_or_else(|_| value.to_string())
        }
        _ => value.to_string(),
    }
}

/// The body of an sf-string (RFC 8941 §3.3.3) after its opening quote: up to the closing
/// quote, which must end the value; `\"` and `\\` unescaped.
pub fn parse_sf_string(rest: &str) -> Result<String, KeyError> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                _ => return Err(KeyError::BadSfString),
            },
            '"' => {
                return if chars.as_str().is_empty() {
                    Ok(out)
                } else {
                    Err(KeyError::BadSfString)
                };
            }
            // RFC 8941: an sf-string holds %x20-7E only; anything else is a parse error.
            ' '..='~' => out.push(c),
            _ => return Err(KeyError::BadSfString),
        }
    }
    Err(KeyError::BadSfString) // no closing quote
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_and_variant_bits_are_forced() {
        let mut seed = 1u8;
        for _ in 0..64 {
            let bytes = [seed; 16];
            seed = seed.wrapping_mul(31).wrapping_add(7);
            let id = uuid_v4(bytes);
            assert!(is_uuid_v4(&id), "{id}");
        }
    }

    #[test]
    fn distinct_bytes_give_distinct_keys() {
        let a = uuid_v4([1; 16]);
        let b = uuid_v4([2; 16]);
        assert_ne!(a, b);
    }

    #[test]
    fn uuid_checker_rejects_near_misses() {
        assert!(!is_uuid_v4("00000000-0000-1000-8000-000000000000"));
        assert!(!is_uuid_v4("00000000-0000-4000-c000-000000000000"));
        assert!(!is_uuid_v4("00000000-0000-4000-8000-00000000000"));
        assert!(!is_uuid_v4("00000000x0000-4000-8000-000000000000"));
    }

    #[test]
    fn sf_string_escapes() {
        assert_eq!(
            header_value(r#"a"b\c"#, KeyFormat::SfString),
            r#""a\"b\\c""#
        );
    }
}
