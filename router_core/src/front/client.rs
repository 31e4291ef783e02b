//! Where a request's response goes: first its head (a JSON answer, or the streaming head), then,
//! streaming, the body's bytes; and whether the client is still there.

use super::api_error::ShapedError;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use std::convert::Infallible;
use tokio::sync::{mpsc, oneshot};

pub const ROUTE_HEADER: &str = "x-switchyard-route";
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// A JSON response with the envelope headers.
pub fn json_response(status: u16, body: Vec<u8>, route: &str, request_id: &str) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    envelope(headers, route, request_id);
    resp
}

pub fn error_response(err: &ShapedError, route: &str, request_id: &str) -> Response {
    let mut resp = json_response(err.status, err.body.clone(), route, request_id);
    if err.status == 429 || err.status == 503 {
        // Busy, draining or no capacity: worth a retry soon.
        let after = HeaderValue::from_str(&err.retry_after_s.max(1).to_string())
            .unwrap_or(HeaderValue::from_static("1"));
        resp.headers_mut().insert(header::RETRY_AFTER, after);
    }
    resp
}

/// X-Request-Id and X-Switchyard-Route on every response.
pub fn envelope(headers: &mut axum::http::HeaderMap, route: &str, request_id: &str) {
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert(REQUEST_ID_HEADER, id);
    }
    let route = HeaderValue::from_str(route).unwrap_or(HeaderValue::from_static("unknown"));
    headers.insert(ROUTE_HEADER, route);
}

/// Where the response goes: first its head (then, streaming, the body's bytes).
pub enum Client {
    Waiting(oneshot::Sender<Response>),
    Streaming(mpsc::Sender<Bytes>),
    Answered,
}

impl Client {
    /// Resolves when the client has gone away.
    pub async fn gone(&mut self) {
        match self {
            Client::Waiting(tx) => tx.closed().await,
            Client::Streaming(tx) => tx.closed().await,
            Client::Answered => std::future::pending().await,
        }
    }

    pub fn answer(&mut self, resp: Response) {
        if let Client::Waiting(tx) = std::mem::replace(self, Client::Answered) {
            let _ = tx.send(resp);
        }
    }

    /// Sends the streaming head with `first` bytes already in the body.
    pub fn start_stream(&mut self, route: &str, request_id: &str, first: Vec<u8>) {
        let (tx, mut rx) = mpsc::channel::<Bytes>(8);
        if !first.is_empty() {
            let _ = tx.try_send(Bytes::from(first));
        }
        let stream = futures_util::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
                .map(|item| item.map(Ok::<Bytes, Infallible>))
        });
        let mut resp = Response::new(Body::from_stream(stream));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        envelope(headers, route, request_id);
        self.answer(resp);
        *self = Client::Streaming(tx);
    }

    /// False when the client has gone.
    pub async fn send(&mut self, bytes: Vec<u8>) -> bool {
        match self {
            Client::Streaming(tx) if !bytes.is_empty() => tx.send(Bytes::from(bytes)).await.is_ok(),
            Client::Streaming(tx) => !tx.is_closed(),
            _ => false,
        }
    }
}
