//! The mock engine: serves the real engine proto (proto/switchyard_rpc/engine.proto) with
//! synthetic tokens and no model. ONLY for router-overhead benchmarks and fault-injection tests —
//! its output is meaningless text. Each request costs a few microseconds, so a benchmark measures
//! the router, not the backend.
//!
//! Semantics (what tests and the router rely on): token ids depend only on the full prompt and
//! the output position, never on `begin` or which engine prefilled what, so any orchestration
//! pattern yields the same tokens as one engine; a pretend prefix cache of block hashes (the
//! crate's one hashing function) answers PrepRecv/MatchPrefix and feeds KVEvents like a real
//! engine's; knobs inject failures (see [`MockEngineConfig`]).

mod config;
mod generation;
mod kv_feed;
mod load_push;
mod prefix_cache;
mod server;
mod service;

pub use config::MockEngineConfig;
pub use generation::synthetic_token;
pub use server::start_mock_engine;
pub use service::MockEngine;
