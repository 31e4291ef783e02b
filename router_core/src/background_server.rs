//! A network server on its own tokio runtime thread — or as a task on a runtime that already
//! runs (the router's HTTP front shares the runtime its engine clients use) — started and
//! stopped from synchronous code (the Python bindings call these with the GIL released). One
//! implementation for every server the crate runs (the router front, the mock engine, the mock
//! OpenAI worker).

use crate::error::{Result, RouterCoreError};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

/// What a server's future resolves to; an error ends the server early.
pub type ServeFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// Tells a running server (and its long-lived streams) that it is shutting down.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Resolves once shutdown has begun (at once if it already has).
    pub async fn begun(&mut self) {
        // An error means the sender is gone: the server is going away all the same.
        let _ = self.0.wait_for(|stopping| *stopping).await;
    }

    pub fn has_begun(&self) -> bool {
        *self.0.borrow()
    }
}

/// A server running on a background thread; `shutdown` stops it (dropping it does too, without
/// waiting).
pub struct BackgroundServer {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<Duration>>,
    runner: Option<Runner>,
}

/// What runs the server: its own thread (and runtime), or a task on a shared runtime.
enum Runner {
    Thread(JoinHandle<Result<()>>),
    Task(mpsc::Receiver<Result<()>>),
}

fn server_error(context: &str, err: impl std::fmt::Display) -> RouterCoreError {
    RouterCoreError::Server(format!("{context}: {err}"))
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut multi = tokio::runtime::Builder::new_multi_thread();
        multi.worker_threads(threads);
        multi
    };
    builder
        .enable_all()
        .build()
        .map_err(|err| server_error("cannot start a tokio runtime", err))
}

impl BackgroundServer {
    /// Binds `addr` (port 0 picks a free port) and runs `serve(listener, shutdown)` on a runtime
    /// with `threads` worker threads (1 = a single-threaded runtime). Returns once the socket is
    /// bound, or the bind error.
    pub fn start<F>(name: &str, addr: SocketAddr, threads: usize, serve: F) -> Result<Self>
    where
        F: FnOnce(TcpListener, Shutdown) -> ServeFuture + Send + 'static,
    {
        let (bound_tx, bound_rx) = mpsc::channel::<Result<SocketAddr>>();
        let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let rt = match runtime(threads) {
                    Ok(rt) => rt,
                    Err(err) => {
                        let _ = bound_tx.send(Err(err.clone()));
                        return Err(err);
                    }
                };
                let result = rt.block_on(run(addr, serve, bound_tx, stop_rx));
                // Tasks still running after the grace period (open streams) are dropped.
                rt.shutdown_timeout(Duration::from_millis(100));
                result
            })
            .map_err(|err| server_error("cannot start the server thread", err))?;
        let local_addr = bound_rx
            .recv()
            .map_err(|err| server_error("server thread ended before binding", err))??;
        Ok(BackgroundServer {
            local_addr,
            stop: Some(stop_tx),
            runner: Some(Runner::Thread(thread)),
        })
    }

    /// As `start`, but as a task on `runtime` (which must outlive the server).
    pub fn start_on<F>(runtime: &tokio::runtime::Handle, addr: SocketAddr, serve: F) -> Result<Self>
    where
        F: FnOnce(TcpListener, Shutdown) -> ServeFuture + Send + 'static,
    {
        let (bound_tx, bound_rx) = mpsc::channel::<Result<SocketAddr>>();
        let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
        let (done_tx, done_rx) = mpsc::channel::<Result<()>>();
        runtime.spawn(async move {
            let _ = done_tx.send(run(addr, serve, bound_tx, stop_rx).await);
        });
        let local_addr = bound_rx
            .recv()
            .map_err(|err| server_error("server task ended before binding", err))??;
        Ok(BackgroundServer {
            local_addr,
            stop: Some(stop_tx),
            runner: Some(Runner::Task(done_rx)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether the server thread is still running (false once it failed or was shut down).
    pub fn is_running(&self) -> bool {
        match &self.runner {
            Some(Runner::Thread(thread)) => !thread.is_finished(),
            Some(Runner::Task(done)) => matches!(done.try_recv(), Err(mpsc::TryRecvError::Empty)),
            None => false,
        }
    }

    /// Stops accepting, lets requests in flight finish for up to `grace`, then ends every
    /// connection and joins the thread. Returns the error the server ended with, if any.
    /// Calling it again is a no-op.
    pub fn shutdown(&mut self, grace: Duration) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            // Err: the server already ended on its own; joining reports why.
            let _ = stop.send(grace);
        }
        match self.runner.take() {
            Some(Runner::Thread(thread)) => thread
                .join()
                .map_err(|_| RouterCoreError::Server("server thread panicked".into()))?,
            // Err: the task was dropped with its runtime; nothing is left running.
            Some(Runner::Task(done)) => done.recv().unwrap_or(Ok(())),
            None => Ok(()),
        }
    }
}

impl Drop for BackgroundServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Duration::ZERO);
        }
    }
}

async fn run<F>(
    addr: SocketAddr,
    serve: F,
    bound_tx: mpsc::Sender<Result<SocketAddr>>,
    stop_rx: oneshot::Receiver<Duration>,
) -> Result<()>
where
    F: FnOnce(TcpListener, Shutdown) -> ServeFuture,
{
    let bound = TcpListener::bind(addr)
        .await
        .and_then(|listener| Ok((listener.local_addr()?, listener)))
        .map_err(|err| server_error(&format!("cannot bind {addr}"), err));
    let listener = match bound {
        Ok((local, listener)) => {
            let _ = bound_tx.send(Ok(local));
            listener
        }
        Err(err) => {
            let _ = bound_tx.send(Err(err.clone()));
            return Err(err);
        }
    };
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let mut serving = serve(listener, Shutdown(shutdown_rx));
    let grace = tokio::select! {
        ended = &mut serving => return ended,
        grace = stop_rx => grace.unwrap_or(Duration::ZERO),
    };
    let _ = shutdown_tx.send(true);
    match tokio::time::timeout(grace, serving).await {
        Ok(ended) => ended,
        Err(_) => Ok(()), // grace over: whatever is still open is dropped with the runtime
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn echo_hello(listener: TcpListener, mut shutdown: Shutdown) -> ServeFuture {
        Box::pin(async move {
            loop {
                tokio::select! {
                    _ = shutdown.begun() => return Ok(()),
                    accepted = listener.accept() => {
                        let (mut socket, _) = accepted.map_err(|e| server_error("accept", e))?;
                        socket.write_all(b"hello").await.map_err(|e| server_error("write", e))?;
                    }
                }
            }
        })
    }

    #[test]
    fn serves_until_shut_down() {
        use std::io::Read;
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut server = BackgroundServer::start("test", addr, 1, echo_hello).unwrap();
        assert_ne!(server.local_addr().port(), 0);
        let mut reply = String::new();
        std::net::TcpStream::connect(server.local_addr())
            .unwrap()
            .read_to_string(&mut reply)
            .unwrap();
        assert_eq!(reply, "hello");
        assert!(server.is_running());
        server.shutdown(Duration::from_secs(1)).unwrap();
        assert!(!server.is_running());
        server.shutdown(Duration::from_secs(1)).unwrap();
        assert!(std::net::TcpStream::connect(server.local_addr()).is_err());
    }

    #[test]
    fn a_taken_port_is_an_error() {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut first = BackgroundServer::start("a", addr, 2, echo_hello).unwrap();
        let second = BackgroundServer::start("b", first.local_addr(), 1, echo_hello);
        assert!(matches!(second, Err(RouterCoreError::Server(_))));
        first.shutdown(Duration::ZERO).unwrap();
    }
}
