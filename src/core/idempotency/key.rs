//! Reading a key: the header's plain or RFC 8941 sf-string form, at most 255 visible ASCII
//! characters; an invalid key is the request's 400.

pub use crate::core::key::{parse_sf_string, validate_key, KeyError, MAX_KEY_LEN};

/// Read the key from a header value, in plain form (`abc`) or in the IETF draft's
/// structured-field string form (`"abc"`, RFC 8941 §3.3.3, with `\"` and `\\` escapes), then
/// [`validate_key`] it.
///
/// Leading and trailing spaces and tabs are ignored. A value that starts with `"` is always
/// read as an sf-string. Parameters after the string (`"abc";a=1`) are refused.
///
/// ```
/// use retry_fetch::core::idempotency::{parse_key, KeyError};
/// assert_eq!(parse_key("abc-123"), Ok("abc-123".to_string()));
/// assert_eq!(parse_key(r#""abc-123""#), Ok("abc-123".to_string()));
/// assert_eq!(parse_key(r#""a\"b""#), Ok(r#"a"b"#.to_string()));
/// assert_eq!(parse_key("a, b"), Err(KeyError::NotVisibleAscii));
/// ```
pub fn parse_key(value: &str) -> Result<String, KeyError> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    let key = match value.strip_prefix('"') {
        Some(rest) => parse_sf_string(rest)?,
        None => value.to_string(),
    };
    validate_key(&key)?;
    Ok(key)
}
