//! `StreamCall`: one server-streaming call to an engine, shared by whoever reads it and
//! cancellable from either side. `GenerateCall` (StartGenerate) is read by Python (the policy's
//! admission reads the first chunk) and then by the HTTP front, which reads the rest; KVEvents
//! is read by the router's membership upkeep. Cancelling drops the stream, which resets the
//! HTTP/2 stream: the engine aborts the generation (or stops sending events).

use crate::rpc::pb;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::codec::Streaming;
use tonic::Status;

/// Why a read returned no chunk.
#[derive(Debug, Clone)]
pub enum CallError {
    /// The engine (or the transport) failed the call.
    Rpc(Status),
    /// Somebody cancelled the call.
    Cancelled,
    /// Two readers at once: a bug in the caller.
    Busy,
}

type Started<T> = std::result::Result<Streaming<T>, Status>;

/// One StartGenerate stream.
pub type GenerateCall = StreamCall<pb::GenerateChunk>;
/// One KVEvents stream (endless until cancelled).
pub type KvEventsCall = StreamCall<pb::KvEventBatch>;

/// How long a finished call's end (its trailers) is waited for before the stream is dropped.
const END_WAIT: Duration = Duration::from_secs(5);

enum CallState<T> {
    /// The call was sent; the engine has not answered with its headers yet.
    Starting(JoinHandle<Started<T>>),
    Open(Box<Streaming<T>>),
    /// A reader holds the stream right now.
    Reading,
    /// The stream ended (finished, failed or cancelled).
    Ended,
}

pub struct StreamCall<T> {
    state: Mutex<CallState<T>>,
    cancelled: watch::Sender<bool>,
}

impl<T: Send + 'static> StreamCall<T> {
    pub(super) fn new(started: JoinHandle<Started<T>>) -> Self {
        StreamCall {
            state: Mutex::new(CallState::Starting(started)),
            cancelled: watch::Sender::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CallState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next message; `Ok(None)` once the engine closed the stream.
    pub async fn next(&self) -> std::result::Result<Option<T>, CallError> {
        let taken = std::mem::replace(&mut *self.lock(), CallState::Reading);
        let mut cancelled = self.cancelled.subscribe();
        if *cancelled.borrow() {
            *self.lock() = CallState::Ended;
            return Err(CallError::Cancelled);
        }
        let mut stream = match taken {
            CallState::Open(stream) => stream,
            CallState::Starting(started) => {
                let opened = tokio::select! {
                    joined = started => joined,
                    _ = cancelled.wait_for(|c| *c) => {
                        *self.lock() = CallState::Ended;
                        return Err(CallError::Cancelled);
                    }
                };
                match opened {
                    Ok(Ok(stream)) => Box::new(stream),
                    Ok(Err(status)) => {
                        *self.lock() = CallState::Ended;
                        return Err(CallError::Rpc(status));
                    }
                    Err(join) => {
                        *self.lock() = CallState::Ended;
                        return Err(CallError::Rpc(Status::cancelled(format!(
                            "the call's task ended: {join}"
                        ))));
                    }
                }
            }
            CallState::Reading => return Err(CallError::Busy),
            CallState::Ended => {
                *self.lock() = CallState::Ended;
                return Ok(None);
            }
        };
        let read = tokio::select! {
            read = stream.message() => read,
            _ = cancelled.wait_for(|c| *c) => {
                *self.lock() = CallState::Ended;
                return Err(CallError::Cancelled);
            }
        };
        match read {
            Ok(Some(chunk)) => {
                let mut state = self.lock();
                // A cancel that raced the read already ended the call: keep it ended.
                if matches!(*state, CallState::Reading) {
                    *state = CallState::Open(stream);
                }
                Ok(Some(chunk))
            }
            Ok(None) => {
                *self.lock() = CallState::Ended;
                Ok(None)
            }
            Err(status) => {
                *self.lock() = CallState::Ended;
                Err(CallError::Rpc(status))
            }
        }
    }

    /// The engine sent its last chunk (a finish or a hand-off): read the stream to its end on
    /// `runtime`, in the background, instead of dropping it open. A stream dropped before its
    /// end is reset, and HTTP/2 (h2 0.4.20's DATA-frame budget) keeps counting the small frames
    /// of reset streams against the connection: under load the budget ran out and the client
    /// side closed the whole connection (GOAWAY ENHANCE_YOUR_CALM), failing every stream on it
    /// with RESOURCE_EXHAUSTED.
    pub fn finish(&self, runtime: &tokio::runtime::Handle) {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, CallState::Ended) {
            CallState::Open(mut stream) => {
                runtime.spawn(async move {
                    let rest = async { while let Ok(Some(_)) = stream.message().await {} };
                    let _ = tokio::time::timeout(END_WAIT, rest).await;
                });
            }
            other => *state = other,
        }
    }

    /// Ends the call (the engine aborts an unfinished generation). Returns whether it was
    /// still running.
    pub fn cancel(&self) -> bool {
        let previous = std::mem::replace(&mut *self.lock(), CallState::Ended);
        let was_cancelled = self.cancelled.send_replace(true);
        match previous {
            CallState::Starting(started) => {
                started.abort();
                !was_cancelled
            }
            CallState::Open(_) | CallState::Reading => !was_cancelled,
            CallState::Ended => false,
        }
    }
}
