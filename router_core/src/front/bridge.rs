//! What the HTTP front asks of the side that decides (the Python policies, pyrouter/
//! front_bridge.py, through the binding): admit a request (run its policy to the first chunk of
//! its first segment), continue after a hand-off, close a request, and answer the routes that
//! are operations rather than the hot path (admin, /ready, /metrics). The front calls it once
//! per request, once per segment boundary and once at the end — never per token.

use super::api_error::ShapedError;
use super::openai_request::GenerationRequest;
use super::segment_call::SegmentCall;
use crate::rpc::pb;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A parsed request handed to the policy.
#[derive(Debug, Clone)]
pub struct AdmitSpec {
    /// The id the client sees (X-Request-Id, the body's id, the trace).
    pub request_id: String,
    /// The id engines see (random; `-rN` after a retry).
    pub engine_request_id: String,
    pub model: String,
    pub request: GenerationRequest,
    /// W3C trace context headers the client sent (traceparent, tracestate), for the trace.
    pub trace_headers: Vec<(String, String)>,
    pub caller: Caller,
}

/// Who sent a request, as per-caller limits see it: the deciding side names the caller by its
/// API key when keys are configured, else by its address.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The client's Authorization header ("" when absent).
    pub authorization: String,
    /// The client's IP address.
    pub host: String,
}

/// A segment's stream the front now reads (the router's gRPC call, or an in-process engine
/// double's), and the engine running it (for messages).
pub struct Segment {
    pub call: Arc<dyn SegmentCall>,
    pub engine: String,
}

/// The policy ran: its first segment and that segment's first chunk.
pub struct Admitted {
    pub segment: Segment,
    pub first: pb::GenerateChunk,
    /// X-Switchyard-Route.
    pub route: String,
    /// The pattern that ran (the route's first word; metrics).
    pub pattern: String,
}

pub struct AdmitOutcome<R> {
    /// The request's state on the deciding side; `close` ends it, whatever happened (None: the
    /// deciding side refused it before making one, and has nothing to close).
    pub run: Option<R>,
    /// The policy that admitted it (metrics).
    pub policy: String,
    pub result: Result<Admitted, ShapedError>,
}

/// How a request ended, for the close call.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestEnd {
    /// "ok", or "error" (a failure, or the client went away).
    pub status: &'static str,
    pub completion_tokens: u64,
    /// The running segment's engine sent its finish: it holds nothing more for this request.
    pub delivered: bool,
    /// Time since the request arrived, and since its first token (None: no token).
    pub since_start: Duration,
    pub since_first_token: Option<Duration>,
}

/// Which listener a request came in on: the public one, or the admin plane's own
/// (`--admin-port`), which serves only /health, /ready and the admin routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plane {
    Public,
    Admin,
}

impl Plane {
    pub fn name(self) -> &'static str {
        match self {
            Plane::Public => "public",
            Plane::Admin => "admin",
        }
    }
}

/// A request to a route the deciding side answers.
#[derive(Debug, Clone)]
pub struct OpsRequest {
    pub plane: Plane,
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Vec<u8>,
    /// The client's own Authorization header ("" when absent): the deciding side checks it
    /// (admin routes take admin keys, which this front never sees), so it is never replaced.
    pub authorization: String,
    /// The client's IP address: with no admin key, admin routes answer loopback clients only.
    pub client_host: String,
}

#[derive(Debug, Clone)]
pub struct OpsResponse {
    pub status: u16,
    pub content_type: String,
    /// Extra headers (Allow on a 405, Retry-After on a 503).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub trait PolicyBridge: Send + Sync + 'static {
    /// The deciding side's handle on one request.
    type Run: Send + 'static;

    fn admit(&self, spec: AdmitSpec) -> BoxFuture<AdmitOutcome<Self::Run>>;

    /// The client went away while `admit` or `next_segment` runs: stop it (it still returns,
    /// then is closed). Named by its first engine-side id: clients may share an X-Request-Id.
    fn cancel_admission(&self, engine_request_id: &str);

    /// The running segment ended with a hand-off after `segment_tokens`: where next, and that
    /// segment's first chunk (an engine failing before it is replaced on the deciding side).
    fn next_segment(
        &self,
        run: &Self::Run,
        segment_tokens: Vec<u32>,
    ) -> BoxFuture<Result<(Segment, pb::GenerateChunk), ShapedError>>;

    fn close(&self, run: Self::Run, end: RequestEnd) -> BoxFuture<()>;

    /// Routes the front does not serve itself (/ready, /metrics, /openapi.json, /admin/...,
    /// unknown paths, everything but /health on the admin plane); the deciding side checks
    /// their keys.
    fn ops(&self, request: OpsRequest) -> BoxFuture<OpsResponse>;

    /// An engine failed a fast-path request before any output: out of rotation (as the
    /// deciding side's own retries do), with this log line.
    fn engine_unavailable(&self, engine: u32, message: String);

    /// A warning for the router's log.
    fn warn(&self, message: String);
}
