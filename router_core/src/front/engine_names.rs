//! How the router names things on the engine side, defined once for both request paths (the
//! Rust front calls these directly, the Python policies' path through the binding): engine `n`
//! is `e{n}`, and a request is known to engines only by ids the router made — a random one for
//! its first attempt and `{first}-r{n}` for its n-th retry or resumption elsewhere (a fresh id
//! per attempt, since a failed attempt may linger on its engine). Nothing a client sends goes
//! into either, so clients that share an X-Request-Id never share an engine-side id.

use super::request_ids::new_request_id;

/// Engine `num`'s id in routes, metrics, the admin API and policies ("e0", "e1", ...).
pub fn engine_name(num: u32) -> String {
    format!("e{num}")
}

/// A request's engine-side id for its first attempt: `prefix` + 128 random bits (unguessable,
/// so nobody can abort another client's request on an engine).
pub fn first_engine_request_id(prefix: &str) -> String {
    new_request_id(prefix)
}

/// The engine-side id of a request's `attempt`-th retry or resumption (1, 2, ...), from its
/// first engine-side id.
pub fn retry_engine_request_id(first: &str, attempt: u32) -> String {
    format!("{first}-r{attempt}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(engine_name(0), "e0");
        assert_eq!(engine_name(12), "e12");
        let first = first_engine_request_id("cmpl-");
        assert!(first.starts_with("cmpl-") && first.len() == 37);
        assert_ne!(first, first_engine_request_id("cmpl-"));
        assert_eq!(retry_engine_request_id(&first, 2), format!("{first}-r2"));
    }
}
