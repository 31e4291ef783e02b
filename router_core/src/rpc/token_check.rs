//! The deployment token on the gRPC services router_core serves (the mock engine, the router
//! replicas' RouterPeer): every call must carry `authorization: Bearer <token>`, compared in
//! constant time, as the real engine's interceptor does (switchyard_engine_api/auth.py).

use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// An interceptor requiring `Bearer <expected>`; an empty `expected` leaves the service open.
pub fn token_check(
    expected: &str,
) -> impl Fn(Request<()>) -> std::result::Result<Request<()>, Status> + Clone {
    let open = expected.is_empty();
    let expected = format!("Bearer {expected}");
    move |request: Request<()>| {
        let presented = request
            .metadata()
            .get("authorization")
            .map(|value| value.as_bytes())
            .unwrap_or_default();
        if open || bool::from(presented.ct_eq(expected.as_bytes())) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("missing or wrong engine token"))
        }
    }
}
