//! The one engine interface the request task reads a segment through: the next chunk, the
//! stream's end read in the background, and a cancel. The router's gRPC client implements it
//! (`engine_rpc::GenerateCall`); so does an engine double living in Python
//! (python/double_call.rs), which is how tests and the simulator run the same request task a
//! client's request runs, with in-process engines.

use crate::engine_rpc::{CallError, GenerateCall};
use crate::rpc::pb;
use std::future::Future;
use std::pin::Pin;

/// A read's future (borrowing the call).
pub type ReadFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<pb::GenerateChunk>, CallError>> + Send + 'a>>;

pub trait SegmentCall: Send + Sync {
    /// The next chunk; `Ok(None)` once the engine closed the stream.
    fn next(&self) -> ReadFuture<'_>;

    /// The engine sent its last chunk: whatever is left of the stream is read (or dropped)
    /// without the request waiting for it.
    fn finish(&self, runtime: &tokio::runtime::Handle);

    /// Ends the call (the engine aborts an unfinished generation); true if it was running.
    fn cancel(&self) -> bool;
}

impl SegmentCall for GenerateCall {
    fn next(&self) -> ReadFuture<'_> {
        Box::pin(GenerateCall::next(self))
    }

    fn finish(&self, runtime: &tokio::runtime::Handle) {
        GenerateCall::finish(self, runtime);
    }

    fn cancel(&self) -> bool {
        GenerateCall::cancel(self)
    }
}
