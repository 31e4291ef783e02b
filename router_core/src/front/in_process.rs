//! One request through the front without a socket: the body a client would POST goes through
//! the same parsing, admission and request task (generation.rs) as on the HTTP listener, and
//! the caller gets the response's head and then its body, as a client would. The caller drives
//! the task's future itself, so tests and the simulator (whose engines are in-process doubles,
//! front/segment_call.rs) run the production request path on their own event loop, in virtual
//! time when the simulator's.

use super::api_error::ShapedError;
use super::bridge::PolicyBridge;
use super::engine_names::first_engine_request_id;
use super::front_state::Front;
use super::generation::{error_response, request_task};
use super::http::{prepare, Identity};
use super::openai_request::RequestKind;
use super::request_ids::{client_request_id, new_request_id};
use crate::otel::RouterTracer;
use axum::http::HeaderMap;
use axum::response::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// The request task, for its caller to drive.
pub type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A request handed to the front in-process.
pub struct InProcessRequest {
    /// None when the request was refused before it had a task (a parse error, the in-flight
    /// limit): its error response is already in `head`.
    pub task: Option<TaskFuture>,
    pub head: oneshot::Receiver<Response>,
    /// The id engines see for its first attempt (router-made, as on the listener).
    pub engine_request_id: String,
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
    let started = Instant::now();
    let engine_request_id = first_engine_request_id(kind.id_prefix());
    let client_id = headers.get("x-request-id").and_then(|v| v.to_str().ok());
    let request_id = client_request_id(client_id)
        .map_or_else(|| new_request_id(kind.id_prefix()), str::to_owned);
    let identity = Identity {
        request_id: request_id.clone(),
        engine_request_id: engine_request_id.clone(),
        client_host: client_host.to_owned(),
    };
    match prepare(&front, kind, body, headers, identity, started) {
        Ok(prepared) => {
            let (task, head) = request_task(front, prepared, tracer);
            InProcessRequest {
                task: Some(Box::pin(task)),
                head,
                engine_request_id,
            }
        }
        Err(err) => {
            let (tx, head) = oneshot::channel();
            let _ = tx.send(error_response(
                &ShapedError::from(&err),
                "none",
                &request_id,
            ));
            InProcessRequest {
                task: None,
                head,
                engine_request_id,
            }
        }
    }
}

#[cfg(test)]
#[path = "in_process_tests.rs"]
mod tests;
