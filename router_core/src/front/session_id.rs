//! A request's session id: the `X-Session-Id` header, else the body's `user` when the operator
//! turned that on (`--session-from-user`). Checked here, before anything is routed: a bad value
//! is a 400 naming where it came from, never silently a request without affinity.

use super::api_error::ApiError;
use crate::session_affinity::SessionSettings;
use axum::http::HeaderMap;
use serde_json::Value;

pub const SESSION_HEADER: &str = "x-session-id";
/// Longest session id taken (bytes); a conversation id or a user name fits well within it.
pub const MAX_SESSION_ID_BYTES: usize = 256;

fn bad(message: String, param: &str) -> ApiError {
    ApiError::bad_request(message)
        .with_param(param)
        .with_code("invalid_session_id")
}

/// A request's session, and the load bound in force when it arrived (the request keeps it, as
/// it keeps the policy that admitted it).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSession {
    pub id: String,
    pub load_bound: f64,
}

/// The session `headers` and `body` name under `settings` (None: the request has none).
pub fn request_session(
    headers: &HeaderMap,
    body: &Value,
    settings: SessionSettings,
) -> Result<Option<RequestSession>, ApiError> {
    let id = request_session_id(headers, body, settings.from_user)?;
    Ok(id.map(|id| RequestSession {
        id,
        load_bound: settings.load_bound,
    }))
}

/// The session id `headers` and `body` name (None: the request has no session).
pub fn request_session_id(
    headers: &HeaderMap,
    body: &Value,
    from_user: bool,
) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(SESSION_HEADER).iter();
    if let Some(value) = values.next() {
        if values.next().is_some() {
            return Err(bad(
                "X-Session-Id appears more than once".into(),
                "X-Session-Id",
            ));
        }
        return header_session_id(value.as_bytes()).map(Some);
    }
    if !from_user {
        return Ok(None);
    }
    match body.get("user") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(user)) if user.is_empty() => Ok(None),
        Some(Value::String(user)) if user.len() > MAX_SESSION_ID_BYTES => Err(bad(
            format!(
                "'user' names the session here and may be at most {MAX_SESSION_ID_BYTES} bytes, \
                 got {}",
                user.len()
            ),
            "user",
        )),
        Some(Value::String(user)) => Ok(Some(user.clone())),
        Some(_) => Err(bad("'user' must be a string".into(), "user")),
    }
}

/// 1 to 256 printable ASCII characters (space to '~'), surrounding blanks dropped.
fn header_session_id(raw: &[u8]) -> Result<String, ApiError> {
    let trimmed = raw.trim_ascii();
    let printable = trimmed.iter().all(|b| (0x20..=0x7e).contains(b));
    if trimmed.is_empty() || trimmed.len() > MAX_SESSION_ID_BYTES || !printable {
        return Err(bad(
            format!(
                "X-Session-Id must be 1 to {MAX_SESSION_ID_BYTES} printable ASCII characters \
                 (got {} bytes{})",
                trimmed.len(),
                if printable {
                    ""
                } else {
                    ", not all printable ASCII"
                }
            ),
            "X-Session-Id",
        ));
    }
    // Printable ASCII is UTF-8.
    Ok(String::from_utf8_lossy(trimmed).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn with_header(value: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(SESSION_HEADER, HeaderValue::from_bytes(value).unwrap());
        headers
    }

    #[test]
    fn the_header_names_the_session_and_wins_over_user() {
        let body = json!({"user": "u1"});
        let got = request_session_id(&with_header(b" chat-42 "), &body, true).unwrap();
        assert_eq!(got.as_deref(), Some("chat-42"));
        assert_eq!(
            request_session_id(&HeaderMap::new(), &body, false).unwrap(),
            None
        );
        let user = request_session_id(&HeaderMap::new(), &body, true).unwrap();
        assert_eq!(user.as_deref(), Some("u1"));
        let empty = json!({"user": ""});
        assert_eq!(
            request_session_id(&HeaderMap::new(), &empty, true).unwrap(),
            None
        );
        let settings = SessionSettings::new(1.5, false).unwrap();
        let session = request_session(&with_header(b"c"), &body, settings).unwrap();
        assert_eq!(
            session.map(|s| (s.id, s.load_bound)),
            Some(("c".into(), 1.5))
        );
    }

    #[test]
    fn bad_values_are_400s_naming_their_source() {
        let body = json!({});
        for raw in [
            &b""[..],
            b"   ",
            "sessi\u{f3}n".as_bytes(),
            &[b'a'; 257][..],
            b"a\tb",
        ] {
            let err = request_session_id(&with_header(raw), &body, false).unwrap_err();
            assert_eq!(err.status, 400);
            assert_eq!(err.param.as_deref(), Some("X-Session-Id"));
            assert_eq!(err.code.as_deref(), Some("invalid_session_id"));
        }
        assert!(request_session_id(&with_header(&[b'a'; 256]), &body, false).is_ok());
        let mut twice = with_header(b"a");
        twice.append(SESSION_HEADER, HeaderValue::from_static("b"));
        assert!(request_session_id(&twice, &body, false).is_err());
        for user in [json!({"user": 7}), json!({"user": "x".repeat(257)})] {
            let err = request_session_id(&HeaderMap::new(), &user, true).unwrap_err();
            assert_eq!(err.param.as_deref(), Some("user"));
            // Ignored, whatever it is, while the operator has not turned `user` on.
            assert_eq!(
                request_session_id(&HeaderMap::new(), &user, false).unwrap(),
                None
            );
        }
        // Any UTF-8 is a fine `user` (it is only hashed).
        let accented = json!({"user": "jos\u{e9}"});
        assert!(request_session_id(&HeaderMap::new(), &accented, true)
            .unwrap()
            .is_some());
    }
}
