//! `RouterPeerExchange` for Python: pyrouter/replicas/peer_exchange.py starts it when the router has
//! peers, keeps its engine addresses in step with the membership, and reads its counters for
//! /metrics. It runs on the router's tokio runtime (the engine clients' and the front's).

use super::router::PyRouterCore;
use crate::peer::{PeerConfig, PeerCounters, PeerExchange};
use pyo3::prelude::*;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

fn listen_addr(host: &str, port: u16) -> PyResult<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!("cannot resolve {host}:{port}"))
        })
}

fn interval(name: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!("{name} must be > 0, got {seconds}"))
        })
}

#[pyclass(
    name = "RouterPeerExchange",
    module = "router_core._router_core",
    frozen
)]
pub struct PyRouterPeerExchange {
    inner: PeerExchange,
}

#[pymethods]
impl PyRouterPeerExchange {
    #[new]
    #[pyo3(signature = (core, host, port, *, peers, peers_dns = None, engine_token = "",
                        flush_s = 0.005, dns_every_s = 5.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        core: PyRef<'_, PyRouterCore>,
        host: &str,
        port: u16,
        peers: Vec<String>,
        peers_dns: Option<String>,
        engine_token: &str,
        flush_s: f64,
        dns_every_s: f64,
    ) -> PyResult<Self> {
        let config = PeerConfig {
            listen: listen_addr(host, port)?,
            peers,
            peers_dns,
            engine_token: engine_token.to_owned(),
            flush: interval("flush_s", flush_s)?,
            dns_every: interval("dns_every_s", dns_every_s)?,
        };
        let table = core.core.table.clone();
        let runtime = pyo3_async_runtimes::tokio::get_runtime().handle().clone();
        let inner = py.allow_threads(|| PeerExchange::start(&runtime, table, config))?;
        Ok(PyRouterPeerExchange { inner })
    }

    /// The port the RouterPeer service listens on.
    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    /// Engine `num` of this router is the one at `address` (HOST:PORT, as every router dials it).
    fn set_engine(&self, num: u32, address: &str) {
        self.inner.set_engine(num, address);
    }

    fn remove_engine(&self, num: u32) {
        self.inner.remove_engine(num);
    }

    /// The router replaced its RouterCore: record and apply on this one's engine table.
    fn set_core(&self, core: PyRef<'_, PyRouterCore>) {
        self.inner.set_table(core.core.table.clone());
    }

    /// (streams to peers up, streams from peers open, engine deltas received, deltas for
    /// engines this router does not know, batches sent)
    fn counters(&self) -> (u64, u64, u64, u64, u64) {
        let c = self.inner.counters();
        (
            PeerCounters::get(&c.streams_up),
            PeerCounters::get(&c.streams_in),
            PeerCounters::get(&c.deltas_received),
            PeerCounters::get(&c.deltas_unknown_engine),
            PeerCounters::get(&c.batches_sent),
        )
    }

    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.allow_threads(|| self.inner.shutdown())?)
    }
}
