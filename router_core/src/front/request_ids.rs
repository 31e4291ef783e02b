//! Request ids: one id per request — X-Request-Id, the body's `id` and the trace's request id are
//! the same string, the client's own X-Request-Id when it sent a sane one. Engines get a random
//! id of their own: 128 bits from a CSPRNG, so nobody can guess (and abort) another client's
//! request.

use rand::RngCore;
use std::fmt::Write;

/// `prefix` + 32 hex digits of randomness.
pub fn new_request_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    let mut id = String::with_capacity(prefix.len() + 32);
    id.push_str(prefix);
    for b in bytes {
        // Writing into a String cannot fail.
        let _ = write!(id, "{b:02x}");
    }
    id
}

/// The client's X-Request-Id when it is sane: 1-128 of `[A-Za-z0-9._:-]`.
pub fn client_request_id(header: Option<&str>) -> Option<&str> {
    header.filter(|id| {
        (1..=128).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        let a = new_request_id("cmpl-");
        assert!(a.starts_with("cmpl-") && a.len() == 37);
        assert_ne!(a, new_request_id("cmpl-"));
        assert_eq!(client_request_id(Some("abc-1.2:3_x")), Some("abc-1.2:3_x"));
        assert_eq!(client_request_id(Some("a b")), None);
        assert_eq!(client_request_id(Some("")), None);
        assert_eq!(client_request_id(Some(&"x".repeat(129))), None);
        assert_eq!(client_request_id(None), None);
    }
}
