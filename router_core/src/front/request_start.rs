//! One generation request from the body a client sent to its running task — the one way in,
//! for the HTTP listener (http.rs) and the in-process front the tests and the simulator use
//! (in_process.rs) alike: prepare it (parse, tokenise, count it in flight), then, inside its
//! task, hold it at the admission gate (front/admission.rs) and run it (generation.rs). A
//! request refused before it has a task (bad input, the in-flight limit) has its error response
//! at once.

use super::admission::wait_at_gate;
use super::api_error::{ApiError, ShapedError};
use super::bridge::{Caller, PolicyBridge};
use super::engine_names::first_engine_request_id;
use super::front_state::Front;
use super::generation::{error_response, request_task, Prepared, TaskOutcome};
use super::openai_request::{parse_generation, GenerationRequest, RequestKind, RequestLimits};
use super::request_ids::{client_request_id, new_request_id};
use super::session_id::request_session;
use crate::otel::RouterTracer;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

/// A request's task, for its caller to spawn (the listener) or drive (in-process).
pub type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Who sent a request and the ids it gets.
pub struct Identity {
    pub request_id: String,
    pub engine_request_id: String,
    pub client_host: String,
}

impl Identity {
    /// A request from `client_host` that sent `headers`: the client's X-Request-Id when it is
    /// a usable one (else a new one with `id_prefix`), and, independent of it, a random
    /// engine-side id (so a seen or guessed id aborts nothing on an engine).
    pub fn of(id_prefix: &str, headers: &HeaderMap, client_host: String) -> Self {
        let client_id = headers.get("x-request-id").and_then(|v| v.to_str().ok());
        Identity {
            request_id: client_request_id(client_id)
                .map_or_else(|| new_request_id(id_prefix), str::to_owned),
            engine_request_id: first_engine_request_id(id_prefix),
            client_host,
        }
    }
}

/// A request handed to the front.
pub struct StartedRequest {
    /// None when the request was refused before it had a task: its error response is already
    /// in `head`.
    pub task: Option<TaskFuture>,
    /// The response's head (then, streaming, its body). Dropping it is the client going away:
    /// the task notices wherever it waits (the gate, the policy, the engine) and aborts.
    pub head: oneshot::Receiver<Response>,
}

impl StartedRequest {
    /// Spawns the task on the current tokio runtime; resolves to the response (its body may
    /// still stream).
    pub async fn spawned(self) -> Response {
        if let Some(task) = self.task {
            tokio::spawn(task);
        }
        self.head.await.unwrap_or_else(|_| {
            error_response(
                &ShapedError::from(&ApiError::internal("the request ended without a response")),
                "none",
                "",
            )
        })
    }
}

/// Prepares `body` (a request of `kind` with the client's `headers`) and makes its task: the
/// admission gate, then the request. Its spans go to `tracer` (None: the process's router
/// tracer); how it ran goes to `outcome` when its task ends (an in-process caller's).
#[allow(clippy::too_many_arguments)]
pub fn start_request<B: PolicyBridge>(
    front: Arc<Front<B>>,
    kind: RequestKind,
    body: &[u8],
    headers: &HeaderMap,
    identity: Identity,
    started: Instant,
    tracer: Option<Arc<RouterTracer>>,
    outcome: Option<Arc<Mutex<TaskOutcome>>>,
) -> StartedRequest {
    let request_id = identity.request_id.clone();
    match prepare(&front, kind, body, headers, identity, started) {
        Ok(mut prepared) => {
            prepared.outcome = outcome;
            let (head_tx, head) = oneshot::channel();
            let task = async move {
                // Shed, or its client went away while it waited: the gate answered for it.
                if let Some((prepared, head_tx)) = wait_at_gate(&front, prepared, head_tx).await {
                    request_task(front, prepared, head_tx, tracer).await;
                }
            };
            StartedRequest {
                task: Some(Box::pin(task)),
                head,
            }
        }
        Err(err) => {
            let (tx, head) = oneshot::channel();
            let _ = tx.send(error_response(
                &ShapedError::from(&err),
                "none",
                &request_id,
            ));
            StartedRequest { task: None, head }
        }
    }
}

fn trace_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    ["traceparent", "tracestate"]
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), value.to_owned()))
        })
        .collect()
}

/// Parse, tokenise and count the request in flight (429 at the limit).
fn prepare<B: PolicyBridge>(
    front: &Front<B>,
    kind: RequestKind,
    body: &[u8],
    headers: &HeaderMap,
    identity: Identity,
    started: Instant,
) -> Result<Prepared, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| ApiError::bad_request(format!("request body is not valid JSON: {err}")))?;
    // The request's model decides how its prompt is read and which engines may take it.
    let model = front.models.resolve(value.get("model"))?;
    let limits = RequestLimits {
        served_model: model.name.clone(),
        ..front.limits()
    };
    let request = parse_generation(&value, kind, model.tokenizer.as_ref(), &limits)?;
    let session = request_session(headers, &value, front.sessions.settings())?;
    let request = GenerationRequest { session, ..request };
    let inflight = front.enter().map_err(|n| {
        ApiError::busy(format!(
            "{n} requests in flight (limit {})",
            front.config.max_inflight
        ))
        .with_code("too_many_requests")
    })?;
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Ok(Prepared {
        request_id: identity.request_id,
        engine_request_id: identity.engine_request_id,
        caller: Caller {
            authorization: authorization.to_owned(),
            host: identity.client_host,
        },
        request,
        model,
        trace_headers: trace_headers(headers),
        started,
        arrived_s: front.clock.arrival_s(started),
        inflight,
        admission: None,
        outcome: None,
    })
}
