//! Hosting the mock engine: the Engine service plus grpc.health.v1 on a background tokio
//! runtime, the `unhealthy_file` health switch, and a clean shutdown (health NOT_SERVING, new
//! connections refused, open streams given the grace period), and the deployment's engine token.

use super::config::MockEngineConfig;
use super::service::MockEngine;
use crate::background_server::{BackgroundServer, ServeFuture, Shutdown};
use crate::error::{Result, RouterCoreError};
use crate::rpc::pb::engine_server::EngineServer;
use crate::rpc::tonic_health::server::{health_reporter, HealthReporter};
use crate::rpc::tonic_health::ServingStatus;
use crate::rpc::{token_check, ENGINE_SERVICE_NAME, MAX_MESSAGE_BYTES};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::service::interceptor::InterceptedService;
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

/// Reflects `unhealthy_file` into the health status (fault injection for router tests), and
/// into `serving`: like a real engine that turns NOT_SERVING (engine/server/main.py, draining),
/// the mock ends its KV event streams while it is not serving.
async fn watch_unhealthy_file(
    reporter: HealthReporter,
    serving_now: watch::Sender<bool>,
    path: String,
    mut shutdown: Shutdown,
) {
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
            serving_now.send_replace(serving);
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
        let (serving_now, serving) = watch::channel(true);
        let engine = MockEngine::new(config.clone(), shutdown.clone(), serving);
        let engine = EngineServer::new(engine)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let engine = InterceptedService::new(engine, token_check(&config.engine_token));
        set_health(&reporter, ServingStatus::Serving).await;
        tokio::spawn(watch_unhealthy_file(
            reporter.clone(),
            serving_now,
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

#[cfg(test)]
mod tests {
    //! The generated client against the mock engine over a real socket: the Rust side of the
    //! contract (the Python tests cover the same server through grpcio).
    use super::*;
    use crate::mock_engine::synthetic_token;
    use crate::rpc::pb::engine_client::EngineClient;
    use crate::rpc::pb::{KvEventsRequest, SamplingParams, StartGenerateRequest};
    use crate::rpc::tonic_health::pb::health_check_response::ServingStatus as Status;
    use crate::rpc::tonic_health::pb::health_client::HealthClient;
    use crate::rpc::tonic_health::pb::HealthCheckRequest;
    use tonic::transport::Channel;
    use tonic::Request;

    async fn channel(addr: SocketAddr) -> Channel {
        Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    async fn health(channel: &Channel, service: &str) -> i32 {
        let request = HealthCheckRequest {
            service: service.into(),
        };
        let mut client = HealthClient::new(channel.clone());
        client.check(request).await.unwrap().into_inner().status
    }

    #[tokio::test]
    async fn generated_client_talks_to_the_mock_engine() {
        let mut server = start_mock_engine(
            "127.0.0.1:0".parse().unwrap(),
            MockEngineConfig::default(),
            2,
        )
        .unwrap();
        let channel = channel(server.local_addr()).await;
        assert_eq!(health(&channel, "").await, Status::Serving as i32);
        assert_eq!(
            health(&channel, ENGINE_SERVICE_NAME).await,
            Status::Serving as i32
        );
        let mut engine = EngineClient::new(channel.clone());
        let mut events = engine
            .kv_events(KvEventsRequest { snapshot: true })
            .await
            .unwrap()
            .into_inner();
        let first = events.message().await.unwrap().unwrap();
        // The first batch carries the load: a router knows from it that this engine pushes.
        assert!(first.snapshot && first.stats.is_some_and(|s| s.running_requests == 0));
        let prompt: Vec<i32> = (0..20).collect();
        let request = StartGenerateRequest {
            request_id: "r".into(),
            tokens: prompt.clone(),
            sampling: Some(SamplingParams {
                max_tokens: 4,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut stream = engine.start_generate(request).await.unwrap().into_inner();
        let chunk = stream.message().await.unwrap().unwrap();
        let prompt_u32: Vec<u32> = (0..20).collect();
        let expected: Vec<i32> = (0..4)
            .map(|p| synthetic_token(&prompt_u32, p) as i32)
            .collect();
        assert_eq!(chunk.token_ids, expected);
        assert_eq!(chunk.finish_reason, "length");
        assert!(stream.message().await.unwrap().is_none());
        // The finished prompt's one full block reached the KV event stream, and the load pushed
        // on it (in batches of their own or with the events) ends at the engine idle again.
        let (mut stored, mut idle) = (None, false);
        while stored.is_none() || !idle {
            let wait = Duration::from_secs(5);
            let batch = tokio::time::timeout(wait, events.message()).await;
            let batch = batch.unwrap().unwrap().unwrap();
            if let Some(stats) = &batch.stats {
                idle = stats.cached_blocks == 1 && stats.running_requests == 0;
            }
            if !batch.stored.is_empty() {
                stored = Some((batch.first_seq, batch.stored.len()));
            }
        }
        assert_eq!(stored, Some((1, 1)));
        server.shutdown(Duration::from_secs(1)).unwrap();
        // Shutdown ended the open KVEvents stream instead of waiting for the grace period.
        assert!(events.message().await.map_or(true, |m| m.is_none()));
    }

    #[tokio::test]
    async fn engine_token_is_required_but_health_stays_open() {
        let config = MockEngineConfig {
            engine_token: "deployment-token".into(),
            ..Default::default()
        };
        let mut server = start_mock_engine("127.0.0.1:0".parse().unwrap(), config, 1).unwrap();
        let channel = channel(server.local_addr()).await;
        assert_eq!(health(&channel, "").await, Status::Serving as i32);
        let events = || KvEventsRequest { snapshot: true };
        let mut engine = EngineClient::new(channel.clone());
        let refused = engine.kv_events(events()).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        let mut wrong = Request::new(events());
        let bad = "Bearer deployment-tokeX".parse().unwrap();
        wrong.metadata_mut().insert("authorization", bad);
        let refused = engine.kv_events(wrong).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        let mut right = Request::new(events());
        let good = "Bearer deployment-token".parse().unwrap();
        right.metadata_mut().insert("authorization", good);
        assert!(engine.kv_events(right).await.is_ok());
        server.shutdown(Duration::from_secs(1)).unwrap();
    }

    #[tokio::test]
    async fn an_engine_that_does_not_push_sends_events_only() {
        let config = MockEngineConfig {
            push_stats: false,
            ..Default::default()
        };
        let mut server = start_mock_engine("127.0.0.1:0".parse().unwrap(), config, 1).unwrap();
        let mut engine = EngineClient::new(channel(server.local_addr()).await);
        let mut events = engine
            .kv_events(KvEventsRequest { snapshot: true })
            .await
            .unwrap()
            .into_inner();
        let first = events.message().await.unwrap().unwrap();
        assert!(first.snapshot && first.stats.is_none());
        server.shutdown(Duration::from_secs(1)).unwrap();
    }

    #[tokio::test]
    async fn kv_event_streams_end_while_not_serving() {
        let flag = std::env::temp_dir().join(format!("mock-unhealthy-{}", std::process::id()));
        let config = MockEngineConfig {
            unhealthy_file: flag.to_string_lossy().into_owned(),
            ..Default::default()
        };
        let mut server = start_mock_engine("127.0.0.1:0".parse().unwrap(), config, 1).unwrap();
        let mut engine = EngineClient::new(channel(server.local_addr()).await);
        let mut events = engine
            .kv_events(KvEventsRequest { snapshot: true })
            .await
            .unwrap()
            .into_inner();
        assert!(events.message().await.unwrap().unwrap().snapshot);
        std::fs::write(&flag, b"").unwrap();
        // The health switch is looked at every 100 ms: the stream ends, as a draining engine's.
        let ended = tokio::time::timeout(Duration::from_secs(5), events.message()).await;
        std::fs::remove_file(&flag).unwrap();
        assert!(ended.unwrap().map_or(true, |m| m.is_none()));
        server.shutdown(Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn bad_config_is_refused_before_binding() {
        let config = MockEngineConfig {
            fail_rate: 2.0,
            ..Default::default()
        };
        assert!(matches!(
            start_mock_engine("127.0.0.1:0".parse().unwrap(), config, 1),
            Err(RouterCoreError::InvalidArgument(_))
        ));
    }
}
