//! The verbs as the executor calls them on one engine: the router's gRPC client
//! (crate::engine_rpc::EngineRpc) implements them, and so does an engine double that lives in
//! Python (python/engine_double.rs: FakeCluster's fakes, the simulator's engines), which is how
//! tests and the simulator run the executor a client's request runs.

use crate::engine_rpc::{CallError, EngineRpc};
use crate::front::segment_call::SegmentCall;
use crate::rpc::pb;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A verb's answer, on its way.
pub type VerbFuture<T> = Pin<Box<dyn Future<Output = Result<T, CallError>> + Send>>;

/// Extra gRPC metadata of one call (a verb span's `traceparent`).
pub type Metadata = Vec<(String, String)>;

pub trait EngineVerbs: Send + Sync {
    /// PrepRecv: reserve KV pages for tokens[matched:end].
    fn prep_recv(
        &self,
        message: pb::PrepRecvRequest,
        metadata: Metadata,
    ) -> VerbFuture<pb::PrepRecvResponse>;

    /// RemoteSend: compute KV for tokens[begin:end] and push it into a reservation.
    fn remote_send(
        &self,
        message: pb::RemoteSendRequest,
        metadata: Metadata,
    ) -> VerbFuture<pb::RemoteSendResponse>;

    /// StartGenerate, started now; its chunks are read from the call.
    fn start_generate(
        &self,
        message: pb::StartGenerateRequest,
        metadata: Metadata,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<dyn SegmentCall>;

    /// Abort (best effort); true when the engine knew the request. `handoff`: a running
    /// generation ends with a hand-off instead (a live migration's first step).
    fn abort(&self, request_id: String, handoff: bool) -> VerbFuture<bool>;
}

impl EngineVerbs for EngineRpc {
    fn prep_recv(
        &self,
        message: pb::PrepRecvRequest,
        metadata: Metadata,
    ) -> VerbFuture<pb::PrepRecvResponse> {
        let rpc = self.clone();
        Box::pin(async move {
            rpc.prep_recv(message, &metadata)
                .await
                .map_err(CallError::Rpc)
        })
    }

    fn remote_send(
        &self,
        message: pb::RemoteSendRequest,
        metadata: Metadata,
    ) -> VerbFuture<pb::RemoteSendResponse> {
        let rpc = self.clone();
        Box::pin(async move {
            rpc.remote_send(message, &metadata, None)
                .await
                .map_err(CallError::Rpc)
        })
    }

    fn start_generate(
        &self,
        message: pb::StartGenerateRequest,
        metadata: Metadata,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<dyn SegmentCall> {
        EngineRpc::start_generate(self, message, &metadata, runtime)
    }

    fn abort(&self, request_id: String, handoff: bool) -> VerbFuture<bool> {
        let rpc = self.clone();
        Box::pin(async move {
            rpc.abort(&request_id, handoff)
                .await
                .map_err(CallError::Rpc)
        })
    }
}
