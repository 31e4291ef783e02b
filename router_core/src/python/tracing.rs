//! The router's tracer for Python: the one the front's request tasks trace with (tests give an
//! in-process front a tracer of their own, to a file), and spans under a given parent for the
//! router's own operations that are no request.

use crate::otel::traceparent;
use crate::otel::{router_tracer, Exporters, RouterTracer, SpanGuard};
use opentelemetry::{Array, KeyValue, StringValue, Value};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[pyclass(name = "RouterTracer", module = "router_core", frozen)]
pub struct PyRouterTracer {
    inner: Arc<RouterTracer>,
}

impl PyRouterTracer {
    /// The tracer itself, for a front whose requests it traces (python/in_process.rs).
    pub(super) fn shared(&self) -> Arc<RouterTracer> {
        self.inner.clone()
    }
}

fn bad_traceparent(value: &str) -> PyErr {
    PyValueError::new_err(format!("not a valid traceparent: {value:?}"))
}

#[pymethods]
impl PyRouterTracer {
    /// The router's tracer, as the environment configures it (the one the front uses); None
    /// when tracing is off.
    #[staticmethod]
    fn from_env() -> Option<Self> {
        let runtime = pyo3_async_runtimes::tokio::get_runtime().handle().clone();
        router_tracer(&runtime).map(|inner| PyRouterTracer {
            inner: inner.clone(),
        })
    }

    /// A tracer of its own that writes the JSONL span file at `path` (tests); the sampler is
    /// still the environment's.
    #[staticmethod]
    fn to_file(path: &str) -> PyResult<Self> {
        let exporters = Exporters {
            trace_file: Some(path.to_owned()),
            ..Exporters::default()
        };
        let inner = RouterTracer::new(&exporters, None).map_err(PyValueError::new_err)?;
        Ok(PyRouterTracer {
            inner: Arc::new(inner),
        })
    }

    /// A span named `name` under the span `parent` names, started at `start_ns` (Unix ns);
    /// None when the parent is not sampled.
    #[pyo3(signature = (name, parent, start_ns, attributes=None))]
    fn start_span(
        &self,
        name: String,
        parent: &str,
        start_ns: u64,
        attributes: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<PyRouterSpan>> {
        let context = traceparent::parse(parent).ok_or_else(|| bad_traceparent(parent))?;
        if !context.is_sampled() {
            return Ok(None);
        }
        let attributes = match attributes {
            Some(dict) => key_values(dict)?,
            None => Vec::new(),
        };
        let span = self
            .inner
            .start(name, Some(&context), unix_ns(start_ns), attributes);
        let span = SpanGuard::new(span);
        Ok(Some(PyRouterSpan {
            traceparent: span.traceparent(),
            span: Mutex::new(Some(span)),
        }))
    }

    /// Exports every ended span now.
    fn flush(&self, py: Python<'_>) {
        py.allow_threads(|| self.inner.flush());
    }

    /// Flushes and stops the exporters (at exit).
    fn shutdown(&self, py: Python<'_>) {
        py.allow_threads(|| self.inner.shutdown());
    }
}

/// One span the Python side made; ended by `end` (or when collected).
#[pyclass(name = "RouterSpan", module = "router_core", frozen)]
pub struct PyRouterSpan {
    span: Mutex<Option<SpanGuard>>,
    traceparent: String,
}

impl PyRouterSpan {
    fn with(&self, f: impl FnOnce(&mut SpanGuard)) {
        let mut span = self.span.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(span) = span.as_mut() {
            f(span);
        }
    }
}

#[pymethods]
impl PyRouterSpan {
    /// The W3C `traceparent` naming this span (for gRPC metadata, or a child's parent).
    #[getter]
    fn traceparent(&self) -> String {
        self.traceparent.clone()
    }

    fn set_attributes(&self, attributes: &Bound<'_, PyDict>) -> PyResult<()> {
        let attributes = key_values(attributes)?;
        self.with(|span| span.set_all(attributes));
        Ok(())
    }

    fn set_error(&self, description: String) {
        self.with(|span| span.fail(description));
    }

    /// Ends the span at `end_ns` (Unix ns; now when None). Later calls do nothing.
    #[pyo3(signature = (end_ns=None))]
    fn end(&self, end_ns: Option<u64>) {
        let span = self
            .span
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(span) = span {
            span.end_at(end_ns.map_or_else(SystemTime::now, unix_ns));
        }
    }
}

fn unix_ns(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

fn key_values(dict: &Bound<'_, PyDict>) -> PyResult<Vec<KeyValue>> {
    dict.iter()
        .map(|(key, value)| Ok(KeyValue::new(key.str()?.to_string(), value_of(&value)?)))
        .collect()
}

/// A Python attribute value as OpenTelemetry's (what its Python SDK accepts: bool, int,
/// float, str, and sequences of one of them); anything else as its `str()`.
fn value_of(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Value::I64(i));
        }
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(Value::F64(value.extract()?));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(Value::String(value.extract::<String>()?.into()));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items: Vec<Value> = value
            .try_iter()?
            .map(|item| value_of(&item?))
            .collect::<PyResult<_>>()?;
        return Ok(Value::Array(array_of(items)));
    }
    Ok(Value::String(value.str()?.to_string().into()))
}

fn array_of(items: Vec<Value>) -> Array {
    if items.iter().all(|v| matches!(v, Value::Bool(_))) {
        let bools = items.iter().filter_map(|v| match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        });
        return Array::Bool(bools.collect());
    }
    if items.iter().all(|v| matches!(v, Value::I64(_))) {
        let ints = items.iter().filter_map(|v| match v {
            Value::I64(i) => Some(*i),
            _ => None,
        });
        return Array::I64(ints.collect());
    }
    if items.iter().all(|v| matches!(v, Value::F64(_))) {
        let floats = items.iter().filter_map(|v| match v {
            Value::F64(f) => Some(*f),
            _ => None,
        });
        return Array::F64(floats.collect());
    }
    Array::String(
        items
            .iter()
            .map(|v| StringValue::from(v.as_str().into_owned()))
            .collect(),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRouterTracer>()?;
    m.add_class::<PyRouterSpan>()?;
    Ok(())
}
