//! Two exchanges over real sockets: what one replica's table dispatches shows in the other's
//! before any Stats, the token is required, and a replica that dials itself stops.

use super::*;
use crate::engine_table::{EngineTable, Role};
use crate::router::lock;
use crate::rpc::pb::router_peer_client::RouterPeerClient;
use crate::rpc::pb::{DeltaBatch, EngineDelta};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Code;

const ENGINE: &str = "10.0.0.7:50051";

fn table() -> Arc<Mutex<EngineTable>> {
    let mut t = EngineTable::new();
    t.upsert(0, Role::Any);
    t.upsert(1, Role::Any);
    Arc::new(Mutex::new(t))
}

fn config(peers: Vec<String>, token: &str) -> PeerConfig {
    PeerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        peers,
        peers_dns: None,
        engine_token: token.to_owned(),
        flush: Duration::from_millis(2),
        dns_every: Duration::from_millis(200),
    }
}

/// Waits (generously: the machine may be loaded) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_peers_dispatch_reaches_this_table_before_any_stats() {
    let rt = runtime();
    let (table_a, table_b) = (table(), table());
    let b = PeerExchange::start(rt.handle(), table_b.clone(), config(vec![], "tok")).unwrap();
    let a_config = config(vec![b.local_addr().to_string()], "tok");
    let a = PeerExchange::start(rt.handle(), table_a.clone(), a_config).unwrap();
    // The same engine is A's engine 0 and B's engine 1.
    a.set_engine(0, ENGINE);
    b.set_engine(1, ENGINE);
    wait_until("A's stream to B", || {
        PeerCounters::get(&a.counters().streams_up) == 1
    });
    lock(&table_a).on_dispatch(0, 100, 20).unwrap();
    wait_until("B to count A's dispatch", || {
        lock(&table_b).get(1).unwrap().router_tokens == 120
    });
    {
        let t = lock(&table_b);
        let row = t.get(1).unwrap();
        assert_eq!((row.router_seqs, row.inflight), (1, 0), "A's, not B's own");
        assert_eq!(row.pending_prefill_tokens(), 100);
        assert_eq!(t.get(0).unwrap().router_tokens, 0);
    }
    assert_eq!(PeerCounters::get(&b.counters().deltas_received), 1);
    // B's own dispatches go nowhere (A is not its peer) and A's table is as before.
    assert_eq!(lock(&table_a).get(0).unwrap().router_tokens, 120);
    // A stops: its stream ends at B, and B's next Stats covers what A sent.
    a.shutdown().unwrap();
    wait_until("A's stream to end at B", || {
        PeerCounters::get(&b.counters().streams_in) == 0
    });
    let mut t = lock(&table_b);
    t.stats_requested(1).unwrap();
    let quiet = crate::engine_table::StatsUpdate::idle(1, 1.0);
    t.update_stats(1, &quiet).unwrap();
    assert_eq!(t.get(1).unwrap().router_tokens, 0);
}

#[test]
fn the_service_wants_the_deployment_token() {
    let rt = runtime();
    let b = PeerExchange::start(rt.handle(), table(), config(vec![], "tok")).unwrap();
    b.set_engine(0, ENGINE);
    let url = format!("http://{}", b.local_addr());
    let batch = DeltaBatch {
        sender_id: "someone".into(),
        engines: vec![EngineDelta {
            address: ENGINE.into(),
            tokens: 5,
            ..EngineDelta::default()
        }],
    };
    let status = rt.block_on(async {
        let mut client = RouterPeerClient::connect(url).await.unwrap();
        client
            .deltas(futures_util::stream::iter(vec![batch]))
            .await
            .unwrap_err()
    });
    assert_eq!(status.code(), Code::Unauthenticated);
    assert_eq!(PeerCounters::get(&b.counters().deltas_received), 0);
}

#[test]
fn a_replica_that_dials_itself_stops_and_counts_nothing_twice() {
    let rt = runtime();
    let t = table();
    // Port 0 is not known before binding: bind once to learn a free port, then dial it.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let mut cfg = config(vec![format!("127.0.0.1:{port}")], "");
    cfg.listen = format!("127.0.0.1:{port}").parse().unwrap();
    let me = PeerExchange::start(rt.handle(), t.clone(), cfg).unwrap();
    me.set_engine(0, ENGINE);
    wait_until("the stream to itself", || {
        PeerCounters::get(&me.counters().streams_up) == 1
    });
    lock(&t).on_dispatch(0, 10, 1).unwrap();
    wait_until("the stream to itself to stop", || {
        PeerCounters::get(&me.counters().streams_up) == 0
    });
    assert_eq!(lock(&t).get(0).unwrap().router_tokens, 11);
    assert_eq!(PeerCounters::get(&me.counters().deltas_received), 0);
}
