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
//! - A date is the server's: it is read against the response's `Date` when it has one
//!   ([`server_clock_ms`]), so that a server whose clock is ahead of the client's is not
//!   refused as asking for hours, nor one behind it retried at once; the client's clock
//!   otherwise.
//!
//! Every parser takes arbitrary text and never panics; malformed input gives `None`, and the
//! caller falls back to the computed backoff delay.

/// Seconds at or above which `RateLimit-Reset` is read as a Unix time.
const UNIX_TIME_THRESHOLD_S: u64 = 1_000_000_000;

/// `s` without its leading and trailing bytes that `space` matches (ASCII ones: a byte of a
/// multi-byte character never does).
fn trim(mut s: &[u8], space: fn(u8) -> bool) -> &[u8] {
    while let [first, rest @ ..] = s {
        if !space(*first) {
            break;
        }
        s = rest;
    }
    while let [rest @ .., last] = s {
        if !space(*last) {
            break;
        }
        s = rest;
    }
    s
}

/// Parse RFC 9110 delta-seconds (`1*DIGIT`, surrounding whitespace allowed), saturating.
fn delta_seconds(value: &str) -> Option<u64> {
    delta_seconds_of(value.as_bytes())
}

/// [`delta_seconds`] of bytes (a slice splits without `str`'s pattern machinery).
fn delta_seconds_of(value: &[u8]) -> Option<u64> {
    let v = trim(value, |b| b == b' ' || b == b'\t');
    if v.is_empty() || !v.iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.iter().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

fn seconds_to_ms(s: u64) -> f64 {
    s as f64 * 1000.0
}

/// English weekday names, Monday first; their first three letters are the short names.
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The twelve three-letter month names, January first.
const MONTHS: &[u8; 36] = b"JanFebMarAprMayJunJulAugSepOctNovDec";

/// The forms of an HTTP-date, as [`scan`] reads them: IMF-fixdate, asctime, and RFC 850
/// after its weekday and `, ` (whose `?`: httpdate does not check the byte between the year
/// and the hour either).
const IMF_FIXDATE: &[u8] = b"aaa, dd bbb yyyy hh:nn:ss GMT";
const ASCTIME: &[u8] = b"aaa bbb _d hh:nn:ss yyyy";
const RFC_850_REST: &[u8] = b"dd-bbb-yy?hh:nn:ss GMT";

/// `s` read by `form`, byte for byte: `a` a letter of the short weekday name, `b` of the month
/// name, `d`, `y`, `h`, `n` and `s` a digit of the day, year, hour, minute and second, `_` a
/// space or a digit of the day (asctime's ` 6`), `?` any byte, and any other byte itself.
/// `([day, year, hour, minute, second], weekday, month)`, or `None`.
fn scan(s: &[u8], form: &[u8]) -> Option<([u32; 5], [u8; 3], [u8; 3])> {
    if s.len() != form.len() {
        return None;
    }
    let (mut n, mut wday, mut mon) = ([0u32; 5], [0u8; 3], [0u8; 3]);
    let (mut w, mut m) = (0, 0);
    for (&b, &f) in s.iter().zip(form) {
        let slot = match f {
            b'a' => {
                *wday.get_mut(w)? = b;
                w += 1;
                continue;
            }
            b'b' => {
                *mon.get_mut(m)? = b;
                m += 1;
                continue;
            }
            b'_' if b == b' ' => continue,
            b'd' | b'_' => 0,
            b'y' => 1,
            b'h' => 2,
            b'n' => 3,
            b's' => 4,
            b'?' => continue,
            _ if b == f => continue,
            _ => return None,
        };
        let d = b.wrapping_sub(b'0');
        if d >= 10 {
            return None;
        }
        let v = n.get_mut(slot)?;
        *v = *v * 10 + u32::from(d);
    }
    Some((n, wday, mon))
}

/// Index (Monday = 0) of a three-letter weekday name such as `Sun`.
fn short_weekday(name: [u8; 3]) -> Option<u32> {
    WEEKDAYS
        .iter()
        .position(|w| w.as_bytes().get(..3) == Some(&name[..]))
        .map(|i| i as u32)
}

/// Month (1 to 12) of a three-letter month name such as `Nov`.
fn month(name: [u8; 3]) -> Option<u32> {
    MONTHS
        .chunks(3)
        .position(|m| m == name)
        .map(|i| i as u32 + 1)
}

/// Days from 1970-01-01 to a proleptic Gregorian date of year 1970 or later (H. Hinnant's
/// `days_from_civil`, all integer arithmetic; March-based years put the leap day last).
fn days_from_civil(year: u32, mon: u32, day: u32) -> u32 {
    let y = if mon <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((mon + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds since the Unix epoch of an HTTP-date in any RFC 9110 form.
///
/// Accepts exactly what the `httpdate` crate (1.0.3) accepts: ASCII only, surrounding ASCII
/// whitespace ignored, names case-sensitive, years 1970 to 9999 (two-digit RFC 850 years
/// 70-99 are 19xx, 00-69 are 20xx), a real calendar date, no leap second, and the weekday
/// must be the date's weekday. Like `httpdate`, the RFC 850 form leaves the byte between the
/// year and the hour unchecked.
///
/// ```
/// use retry_fetch::core::retry_after::parse_http_date_ms;
/// assert_eq!(parse_http_date_ms("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777_000.0));
/// assert_eq!(parse_http_date_ms("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777_000.0));
/// assert_eq!(parse_http_date_ms("Sun Nov  6 08:49:37 1994"), Some(784_111_777_000.0));
/// assert_eq!(parse_http_date_ms("Mon, 06 Nov 1994 08:49:37 GMT"), None);
/// ```
pub fn parse_http_date_ms(value: &str) -> Option<f64> {
    if !value.is_ascii() {
        return None;
    }
    let s = trim(value.as_bytes(), |b| matches!(b, b'\t'..=b'\r' | b' '));
    // The three forms cannot be mistaken for one another: the fourth byte is `,` in an
    // IMF-fixdate, a space in asctime, a letter (of the full weekday name) in RFC 850.
    let (wday, [day, year, hour, min, sec], mon) =
        match scan(s, IMF_FIXDATE).or_else(|| scan(s, ASCTIME)) {
            Some((n, w, m)) => (short_weekday(w)?, n, month(m)?),
            // RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`
            None => {
                let (wday, rest) = WEEKDAYS.iter().enumerate().find_map(|(i, w)| {
                    Some((i as u32, s.strip_prefix(w.as_bytes())?.strip_prefix(b", ")?))
                })?;
                let ([day, yy, hour, min, sec], _, m) = scan(rest, RFC_850_REST)?;
                let year = if yy < 70 { 2000 + yy } else { 1900 + yy };
                (wday, [day, year, hour, min, sec], month(m)?)
            }
        };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_len = if mon == 2 {
        28 + u32::from(leap)
    } else {
        30 + (mon + mon / 8) % 2
    };
    if hour > 23 || min > 59 || sec > 59 || year < 1970 || day == 0 || day > month_len {
        return None;
    }
    let days = days_from_civil(year, mon, day);
    // 1970-01-01 was a Thursday (index 3)
    if (days + 3) % 7 != wday {
        return None;
    }
    let secs = u64::from(days) * 86_400 + u64::from(hour * 3600 + min * 60 + sec);
    Some(secs as f64 * 1000.0)
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
    // The header sent more than once, joined by fetch with ", ": seconds in each, the longest.
    if value.as_bytes().contains(&b',') {
        let longest = value
            .as_bytes()
            .split(|b| *b == b',')
            .try_fold(0u64, |most, item| {
                delta_seconds_of(item).map(|s| most.max(s))
            });
        if let Some(s) = longest {
            return Some(seconds_to_ms(s));
        }
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
        let Some((key, val)) = super::classify::cut(piece, b'=', false) else {
            continue;
        };
        match super::classify::trim(key) {
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

/// The server's clock when it answered, in ms since the Unix epoch: the response's `Date`
/// (an HTTP-date, as [`parse_http_date_ms`] reads it) plus its `Age` (delta-seconds: a cache's
/// copy was dated when the origin made it), or `None` when it has no usable `Date`.
///
/// The dates a server sends (`Retry-After`, an epoch `RateLimit-Reset`) are on its clock, so
/// they are read against this rather than the client's (a server an hour ahead asking for 5 s
/// is a wait of 5 s, not of an hour and 5 s). In a browser a cross-origin response shows
/// `Date` (and `Age`) only when the server lists it in `Access-Control-Expose-Headers`.
///
/// ```
/// use retry_fetch::core::retry_after::{parse_retry_after, server_clock_ms};
/// let date = "Thu, 01 Jan 1970 01:00:00 GMT"; // the server's clock: 1 h after the epoch
/// let now = server_clock_ms(Some(date), None).unwrap_or(0.0);
/// assert_eq!(parse_retry_after("Thu, 01 Jan 1970 01:00:05 GMT", now), Some(5000.0));
/// // A cached copy, 3 s old: 2 s are left.
/// let now = server_clock_ms(Some(date), Some("3")).unwrap_or(0.0);
/// assert_eq!(parse_retry_after("Thu, 01 Jan 1970 01:00:05 GMT", now), Some(2000.0));
/// assert_eq!(server_clock_ms(Some("yesterday"), Some("3")), None);
/// ```
pub fn server_clock_ms(date: Option<&str>, age: Option<&str>) -> Option<f64> {
    let dated = parse_http_date_ms(date?)?;
    Some(dated + age.and_then(delta_seconds).map_or(0.0, seconds_to_ms))
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
        assert_eq!(
            parse_retry_after("99999999999999999999999", 0.0),
            Some(u64::MAX as f64 * 1000.0)
        );
        for bad in ["", "-1", "1.5", "1e3", "abc", "12 34", "+5"] {
            assert_eq!(parse_retry_after(bad, 0.0), None, "{bad:?}");
        }
    }

    #[test]
    fn a_header_sent_twice_asks_for_the_longer_wait() {
        // fetch joins a repeated header's values with ", ".
        assert_eq!(parse_retry_after("5, 5", 0.0), Some(5_000.0));
        assert_eq!(parse_retry_after("5, 120", 0.0), Some(120_000.0));
        assert_eq!(parse_retry_after("120,5", 0.0), Some(120_000.0));
        for bad in ["5, soon", "5,", ", 5", "5, -1"] {
            assert_eq!(parse_retry_after(bad, 0.0), None, "{bad:?}");
        }
        // A date's own comma is still a date.
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:05 GMT", 1000.0),
            Some(4000.0)
        );
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

    /// Append `n` as `width` zero-padded decimal digits.
    fn push_num(out: &mut String, n: u64, width: u32) {
        for i in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10u64.pow(i) % 10) as u8));
        }
    }

    const MONTH_NAMES: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];

    /// A broken-down UTC time: (weekday Monday = 0, year, month 1-12, day, h, m, s).
    type Civil = (usize, u64, usize, u64, u64, u64, u64);

    /// Unix seconds to a broken-down time, by H. Hinnant's `civil_from_days` (the inverse of
    /// the parser's arithmetic, written independently of it).
    fn civil(secs: u64) -> Civil {
        let (days, sod) = (secs / 86_400, secs % 86_400);
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let mon = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(mon <= 2);
        let wday = ((days + 3) % 7) as usize;
        (
            wday,
            year,
            mon as usize,
            day,
            sod / 3600,
            sod / 60 % 60,
            sod % 60,
        )
    }

    fn push_hms(out: &mut String, (_, _, _, _, h, m, s): Civil) {
        push_num(out, h, 2);
        out.push(':');
        push_num(out, m, 2);
        out.push(':');
        push_num(out, s, 2);
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT`
    fn fmt_imf(c: Civil) -> String {
        let mut out = String::new();
        out.push_str(&WEEKDAYS[c.0][..3]);
        out.push_str(", ");
        push_num(&mut out, c.3, 2);
        out.push(' ');
        out.push_str(MONTH_NAMES[c.2 - 1]);
        out.push(' ');
        push_num(&mut out, c.1, 4);
        out.push(' ');
        push_hms(&mut out, c);
        out.push_str(" GMT");
        out
    }

    /// `Sunday, 06-Nov-94 08:49:37 GMT`
    fn fmt_rfc850(c: Civil) -> String {
        let mut out = String::new();
        out.push_str(WEEKDAYS[c.0]);
        out.push_str(", ");
        push_num(&mut out, c.3, 2);
        out.push('-');
        out.push_str(MONTH_NAMES[c.2 - 1]);
        out.push('-');
        push_num(&mut out, c.1 % 100, 2);
        out.push(' ');
        push_hms(&mut out, c);
        out.push_str(" GMT");
        out
    }

    /// `Sun Nov  6 08:49:37 1994`
    fn fmt_asctime(c: Civil) -> String {
        let mut out = String::new();
        out.push_str(&WEEKDAYS[c.0][..3]);
        out.push(' ');
        out.push_str(MONTH_NAMES[c.2 - 1]);
        out.push(' ');
        if c.3 < 10 {
            out.push(' ');
            push_num(&mut out, c.3, 1);
        } else {
            push_num(&mut out, c.3, 2);
        }
        out.push(' ');
        push_hms(&mut out, c);
        out.push(' ');
        push_num(&mut out, c.1, 4);
        out
    }

    #[test]
    fn http_date_three_forms_of_the_rfc_example() {
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun Nov 06 08:49:37 1994",
            " \t Sun, 06 Nov 1994 08:49:37 GMT\r\n",
            "\x0b\x0cSunday, 06-Nov-94 08:49:37 GMT\n",
        ] {
            assert_eq!(parse_http_date_ms(form), Some(EPOCH_1994_MS), "{form:?}");
        }
    }

    #[test]
    fn http_date_known_pairs() {
        for (secs, imf) in [
            (0u64, "Thu, 01 Jan 1970 00:00:00 GMT"),
            (86_399, "Thu, 01 Jan 1970 23:59:59 GMT"),
            (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
            (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"),
            (1_475_419_451, "Sun, 02 Oct 2016 14:44:11 GMT"),
            (1_700_000_000, "Tue, 14 Nov 2023 22:13:20 GMT"),
            (1_709_164_800, "Thu, 29 Feb 2024 00:00:00 GMT"),
            (2_147_483_647, "Tue, 19 Jan 2038 03:14:07 GMT"),
            (4_107_542_399, "Sun, 28 Feb 2100 23:59:59 GMT"),
            (4_107_542_400, "Mon, 01 Mar 2100 00:00:00 GMT"),
            (253_402_300_799, "Fri, 31 Dec 9999 23:59:59 GMT"),
        ] {
            assert_eq!(fmt_imf(civil(secs)), imf, "the test formatter, {secs}");
            assert_eq!(parse_http_date_ms(imf), Some(secs as f64 * 1000.0), "{imf}");
        }
    }

    #[test]
    fn http_date_rfc850_two_digit_years() {
        // 70-99 are 19xx, 00-69 are 20xx (httpdate's rule)
        assert_eq!(
            parse_http_date_ms("Thursday, 01-Jan-70 00:00:00 GMT"),
            Some(0.0)
        );
        assert_eq!(
            parse_http_date_ms("Friday, 31-Dec-99 23:59:59 GMT"),
            Some(946_684_799_000.0)
        );
        assert_eq!(
            parse_http_date_ms("Saturday, 01-Jan-00 00:00:00 GMT"),
            Some(946_684_800_000.0)
        );
        assert_eq!(
            parse_http_date_ms("Tuesday, 31-Dec-69 23:59:59 GMT"),
            Some(3_155_759_999_000.0)
        );
        // the weekday is checked against the 20xx/19xx reading
        assert_eq!(
            parse_http_date_ms("Wednesday, 01-Jan-70 00:00:00 GMT"),
            None
        );
    }

    #[test]
    fn http_date_rejects_invalid_dates() {
        for bad in [
            "",
            " ",
            "garbage",
            "Sun, 06 Foo 1994 08:49:37 GMT", // bad month
            "Sun, 06 nov 1994 08:49:37 GMT", // names are case-sensitive
            "sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 gmt",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 32 Nov 1994 08:49:37 GMT", // day 32
            "Thu, 31 Nov 1994 08:49:37 GMT", // 1 Dec 1994 is a Thursday
            "Mon, 00 Nov 1994 08:49:37 GMT", // day 0 (31 Oct 1994 is a Monday)
            "Thu, 30 Feb 2012 00:00:00 GMT", // Feb 30 (1 Mar 2012 is a Thursday)
            "Tue, 29 Feb 2011 00:00:00 GMT", // not a leap year (1 Mar 2011 is a Tuesday)
            "Mon, 29 Feb 2100 00:00:00 GMT", // not a leap year (1 Mar 2100 is a Monday)
            "Sun, 06 Nov 1994 25:00:00 GMT", // 25:00
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:37 GMT",
            "Sun, 06 Nov 1994 08:49:60 GMT", // no leap seconds
            "Mon, 06 Nov 1994 08:49:37 GMT", // wrong weekday, each form
            "Monday, 06-Nov-94 08:49:37 GMT",
            "Mon Nov  6 08:49:37 1994",
            "Sund, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT x",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun,  6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 06-Nov-1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08.49.37 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun, 06 Nov +994 08:49:37 GMT",
            "Wed, 31 Dec 1969 23:59:59 GMT", // before 1970
            "Sat, 01 Jan 0000 00:00:00 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT", // RFC 850 needs the long weekday
            "Sunday, 06 Nov 1994 08:49:37 GMT",
            "Sunday,06-Nov-94 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT GMT",
            "Sunday, 6-Nov-94 08:49:37 GMT",
            "Sunday, 06-Nov-9 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",
            "Sun Nov  6 08:49:37 94",
            "Sun Nov  0 08:49:37 1994",
            "Sun Nov 6  08:49:37 1994",
            "Sun Nov  6 08:49:37 1994 GMT",
            "Sun\tNov  6 08:49:37 1994",
            "\0Sun, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date_ms(bad), None, "{bad:?}");
            assert_eq!(parse_retry_after(bad, 0.0), None, "{bad:?}");
        }
    }

    #[test]
    fn http_date_rejects_every_truncation() {
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            for end in 1..form.len() {
                let cut = &form[..end];
                if cut.trim_end() != cut {
                    continue; // trailing whitespace trimmed: the same prefix is tested untrimmed
                }
                assert_eq!(parse_http_date_ms(cut), None, "{cut:?}");
                assert_eq!(parse_http_date_ms(&form[end..]), None, "{:?}", &form[end..]);
            }
        }
    }

    #[test]
    fn http_date_rejects_multibyte_utf8_anywhere() {
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            for c in [
                "\u{e9}",
                "\u{a0}",
                "\u{85}",
                "\u{2003}",
                "\u{65e5}",
                "\u{feff}",
                "\u{1f600}",
            ] {
                for i in 0..=form.len() {
                    let mut inserted = String::from(form);
                    inserted.insert_str(i, c);
                    assert_eq!(parse_http_date_ms(&inserted), None, "{inserted:?}");
                    assert_eq!(parse_retry_after(&inserted, 0.0), None, "{inserted:?}");
                    if i < form.len() {
                        // in place of one byte, and in place of as many bytes as it is long
                        for len in [1, c.len()] {
                            let mut replaced = String::from(form);
                            replaced.replace_range(i..(i + len).min(form.len()), c);
                            assert_eq!(parse_http_date_ms(&replaced), None, "{replaced:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn http_date_round_trips_generated_timestamps() {
        // a 64-bit LCG (Knuth's MMIX constants) over 1970-01-01 .. 9999-12-31 23:59:59
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for i in 0..20_000u64 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let secs = match i % 3 {
                0 => (state >> 11) % 253_402_300_800,
                1 => (state >> 11) % 4_102_444_800, // 1970 .. 2099, where RFC 850 round-trips
                _ => 1_700_000_000 + (state >> 11) % 1_000_000_000,
            };
            let c = civil(secs);
            let ms = Some(secs as f64 * 1000.0);
            assert_eq!(parse_http_date_ms(&fmt_imf(c)), ms, "{}", fmt_imf(c));
            assert_eq!(
                parse_http_date_ms(&fmt_asctime(c)),
                ms,
                "{}",
                fmt_asctime(c)
            );
            if c.1 < 2070 {
                assert_eq!(parse_http_date_ms(&fmt_rfc850(c)), ms, "{}", fmt_rfc850(c));
            }
            // any other weekday is refused
            let wrong = (c.0 + 1 + (state % 6) as usize) % 7;
            assert_eq!(
                parse_http_date_ms(&fmt_imf((wrong, c.1, c.2, c.3, c.4, c.5, c.6))),
                None
            );
        }
    }

    #[test]
    fn http_date_every_day_from_1970_to_2400() {
        // walk the calendar one day at a time with a plain month-length table, independent of
        // both the parser's arithmetic and `civil`
        let (mut year, mut mon, mut day, mut wday) = (1970u64, 1usize, 1u64, 3usize);
        let mut secs = 0u64;
        while year <= 2400 {
            let c = (wday, year, mon, day, 23, 59, 59);
            let ms = Some((secs + 86_399) as f64 * 1000.0);
            assert_eq!(parse_http_date_ms(&fmt_imf(c)), ms, "{}", fmt_imf(c));
            assert_eq!(
                parse_http_date_ms(&fmt_asctime(c)),
                ms,
                "{}",
                fmt_asctime(c)
            );
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            let len = [
                31,
                if leap { 29 } else { 28 },
                31,
                30,
                31,
                30,
                31,
                31,
                30,
                31,
                30,
                31,
            ][mon - 1];
            if day == len {
                // the day after the last of the month does not exist
                let next = fmt_imf(((wday + 1) % 7, year, mon, day + 1, 0, 0, 0));
                assert_eq!(parse_http_date_ms(&next), None, "{next}");
            }
            secs += 86_400;
            wday = (wday + 1) % 7;
            day += 1;
            if day > len {
                day = 1;
                mon += 1;
                if mon > 12 {
                    mon = 1;
                    year += 1;
                }
            }
        }
    }

    #[test]
    fn a_past_date_means_now() {
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", EPOCH_1994_MS + 5e6),
            Some(0.0)
        );
    }

    #[test]
    fn ratelimit_reset_delta_and_unix_time() {
        assert_eq!(parse_ratelimit_reset("7", 0.0), Some(7000.0));
        assert_eq!(
            parse_ratelimit_reset("1700000010", 1_700_000_000_000.0),
            Some(10_000.0)
        );
        assert_eq!(parse_ratelimit_reset("x", 0.0), None);
    }

    #[test]
    fn ratelimit_field() {
        assert_eq!(parse_ratelimit(r#""default";r=0;t=30"#), Some(30_000.0));
        assert_eq!(
            parse_ratelimit(r#""a";r=3;t=1, "b";r=0;t=12, "c";r=0;t=4"#),
            Some(12_000.0)
        );
        assert_eq!(parse_ratelimit(r#""x,y;z";r=0;t=2"#), Some(2_000.0));
        assert_eq!(
            parse_ratelimit("limit=10, remaining=0, reset=5"),
            Some(5_000.0)
        );
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
        assert_eq!(
            server_delay_ms(Some("2"), Some("5"), None, 0.0),
            Some(2000.0)
        );
        assert_eq!(
            server_delay_ms(Some("bad"), Some("5"), None, 0.0),
            Some(5000.0)
        );
        assert_eq!(
            server_delay_ms(None, None, Some(r#"p;r=0;t=3"#), 0.0),
            Some(3000.0)
        );
        assert_eq!(server_delay_ms(None, None, None, 0.0), None);
        assert_eq!(server_delay_ms(Some("bad"), None, None, 0.0), None);
    }
}
