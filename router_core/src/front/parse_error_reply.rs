//! The OpenAI error body for the replies hyper writes itself. A request head hyper cannot parse
//! (a malformed request line or header, a URI or a head over its limits) never reaches the front:
//! hyper answers 400 / 414 / 431 with an empty body and closes the connection, and offers no hook
//! to shape that reply. So the front's sockets are wrapped in [`ShapedParseErrors`], which
//! recognises that one reply in what hyper writes and sends the front's JSON error (with an
//! X-Request-Id, as every response has) in its place.
//!
//! Recognising it is exact: hyper's automatic reply is a head with no header of the front's —
//! `connection: close`, `content-length: 0` and `date`, in that order, straight after the
//! status line — while every response of the front starts its headers with `content-type`, and
//! no body the front writes holds a raw CR LF (JSON and SSE escape them). The wrapper turns off
//! vectored writes so that hyper hands it each flush as one buffer, the reply at its end (hyper
//! writes nothing after it).

use super::api_error::ApiError;
use super::request_ids::new_request_id;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The error a client gets for hyper's automatic reply with `status`.
fn api_error(status: u16) -> Option<ApiError> {
    Some(match status {
        400 => ApiError::bad_request("malformed HTTP request head").with_code("malformed_request"),
        414 => ApiError::http(414, "request URI too long"),
        431 => ApiError::http(431, "request header fields too large"),
        _ => return None,
    })
}

/// Where hyper's automatic reply starts in `written` (it ends the buffer), with its status code
/// and its `date` line; None when `written` ends otherwise.
fn automatic_reply(written: &[u8]) -> Option<(usize, u16, &[u8])> {
    // Cheap refusal first: this runs on every write (SSE chunks end "\n\n\r\n").
    if !written.ends_with(b"\r\n\r\n") {
        return None;
    }
    const AFTER_STATUS: &[u8] = b"\r\nconnection: close\r\ncontent-length: 0\r\n";
    let tail_start = written.len().saturating_sub(256);
    let tail = &written[tail_start..];
    let start = tail.windows(7).rposition(|w| w == b"HTTP/1.")?;
    let reply = &tail[start..];
    // "HTTP/1.1 431 Request Header Fields Too Large" then the three headers.
    let status_end = reply.windows(2).position(|w| w == b"\r\n")?;
    let status: u16 = std::str::from_utf8(reply.get(9..12)?).ok()?.parse().ok()?;
    if reply.get(8) != Some(&b' ') || !reply[status_end..].starts_with(AFTER_STATUS) {
        return None;
    }
    let date = &reply[status_end + AFTER_STATUS.len()..reply.len() - 2];
    let plain_date = date.is_empty()
        || (date.starts_with(b"date: ")
            && date.ends_with(b"\r\n")
            && !date[..date.len() - 2].windows(2).any(|w| w == b"\r\n"));
    if !plain_date {
        return None;
    }
    api_error(status)?;
    Some((tail_start + start, status, date))
}

/// The reply the front sends instead: hyper's status line and date, the front's headers, the
/// JSON error body.
fn shaped_reply(status_line: &[u8], status: u16, date: &[u8]) -> Vec<u8> {
    let body = api_error(status)
        .map(|e| e.body_bytes())
        .unwrap_or_default();
    let mut reply = Vec::with_capacity(256 + body.len());
    reply.extend_from_slice(status_line);
    reply.extend_from_slice(b"\r\ncontent-type: application/json\r\nx-request-id: ");
    reply.extend_from_slice(new_request_id("req-").as_bytes());
    reply.extend_from_slice(b"\r\nx-switchyard-route: none\r\nconnection: close\r\n");
    reply.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    reply.extend_from_slice(date);
    reply.extend_from_slice(b"\r\n");
    reply.extend_from_slice(&body);
    reply
}

/// A connection's socket, with hyper's automatic error reply replaced by the front's.
pub struct ShapedParseErrors<S> {
    inner: S,
    /// Bytes already accepted from hyper and not yet written (the replacement reply).
    pending: Vec<u8>,
    sent: usize,
}

impl<S> ShapedParseErrors<S> {
    pub fn new(inner: S) -> Self {
        ShapedParseErrors {
            inner,
            pending: Vec::new(),
            sent: 0,
        }
    }
}

impl<S: AsyncWrite + Unpin> ShapedParseErrors<S> {
    /// Writes what is pending; Ready once nothing is.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.pending.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ShapedParseErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ShapedParseErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_pending(cx))?;
        let Some((start, status, date)) = automatic_reply(buf) else {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        };
        let status_line_end = buf[start..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(buf.len(), |end| start + end);
        // What came before it (earlier responses on the connection) goes out unchanged.
        this.pending = buf[..start].to_vec();
        this.pending
            .extend(shaped_reply(&buf[start..status_line_end], status, date));
        // Taken whole: the rest goes out as the socket allows (flush and shutdown wait for it).
        match this.poll_pending(cx) {
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            _ => Poll::Ready(Ok(buf.len())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    const DATE: &str = "date: Tue, 01 Dec 2026 18:31:06 GMT\r\n";

    fn hyper_reply(status_line: &str) -> Vec<u8> {
        format!("{status_line}\r\nconnection: close\r\ncontent-length: 0\r\n{DATE}\r\n")
            .into_bytes()
    }

    #[test]
    fn recognises_only_hypers_own_reply() {
        let reply = hyper_reply("HTTP/1.1 431 Request Header Fields Too Large");
        assert_eq!(automatic_reply(&reply), Some((0, 431, DATE.as_bytes())));
        let ok =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        let pipelined = [&ok[..], &hyper_reply("HTTP/1.1 400 Bad Request")].concat();
        assert_eq!(automatic_reply(&pipelined).map(|r| r.0), Some(ok.len()));
        // The front's own responses: content-type first, or a status hyper never sends itself.
        let own = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: \
                    close\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_reply(own), None);
        assert_eq!(automatic_reply(&hyper_reply("HTTP/1.1 500 Internal")), None);
        assert_eq!(automatic_reply(b"5\r\ndata: {}\n\n\r\n"), None);
        assert_eq!(automatic_reply(b"0\r\n\r\n"), None);
    }

    #[tokio::test]
    async fn writes_the_json_error_in_its_place() {
        let (client, server) = tokio::io::duplex(64);
        let mut shaped = ShapedParseErrors::new(server);
        let reader = tokio::spawn(async move {
            let mut client = client;
            let mut got = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut client, &mut got)
                .await
                .map(|_| got)
        });
        let reply = hyper_reply("HTTP/1.1 400 Bad Request");
        let taken = shaped.write(&reply).await.expect("write");
        assert_eq!(taken, reply.len());
        shaped.shutdown().await.expect("shutdown");
        drop(shaped);
        let got = String::from_utf8(reader.await.expect("join").expect("read")).expect("utf8");
        let (head, body) = got.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"));
        assert!(head.contains("\r\nx-request-id: req-") && head.ends_with(DATE.trim_end()));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(body["error"]["code"], "malformed_request");
    }
}
