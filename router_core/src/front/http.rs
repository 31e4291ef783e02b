//! The HTTP surface: one axum handler that gives every response its envelope (X-Request-Id,
//! X-Switchyard-Route, OpenAI error bodies), checks API keys on the OpenAI routes it serves
//! itself (/v1/completions, /v1/chat/completions, /v1/models; /health is open), and hands every
//! other route (/ready, /metrics, /openapi.json, /admin/..., unknown paths) to the deciding side
//! with the client's own Authorization header: that side's key ring decides (admin keys are
//! separate and an inference key never opens an admin route). A second listener, the admin plane
//! (`--admin-port`), serves /health itself and hands everything else to the deciding side, which
//! answers only /ready and the admin routes there.

use super::api_error::{ApiError, ShapedError};
use super::bridge::{OpsRequest, Plane, PolicyBridge};
use super::client::{envelope, error_response, json_response};
use super::client_close::watch_close;
use super::front_state::Front;
use super::openai_request::RequestKind;
use super::parse_error_reply::ShapedParseErrors;
use super::request_start::{start_request, Identity};
use crate::background_server::{BackgroundServer, ServeFuture, Shutdown};
use crate::error::Result;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Served here and needing an API key when keys are configured.
const KEYED_PATHS: [&str; 3] = ["/v1/completions", "/v1/chat/completions", "/v1/models"];
/// Routes served here (others go to the deciding side).
const OWN_PATHS: [&str; 4] = [
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/models",
    "/health",
];

/// Serves `front`'s `plane` on `addr` as a task on `runtime`.
pub fn start_front<B: PolicyBridge>(
    front: Arc<Front<B>>,
    addr: SocketAddr,
    plane: Plane,
    runtime: &tokio::runtime::Handle,
) -> Result<BackgroundServer> {
    BackgroundServer::start_on(runtime, addr, move |listener, shutdown| {
        serve(listener, front, plane, shutdown)
    })
}

/// Accepts connections until shutdown, then lets open ones finish (the server's grace bounds
/// that). Each connection is hyper's HTTP/1 with a timer: its request heads must arrive within
/// `idle_timeout` (slowloris; an idle keep-alive connection closes after it too). A head hyper
/// cannot parse is answered by hyper itself, which the socket's wrapper gives the JSON error
/// body (front/parse_error_reply.rs).
fn serve<B: PolicyBridge>(
    listener: TcpListener,
    front: Arc<Front<B>>,
    plane: Plane,
    mut shutdown: Shutdown,
) -> ServeFuture {
    Box::pin(async move {
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(front.config.idle_timeout);
        let connections = GracefulShutdown::new();
        loop {
            let (socket, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                },
                _ = shutdown.begun() => break,
            };
            // Small SSE writes must not wait for Nagle; failure only costs latency.
            let _ = socket.set_nodelay(true);
            // Per connection: its handlers know the client's address (per-caller limits).
            let app = Router::new().fallback(handle::<B>).with_state(Connection {
                front: front.clone(),
                client_host: peer.ip().to_string(),
                plane,
            });
            let service = TowerToHyperService::new(app);
            // A client that closes is seen at once, even with a request in flight
            // (front/client_close.rs); hyper's own replies to heads it cannot parse get the
            // front's JSON error body.
            let (socket, client_closed) = watch_close(socket);
            let socket = TokioIo::new(ShapedParseErrors::new(socket));
            let connection = connections.watch(http.serve_connection(socket, service));
            tokio::spawn(async move {
                // A client that goes away or times out ends its connection; nothing to report.
                // One that closed while a request waits: dropping the connection drops the
                // handlers in flight, and each request's task aborts its engine work. hyper is
                // polled first, so a reply it can write at once (to a head it refuses) still
                // goes out.
                tokio::select! {
                    biased;
                    _ = connection => {}
                    () = client_closed => {}
                }
            });
        }
        connections.shutdown().await;
        Ok(())
    })
}

/// Constant-time comparison (a key check must not leak how much of a key matched).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(headers: &HeaderMap, keys: &[String]) -> bool {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let token = match auth.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => auth[7..].trim(),
        _ => "",
    };
    !token.is_empty()
        && keys
            .iter()
            .any(|k| same_secret(token.as_bytes(), k.as_bytes()))
}

fn api_error(err: &ApiError, request_id: &str) -> Response {
    error_response(&ShapedError::from(err), "none", request_id)
}

/// The whole body, within the size limit and the body timeout; else the error response (a body
/// that came too slowly leaves the connection unusable: it closes).
async fn read_body<B: PolicyBridge>(
    front: &Front<B>,
    body: Body,
    request_id: &str,
) -> std::result::Result<Bytes, Response> {
    let limit = front.config.max_body_bytes;
    match tokio::time::timeout(front.config.body_timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        // A body the connection could not decode (a bad chunk size, a cut chunk) is the
        // client's malformed request; only the length limit is a 413.
        Ok(Err(err)) if from_the_connection(&err) => Err(api_error(
            &ApiError::bad_request("malformed request body").with_code("invalid_body"),
            request_id,
        )),
        Ok(Err(_)) => Err(api_error(
            &ApiError::http(413, "request body too large"),
            request_id,
        )),
        Err(_) => {
            let message = format!(
                "request body not received within {} s",
                front.config.body_timeout.as_secs_f64()
            );
            let mut resp = api_error(&ApiError::request_timeout(message), request_id);
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(resp)
        }
    }
}

/// The body failed in hyper (its HTTP/1 decoding), not at the length limit.
fn from_the_connection(err: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<hyper::Error>().is_some() {
            return true;
        }
        cause = e.source();
    }
    false
}

/// What a connection's handlers share: the front, the client's address and the listener's plane.
struct Connection<B: PolicyBridge> {
    front: Arc<Front<B>>,
    client_host: String,
    plane: Plane,
}

impl<B: PolicyBridge> Clone for Connection<B> {
    fn clone(&self) -> Self {
        Connection {
            front: self.front.clone(),
            client_host: self.client_host.clone(),
            plane: self.plane,
        }
    }
}

async fn handle<B: PolicyBridge>(State(conn): State<Connection<B>>, request: Request) -> Response {
    let Connection {
        front,
        client_host,
        plane,
    } = conn;
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let public = plane == Plane::Public;
    let kind = match path {
        "/v1/completions" if public => Some(RequestKind::Completion),
        "/v1/chat/completions" if public => Some(RequestKind::Chat),
        _ => None,
    };
    let id_prefix = kind.map_or("req-", RequestKind::id_prefix);
    let identity = Identity::of(id_prefix, &parts.headers, client_host);
    let request_id = identity.request_id.clone();
    let keys = &front.config.api_keys;
    if public
        && !keys.is_empty()
        && KEYED_PATHS.contains(&path)
        && !authorized(&parts.headers, keys)
    {
        let err = ApiError::unauthorized("missing or invalid API key").with_code("invalid_api_key");
        return api_error(&err, &request_id);
    }
    let own = path == "/health" || (public && OWN_PATHS.contains(&path));
    match (&parts.method, kind) {
        (&Method::POST, Some(kind)) => {
            let body = match read_body(&front, body, &request_id).await {
                Ok(body) => body,
                Err(resp) => return resp,
            };
            start_request(
                front,
                kind,
                &body,
                &parts.headers,
                identity,
                started,
                None,
                None,
            )
            .spawned()
            .await
        }
        (&Method::GET | &Method::HEAD, None) if path == "/health" => {
            json_response(200, br#"{"status":"ok"}"#.to_vec(), "none", &request_id)
        }
        (&Method::GET, None) if public && path == "/v1/models" => {
            let data: Vec<Value> = front
                .models
                .list()
                .iter()
                .map(|model| {
                    json!({
                "id": model.name, "object": "model",
                "created": front.started_unix, "owned_by": "switchyard"})
                })
                .collect();
            let body = json!({"object": "list", "data": data});
            json_response(200, body.to_string().into_bytes(), "none", &request_id)
        }
        _ if own => {
            let mut resp = api_error(&ApiError::http(405, "Method Not Allowed"), &request_id);
            let allow = if kind.is_some() { "POST" } else { "GET" };
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            resp
        }
        _ => {
            let body = match read_body(&front, body, &request_id).await {
                Ok(body) => body.to_vec(),
                Err(resp) => return resp,
            };
            let ops = OpsRequest {
                plane,
                method: parts.method.to_string(),
                path: path.to_owned(),
                query: parts.uri.query().unwrap_or("").to_owned(),
                body,
                authorization: parts
                    .headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
                client_host: identity.client_host,
            };
            let answer = front.bridge.ops(ops).await;
            let mut resp = Response::new(Body::from(answer.body));
            *resp.status_mut() =
                StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let content_type = HeaderValue::from_str(&answer.content_type)
                .unwrap_or(HeaderValue::from_static("application/json"));
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, content_type);
            for (name, value) in &answer.headers {
                if let (Ok(name), Ok(value)) = (
                    header::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    resp.headers_mut().insert(name, value);
                }
            }
            envelope(resp.headers_mut(), "none", &request_id);
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_keys() {
        let keys = vec!["k1".to_string(), "k2".to_string()];
        let mut headers = HeaderMap::new();
        assert!(!authorized(&headers, &keys));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k2"));
        assert!(authorized(&headers, &keys));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  k1 "),
        );
        assert!(authorized(&headers, &keys));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        assert!(!authorized(&headers, &keys));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic k1"));
        assert!(!authorized(&headers, &keys));
    }
}
