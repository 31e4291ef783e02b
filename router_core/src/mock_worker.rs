//! An OpenAI-style mock HTTP worker: streams synthetic completions at (almost) no cost. ONLY for
//! the router-overhead benchmark, where it stands behind the anchor routers (vllm-router, SGLang's
//! router), which speak HTTP to their workers, the way the mock engine stands behind Switchyard's
//! router — both in Rust, so the two sides' backends cost alike.
//!
//! A streamed response is `max_tokens` SSE events (" w0", " w1", ...) and `data: [DONE]`, written
//! as one body chunk (every token exists at once, as in the mock engine's packed message).

use crate::background_server::{BackgroundServer, ServeFuture, Shutdown};
use crate::error::{Result, RouterCoreError};
use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use serde_json::Value;
use std::convert::Infallible;
use std::fmt::Write;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;

const MODEL: &str = "mock";
const DEFAULT_MAX_TOKENS: u64 = 16;
/// More than any benchmark asks for; a bigger request is refused rather than served slowly.
const MAX_TOKENS_LIMIT: u64 = 1 << 16;
/// Prompt tokens reported in `usage` (the worker does not tokenise).
const PROMPT_TOKENS: u64 = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

/// Starts the worker on `addr` (port 0: any free port) with `threads` runtime threads.
pub fn start_mock_worker(addr: SocketAddr, threads: usize) -> Result<BackgroundServer> {
    BackgroundServer::start("mock-openai-worker", addr, threads, serve)
}

fn serve(listener: TcpListener, mut shutdown: Shutdown) -> ServeFuture {
    Box::pin(async move {
        let listener = listener.tap_io(|socket| {
            // Small SSE writes must not wait for Nagle; failure only costs latency.
            let _ = socket.set_nodelay(true);
        });
        axum::serve(listener, router())
            .with_graceful_shutdown(async move { shutdown.begun().await })
            .await
            .map_err(|err| RouterCoreError::Server(format!("mock worker: {err}")))
    })
}

fn router() -> Router {
    let ok = || async { json_response(StatusCode::OK, r#"{"status":"ok"}"#.to_owned()) };
    let info = || async {
        // Fields the SGLang / vLLM routers probe on their workers.
        json_response(
            StatusCode::OK,
            format!(
                r#"{{"model_path":"{MODEL}","tokenizer_path":null,"is_generation":true,"served_model_name":"{MODEL}"}}"#
            ),
        )
    };
    let models = || async {
        json_response(
            StatusCode::OK,
            format!(r#"{{"object":"list","data":[{{"id":"{MODEL}","object":"model"}}]}}"#),
        )
    };
    Router::new()
        .route(
            "/v1/completions",
            post(|body: Bytes| generate(body, Kind::Completion)),
        )
        .route(
            "/generate",
            post(|body: Bytes| generate(body, Kind::Completion)),
        )
        .route(
            "/v1/chat/completions",
            post(|body: Bytes| generate(body, Kind::Chat)),
        )
        .route("/health", get(ok))
        .route("/health_generate", get(ok))
        .route("/readiness", get(ok))
        .route("/liveness", get(ok))
        .route("/get_model_info", get(info))
        .route("/get_server_info", get(info))
        .route("/v1/models", get(models))
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn bad_request(message: &str) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error",
                                            "param": null, "code": null}});
    json_response(StatusCode::BAD_REQUEST, body.to_string())
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn generate(body: Bytes, kind: Kind) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return bad_request("request body must be JSON");
    };
    let max_tokens = match request.get("max_tokens") {
        None | Some(Value::Null) => DEFAULT_MAX_TOKENS,
        Some(value) => match value.as_u64() {
            Some(n) if (1..=MAX_TOKENS_LIMIT).contains(&n) => n,
            _ => return bad_request("'max_tokens' must be an integer in [1, 65536]"),
        },
    };
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        stream_body(kind, max_tokens)
    } else {
        whole_body(kind, max_tokens)
    }
}

fn stream_body(kind: Kind, n: u64) -> Response {
    let created = now_s();
    let (object, field_open, field_close) = match kind {
        Kind::Completion => ("text_completion", r#""text":""#, ""),
        Kind::Chat => ("chat.completion.chunk", r#""delta":{"content":""#, "}"),
    };
    let mut events = String::with_capacity(200 * n as usize + 16);
    for i in 0..n {
        let finish = if i + 1 == n { r#""length""# } else { "null" };
        let _ = write!(
            events,
            r#"data: {{"id":"cmpl-mock","object":"{object}","created":{created},"model":"{MODEL}","choices":[{{"index":0,"finish_reason":{finish},"logprobs":null,{field_open} w{i}"{field_close}}}]}}"#
        );
        events.push_str("\n\n");
    }
    events.push_str("data: [DONE]\n\n");
    // A one-chunk stream: chunked transfer encoding, as a streaming server sends it.
    let chunk = futures_util::stream::once(async move { Ok::<_, Infallible>(Bytes::from(events)) });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(chunk))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn whole_body(kind: Kind, n: u64) -> Response {
    let mut text = String::with_capacity(6 * n as usize);
    for i in 0..n {
        let _ = write!(text, " w{i}");
    }
    let (object, choice) = match kind {
        Kind::Completion => ("text_completion", format!(r#""text":"{text}""#)),
        Kind::Chat => (
            "chat.completion",
            format!(r#""message":{{"role":"assistant","content":"{text}"}}"#),
        ),
    };
    let body = format!(
        r#"{{"id":"cmpl-mock","object":"{object}","created":{},"model":"{MODEL}","choices":[{{"index":0,"finish_reason":"length","logprobs":null,{choice}}}],"usage":{{"prompt_tokens":{PROMPT_TOKENS},"completion_tokens":{n},"total_tokens":{}}}}}"#,
        now_s(),
        n + PROMPT_TOKENS
    );
    json_response(StatusCode::OK, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write as _};
    use std::time::Duration;

    fn post(addr: SocketAddr, path: &str, body: &str) -> String {
        let mut socket = std::net::TcpStream::connect(addr).unwrap();
        write!(
            socket,
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        socket.read_to_string(&mut reply).unwrap();
        reply
    }

    fn json_events(reply: &str) -> Vec<Value> {
        reply
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn streams_one_event_per_token_then_done() {
        let mut server = start_mock_worker("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let reply = post(
            server.local_addr(),
            "/v1/completions",
            r#"{"max_tokens":3,"stream":true}"#,
        );
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        assert!(reply.contains("text/event-stream"));
        let events = json_events(&reply);
        let texts: Vec<&str> = events
            .iter()
            .map(|e| e["choices"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, [" w0", " w1", " w2"]);
        assert_eq!(events[2]["choices"][0]["finish_reason"], "length");
        assert!(events[1]["choices"][0]["finish_reason"].is_null());
        assert!(reply.contains("data: [DONE]"));
        let chat = json_events(&post(
            server.local_addr(),
            "/v1/chat/completions",
            r#"{"stream":true}"#,
        ));
        assert_eq!(chat.len(), 16);
        assert_eq!(chat[0]["choices"][0]["delta"]["content"], " w0");
        server.shutdown(Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn whole_bodies_and_bad_input() {
        let mut server = start_mock_worker("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let reply = post(
            server.local_addr(),
            "/v1/chat/completions",
            r#"{"max_tokens":2}"#,
        );
        let body: Value = serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], " w0 w1");
        assert_eq!(body["usage"]["completion_tokens"], 2);
        assert!(
            post(server.local_addr(), "/v1/completions", "{not json").starts_with("HTTP/1.1 400")
        );
        assert!(post(
            server.local_addr(),
            "/v1/completions",
            r#"{"max_tokens":0}"#
        )
        .starts_with("HTTP/1.1 400"));
        server.shutdown(Duration::from_secs(1)).unwrap();
    }
}
