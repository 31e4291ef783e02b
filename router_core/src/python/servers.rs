//! `MockEngineServer` and `MockOpenAIWorker` for Python: each runs its server on a tokio runtime
//! thread; constructing one binds and starts it, `shutdown` stops it. Neither holds the GIL while
//! it serves, binds or stops.

use crate::background_server::BackgroundServer;
use crate::error::RouterCoreError;
use crate::mock_engine::{start_mock_engine, MockEngineConfig};
use crate::mock_worker::start_mock_worker;
use pyo3::prelude::*;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

fn socket_addr(host: &str, port: u16) -> Result<SocketAddr, RouterCoreError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|err| RouterCoreError::Server(format!("cannot resolve {host}:{port}: {err}")))?
        .next()
        .ok_or_else(|| RouterCoreError::Server(format!("{host} resolves to no address")))
}

fn grace(grace_s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(grace_s).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!("grace_s must be >= 0, got {grace_s}"))
    })
}

/// The state both server classes share.
struct Running {
    server: Mutex<BackgroundServer>,
    port: u16,
}

impl Running {
    fn new(server: BackgroundServer) -> Self {
        Running {
            port: server.local_addr().port(),
            server: Mutex::new(server),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BackgroundServer> {
        self.server.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn shutdown(&self, py: Python<'_>, grace_s: f64) -> PyResult<()> {
        let grace = grace(grace_s)?;
        Ok(py.allow_threads(|| self.lock().shutdown(grace))?)
    }
}

/// Writes a server class's one `#[pymethods]` block: its own constructor, then the lifecycle
/// methods both classes share over their `running` field (PyO3 has no method inheritance short
/// of a Python base class, which would change the classes' published shape).
macro_rules! server_pymethods {
    ($class:ty { $($constructor:tt)* }) => {
        #[pymethods]
        impl $class {
            $($constructor)*

            /// The bound port (the one picked when 0 was asked for).
            #[getter]
            fn port(&self) -> u16 {
                self.running.port
            }

            fn is_running(&self) -> bool {
                self.running.lock().is_running()
            }

            /// Health goes NOT_SERVING, new connections are refused, open streams get `grace_s`.
            #[pyo3(signature = (grace_s = 1.0))]
            fn shutdown(&self, py: Python<'_>, grace_s: f64) -> PyResult<()> {
                self.running.shutdown(py, grace_s)
            }

            fn __enter__(slf: Py<Self>) -> Py<Self> {
                slf
            }

            #[pyo3(signature = (*_exc))]
            fn __exit__(
                &self,
                py: Python<'_>,
                _exc: &Bound<'_, pyo3::types::PyTuple>,
            ) -> PyResult<()> {
                self.running.shutdown(py, 0.0)
            }
        }
    };
}

/// The mock engine (synthetic tokens over the real proto, no model): ONLY for router-overhead
/// benchmarks and fault-injection tests.
#[pyclass(name = "MockEngineServer", module = "router_core._router_core", frozen)]
pub struct PyMockEngineServer {
    running: Running,
}

server_pymethods!(PyMockEngineServer {
    #[new]
    #[pyo3(signature = (port, host = "127.0.0.1", *, threads = 1, engine_id = "mock",
                        role = "any", served_model = "", tokens_per_chunk = 1,
                        chunk_delay_ms = 0.0,
                        coalesce = true, fail_rate = 0.0, fail_after_tokens = 0,
                        abort_after_tokens = 0, fail_remote_send = false, unhealthy_file = "",
                        page_size = 16, vocab_size = 49152, seed = 0, engine_token = "",
                        push_stats = true, cache_blocks = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        port: u16,
        host: &str,
        threads: usize,
        engine_id: &str,
        role: &str,
        served_model: &str,
        tokens_per_chunk: u32,
        chunk_delay_ms: f64,
        coalesce: bool,
        fail_rate: f64,
        fail_after_tokens: u32,
        abort_after_tokens: u32,
        fail_remote_send: bool,
        unhealthy_file: &str,
        page_size: u32,
        vocab_size: u32,
        seed: u64,
        engine_token: &str,
        push_stats: bool,
        cache_blocks: u32,
    ) -> PyResult<Self> {
        let config = MockEngineConfig {
            engine_id: engine_id.to_owned(),
            role: role.to_owned(),
            served_model: served_model.to_owned(),
            tokens_per_chunk,
            chunk_delay_ms,
            coalesce,
            fail_rate,
            fail_after_tokens,
            abort_after_tokens,
            fail_remote_send,
            unhealthy_file: unhealthy_file.to_owned(),
            page_size,
            cache_blocks,
            vocab_size,
            seed,
            engine_token: engine_token.to_owned(),
            push_stats,
        };
        config.validate()?;
        let server =
            py.allow_threads(|| start_mock_engine(socket_addr(host, port)?, config, threads))?;
        Ok(PyMockEngineServer {
            running: Running::new(server),
        })
    }
});

/// An OpenAI-style HTTP worker streaming synthetic tokens: ONLY for the router benchmark's
/// anchors.
#[pyclass(name = "MockOpenAIWorker", module = "router_core._router_core", frozen)]
pub struct PyMockOpenAIWorker {
    running: Running,
}

server_pymethods!(PyMockOpenAIWorker {
    #[new]
    #[pyo3(signature = (port, host = "127.0.0.1", *, threads = 1))]
    fn new(py: Python<'_>, port: u16, host: &str, threads: usize) -> PyResult<Self> {
        let server = py.allow_threads(|| start_mock_worker(socket_addr(host, port)?, threads))?;
        Ok(PyMockOpenAIWorker {
            running: Running::new(server),
        })
    }
});
