//! What the HTTP front asks of the side that decides (the Python policies, pyrouter/runtime/
//! bridge.py, through the binding): decide where a request goes (a placement the executor
//! carries out; a verb-API policy's own verbs run through the request's executor while it
//! decides), decide again after a segment hands off, hear how a placement went (the policy's
//! closed loop), and answer the routes that are operations rather than the hot path (admin,
//! /ready, /metrics). Everything else — the verbs, the first chunk, retries, error mapping,
//! finish checks, the engine table's accounting, the close — is the executor's (crate::executor).

use super::api_error::ShapedError;
use super::openai_request::GenerationRequest;
use crate::executor::{Placement, RequestExec, RouteNote};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A parsed request handed to the policy.
#[derive(Debug, Clone)]
pub struct DecideSpec {
    /// The id the client sees (X-Request-Id, the body's id, the trace).
    pub request_id: String,
    /// The request's router-made name (its first attempt's engine-side id): its key in the
    /// deciding side's bookkeeping, the same through every attempt.
    pub key: String,
    /// The id engines see for this attempt (random; `-rN` after a retry).
    pub engine_request_id: String,
    pub model: String,
    pub request: GenerationRequest,
    pub caller: Caller,
    /// Retries of this request so far (0: its first attempt).
    pub retries: u32,
    /// The request is traced: the decision's explanation goes on its span.
    pub traced: bool,
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

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    Text(String),
    Int(i64),
    Float(f64),
}

/// What the policy decided.
pub struct Decision<R> {
    pub placement: Placement,
    pub route: RouteNote,
    /// The policy that decided (metrics, errors).
    pub policy: String,
    /// A policy that decides again after a hand-off: its run, asked by `next_segment` and
    /// closed when the request ends.
    pub run: Option<R>,
    /// Told how the placement went (`observe`): its KV transfer, its first token, its end.
    pub observer: Option<R>,
    /// Why it went where it went, for the decision's span (traced requests).
    pub explanation: Vec<(String, AttributeValue)>,
}

/// Why the deciding side gave no placement.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// An error it shaped itself (status and body): bad input, no capacity, a policy's failure.
    Shaped(ShapedError),
    /// The policy (named) let a verb's failure through: the executor maps the failure it
    /// recorded.
    VerbFailed { policy: String },
    /// The active policy became a Rust built-in while the request waited for the decision
    /// (a switch): the built-in decides it.
    Builtin,
}

/// A segment ended with a hand-off (its own limit) or an interruption: the policy's next
/// decision gets this.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentEnd {
    pub engine: u32,
    /// "handoff" or "interrupted".
    pub reason: &'static str,
    /// The segment's tokens (already appended to the request's).
    pub tokens: Vec<u32>,
    /// Why it was interrupted (e.g. `after_s`).
    pub detail: Vec<(String, f64)>,
}

/// How a placement went, for its observer.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// The placement's generation started (its verbs before it done).
    Started,
    /// KV of `tokens` crossed; its exposed part took `tail_ms`.
    Sent { tokens: u64, tail_ms: f64 },
    /// The first token came, `ttft_s` after the request arrived and `attempt_s` after the
    /// attempt that placed it began.
    FirstToken { ttft_s: f64, attempt_s: f64 },
    /// The request ended (`ok`), with its mean time per token after the first.
    Ended {
        ok: bool,
        tpot_s: Option<f64>,
        completion_tokens: u64,
    },
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
    /// The deciding side's handle on a policy run or an observer.
    type Run: Clone + Send + Sync + 'static;

    /// Where `spec` goes; a policy's own verbs go through `exec` while it decides.
    fn decide(
        &self,
        spec: DecideSpec,
        exec: Arc<RequestExec>,
    ) -> BoxFuture<Result<Decision<Self::Run>, Refused>>;

    /// The running segment ended (`end`): where the request goes next (None: the policy has
    /// nothing more).
    fn next_segment(
        &self,
        run: &Self::Run,
        end: SegmentEnd,
        exec: Arc<RequestExec>,
    ) -> BoxFuture<Result<Option<Decision<Self::Run>>, Refused>>;

    /// How a placement went (queued for the deciding side: no wait).
    fn observe(&self, observer: &Self::Run, observation: Observation);

    /// The request ended: a policy run still open is closed (its clean-up runs).
    fn close(&self, run: Self::Run);

    /// The client went away while `decide` or `next_segment` runs for the request named `key`:
    /// stop it (it still answers).
    fn cancel_decision(&self, key: &str);

    /// Routes the front does not serve itself (/ready, /metrics, /openapi.json, /admin/...,
    /// unknown paths, everything but /health on the admin plane); the deciding side checks
    /// their keys.
    fn ops(&self, request: OpsRequest) -> BoxFuture<OpsResponse>;

    /// An engine failed a request before any output and leaves rotation, with this log line.
    fn engine_unavailable(&self, engine: u32, message: String);

    /// A warning for the router's log.
    fn warn(&self, message: String);
}
