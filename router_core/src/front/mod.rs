//! The router's HTTP front: the OpenAI routes served by axum on the tokio runtime (all cores),
//! tokenisation, admission, the per-token loop (detokenise, stop strings, SSE or JSON, usage)
//! over the engines' gRPC streams, and the pure-selection policies' fast path. Everything that
//! decides — the Python policies, the admin logic, health checking — sits behind
//! [`bridge::PolicyBridge`], called once per request and once per segment boundary.

pub mod admission;
pub mod api_error;
pub mod bridge;
mod caller_limits;
mod client;
mod client_close;
pub mod clock;
pub mod engine_names;
pub mod fast_path;
pub mod fast_session;
mod front_state;
pub mod generation;
mod http;
pub mod in_process;
pub mod openai_request;
mod parse_error_reply;
mod request_ids;
pub mod request_start;
pub mod response_body;
pub mod response_format;
pub mod segment_call;
mod segment_stream;
pub mod served_models;
pub mod session_id;

pub use caller_limits::{CallerLimits, RateRules};
pub use front_state::{
    Front, FrontConfig, InflightGuard, MigrationOutcome, RequestRecord, SegmentRecord,
};
pub use http::start_front;
pub use request_ids::{client_request_id, new_request_id};
