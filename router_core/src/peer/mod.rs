//! One load view across router replicas (issue 25; docs/deploy.md, "Several routers"): each
//! replica streams what it dispatches, per engine address, to every peer every few milliseconds
//! (`RouterPeer.Deltas`, proto/switchyard_rpc/router_peer.proto), and adds what its peers send
//! to its engine table next to its own dispatches. The engines' Stats stay the base: a delta is
//! counted until the next Stats asked for after it arrived covers it, so a peer whose stream
//! breaks stops being counted then, with no expiry of its own.
//!
//! The pieces: `receiver` (the service, on its own port), `sender` (one stream per peer, with
//! reconnects and backoff), `exchange` (starts both, flushes the table's outbox, follows
//! `--peers-dns`).

mod addresses;
mod exchange;
mod receiver;
mod sender;
#[cfg(test)]
mod tests;

pub use addresses::EngineAddresses;
pub use exchange::{PeerConfig, PeerExchange};

use std::sync::atomic::{AtomicU64, Ordering};

/// What the exchange exports as metrics (pyrouter/replicas/peer_exchange.py).
#[derive(Debug, Default)]
pub struct PeerCounters {
    /// Streams to peers connected now.
    pub streams_up: AtomicU64,
    /// Streams from peers open now.
    pub streams_in: AtomicU64,
    /// Per-engine deltas received and applied to the engine table.
    pub deltas_received: AtomicU64,
    /// Per-engine deltas received for an engine this replica does not know (ignored).
    pub deltas_unknown_engine: AtomicU64,
    /// Batches handed to the peer streams.
    pub batches_sent: AtomicU64,
}

impl PeerCounters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }
}
