//! `EngineUpkeep` and `UpkeepPace` for Python: the membership starts one engine's upkeep
//! (crate::engine_upkeep) once it knows the engine's model, and hears from it only when the
//! engine turns healthy or unhealthy (`next_change`, an awaitable on the client's loop). The
//! polls, their Stats and the KV events never cross into Python.

use super::engine_client::PyEngineRpcClient;
use super::router::PyRouterCore;
use crate::engine_upkeep::pace::{UpkeepPace, DEFAULT_LIVENESS_S};
use crate::engine_upkeep::{EngineUpkeep, Health};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::Arc;

/// How often each engine is polled: every `poll_s` for its load, or only every `liveness_s`
/// while it pushes its load on its KV event stream; every interval stretched alike once the
/// fleet would poll more than `polls_per_s` a second (0: no bound).
#[pyclass(name = "UpkeepPace", module = "router_core._router_core", frozen)]
pub struct PyUpkeepPace {
    pace: Arc<UpkeepPace>,
}

#[pymethods]
impl PyUpkeepPace {
    #[new]
    #[pyo3(signature = (poll_s, polls_per_s, liveness_s = DEFAULT_LIVENESS_S))]
    fn new(poll_s: f64, polls_per_s: f64, liveness_s: f64) -> PyResult<Self> {
        let positive = |s: f64| s.is_finite() && s > 0.0;
        let bounded = polls_per_s.is_finite() && polls_per_s >= 0.0;
        if !(positive(poll_s) && positive(liveness_s) && bounded) {
            return Err(PyValueError::new_err(format!(
                "poll_s and liveness_s must be > 0 and polls_per_s >= 0, got poll_s {poll_s}, \
                 liveness_s {liveness_s}, polls_per_s {polls_per_s}"
            )));
        }
        Ok(PyUpkeepPace {
            pace: Arc::new(UpkeepPace::new(poll_s, liveness_s, polls_per_s)),
        })
    }

    #[getter]
    fn poll_s(&self) -> f64 {
        self.pace.poll_s()
    }

    #[getter]
    fn liveness_s(&self) -> f64 {
        self.pace.liveness_s()
    }

    #[getter]
    fn polls_per_s(&self) -> f64 {
        self.pace.polls_per_s()
    }

    /// Seconds between the polls of an engine that does not push its load, for the fleet now.
    #[getter]
    fn interval_s(&self) -> f64 {
        self.pace.interval_s(false)
    }

    /// Seconds between the liveness polls of an engine that pushes its load, for the fleet now.
    #[getter]
    fn liveness_interval_s(&self) -> f64 {
        self.pace.interval_s(true)
    }

    /// Engines whose KV event stream pushes their load now.
    #[getter]
    fn pushing(&self) -> usize {
        self.pace.pushing()
    }

    /// The fleet's size (the membership sets it as engines come and go).
    fn set_engines(&self, engines: usize) {
        self.pace.set_engines(engines);
    }
}

/// One engine's upkeep, running from construction until `stop` or until it is dropped.
#[pyclass(name = "EngineUpkeep", module = "router_core._router_core", frozen)]
pub struct PyEngineUpkeep {
    upkeep: Arc<EngineUpkeep>,
    client: Py<PyEngineRpcClient>,
}

impl Drop for PyEngineUpkeep {
    /// Its tasks hold the upkeep: without this a dropped upkeep would poll on for ever.
    fn drop(&mut self) {
        self.upkeep.stop();
    }
}

fn health_tuple(health: Health) -> (bool, String) {
    (health.serving, health.reason)
}

#[pymethods]
impl PyEngineUpkeep {
    /// Polls engine `engine_id` through `client` at `pace` into `core`'s table, and follows its
    /// KV events into `core`'s index. Call on the client's loop.
    #[new]
    fn new(
        client: Bound<'_, PyEngineRpcClient>,
        core: PyRef<'_, PyRouterCore>,
        engine_id: u32,
        pace: PyRef<'_, PyUpkeepPace>,
    ) -> Self {
        let rpc = client.get().rpc().clone();
        let runtime = pyo3_async_runtimes::tokio::get_runtime().handle().clone();
        PyEngineUpkeep {
            upkeep: EngineUpkeep::start(
                engine_id,
                rpc,
                core.core.clone(),
                pace.pace.clone(),
                runtime,
            ),
            client: client.unbind(),
        }
    }

    /// As of the latest poll (False until the first answers).
    #[getter]
    fn healthy(&self) -> bool {
        self.upkeep.health().serving
    }

    /// Why it is unhealthy ("" while healthy).
    #[getter]
    fn reason(&self) -> String {
        self.upkeep.health().reason
    }

    /// Polls so far.
    #[getter]
    fn polls(&self) -> u64 {
        self.upkeep.polls()
    }

    /// Stats the engine pushed on its KV event stream, applied so far.
    #[getter]
    fn pushes(&self) -> u64 {
        self.upkeep.pushes()
    }

    /// Its KV event stream is open and pushing its load (polled only for liveness then).
    #[getter]
    fn pushing(&self) -> bool {
        self.upkeep.pushing()
    }

    /// Awaitable: (healthy, reason) once the engine's health differs from `known` (at once if
    /// it already does).
    fn next_change<'py>(&self, py: Python<'py>, known: bool) -> PyResult<Bound<'py, PyAny>> {
        let upkeep = self.upkeep.clone();
        let wait = async move { Ok(health_tuple(upkeep.wait_change(known).await)) };
        self.client.get().answers().start(
            py,
            wait,
            |py, (serving, reason)| Ok((serving, reason).into_pyobject(py)?.into_any().unbind()),
            true,
        )
    }

    /// Apply to `core` from now on (the router rebuilt its core): the KV view starts over there
    /// from a snapshot.
    fn set_core(&self, core: PyRef<'_, PyRouterCore>) {
        self.upkeep.set_core(core.core.clone());
    }

    /// Out of rotation whatever its health while `draining`.
    fn set_draining(&self, draining: bool) {
        self.upkeep.set_draining(draining);
    }

    /// A request failed on it: out of rotation, its load forgotten, until a poll finds it
    /// serving. False when it was unhealthy already.
    fn mark_unhealthy(&self, py: Python<'_>, reason: &str) -> bool {
        py.allow_threads(|| self.upkeep.mark_unhealthy(reason))
    }

    /// Ends its polls and KV event stream.
    fn stop(&self) {
        self.upkeep.stop();
    }
}

pub fn register_constants(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("UPKEEP_LIVENESS_S", DEFAULT_LIVENESS_S)
}
