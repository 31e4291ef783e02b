//! The values that cross the policy bridge (crate::front::bridge <-> pyrouter/front_bridge.py),
//! as Python classes with stubs in router_core/__init__.pyi: what the front hands Python
//! (`AdmitSpec`, `SegmentHandoff`, `RequestEnd`, `OpsCall`) and what Python answers
//! (`AdmitOutcome` of `Admitted` or `RequestFailure`, `SegmentStart`, `OpsReply`). No positional
//! tuples or dicts: a wrong answer is named by its type, and the front turns it into a 500 with
//! that message instead of failing to unpack it.

use super::bridge_jobs::Run;
use super::double_call::{chunk_message, DoubleCall};
use super::generate_call::PyGenerateCall;
use crate::front::api_error::ShapedError;
use crate::front::bridge::{
    AdmitOutcome, AdmitSpec, Admitted, OpsRequest, OpsResponse, RequestEnd, Segment,
};
use crate::front::segment_call::SegmentCall;
use crate::rpc::pb;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

/// A parsed request for the policy (crate::front::bridge::AdmitSpec), read-only.
#[pyclass(name = "AdmitSpec", module = "router_core._router_core", frozen)]
pub struct PyAdmitSpec {
    spec: AdmitSpec,
}

impl From<AdmitSpec> for PyAdmitSpec {
    fn from(spec: AdmitSpec) -> Self {
        PyAdmitSpec { spec }
    }
}

#[pymethods]
impl PyAdmitSpec {
    #[getter]
    fn request_id(&self) -> &str {
        &self.spec.request_id
    }
    #[getter]
    fn engine_request_id(&self) -> &str {
        &self.spec.engine_request_id
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

/// A segment's stream for the front to read: its call, its engine, and the first chunk the
/// deciding side already read from it. The call is the router's (a `GenerateCall`) or an
/// in-process engine double's (python/double_call.rs), the chunk an `EngineChunk` or a
/// GenerateChunk message; both become the front's own values here, once.
#[pyclass(name = "SegmentStart", module = "router_core._router_core", frozen)]
pub struct PySegmentStart {
    call: PyObject,
    engine: String,
    first: PyObject,
    front_call: Arc<dyn SegmentCall>,
    first_chunk: pb::GenerateChunk,
}

#[pymethods]
impl PySegmentStart {
    #[new]
    fn new(call: &Bound<'_, PyAny>, engine: String, first: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = call.py();
        let front_call: Arc<dyn SegmentCall> = match call.downcast::<PyGenerateCall>() {
            Ok(rust) => rust.get().call(),
            Err(_) => Arc::new(DoubleCall::new(py, call.clone().unbind())?),
        };
        Ok(PySegmentStart {
            call: call.clone().unbind(),
            engine,
            first: first.clone().unbind(),
            front_call,
            first_chunk: chunk_message(first)?,
        })
    }
    #[getter]
    fn call(&self, py: Python<'_>) -> PyObject {
        self.call.clone_ref(py)
    }
    #[getter]
    fn engine(&self) -> &str {
        &self.engine
    }
    #[getter]
    fn first(&self, py: Python<'_>) -> PyObject {
        self.first.clone_ref(py)
    }
}

impl PySegmentStart {
    fn segment(&self, _py: Python<'_>) -> (Segment, pb::GenerateChunk) {
        let segment = Segment {
            call: self.front_call.clone(),
            engine: self.engine.clone(),
        };
        (segment, self.first_chunk.clone())
    }
}

/// The policy ran: its first segment, X-Switchyard-Route and the pattern (metrics).
#[pyclass(
    name = "Admitted",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyAdmitted {
    segment: Py<PySegmentStart>,
    route: String,
    pattern: String,
}

#[pymethods]
impl PyAdmitted {
    #[new]
    fn new(segment: Py<PySegmentStart>, route: String, pattern: String) -> Self {
        PyAdmitted {
            segment,
            route,
            pattern,
        }
    }
}

/// A request that fails: the HTTP status and the OpenAI error body the client gets.
#[pyclass(name = "RequestFailure", module = "router_core._router_core", frozen)]
pub struct PyRequestFailure {
    #[pyo3(get)]
    status: u16,
    body: Vec<u8>,
}

#[pymethods]
impl PyRequestFailure {
    #[new]
    fn new(status: u16, body: &[u8]) -> Self {
        PyRequestFailure {
            status,
            body: body.to_vec(),
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
        }
    }
}

/// What `admit` answers: the request's handle on the deciding side (`close` gets it back,
/// whatever happened), the policy that decided, and how.
#[pyclass(name = "AdmitOutcome", module = "router_core._router_core", frozen)]
pub struct PyAdmitOutcome {
    #[pyo3(get)]
    run: PyObject,
    #[pyo3(get)]
    policy: String,
    result: AdmitResult,
}

enum AdmitResult {
    Admitted(Py<PyAdmitted>),
    Failed(Py<PyRequestFailure>),
}

#[pymethods]
impl PyAdmitOutcome {
    /// `result` is an Admitted or a RequestFailure (anything else raises TypeError here, in
    /// the code that made it).
    #[new]
    fn new(run: PyObject, policy: String, result: &Bound<'_, PyAny>) -> PyResult<Self> {
        let result = if let Ok(admitted) = result.downcast::<PyAdmitted>() {
            AdmitResult::Admitted(admitted.clone().unbind())
        } else if let Ok(failure) = result.downcast::<PyRequestFailure>() {
            AdmitResult::Failed(failure.clone().unbind())
        } else {
            return Err(PyTypeError::new_err(format!(
                "AdmitOutcome's result must be Admitted or RequestFailure, got {}",
                type_name(result)
            )));
        };
        Ok(PyAdmitOutcome {
            run,
            policy,
            result,
        })
    }

    #[getter]
    fn result(&self, py: Python<'_>) -> PyObject {
        match &self.result {
            AdmitResult::Admitted(admitted) => admitted.clone_ref(py).into_any(),
            AdmitResult::Failed(failure) => failure.clone_ref(py).into_any(),
        }
    }
}

/// The running segment ended with a hand-off after `tokens` (what it produced).
#[pyclass(
    name = "SegmentHandoff",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PySegmentHandoff {
    tokens: Vec<u32>,
}

impl PySegmentHandoff {
    pub fn new(tokens: Vec<u32>) -> Self {
        PySegmentHandoff { tokens }
    }
}

/// How a request ended (crate::front::bridge::RequestEnd, durations in seconds).
#[pyclass(
    name = "RequestEnd",
    module = "router_core._router_core",
    frozen,
    get_all
)]
pub struct PyRequestEnd {
    /// "ok", or "error" (a failure, or the client went away).
    status: &'static str,
    completion_tokens: u64,
    /// The running segment's engine sent its finish: it holds nothing more for this request.
    delivered: bool,
    since_start_s: f64,
    /// None: no token came.
    since_first_token_s: Option<f64>,
}

impl From<&RequestEnd> for PyRequestEnd {
    fn from(end: &RequestEnd) -> Self {
        PyRequestEnd {
            status: end.status,
            completion_tokens: end.completion_tokens,
            delivered: end.delivered,
            since_start_s: end.since_start.as_secs_f64(),
            since_first_token_s: end.since_first_token.map(|d| d.as_secs_f64()),
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

/// `admit`'s answer as the front takes it.
pub fn admit_outcome(answer: &Bound<'_, PyAny>) -> PyResult<AdmitOutcome<Run>> {
    let py = answer.py();
    let outcome = answer
        .downcast::<PyAdmitOutcome>()
        .map_err(|_| wrong_type("admit", "AdmitOutcome", answer))?
        .get();
    let result = match &outcome.result {
        AdmitResult::Admitted(admitted) => {
            let admitted = admitted.get();
            let (segment, first) = admitted.segment.get().segment(py);
            Ok(Admitted {
                segment,
                first,
                route: admitted.route.clone(),
                pattern: admitted.pattern.clone(),
            })
        }
        AdmitResult::Failed(failure) => Err(failure.get().shaped()),
    };
    Ok(AdmitOutcome {
        run: (!outcome.run.is_none(py)).then(|| Arc::new(outcome.run.clone_ref(py))),
        policy: outcome.policy.clone(),
        result,
    })
}

/// `next_segment`'s answer as the front takes it: a SegmentStart or a RequestFailure.
pub fn next_segment(
    answer: &Bound<'_, PyAny>,
) -> PyResult<Result<(Segment, pb::GenerateChunk), ShapedError>> {
    if let Ok(start) = answer.downcast::<PySegmentStart>() {
        return Ok(Ok(start.get().segment(answer.py())));
    }
    if let Ok(failure) = answer.downcast::<PyRequestFailure>() {
        return Ok(Err(failure.get().shaped()));
    }
    Err(wrong_type(
        "next_segment",
        "SegmentStart or RequestFailure",
        answer,
    ))
}

/// `ops`'s answer as the front takes it.
pub fn ops_response(answer: &Bound<'_, PyAny>) -> PyResult<OpsResponse> {
    let reply = answer
        .downcast::<PyOpsReply>()
        .map_err(|_| wrong_type("ops", "OpsReply", answer))?;
    Ok(reply.get().response.clone())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAdmitSpec>()?;
    m.add_class::<PySegmentStart>()?;
    m.add_class::<PyAdmitted>()?;
    m.add_class::<PyRequestFailure>()?;
    m.add_class::<PyAdmitOutcome>()?;
    m.add_class::<PySegmentHandoff>()?;
    m.add_class::<PyRequestEnd>()?;
    m.add_class::<PyOpsCall>()?;
    m.add_class::<PyOpsReply>()?;
    Ok(())
}
