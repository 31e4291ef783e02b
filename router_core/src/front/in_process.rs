//! One request through the front without a socket: the body a client would POST goes through
//! the same parsing, admission gate and request task (request_start.rs) as on the HTTP listener,
//! and the caller gets the response's head and then its body, as a client would. The caller drives
//! the task's future itself, so tests and the simulator (whose engines are in-process doubles,
//! front/segment_call.rs) run the production request path on their own event loop, in virtual
//! time when the simulator's.

use super::bridge::PolicyBridge;
use super::front_state::Front;
use super::generation::TaskOutcome;
use super::openai_request::RequestKind;
pub use super::request_start::TaskFuture;
use super::request_start::{start_request, Identity};
use crate::otel::RouterTracer;
use axum::http::HeaderMap;
use axum::response::Response;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

/// A request handed to the front in-process.
pub struct InProcessRequest {
    /// None when the request was refused before it had a task (a parse error, the in-flight
    /// limit): its error response is already in `head`.
    pub task: Option<TaskFuture>,
    pub head: oneshot::Receiver<Response>,
    /// The id engines see for its first attempt (router-made, as on the listener).
    pub engine_request_id: String,
    /// How it ran, once its task has ended (default until then).
    pub outcome: Arc<Mutex<TaskOutcome>>,
}

/// Starts `body` as a request of `kind` from a client at `client_host`, with the headers it
/// would send (X-Request-Id, Authorization, traceparent); its spans go to `tracer` (None: the
/// process's router tracer).
pub fn start_in_process<B: PolicyBridge>(
    front: Arc<Front<B>>,
    kind: RequestKind,
    body: &[u8],
    headers: &HeaderMap,
    client_host: &str,
    tracer: Option<Arc<RouterTracer>>,
) -> InProcessRequest {
    let identity = Identity::of(kind.id_prefix(), headers, client_host.to_owned());
    let engine_request_id = identity.engine_request_id.clone();
    let outcome = Arc::new(Mutex::new(TaskOutcome::default()));
    let started = start_request(
        front,
        kind,
        body,
        headers,
        identity,
        Instant::now(),
        tracer,
        Some(outcome.clone()),
    );
    InProcessRequest {
        task: started.task,
        head: started.head,
        engine_request_id,
        outcome,
    }
}

#[cfg(test)]
#[path = "in_process_tests.rs"]
mod tests;
