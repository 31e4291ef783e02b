//! Engine doubles for the executor's unit tests.

use super::engine_verbs::{EngineVerbs, Metadata, VerbFuture};
use crate::engine_rpc::CallError;
use crate::front::segment_call::{ReadFuture, SegmentCall};
use crate::rpc::pb;
use std::sync::Arc;
use tonic::Status;

/// An engine that refuses every verb (UNAVAILABLE).
pub struct NullVerbs;

struct NoStream;

impl SegmentCall for NoStream {
    fn next(&self) -> ReadFuture<'_> {
        Box::pin(async { Err(CallError::Rpc(Status::unavailable("no engine"))) })
    }

    fn finish(&self, _runtime: &tokio::runtime::Handle) {}

    fn cancel(&self) -> bool {
        false
    }
}

fn refused<T: Send + 'static>() -> VerbFuture<T> {
    Box::pin(async { Err(CallError::Rpc(Status::unavailable("no engine"))) })
}

impl EngineVerbs for NullVerbs {
    fn prep_recv(&self, _: pb::PrepRecvRequest, _: Metadata) -> VerbFuture<pb::PrepRecvResponse> {
        refused()
    }

    fn remote_send(
        &self,
        _: pb::RemoteSendRequest,
        _: Metadata,
    ) -> VerbFuture<pb::RemoteSendResponse> {
        refused()
    }

    fn start_generate(
        &self,
        _: pb::StartGenerateRequest,
        _: Metadata,
        _: &tokio::runtime::Handle,
    ) -> Arc<dyn SegmentCall> {
        Arc::new(NoStream)
    }

    fn abort(&self, _: String, _: bool) -> VerbFuture<bool> {
        Box::pin(async { Ok(false) })
    }
}
