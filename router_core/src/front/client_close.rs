//! Noticing that a client closed its connection while its request still waits (queued at the
//! admission gate, while the policy runs, while an engine queues or prefills it — before any
//! byte of the response is written).
//!
//! hyper notices a closed connection only by reading from it, and while a request is in
//! flight it reads only when nothing is left in its own read buffer: a client that sent a byte
//! more than its request (a CR LF after the body, as some clients add, or a pipelined request)
//! and then went away was noticed only when the response's first write failed — for a request
//! queued on a busy engine, many seconds of engine work later. So each connection's socket is
//! split in two over one shared state: [`WatchedSocket`], the socket hyper reads and writes
//! (bytes read ahead come first), and [`ClientClosed`], a future that reads ahead (a bounded
//! amount) and resolves when the client has closed (end of stream or a reset). The connection's
//! task drops hyper's connection when it resolves, which drops the handlers in flight: each
//! request task sees its client gone and aborts its engine work (generation.rs).
//!
//! A client that shuts only its sending side counts as gone, as hyper itself treats one whose
//! request was read whole.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes read ahead of hyper at most; past this the watch waits for hyper to take them (a
/// client that floods a connection is noticed as before, by the next write).
const READ_AHEAD: usize = 16 * 1024;

struct Shared<S> {
    socket: S,
    /// Read from the socket, not yet taken by hyper.
    ahead: Vec<u8>,
    /// The client closed (end of stream, or a read failed).
    closed: bool,
}

fn locked<S>(shared: &Mutex<Shared<S>>) -> MutexGuard<'_, Shared<S>> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The socket hyper serves the connection on.
pub struct WatchedSocket<S> {
    shared: Arc<Mutex<Shared<S>>>,
}

/// Resolves once the client has closed the connection.
pub struct ClientClosed<S> {
    shared: Arc<Mutex<Shared<S>>>,
}

/// `socket` as hyper's half and the watch's.
pub fn watch_close<S>(socket: S) -> (WatchedSocket<S>, ClientClosed<S>) {
    let shared = Arc::new(Mutex::new(Shared {
        socket,
        ahead: Vec::new(),
        closed: false,
    }));
    (
        WatchedSocket {
            shared: shared.clone(),
        },
        ClientClosed { shared },
    )
}

impl<S: AsyncRead + Unpin> Future for ClientClosed<S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut shared = locked(&self.shared);
        let mut chunk = [0u8; 4096];
        while !shared.closed && shared.ahead.len() < READ_AHEAD {
            let room = (READ_AHEAD - shared.ahead.len()).min(chunk.len());
            let mut buf = ReadBuf::new(&mut chunk[..room]);
            match Pin::new(&mut shared.socket).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => shared.closed = true,
                Poll::Ready(Ok(())) => {
                    let filled = buf.filled().len();
                    shared.ahead.extend_from_slice(&chunk[..filled]);
                }
                Poll::Ready(Err(_)) => shared.closed = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        // Read ahead in full: hyper's next read (in this same task) makes room and wakes it.
        if shared.closed {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedSocket<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut shared = locked(&self.shared);
        if !shared.ahead.is_empty() {
            let n = shared.ahead.len().min(buf.remaining());
            if shared.ahead.len() >= READ_AHEAD {
                // The watch stopped reading at its limit; it shares this task: poll it again.
                cx.waker().wake_by_ref();
            }
            buf.put_slice(&shared.ahead[..n]);
            shared.ahead.drain(..n);
            return Poll::Ready(Ok(()));
        }
        if shared.closed {
            return Poll::Ready(Ok(())); // end of stream
        }
        Pin::new(&mut shared.socket).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedSocket<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut locked(&self.shared).socket).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut locked(&self.shared).socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut locked(&self.shared).socket).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_read_ahead_reach_the_reader_in_order_then_the_close_is_seen() {
        let (mut client, server) = tokio::io::duplex(64);
        let (mut socket, closed) = watch_close(server);
        let mut closed = std::pin::pin!(closed);
        client.write_all(b"request\r\n").await.unwrap();
        // The watch reads what came, and has not seen a close.
        tokio::select! {
            biased;
            () = &mut closed => panic!("not closed yet"),
            () = tokio::task::yield_now() => {}
        }
        client.write_all(b"more").await.unwrap();
        drop(client);
        closed.await;
        let mut got = Vec::new();
        socket.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"request\r\nmore");
    }

    #[tokio::test]
    async fn writes_go_through() {
        let (mut client, server) = tokio::io::duplex(64);
        let (mut socket, _closed) = watch_close(server);
        socket.write_all(b"reply").await.unwrap();
        let mut got = [0u8; 5];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"reply");
    }
}
