//! The `RouterPeer` service: applies each batch a peer streams to this replica's engine table.

use super::{EngineAddresses, PeerCounters};
use crate::dispatch_delta::DispatchDelta;
use crate::engine_table::EngineTable;
use crate::router::lock;
use crate::rpc::pb::router_peer_server::RouterPeer;
use crate::rpc::pb::{DeltaBatch, DeltasAck, EngineDelta};
use std::sync::{Arc, Mutex};
use tonic::{Request, Response, Status, Streaming};

/// What the service and the exchange share.
pub struct PeerState {
    /// The router's engine table (replaced when the router rebuilds its core: `set_table`).
    pub table: Mutex<Arc<Mutex<EngineTable>>>,
    pub addresses: Mutex<EngineAddresses>,
    pub counters: PeerCounters,
    /// This process's id: a stream carrying it is this replica reaching itself.
    pub sender_id: String,
}

impl PeerState {
    pub fn table(&self) -> Arc<Mutex<EngineTable>> {
        lock(&self.table).clone()
    }

    /// From now on the exchange records and applies deltas on `table` (the old one stops
    /// recording).
    pub fn set_table(&self, table: Arc<Mutex<EngineTable>>) {
        let old = std::mem::replace(&mut *lock(&self.table), table.clone());
        lock(&old).record_for_peers(false);
        lock(&table).record_for_peers(true);
    }

    /// Adds a batch's deltas to the engines this replica knows by those addresses.
    pub fn apply(&self, engines: &[EngineDelta]) {
        let table = self.table();
        let addresses = lock(&self.addresses);
        let mut table = lock(&table);
        let (mut applied, mut unknown) = (0, 0);
        for engine in engines {
            let delta = DispatchDelta {
                tokens: engine.tokens,
                prefill_tokens: engine.prefill_tokens,
                generations: engine.generations,
                prefilled_tokens: engine.prefilled_tokens,
            };
            // None or Err: an engine the peer follows and this replica does not (yet).
            match addresses.id(&engine.address) {
                Some(id) if table.on_peer_delta(id, &delta).is_ok() => applied += 1,
                _ => unknown += 1,
            }
        }
        PeerCounters::add(&self.counters.deltas_received, applied);
        PeerCounters::add(&self.counters.deltas_unknown_engine, unknown);
    }
}

/// Counts an inbound stream while it is open.
struct InboundStream<'a>(&'a PeerCounters);

impl<'a> InboundStream<'a> {
    fn open(counters: &'a PeerCounters) -> Self {
        PeerCounters::add(&counters.streams_in, 1);
        InboundStream(counters)
    }
}

impl Drop for InboundStream<'_> {
    fn drop(&mut self) {
        PeerCounters::sub(&self.0.streams_in, 1);
    }
}

pub struct PeerService {
    pub state: Arc<PeerState>,
    pub shutdown: crate::background_server::Shutdown,
}

#[tonic::async_trait]
impl RouterPeer for PeerService {
    async fn deltas(
        &self,
        request: Request<Streaming<DeltaBatch>>,
    ) -> Result<Response<DeltasAck>, Status> {
        let mut stream = request.into_inner();
        let _open = InboundStream::open(&self.state.counters);
        let mut shutdown = self.shutdown.clone();
        let mut batches = 0;
        loop {
            let next = tokio::select! {
                next = stream.message() => next?,
                _ = shutdown.begun() => None,
            };
            let Some(batch) = next else { break };
            if batch.sender_id == self.state.sender_id {
                return Err(Status::failed_precondition(
                    "this address is the router replica itself",
                ));
            }
            self.state.apply(&batch.engines);
            batches += 1;
        }
        Ok(Response::new(DeltasAck { batches }))
    }
}
