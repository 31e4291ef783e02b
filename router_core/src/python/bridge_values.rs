//! The values that cross the policy bridge (crate::front::bridge <-> pyrouter/runtime/
//! bridge.py), as Python classes: what the front hands Python (`DecideSpec`, `SegmentEnd`,
//! `Observation`, `OpsCall`) and what Python answers (`Decision` — python/placements.rs — or
//! `RequestFailure`, `OpsReply`). No positional tuples or dicts: a wrong answer is named by its
//! type, and the front turns it into a 500 with that message instead of failing to unpack it.

use super::placements::PyDecision;
use crate::front::api_error::ShapedError;
use crate::front::bridge::{
    DecideSpec, Decision, Observation, OpsRequest, OpsResponse, Refused, SegmentEnd,
};
use crate::front::engine_names::engine_name;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

/// The deciding side's handle on a policy run or an observer: an `Arc` so that tokio threads can
/// share it without taking the GIL.
pub type Run = Arc<PyObject>;

/// A parsed request for the policy (crate::front::bridge::DecideSpec), read-only.
#[pyclass(name = "DecideSpec", module = "router_core._router_core", frozen)]
pub struct PyDecideSpec {
    spec: DecideSpec,
}

impl From<DecideSpec> for PyDecideSpec {
    fn from(spec: DecideSpec) -> Self {
        PyDecideSpec { spec }
    }
}

#[pymethods]
impl PyDecideSpec {
    #[getter]
    fn request_id(&self) -> &str {
        &self.spec.request_id
    }
    #[getter]
    fn engine_request_id(&self) -> &str {
        &self.spec.engine_request_id
    }
    /// The request's router-made name, the same through every attempt.
    #[getter]
    fn key(&self) -> &str {
        &self.spec.key
    }
    /// Retries of this request so far.
    #[getter]
    fn retries(&self) -> u32 {
        self.spec.retries
    }
    /// The request is traced (the decision's explanation goes on its span).
    #[getter]
    fn traced(&self) -> bool {
        self.spec.traced
    }
    /// The served model the request named (resolved: "default" is the first model's name).
    #[getter]
    fn model(&self) -> &str {
        &self.spec.model
    }
    #[getter]
    fn kind(&self) -> &'static str {
        self.spec.request.kind.name()
    }
    #[getter]
    fn tokens(&self) -> Vec<u32> {
        self.spec.request.tokens.clone()
    }
    #[getter]
    fn prompt_len(&self) -> usize {
        self.spec.request.tokens.len()
    }
    #[getter]
    fn stream(&self) -> bool {
        self.spec.request.stream
    }
    #[getter]
    fn include_usage(&self) -> bool {
        self.spec.request.include_usage
    }
    #[getter]
    fn return_token_ids(&self) -> bool {
        self.spec.request.return_token_ids
    }
    #[getter]
    fn slo_ttft_ms(&self) -> Option<f64> {
        self.spec.request.slo_ttft_ms
    }
    #[getter]
    fn slo_tpot_ms(&self) -> Option<f64> {
        self.spec.request.slo_tpot_ms
    }
    /// The session the request belongs to (X-Session-Id, or `user` when allowed); None: none.
    #[getter]
    fn session_id(&self) -> Option<&str> {
        self.spec.request.session.as_ref().map(|s| s.id.as_str())
    }
    /// Session affinity's load bound in force when the request arrived (None: no session).
    #[getter]
    fn session_load_bound(&self) -> Option<f64> {
        self.spec.request.session.as_ref().map(|s| s.load_bound)
    }
    #[getter]
    fn max_tokens(&self) -> i64 {
        self.spec.request.sampling.max_tokens
    }
    #[getter]
    fn temperature(&self) -> f64 {
        self.spec.request.sampling.temperature
    }
    #[getter]
    fn top_p(&self) -> f64 {
        self.spec.request.sampling.top_p
    }
    #[getter]
    fn top_k(&self) -> i64 {
        self.spec.request.sampling.top_k
    }
    #[getter]
    fn min_tokens(&self) -> i64 {
        self.spec.request.sampling.min_tokens
    }
    #[getter]
    fn seed(&self) -> Option<i64> {
        self.spec.request.sampling.seed
    }
    #[getter]
    fn stop(&self) -> Vec<String> {
        self.spec.request.sampling.stop.clone()
    }
    #[getter]
    fn ignore_eos(&self) -> bool {
        self.spec.request.sampling.ignore_eos
    }
    /// The structured output asked for: "" (free text), "json_object" or "json_schema".
    #[getter]
    fn response_format(&self) -> &'static str {
        let format = self.spec.request.sampling.response_format.as_ref();
        format.map_or("", |f| f.type_name())
    }
    /// A json_schema response format's schema as JSON text ("" otherwise).
    #[getter]
    fn json_schema(&self) -> &str {
        let format = self.spec.request.sampling.response_format.as_ref();
        format.map_or("", |f| f.schema())
    }
    /// Scheduling priority, lower first (0 when the body gave none).
    #[getter]
    fn priority(&self) -> i32 {
        self.spec.request.sampling.priority
    }
    /// The client's Authorization header ("" when absent).
    #[getter]
    fn authorization(&self) -> &str {
        &self.spec.caller.authorization
    }
    #[getter]
    fn client_host(&self) -> &str {
        &self.spec.caller.host
    }
}

/// An error the deciding side shaped itself: the client's status and OpenAI error body, and
/// the seconds for `Retry-After` (429/503).
#[pyclass(name = "RequestFailure", module = "router_core._router_core", frozen)]
pub struct PyRequestFailure {
    #[pyo3(get)]
    status: u16,
    body: Vec<u8>,
    #[pyo3(get)]
    retry_after_s: f64,
}

#[pymethods]
impl PyRequestFailure {
    #[new]
    #[pyo3(signature = (status, body, retry_after_s = 0.0))]
    fn new(status: u16, body: &[u8], retry_after_s: f64) -> Self {
        PyRequestFailure {
            status,
            body: body.to_vec(),
            retry_after_s,
        }
    }

    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.body)
    }
}

impl PyRequestFailure {
    fn shaped(&self) -> ShapedError {
        ShapedError {
            status: self.status,
            body: self.body.clone(),
            retry_after_s: self.retry_after_s.max(0.0).ceil() as u64,
        }
    }
}

/// The deciding side's answer when the active policy is a Rust built-in (it was switched in
/// while the request waited): the built-in decides.
#[pyclass(name = "UseBuiltin", module = "router_core._router_core", frozen)]
pub struct PyUseBuiltin;

#[pymethods]
impl PyUseBuiltin {
    #[new]
    fn new() -> Self {
        PyUseBuiltin
    }
}

/// The deciding side's answer when the policy let a verb's failure through: the executor maps
/// the failure the verb recorded, naming `policy`.
#[pyclass(name = "VerbFailed", module = "router_core._router_core", frozen)]
pub struct PyVerbFailed {
    policy: String,
}

#[pymethods]
impl PyVerbFailed {
    #[new]
    fn new(policy: String) -> Self {
        PyVerbFailed { policy }
    }
}

/// A segment ended (crate::front::bridge::SegmentEnd): the policy decides where next.
#[pyclass(name = "SegmentEnd", module = "router_core._router_core", frozen)]
pub struct PySegmentEnd {
    end: SegmentEnd,
}

impl From<SegmentEnd> for PySegmentEnd {
    fn from(end: SegmentEnd) -> Self {
        PySegmentEnd { end }
    }
}

#[pymethods]
impl PySegmentEnd {
    /// The engine the segment ran on ("e1").
    #[getter]
    fn engine_id(&self) -> String {
        engine_name(self.end.engine)
    }
    /// "handoff" (the segment's own limit) or "interrupted" (the router took control back).
    #[getter]
    fn reason(&self) -> &'static str {
        self.end.reason
    }
    /// The segment's tokens.
    #[getter]
    fn tokens(&self) -> Vec<u32> {
        self.end.tokens.clone()
    }
    /// Why it was interrupted (e.g. {"after_s": 1.5}).
    #[getter]
    fn detail(&self) -> Vec<(String, f64)> {
        self.end.detail.clone()
    }
}

/// How a placement went, for its observer (crate::front::bridge::Observation): `kind` is
/// "started" (its generation went out), "sent" (`tokens`, `tail_ms`), "first_token" (`ttft_s`, `attempt_s`) or "ended" (`ok`,
/// `tpot_s`, `completion_tokens`).
#[pyclass(
    name = "Observation",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyObservation {
    kind: &'static str,
    tokens: u64,
    tail_ms: f64,
    ttft_s: f64,
    attempt_s: f64,
    ok: bool,
    tpot_s: Option<f64>,
    completion_tokens: u64,
}

impl From<&Observation> for PyObservation {
    fn from(observation: &Observation) -> Self {
        let empty = PyObservation {
            kind: "",
            tokens: 0,
            tail_ms: 0.0,
            ttft_s: 0.0,
            attempt_s: 0.0,
            ok: false,
            tpot_s: None,
            completion_tokens: 0,
        };
        match *observation {
            Observation::Started => PyObservation {
                kind: "started",
                ..empty
            },
            Observation::Sent { tokens, tail_ms } => PyObservation {
                kind: "sent",
                tokens,
                tail_ms,
                ..empty
            },
            Observation::FirstToken { ttft_s, attempt_s } => PyObservation {
                kind: "first_token",
                ttft_s,
                attempt_s,
                ..empty
            },
            Observation::Ended {
                ok,
                tpot_s,
                completion_tokens,
            } => PyObservation {
                kind: "ended",
                ok,
                tpot_s,
                completion_tokens,
                ..empty
            },
        }
    }
}

/// A request to a route the deciding side answers (crate::front::bridge::OpsRequest).
#[pyclass(name = "OpsCall", module = "router_core._router_core", frozen)]
pub struct PyOpsCall {
    request: OpsRequest,
}

impl From<OpsRequest> for PyOpsCall {
    fn from(request: OpsRequest) -> Self {
        PyOpsCall { request }
    }
}

#[pymethods]
impl PyOpsCall {
    /// "public", or "admin" (the admin plane's own listener).
    #[getter]
    fn plane(&self) -> &'static str {
        self.request.plane.name()
    }
    #[getter]
    fn method(&self) -> &str {
        &self.request.method
    }
    #[getter]
    fn path(&self) -> &str {
        &self.request.path
    }
    #[getter]
    fn query(&self) -> &str {
        &self.request.query
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.request.body)
    }
    #[getter]
    fn authorization(&self) -> &str {
        &self.request.authorization
    }
    #[getter]
    fn client_host(&self) -> &str {
        &self.request.client_host
    }
}

/// The deciding side's answer to an OpsCall.
#[pyclass(name = "OpsReply", module = "router_core._router_core", frozen)]
pub struct PyOpsReply {
    response: OpsResponse,
}

#[pymethods]
impl PyOpsReply {
    #[new]
    #[pyo3(signature = (status, content_type, body, headers = Vec::new()))]
    fn new(status: u16, content_type: String, body: &[u8], headers: Vec<(String, String)>) -> Self {
        PyOpsReply {
            response: OpsResponse {
                status,
                content_type,
                headers,
                body: body.to_vec(),
            },
        }
    }
    #[getter]
    fn status(&self) -> u16 {
        self.response.status
    }
    #[getter]
    fn content_type(&self) -> &str {
        &self.response.content_type
    }
    #[getter]
    fn headers(&self) -> Vec<(String, String)> {
        self.response.headers.clone()
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.response.body)
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |name| name.to_string())
}

/// A bridge method's answer of the wrong type, named for the log and the client's 500.
fn wrong_type(method: &str, expected: &str, answer: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "the policy bridge's {method} returned {}, expected {expected}",
        type_name(answer)
    ))
}

/// `decide`'s (or `next_segment`'s) answer as the front takes it: a Decision, a RequestFailure,
/// None (`next_segment` only: the policy has nothing more), UseBuiltin or VerbFailed.
pub fn decision_of(
    py: Python<'_>,
    answer: PyResult<Bound<'_, PyAny>>,
    method: &str,
) -> PyResult<Result<Option<Decision<Run>>, Refused>> {
    let answer = answer?;
    if answer.is_none() {
        return Ok(Ok(None));
    }
    if let Ok(decision) = answer.downcast::<PyDecision>() {
        return Ok(Ok(Some(decision.get().decision(py))));
    }
    if let Ok(failure) = answer.downcast::<PyRequestFailure>() {
        return Ok(Err(Refused::Shaped(failure.get().shaped())));
    }
    if answer.downcast::<PyUseBuiltin>().is_ok() {
        return Ok(Err(Refused::Builtin));
    }
    if let Ok(failed) = answer.downcast::<PyVerbFailed>() {
        return Ok(Err(Refused::VerbFailed {
            policy: failed.get().policy.clone(),
        }));
    }
    Err(wrong_type(method, "Decision or RequestFailure", &answer))
}

/// `ops`'s answer as the front takes it.
pub fn ops_response(answer: &Bound<'_, PyAny>) -> PyResult<OpsResponse> {
    let reply = answer
        .downcast::<PyOpsReply>()
        .map_err(|_| wrong_type("ops", "OpsReply", answer))?;
    Ok(reply.get().response.clone())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDecideSpec>()?;
    m.add_class::<PyRequestFailure>()?;
    m.add_class::<PyUseBuiltin>()?;
    m.add_class::<PyVerbFailed>()?;
    m.add_class::<PySegmentEnd>()?;
    m.add_class::<PyObservation>()?;
    m.add_class::<PyOpsCall>()?;
    m.add_class::<PyOpsReply>()?;
    Ok(())
}
