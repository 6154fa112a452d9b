//! Server-requested waits: `Retry-After`, `RateLimit-Reset` and `RateLimit`.
//!
//! - `Retry-After` (RFC 9110 section 10.2.3): delta-seconds (`120`) or an HTTP-date in any of
//!   the three forms RFC 9110 requires recipients to accept (IMF-fixdate
//!   `Sun, 06 Nov 1994 08:49:37 GMT`, RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT`, asctime
//!   `Sun Nov  6 08:49:37 1994`). A date in the past means "now".
//! - `RateLimit-Reset` (earlier drafts of draft-ietf-httpapi-ratelimit-headers): delta-seconds.
//!   A value of 1,000,000,000 or more is read as a Unix time in seconds, since some servers
//!   send that (a 31-year delta is never meant).
//! - `RateLimit` (the current draft): a list like `"default";r=0;t=30`. The wait is the
//!   largest `t` among the quota policies that are exhausted (`r=0`); when none is
//!   exhausted the field says nothing about waiting. `reset=` (an older spelling) is read as `t`.
//!
//! Every parser takes arbitrary text and never panics; malformed input gives `None`, and the
//! caller falls back to the computed backoff delay.

use std::time::{Duration, UNIX_EPOCH};

/// Seconds at or above which `RateLimit-Reset` is read as a Unix time.
const UNIX_TIME_THRESHOLD_S: u64 = 1_000_000_000;

/// Parse RFC 9110 delta-seconds (`1*DIGIT`, surrounding whitespace allowed), saturating.
fn delta_seconds(value: &str) -> Option<u64> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.bytes().fold(0u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))))
}

fn seconds_to_ms(s: u64) -> f64 {
    s as f64 * 1000.0
}

/// Milliseconds since the Unix epoch of an HTTP-date in any RFC 9110 form.
pub fn parse_http_date_ms(value: &str) -> Option<f64> {
    let t = httpdate::parse_http_date(value.trim_matches(|c| c == ' ' || c == '\t')).ok()?;
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Some(since.as_secs_f64() * 1000.0)
}

/// The wait a `Retry-After` value asks for, in ms from `now_ms` (ms since the Unix epoch).
///
/// ```
/// use retry_fetch::core::retry_after::parse_retry_after;
/// assert_eq!(parse_retry_after("3", 0.0), Some(3000.0));
/// assert_eq!(parse_retry_after("Thu, 01 Jan 1970 00:00:05 GMT", 1000.0), Some(4000.0));
/// assert_eq!(parse_retry_after("soon", 0.0), None);
/// ```
pub fn parse_retry_after(value: &str, now_ms: f64) -> Option<f64> {
    if let Some(s) = delta_seconds(value) {
        return Some(seconds_to_ms(s));
    }
    let at = parse_http_date_ms(value)?;
    Some((at - now_ms).max(0.0))
}

/// The wait a `RateLimit-Reset` value asks for, in ms from `now_ms`.
pub fn parse_ratelimit_reset(value: &str, now_ms: f64) -> Option<f64> {
    let s = delta_seconds(value)?;
    if s >= UNIX_TIME_THRESHOLD_S {
        Some((seconds_to_ms(s) - now_ms).max(0.0))
    } else {
        Some(seconds_to_ms(s))
    }
}

/// Split `text` on `sep`, ignoring separators inside double-quoted strings.
fn split_outside_quotes(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut in_quotes = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if in_quotes && c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_quotes = !in_quotes;
        } else if c == sep && !in_quotes {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// One quota policy's `remaining` (`r`) and `reset` (`t`), from `key=value` pieces.
fn quota<'a>(pieces: impl Iterator<Item = &'a str>) -> (Option<u64>, Option<u64>) {
    let mut remaining = None;
    let mut reset = None;
    for piece in pieces {
        let Some((key, val)) = piece.split_once('=') else { continue };
        match key.trim() {
            "r" | "remaining" => remaining = delta_seconds(val),
            "t" | "reset" => reset = delta_seconds(val),
            _ => {}
        }
    }
    (remaining, reset)
}

/// The wait a `RateLimit` field (current draft) asks for, in ms.
///
/// The largest `t` among the exhausted policies (`r=0`); when no policy states `r`, the
/// largest `t` given; a policy with quota left (`r` > 0) asks for no wait. The older draft's
/// form, `limit=10, remaining=0, reset=5`, is read as one policy.
///
/// ```
/// use retry_fetch::core::retry_after::parse_ratelimit;
/// assert_eq!(parse_ratelimit(r#""default";r=0;t=30"#), Some(30_000.0));
/// assert_eq!(parse_ratelimit(r#""default";t=7"#), Some(7_000.0));
/// assert_eq!(parse_ratelimit(r#""default";r=5;t=30"#), None);
/// assert_eq!(parse_ratelimit("limit=10, remaining=0, reset=5"), Some(5_000.0));
/// ```
pub fn parse_ratelimit(value: &str) -> Option<f64> {
    let members = split_outside_quotes(value, ',');
    let mut exhausted: Option<u64> = None;
    let mut unstated: Option<u64> = None;
    let mut any_params = false;
    for member in &members {
        let parts = split_outside_quotes(member, ';');
        any_params |= parts.len() > 1;
        match quota(parts.into_iter().skip(1)) {
            (Some(0), Some(t)) => exhausted = Some(exhausted.map_or(t, |w| w.max(t))),
            (None, Some(t)) => unstated = Some(unstated.map_or(t, |w| w.max(t))),
            _ => {}
        }
    }
    if !any_params {
        // the older draft: `limit=.., remaining=.., reset=..` as list members
        if let (Some(0) | None, Some(t)) = quota(members.iter().copied()) {
            return Some(seconds_to_ms(t));
        }
    }
    exhausted.or(unstated).map(seconds_to_ms)
}

/// The server's requested wait before the next attempt, in ms, from the three headers of a
/// response (each `None` when absent). `Retry-After` wins; when it is absent or malformed,
/// `RateLimit-Reset`, then `RateLimit`. `None`: the server asked for nothing usable.
pub fn server_delay_ms(
    retry_after: Option<&str>,
    ratelimit_reset: Option<&str>,
    ratelimit: Option<&str>,
    now_ms: f64,
) -> Option<f64> {
    retry_after
        .and_then(|v| parse_retry_after(v, now_ms))
        .or_else(|| ratelimit_reset.and_then(|v| parse_ratelimit_reset(v, now_ms)))
        .or_else(|| ratelimit.and_then(parse_ratelimit))
}

#[cfg(test)]
mod tests {
    use super::*;

    // 1994-11-06T08:49:37Z
    const EPOCH_1994_MS: f64 = 784_111_777_000.0;

    #[test]
    fn delta_seconds_forms() {
        assert_eq!(parse_retry_after("0", 0.0), Some(0.0));
        assert_eq!(parse_retry_after(" 120 ", 0.0), Some(120_000.0));
        assert_eq!(parse_retry_after("99999999999999999999999", 0.0), Some(u64::MAX as f64 * 1000.0));
        for bad in ["", "-1", "1.5", "1e3", "abc", "12 34", "+5"] {
            assert_eq!(parse_retry_after(bad, 0.0), None, "{bad:?}");
        }
    }

    #[test]
    fn all_three_http_date_forms() {
        let now = EPOCH_1994_MS - 10_000.0;
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_retry_after(form, now), Some(10_000.0), "{form}");
        }
    }

    #[test]
    fn a_past_date_means_now() {
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", EPOCH_1994_MS + 5e6), Some(0.0));
    }

    #[test]
    fn ratelimit_reset_delta_and_unix_time() {
        assert_eq!(parse_ratelimit_reset("7", 0.0), Some(7000.0));
        assert_eq!(parse_ratelimit_reset("1700000010", 1_700_000_000_000.0), Some(10_000.0));
        assert_eq!(parse_ratelimit_reset("x", 0.0), None);
    }

    #[test]
    fn ratelimit_field() {
        assert_eq!(parse_ratelimit(r#""default";r=0;t=30"#), Some(30_000.0));
        assert_eq!(parse_ratelimit(r#""a";r=3;t=1, "b";r=0;t=12, "c";r=0;t=4"#), Some(12_000.0));
        assert_eq!(parse_ratelimit(r#""x,y;z";r=0;t=2"#), Some(2_000.0));
        assert_eq!(parse_ratelimit("limit=10, remaining=0, reset=5"), Some(5_000.0));
        assert_eq!(parse_ratelimit("limit=10, remaining=3, reset=5"), None);
        assert_eq!(parse_ratelimit(r#""default";t=4"#), Some(4_000.0));
        assert_eq!(parse_ratelimit(r#""a";r=2;t=9, "b";t=4"#), Some(4_000.0));
        assert_eq!(parse_ratelimit(r#""a";r=0;t=2, "b";t=9"#), Some(2_000.0));
        assert_eq!(parse_ratelimit("q;remaining=0;reset=5"), Some(5_000.0));
        assert_eq!(parse_ratelimit(r#""default";r=9;t=30"#), None);
        assert_eq!(parse_ratelimit("garbage"), None);
    }

    #[test]
    fn precedence() {
        assert_eq!(server_delay_ms(Some("2"), Some("5"), None, 0.0), Some(2000.0));
        assert_eq!(server_delay_ms(Some("bad"), Some("5"), None, 0.0), Some(5000.0));
        assert_eq!(server_delay_ms(None, None, Some(r#"p;r=0;t=3"#), 0.0), Some(3000.0));
        assert_eq!(server_delay_ms(None, None, None, 0.0), None);
        assert_eq!(server_delay_ms(Some("bad"), None, None, 0.0), None);
    }
}
