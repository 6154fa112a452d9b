//! Who the caller is when the `identity` option is not given: the first credential header,
//! else one session or token cookie; what is not a credential is left out.

/// Request headers that carry a credential, in the order they are looked for when no
/// `identity` is given (lower-case): `Authorization`, then the API-key and token headers
/// APIs commonly use.
pub const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "x-api-key",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "x-session-token",
];

/// Cookie names taken for a session or credential cookie when no `identity` is given (compared
/// without case): the usual names of Express, Koa, Rails, Django, PHP, Java, Laravel, ASP.NET,
/// Auth.js and of JWT cookies.
pub const SESSION_COOKIE_NAMES: [&str; 17] = [
    "connect.sid",
    "sid",
    "session",
    "sessionid",
    "session_id",
    "jsessionid",
    "phpsessid",
    "laravel_session",
    "next-auth.session-token",
    "authjs.session-token",
    "koa.sess",
    ".aspnetcore.cookies",
    "token",
    "jwt",
    "access_token",
    "auth_token",
    "id_token",
];

/// Name endings that make a cookie count as a credential (after the known names): `session`,
/// `sessionid`, `session-token`, `auth-token` (Supabase's `sb-<ref>-auth-token`),
/// `auth_token`, `access_token`, `access-token`.
pub const SESSION_COOKIE_SUFFIXES: [&str; 7] = [
    "session",
    "sessionid",
    "session-token",
    "auth-token",
    "auth_token",
    "access_token",
    "access-token",
];

/// How surely `name` is a credential cookie's name: 2 for one of [`SESSION_COOKIE_NAMES`]
/// (or a name starting with `.aspnetcore.`), 1 for a name with one of
/// [`SESSION_COOKIE_SUFFIXES`], 0 otherwise. `__Host-` and `__Secure-` prefixes are ignored;
/// chunked cookies (`sb-x-auth-token.0`) count by their base name.
fn session_cookie_rank(name: &str) -> u8 {
    let lower = name.trim().to_ascii_lowercase();
    let bare = lower
        .strip_prefix("__host-")
        .or_else(|| lower.strip_prefix("__secure-"))
        .unwrap_or(&lower);
    // `name.0`, `name.1`: one cookie split in chunks (Supabase, Auth.js).
    let base = match bare.rsplit_once('.') {
        Some((b, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => b,
        _ => bare,
    };
    if SESSION_COOKIE_NAMES.contains(&base) || base.starts_with(".aspnetcore.") {
        2
    } else if SESSION_COOKIE_SUFFIXES.iter().any(|s| base.ends_with(s)) {
        1
    } else {
        0
    }
}

/// Is `name` a session cookie's name (see [`session_cookie_rank`])?
#[cfg(test)]
pub(crate) fn is_session_cookie(name: &str) -> bool {
    session_cookie_rank(name) > 0
}

/// The default scope of a key when the `identity` option is not given: the caller's
/// credentials, so that a caller who reuses another's key never gets that caller's stored
/// answer. `header(name)` reads a request header (lower-case name). The first of
/// [`CREDENTIAL_HEADERS`] present (`authorization:Bearer t1`); else the credential cookie's
/// `name=value` (the first cookie named in [`SESSION_COOKIE_NAMES`], else the first whose name
/// ends in one of [`SESSION_COOKIE_SUFFIXES`]); else `None`: the request carries no credential
/// this recognises, and its key is not scoped. Other cookies (analytics, preferences) are left
/// out: they may change between a request and its retry. The store keeps only a keyed hash of
/// it ([`store_key`](super::store_key)).
///
/// ```
/// use retry_fetch::core::idempotency::default_identity;
/// let from = |h: &'static [(&'static str, &'static str)]| move |name: &str| h.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string());
/// assert_eq!(default_identity(from(&[("authorization", "Bearer t1"), ("cookie", "sid=abc")])), Some("authorization:Bearer t1".into()));
/// assert_eq!(default_identity(from(&[("x-api-key", "alice")])), Some("x-api-key:alice".into()));
/// assert_eq!(default_identity(from(&[("cookie", "_ga=1; sid=abc")])), Some("cookie:sid=abc".into()));
/// assert_eq!(default_identity(from(&[("cookie", "_ga=1; theme=dark")])), None);
/// assert_eq!(default_identity(from(&[])), None);
/// ```
pub fn default_identity(header: impl Fn(&str) -> Option<String>) -> Option<String> {
    for name in CREDENTIAL_HEADERS {
        if let Some(value) = header(name) {
            let value = value.trim();
            if !value.is_empty() {
                return Some(format!("{name}:{value}"));
            }
        }
    }
    let cookie = header("cookie")?;
    // A known name wins over a suffix match wherever it is in the header (`rl_session`, an
    // analytics cookie whose value changes, must not shadow `connect.sid`); among equals, the
    // first (a session split in chunks counts by its first chunk).
    let (_, name, value) = cookie
        .split(';')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let (name, value) = (name.trim(), value.trim());
            let rank = session_cookie_rank(name);
            (rank > 0 && !value.is_empty()).then_some((rank, name, value))
        })
        .fold(None, |best: Option<(u8, &str, &str)>, c| match best {
            Some(b) if b.0 >= c.0 => Some(b),
            _ => Some(c),
        })?;
    Some(format!("cookie:{name}={value}"))
}
