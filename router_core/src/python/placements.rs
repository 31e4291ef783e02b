//! The placements a policy returns (`Dp`, `Pd`, `Split`, `Segment`; importable from pyrouter)
//! and the `Decision` the policy's side hands back with one: typed values the executor carries
//! out with no further call into Python. An engine is given as its handle (anything with a
//! `num`) or its number.

use super::bridge_values::Run;
use super::request_verbs::PyRequestVerbs;
use crate::executor::{PdPlan, Placement, RouteNote, SegmentPlan, SplitPlan};
use crate::front::bridge::{AttributeValue, Decision};
use crate::front::engine_names::engine_name;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;
use std::time::Duration;

fn engine_num(engine: &Bound<'_, PyAny>) -> PyResult<u32> {
    if let Ok(num) = engine.extract::<u32>() {
        return Ok(num);
    }
    engine
        .getattr("num")
        .and_then(|num| num.extract::<u32>())
        .map_err(|_| PyTypeError::new_err("an engine is its handle (with a `num`) or its number"))
}

/// The whole request (or the rest of it) on one engine: data parallel.
#[pyclass(name = "Dp", module = "router_core._router_core", frozen)]
pub struct PyDp {
    engine: u32,
}

#[pymethods]
impl PyDp {
    #[new]
    fn new(engine: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyDp {
            engine: engine_num(engine)?,
        })
    }

    #[getter]
    fn engine(&self) -> String {
        engine_name(self.engine)
    }

    fn __repr__(&self) -> String {
        format!("Dp({})", engine_name(self.engine))
    }
}

/// One segment on `engine`: prefill tokens[begin:] on top of the KV already there, then decode
/// at most `max_tokens` tokens (None: to the request's end) — the policy decides again after
/// it, or after `control_after_s` (a policy written as an async generator).
#[pyclass(name = "Segment", module = "router_core._router_core", frozen)]
pub struct PySegment {
    plan: SegmentPlan,
}

#[pymethods]
impl PySegment {
    #[new]
    #[pyo3(signature = (engine, max_tokens = None, *, begin = 0, control_after_s = None))]
    fn new(
        engine: &Bound<'_, PyAny>,
        max_tokens: Option<u32>,
        begin: u64,
        control_after_s: Option<f64>,
    ) -> PyResult<Self> {
        if max_tokens == Some(0) {
            return Err(PyValueError::new_err("max_tokens must be >= 1, got 0"));
        }
        let control_after = control_after_s
            .map(|s| {
                Duration::try_from_secs_f64(s)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        PyValueError::new_err(format!("control_after_s must be > 0, got {s}"))
                    })
            })
            .transpose()?;
        Ok(PySegment {
            plan: SegmentPlan {
                engine: engine_num(engine)?,
                begin,
                max_new_tokens: max_tokens,
                control_after,
            },
        })
    }

    #[getter]
    fn engine(&self) -> String {
        engine_name(self.plan.engine)
    }
    #[getter]
    fn begin(&self) -> u64 {
        self.plan.begin
    }
    #[getter]
    fn max_tokens(&self) -> Option<u32> {
        self.plan.max_new_tokens
    }
    #[getter]
    fn control_after_s(&self) -> Option<f64> {
        self.plan.control_after.map(|d| d.as_secs_f64())
    }

    fn __repr__(&self) -> String {
        format!(
            "Segment({}, max_tokens={:?}, begin={})",
            engine_name(self.plan.engine),
            self.plan.max_new_tokens,
            self.plan.begin
        )
    }
}

/// Prefill/decode disaggregation: `decode` reserves KV for tokens[:end] (default: all but the
/// last), `prefill` computes what it lacks and sends it (None: the decode engine prefills);
/// with `local_prefill_ratio`, a decode engine holding that share of the prompt prefills the
/// rest itself. A failed transfer falls back to the decode engine's own prefill.
#[pyclass(name = "Pd", module = "router_core._router_core", frozen)]
pub struct PyPd {
    plan: PdPlan,
}

#[pymethods]
impl PyPd {
    #[new]
    #[pyo3(signature = (prefill, decode, *, end = None, local_prefill_ratio = None))]
    fn new(
        prefill: Option<&Bound<'_, PyAny>>,
        decode: &Bound<'_, PyAny>,
        end: Option<u64>,
        local_prefill_ratio: Option<f64>,
    ) -> PyResult<Self> {
        if let Some(ratio) = local_prefill_ratio {
            if !(0.0..=1.0).contains(&ratio) {
                return Err(PyValueError::new_err(format!(
                    "local_prefill_ratio must be in [0, 1], got {ratio}"
                )));
            }
        }
        Ok(PyPd {
            plan: PdPlan {
                prefill: prefill.map(engine_num).transpose()?,
                decode: engine_num(decode)?,
                end,
                local_prefill_ratio,
            },
        })
    }

    #[getter]
    fn prefill(&self) -> Option<String> {
        self.plan.prefill.map(engine_name)
    }
    #[getter]
    fn decode(&self) -> String {
        engine_name(self.plan.decode)
    }

    fn __repr__(&self) -> String {
        format!(
            "Pd({}, {})",
            self.plan
                .prefill
                .map_or_else(|| "None".to_owned(), engine_name),
            engine_name(self.plan.decode)
        )
    }
}

/// Tandem (DynaServe): `lead` computes the first `at` prompt tokens — or, with `lead_tokens`,
/// the whole prompt and the first `lead_tokens` tokens — and `follow` receives that KV,
/// computes the rest and decodes.
#[pyclass(name = "Split", module = "router_core._router_core", frozen)]
pub struct PySplit {
    plan: SplitPlan,
}

#[pymethods]
impl PySplit {
    #[new]
    #[pyo3(signature = (lead, follow, at = 0, lead_tokens = 0))]
    fn new(
        lead: &Bound<'_, PyAny>,
        follow: &Bound<'_, PyAny>,
        at: u64,
        lead_tokens: u32,
    ) -> PyResult<Self> {
        let (lead, follow) = (engine_num(lead)?, engine_num(follow)?);
        if lead == follow {
            return Err(PyValueError::new_err("a split needs two engines"));
        }
        Ok(PySplit {
            plan: SplitPlan {
                lead,
                follow,
                at,
                lead_tokens,
            },
        })
    }

    #[getter]
    fn lead(&self) -> String {
        engine_name(self.plan.lead)
    }
    #[getter]
    fn follow(&self) -> String {
        engine_name(self.plan.follow)
    }
    #[getter]
    fn at(&self) -> u64 {
        self.plan.at
    }
    #[getter]
    fn lead_tokens(&self) -> u32 {
        self.plan.lead_tokens
    }

    fn __repr__(&self) -> String {
        format!(
            "Split({}, {}, at={}, lead_tokens={})",
            engine_name(self.plan.lead),
            engine_name(self.plan.follow),
            self.plan.at,
            self.plan.lead_tokens
        )
    }
}

/// The placement a policy returned, or None when it is not one.
pub fn placement_of(value: &Bound<'_, PyAny>) -> Option<Placement> {
    if let Ok(dp) = value.downcast::<PyDp>() {
        return Some(Placement::Segment(SegmentPlan::whole(dp.get().engine)));
    }
    if let Ok(segment) = value.downcast::<PySegment>() {
        return Some(Placement::Segment(segment.get().plan.clone()));
    }
    if let Ok(pd) = value.downcast::<PyPd>() {
        return Some(Placement::Pd(pd.get().plan.clone()));
    }
    if let Ok(split) = value.downcast::<PySplit>() {
        return Some(Placement::Split(split.get().plan.clone()));
    }
    None
}

/// What the policy's side hands back: the placement, the route note (pattern, parameters in
/// order, degraded roles), the policy's name, its run (a policy that decides again after a
/// hand-off), its observer, and the decision's explanation (traced requests). Made with the
/// request's `verbs`, it places the request at once: the engine table counts the generation it
/// starts with before the next decision is made (a burst decided back to back spreads).
#[pyclass(name = "Decision", module = "router_core._router_core", frozen)]
pub struct PyDecision {
    placement: Placement,
    route: RouteNote,
    policy: String,
    run: Option<Run>,
    observer: Option<Run>,
    explanation: Vec<(String, AttributeValue)>,
}

fn attribute(value: &Bound<'_, PyAny>) -> PyResult<AttributeValue> {
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Ok(AttributeValue::Text(value.str()?.to_string()));
    }
    if let Ok(n) = value.extract::<i64>() {
        return Ok(AttributeValue::Int(n));
    }
    if let Ok(x) = value.extract::<f64>() {
        return Ok(AttributeValue::Float(x));
    }
    Ok(AttributeValue::Text(value.str()?.to_string()))
}

#[pymethods]
impl PyDecision {
    #[new]
    #[pyo3(signature = (placement, pattern, params, degraded, policy, *, run = None,
                        observer = None, explanation = None, verbs = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        placement: &Bound<'_, PyAny>,
        pattern: String,
        params: Vec<(String, String)>,
        degraded: Vec<String>,
        policy: String,
        run: Option<PyObject>,
        observer: Option<PyObject>,
        explanation: Option<&Bound<'_, PyDict>>,
        verbs: Option<PyRef<'_, PyRequestVerbs>>,
    ) -> PyResult<Self> {
        let placement = placement_of(placement).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "a policy returns a placement (Dp, Pd, Split, Segment or what start_generate \
                 returns), got {}",
                placement
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        if let Some(verbs) = verbs {
            verbs.exec().place(&placement);
        }
        let explanation = match explanation {
            None => Vec::new(),
            Some(dict) => dict
                .iter()
                .map(|(k, v)| Ok((k.str()?.to_string(), attribute(&v)?)))
                .collect::<PyResult<_>>()?,
        };
        Ok(PyDecision {
            placement,
            route: RouteNote {
                pattern,
                params,
                degraded,
            },
            policy,
            run: run.map(Arc::new),
            observer: observer.map(Arc::new),
            explanation,
        })
    }
}

impl PyDecision {
    pub fn decision(&self, py: Python<'_>) -> Decision<Run> {
        let clone = |r: &Option<Run>| r.as_ref().map(|r| Arc::new(r.clone_ref(py)));
        Decision {
            placement: self.placement.clone(),
            route: self.route.clone(),
            policy: self.policy.clone(),
            run: clone(&self.run),
            observer: clone(&self.observer),
            explanation: self.explanation.clone(),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDp>()?;
    m.add_class::<PySegment>()?;
    m.add_class::<PyPd>()?;
    m.add_class::<PySplit>()?;
    m.add_class::<PyDecision>()?;
    Ok(())
}
