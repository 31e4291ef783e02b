//! The engine gRPC contract in Rust: messages, client and server generated from
//! proto/switchyard_rpc/engine.proto by build.rs (tonic + prost, compiled with protox), and the
//! standard grpc.health.v1 service from tonic-health.

/// Generated code for package `switchyard.v1`: `engine_client::EngineClient`,
/// `engine_server::{Engine, EngineServer}` and one struct per message.
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod pb {
    tonic::include_proto!("switchyard.v1");
}

pub use tonic_health;

mod token_check;
pub use token_check::token_check;

/// The service name health checks ask about (as well as "", the whole server).
pub const ENGINE_SERVICE_NAME: &str = "switchyard.v1.Engine";

/// Largest gRPC message either side accepts: a prompt of a million token ids fits.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
