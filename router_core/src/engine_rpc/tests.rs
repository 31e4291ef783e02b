//! The router's engine client against the Rust mock engine over a real socket, a dead address
//! and a peer that never speaks HTTP/2: the token, health, the upkeep calls, the KV event
//! stream and how failures read (the codes grpc.aio would report).

use super::*;
use crate::mock_engine::{start_mock_engine, MockEngineConfig};
use std::net::TcpListener;

fn mock(engine_token: &str) -> crate::background_server::BackgroundServer {
    let config = MockEngineConfig {
        engine_token: engine_token.into(),
        ..MockEngineConfig::default()
    };
    start_mock_engine("127.0.0.1:0".parse().unwrap(), config, 1).unwrap()
}

fn client(address: &str, timeout: Duration, token: &str) -> EngineRpc {
    EngineRpc::connect_lazy(address, timeout, token, None).unwrap()
}

#[tokio::test]
async fn token_health_and_upkeep_calls() {
    let mut server = mock("s3cret");
    let address = server.local_addr().to_string();
    let good = client(&address, Duration::from_secs(5), "s3cret");
    let wrong = client(&address, Duration::from_secs(5), "guess");
    assert!(good.healthy(Duration::from_secs(2)).await);
    assert!(
        wrong.healthy(Duration::from_secs(2)).await,
        "health is open to probes"
    );
    assert_eq!(good.model_info(None).await.unwrap().engine_id, "mock");
    assert!(good.stats(Some(Duration::from_secs(2))).await.is_ok());
    let refused = wrong.stats(None).await.unwrap_err();
    assert_eq!(code_name(refused.code()), "UNAUTHENTICATED");
    assert!(!good.abort("nobody", false).await.unwrap());

    let events = good.kv_events(true, &tokio::runtime::Handle::current());
    let first = events.next().await.unwrap().expect("a snapshot batch");
    assert!(first.snapshot);
    assert!(events.cancel());
    assert!(matches!(events.next().await, Err(CallError::Cancelled)));
    server.shutdown(Duration::from_secs(1)).unwrap();
}

#[tokio::test]
async fn a_dead_address_is_unavailable_and_unhealthy() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // closed again when the listener drops: nothing answers there
    let dead = client(&format!("127.0.0.1:{port}"), Duration::from_secs(5), "");
    assert!(!dead.healthy(Duration::from_secs(2)).await);
    let failed = dead.stats(None).await.unwrap_err();
    assert_eq!(code_name(failed.code()), "UNAVAILABLE");
}

#[tokio::test]
async fn a_silent_peer_is_deadline_exceeded() {
    // Accepts TCP (the backlog) and never speaks HTTP/2: every deadline runs out, whichever of
    // the channel's timer and ours fires first.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap().to_string();
    let peer = client(&address, Duration::from_millis(200), "");
    for _ in 0..3 {
        let expired = peer.stats(None).await.unwrap_err();
        assert_eq!(code_name(expired.code()), "DEADLINE_EXCEEDED");
    }
    let expired = peer
        .model_info(Some(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert_eq!(code_name(expired.code()), "DEADLINE_EXCEEDED");
    assert!(!peer.healthy(Duration::from_millis(100)).await);
}
