//! router_core: Switchyard's per-request hot path — the HTTP front, tokenisation, sampling rules,
//! block hashing, prefix index, engine table, scoring, the engines' gRPC streams and detokenised
//! streaming.
//!
//! Every module here is pure Rust with no PyO3 types; the Python binding lives in `python/`
//! behind the `python` cargo feature so `cargo test` never links libpython.

/// Rust's allocations in the extension (Python keeps its own allocator): see Cargo.toml.
#[cfg(feature = "python")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod admission_outlook;
pub mod admission_queue;
#[cfg(any(feature = "mock-engine", feature = "mock-worker", feature = "front"))]
pub mod background_server;
pub mod detok;
pub mod dispatch_delta;
#[cfg(feature = "grpc")]
pub mod engine_rpc;
pub mod engine_set;
pub mod engine_table;
#[cfg(feature = "front")]
pub mod engine_upkeep;
pub mod error;
#[cfg(feature = "front")]
pub mod executor;
#[cfg(feature = "front")]
pub mod front;
pub mod hashing;
pub mod identity_hash;
pub mod latency_model;
#[cfg(feature = "mock-engine")]
pub mod mock_engine;
#[cfg(feature = "mock-worker")]
pub mod mock_worker;
#[cfg(feature = "front")]
pub mod otel;
#[cfg(feature = "front")]
pub mod peer;
pub mod prediction;
pub mod prediction_shortlist;
pub mod prefix_index;
pub mod router;
#[cfg(feature = "grpc")]
pub mod rpc;
pub mod sampling;
pub mod scoring;
pub mod session_affinity;
pub mod sse;
#[cfg(feature = "tokenize")]
pub mod tokenize;

#[cfg(feature = "python")]
mod python;

pub use error::{Result, RouterCoreError};

/// The crate version, exported to Python as `router_core.__version__`.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
