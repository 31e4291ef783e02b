//! One peer's stream: connect, forward every batch the exchange flushes, and on a break
//! reconnect with backoff. Batches made while the stream is down are dropped: a delta only
//! matters until the receiver's next Stats, and the Stats carry the work by then.

use super::receiver::PeerState;
use super::PeerCounters;
use crate::rpc::pb::router_peer_client::RouterPeerClient;
use crate::rpc::pb::DeltaBatch;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request};

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 keepalive, so a peer that vanished (host gone, no RST) is noticed within seconds.
const KEEPALIVE: Duration = Duration::from_secs(5);
/// Batches queued for one stream before new ones are dropped (a peer that cannot keep up).
const STREAM_QUEUE: usize = 64;

/// How one connected stream ended.
enum StreamEnd {
    /// Broken (peer gone, restarted, refused the token): reconnect.
    Broken,
    /// The address is this replica itself: never dial it again.
    Myself,
    /// The exchange is stopping.
    Stopped,
}

/// Streams batches to `address` until the exchange stops or the address turns out to be this
/// replica; `authorization` is `Bearer <engine token>` when the deployment has one.
pub async fn stream_to_peer(
    address: String,
    state: Arc<PeerState>,
    batches: broadcast::Sender<DeltaBatch>,
    authorization: Option<MetadataValue<Ascii>>,
) {
    let mut backoff = BACKOFF_MIN;
    loop {
        if let Ok(channel) = connect(&address).await {
            PeerCounters::add(&state.counters.streams_up, 1);
            let end = run_stream(channel, batches.subscribe(), authorization.clone()).await;
            PeerCounters::sub(&state.counters.streams_up, 1);
            match end {
                StreamEnd::Broken => backoff = BACKOFF_MIN,
                StreamEnd::Myself | StreamEnd::Stopped => return,
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn connect(address: &str) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{address}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE)
        .keep_alive_while_idle(true)
        .connect()
        .await
}

async fn run_stream(
    channel: Channel,
    mut batches: broadcast::Receiver<DeltaBatch>,
    authorization: Option<MetadataValue<Ascii>>,
) -> StreamEnd {
    let (queue, queued) = mpsc::channel::<DeltaBatch>(STREAM_QUEUE);
    let outbound = futures_util::stream::unfold(queued, |mut queued| async move {
        queued.recv().await.map(|batch| (batch, queued))
    });
    let mut request = Request::new(outbound);
    if let Some(value) = authorization {
        request.metadata_mut().insert("authorization", value);
    }
    let mut client = RouterPeerClient::new(channel);
    let call = client.deltas(request);
    tokio::pin!(call);
    loop {
        tokio::select! {
            ended = &mut call => {
                return match ended {
                    Err(status) if status.code() == Code::FailedPrecondition => StreamEnd::Myself,
                    _ => StreamEnd::Broken,
                };
            }
            batch = batches.recv() => match batch {
                // Full: the peer is slower than the flushes; it is sent the later ones.
                Ok(batch) => { let _ = queue.try_send(batch); }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return StreamEnd::Stopped,
            },
        }
    }
}
