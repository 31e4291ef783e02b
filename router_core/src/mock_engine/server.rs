//! Hosting the mock engine: the Engine service plus grpc.health.v1 on a background tokio
//! runtime, the `unhealthy_file` health switch, and a clean shutdown (health NOT_SERVING, new
//! connections refused, open streams given the grace period).

use super::config::MockEngineConfig;
use super::service::MockEngine;
use crate::background_server::{BackgroundServer, ServeFuture, Shutdown};
use crate::error::{Result, RouterCoreError};
use crate::rpc::pb::engine_server::EngineServer;
use crate::rpc::tonic_health::server::{health_reporter, HealthReporter};
use crate::rpc::tonic_health::ServingStatus;
use crate::rpc::{ENGINE_SERVICE_NAME, MAX_MESSAGE_BYTES};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

/// How often the `unhealthy_file` switch is looked at.
const HEALTH_POLL: Duration = Duration::from_millis(100);

/// Starts a mock engine on `addr` (port 0: any free port) with `threads` runtime threads.
pub fn start_mock_engine(
    addr: SocketAddr,
    config: MockEngineConfig,
    threads: usize,
) -> Result<BackgroundServer> {
    config.validate()?;
    BackgroundServer::start("mock-engine", addr, threads, move |listener, shutdown| {
        serve(listener, config, shutdown)
    })
}

async fn set_health(reporter: &HealthReporter, status: ServingStatus) {
    for name in ["", ENGINE_SERVICE_NAME] {
        reporter.set_service_status(name, status).await;
    }
}

/// Reflects `unhealthy_file` into the health status (fault injection for router tests).
async fn watch_unhealthy_file(reporter: HealthReporter, path: String, mut shutdown: Shutdown) {
    let mut last = None;
    loop {
        let serving = path.is_empty() || !Path::new(&path).exists();
        if last != Some(serving) {
            let status = if serving {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            set_health(&reporter, status).await;
            last = Some(serving);
        }
        tokio::select! {
            _ = shutdown.begun() => return,
            _ = tokio::time::sleep(HEALTH_POLL) => {}
        }
    }
}

fn serve(listener: TcpListener, config: MockEngineConfig, shutdown: Shutdown) -> ServeFuture {
    Box::pin(async move {
        let (reporter, health_service) = health_reporter();
        let engine = EngineServer::new(MockEngine::new(config.clone(), shutdown.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        set_health(&reporter, ServingStatus::Serving).await;
        tokio::spawn(watch_unhealthy_file(
            reporter.clone(),
            config.unhealthy_file.clone(),
            shutdown.clone(),
        ));
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut stopping = shutdown.clone();
        let stopped = async move {
            stopping.begun().await;
            set_health(&reporter, ServingStatus::NotServing).await;
        };
        Server::builder()
            .add_service(health_service)
            .add_service(engine)
            .serve_with_incoming_shutdown(incoming, stopped)
            .await
            .map_err(|err| RouterCoreError::Server(format!("mock engine: {err}")))
    })
}
