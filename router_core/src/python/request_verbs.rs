//! `RequestVerbs`: one request's executor as a verb-API policy reaches it while it decides. Each
//! verb is one call into Rust (a `PendingCall` the policy's side awaits on its loop) and one
//! answer back; the executor records what the verb takes in the request's scope, does the engine
//! table's accounting and keeps the verb's span, so nothing about the verb is left to Python.

use super::bridge_jobs::Crossings;
use super::pollable::{Answer, PyPendingCall};
use super::verb_values::{verb_error, PyKvReservation, PySendResult};
use crate::executor::{KvReservation, RequestExec, SendResult, VerbError};
use crate::front::engine_names::engine_name;
use pyo3::prelude::*;
use std::sync::Arc;

#[pyclass(name = "RequestVerbs", module = "router_core._router_core", frozen)]
pub struct PyRequestVerbs {
    exec: Arc<RequestExec>,
    crossings: Arc<Crossings>,
}

impl PyRequestVerbs {
    pub fn new(exec: Arc<RequestExec>, crossings: Arc<Crossings>) -> Self {
        PyRequestVerbs { exec, crossings }
    }

    pub fn exec(&self) -> &Arc<RequestExec> {
        &self.exec
    }
}

fn reservation(answer: Result<KvReservation, VerbError>) -> Answer {
    Box::new(move |py| match answer {
        Ok(reservation) => Ok(Py::new(py, PyKvReservation { reservation })?.into_any()),
        Err(err) => Err(verb_error(py, &err)),
    })
}

fn sent(answer: Result<SendResult, VerbError>) -> Answer {
    Box::new(move |py| match answer {
        Ok(sent) => Ok(Py::new(py, PySendResult::from(sent))?.into_any()),
        Err(err) => Err(verb_error(py, &err)),
    })
}

#[pymethods]
impl PyRequestVerbs {
    /// PrepRecv on engine `engine` for tokens[..end] of the request's tokens so far (default:
    /// all but the last): a KvReservation when awaited.
    #[pyo3(signature = (engine, end = None))]
    fn prep_recv(&self, engine: u32, end: Option<u64>) -> PyPendingCall {
        let (exec, crossings) = (self.exec.clone(), self.crossings.clone());
        Crossings::count(&crossings.verb_call);
        PyPendingCall::new(self.exec.runtime.clone(), async move {
            let answer = exec.prep_recv(engine, end).await;
            Crossings::count(&crossings.verb_answer);
            reservation(answer)
        })
    }

    /// RemoteSend from engine `engine`: KV for tokens[begin..end] (default: what `kv` lacks)
    /// into `kv`'s reservation; a SendResult when awaited. Raises TransferFailed when the
    /// transfer failed on the engines' side, VerbOrderError for a range or reservation the
    /// contract forbids.
    #[pyo3(signature = (engine, kv, begin = None, end = None))]
    fn remote_send(
        &self,
        engine: u32,
        kv: PyRef<'_, PyKvReservation>,
        begin: Option<u64>,
        end: Option<u64>,
    ) -> PyPendingCall {
        let (exec, kv) = (self.exec.clone(), kv.reservation.clone());
        let crossings = self.crossings.clone();
        Crossings::count(&crossings.verb_call);
        PyPendingCall::new(self.exec.runtime.clone(), async move {
            let answer = exec.remote_send(engine, &kv, begin, end).await;
            Crossings::count(&crossings.verb_answer);
            sent(answer)
        })
    }

    /// The id engines know the request's current attempt by.
    #[getter]
    fn engine_request_id(&self) -> String {
        self.exec.state().engine_request_id.clone()
    }

    /// Tokens generated so far (by the segments that have ended).
    #[getter]
    fn generated(&self) -> u64 {
        self.exec.state().generated()
    }

    /// (verb, engine id) of the newest verb call not answered yet, or None.
    fn waiting_on(&self) -> Option<(&'static str, String)> {
        let state = self.exec.state();
        state
            .scope
            .waiting_on()
            .map(|(verb, num)| (verb.name(), engine_name(num)))
    }

    /// Every verb the request issued, in order: (verb, engine id).
    #[getter]
    fn verbs(&self) -> Vec<(&'static str, String)> {
        let state = self.exec.state();
        state
            .scope
            .verbs()
            .iter()
            .map(|&(verb, num)| (verb.name(), engine_name(num)))
            .collect()
    }
}
