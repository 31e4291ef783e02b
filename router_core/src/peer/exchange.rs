//! Starts a replica's side of the exchange: the `RouterPeer` service on its port, the flush of
//! the engine table's outbox every few milliseconds, and one stream per peer (the `--peer`
//! addresses and, re-resolved periodically, the `--peers-dns` records).

use super::receiver::{PeerService, PeerState};
use super::sender::stream_to_peer;
use super::{EngineAddresses, PeerCounters};
use crate::background_server::{BackgroundServer, ServeFuture, Shutdown};
use crate::engine_table::EngineTable;
use crate::error::{Result, RouterCoreError};
use crate::router::lock;
use crate::rpc::pb::router_peer_server::RouterPeerServer;
use crate::rpc::pb::{DeltaBatch, EngineDelta};
use crate::rpc::{token_check, MAX_MESSAGE_BYTES};
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

/// Batches waiting for the slowest peer stream before it skips ahead.
const BROADCAST_DEPTH: usize = 256;

#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Where this replica's `RouterPeer` service listens (`--peer-port`).
    pub listen: SocketAddr,
    /// Peers' `RouterPeer` addresses, HOST:PORT (`--peer`).
    pub peers: Vec<String>,
    /// NAME:PORT whose records are the peers (`--peers-dns`), this replica among them.
    pub peers_dns: Option<String>,
    /// The deployment's engine token ("" = none): required of peers and sent to them.
    pub engine_token: String,
    /// How often this replica's dispatches go out.
    pub flush: Duration,
    /// How often `peers_dns` is resolved again.
    pub dns_every: Duration,
}

/// A running exchange; `shutdown` (or dropping it) stops the service and every stream.
pub struct PeerExchange {
    state: Arc<PeerState>,
    server: Mutex<Option<BackgroundServer>>,
    local_addr: SocketAddr,
    /// Ends the flush and the peer streams (each task watches it).
    stop: watch::Sender<bool>,
}

impl PeerExchange {
    /// Binds the service and starts the streams on `runtime`; from then on `table` records
    /// this replica's dispatches for the peers.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        table: Arc<Mutex<EngineTable>>,
        config: PeerConfig,
    ) -> Result<Self> {
        if config.flush.is_zero() || config.dns_every.is_zero() {
            return Err(RouterCoreError::InvalidArgument(
                "the peer flush and DNS intervals must be > 0".into(),
            ));
        }
        let authorization = bearer(&config.engine_token)?;
        let state = Arc::new(PeerState {
            table: Mutex::new(table),
            addresses: Mutex::new(EngineAddresses::default()),
            counters: PeerCounters::default(),
            sender_id: format!("{:016x}", rand::random::<u64>()),
        });
        let served = state.clone();
        let token = config.engine_token.clone();
        let server = BackgroundServer::start_on(runtime, config.listen, move |listener, stop| {
            serve(listener, served, token, stop)
        })?;
        lock(&state.table()).record_for_peers(true);
        let (stop, stopped) = watch::channel(false);
        let (batches, _) = broadcast::channel(BROADCAST_DEPTH);
        runtime.spawn(flush(
            state.clone(),
            batches.clone(),
            config.flush,
            stopped.clone(),
        ));
        runtime.spawn(follow_peers(
            state.clone(),
            config,
            batches,
            authorization,
            stopped,
        ));
        Ok(PeerExchange {
            local_addr: server.local_addr(),
            state,
            server: Mutex::new(Some(server)),
            stop,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn counters(&self) -> &PeerCounters {
        &self.state.counters
    }

    /// Engine `id` of this replica's table is the one the routers dial at `address`.
    pub fn set_engine(&self, id: u32, address: &str) {
        lock(&self.state.addresses).set(id, address);
    }

    pub fn remove_engine(&self, id: u32) {
        lock(&self.state.addresses).remove(id);
    }

    /// The router rebuilt its core (pyrouter/engines/membership.py, once the engines tell
    /// their block layout): record and apply on the new table.
    pub fn set_table(&self, table: Arc<Mutex<EngineTable>>) {
        self.state.set_table(table);
    }

    /// Stops the streams and the service (idempotent); the table stops recording.
    pub fn shutdown(&self) -> Result<()> {
        let _ = self.stop.send(true);
        lock(&self.state.table()).record_for_peers(false);
        match lock(&self.server).take() {
            Some(mut server) => server.shutdown(Duration::ZERO),
            None => Ok(()),
        }
    }
}

impl Drop for PeerExchange {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn bearer(token: &str) -> Result<Option<MetadataValue<Ascii>>> {
    if token.is_empty() {
        return Ok(None);
    }
    // The token itself never goes into the message.
    format!("Bearer {token}").parse().map(Some).map_err(|_| {
        RouterCoreError::InvalidArgument("the engine token is not valid header text".into())
    })
}

fn serve(
    listener: TcpListener,
    state: Arc<PeerState>,
    token: String,
    shutdown: Shutdown,
) -> ServeFuture {
    Box::pin(async move {
        let service = RouterPeerServer::new(PeerService {
            state,
            shutdown: shutdown.clone(),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let service = InterceptedService::new(service, token_check(&token));
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut stopping = shutdown;
        Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async move { stopping.begun().await })
            .await
            .map_err(|err| RouterCoreError::Server(format!("router peer service: {err}")))
    })
}

/// Every `every`: this replica's dispatches since the last flush, by engine address, to every
/// peer stream.
async fn flush(
    state: Arc<PeerState>,
    batches: broadcast::Sender<DeltaBatch>,
    every: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        let outbox = lock(&state.table()).take_peer_outbox();
        if outbox.is_empty() || batches.receiver_count() == 0 {
            continue; // taken all the same: no peer connected, nobody to tell
        }
        let engines: Vec<EngineDelta> = {
            let addresses = lock(&state.addresses);
            outbox
                .iter()
                .filter_map(|(id, delta)| {
                    addresses.address(*id).map(|address| EngineDelta {
                        address: address.to_owned(),
                        tokens: delta.tokens,
                        prefill_tokens: delta.prefill_tokens,
                        generations: delta.generations,
                        prefilled_tokens: delta.prefilled_tokens,
                    })
                })
                .collect()
        };
        if !engines.is_empty()
            && batches
                .send(DeltaBatch {
                    sender_id: state.sender_id.clone(),
                    engines,
                })
                .is_ok()
        {
            PeerCounters::add(&state.counters.batches_sent, 1);
        }
    }
}

/// The peer streams: one per `--peer` address and per `--peers-dns` record, re-resolved every
/// `dns_every` (a record that went away ends its stream; a lookup that fails keeps the last).
async fn follow_peers(
    state: Arc<PeerState>,
    config: PeerConfig,
    batches: broadcast::Sender<DeltaBatch>,
    authorization: Option<MetadataValue<Ascii>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut streams: HashMap<String, JoinHandle<()>> = HashMap::new();
    let mut resolved: BTreeSet<String> = BTreeSet::new();
    loop {
        if let Some(dns) = &config.peers_dns {
            if let Ok(records) = tokio::net::lookup_host(dns.as_str()).await {
                resolved = records.map(|addr| addr.to_string()).collect();
            }
        }
        let wanted: BTreeSet<String> = config
            .peers
            .iter()
            .cloned()
            .chain(resolved.iter().cloned())
            .collect();
        streams.retain(|address, task| {
            let keep = wanted.contains(address);
            if !keep {
                task.abort();
            }
            keep
        });
        for address in wanted {
            // A finished stream stays: its address was this replica itself.
            streams.entry(address.clone()).or_insert_with(|| {
                tokio::spawn(stream_to_peer(
                    address,
                    state.clone(),
                    batches.clone(),
                    authorization.clone(),
                ))
            });
        }
        tokio::select! {
            _ = tokio::time::sleep(config.dns_every) => {}
            _ = stopped.wait_for(|stop| *stop) => break,
        }
    }
    for task in streams.values() {
        task.abort();
    }
}
