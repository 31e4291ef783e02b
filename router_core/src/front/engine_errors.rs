//! Engine failures as the client sees them, with the texts pyrouter/dispatch.py gives the same
//! failures on the Python side: a segment's first chunk (admission, or after a hand-off) and
//! the chunks after it.

use super::api_error::ApiError;
use crate::engine_rpc::{code_name, is_caller_mistake, CallError};
use crate::rpc::pb;
use std::time::Duration;

/// A first chunk that did not come: the error, and whether it is worth a retry elsewhere (the
/// engine failed before any output, whatever its status).
#[derive(Debug)]
pub struct FirstChunkFailure {
    pub error: ApiError,
    pub retryable: bool,
}

fn seconds(d: Duration) -> String {
    // Python's `{:g}`: no trailing zeros.
    let s = format!("{:.6}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// No chunk within the first-chunk deadline.
pub fn first_chunk_timeout(engine: &str, deadline: Duration) -> ApiError {
    ApiError::engine_failed(format!(
        "engine {engine} produced no output within {} s",
        seconds(deadline)
    ))
    .with_code("engine_timeout")
}

/// The finish reason of a request the engine ended itself: never shown to a client.
const ABORT: &str = "abort";

/// A chunk whose finish reason is "error", as the client sees it (the texts of
/// pyrouter/dispatch.py); `error` is the engine's message.
pub fn engine_error_chunk(error: &str) -> ApiError {
    let detail = if error.is_empty() { "unknown" } else { error };
    ApiError::engine_failed(format!("engine error: {detail}")).with_code("engine_error")
}

fn aborted() -> ApiError {
    ApiError::engine_failed("the engine aborted the request").with_code("engine_aborted")
}

/// The first chunk of a fast-path request (one plain StartGenerate: an engine refusing it is
/// the client's bad input).
pub fn first_chunk(
    read: Result<Option<pb::GenerateChunk>, CallError>,
    engine_request_id: &str,
) -> Result<pb::GenerateChunk, FirstChunkFailure> {
    let fail = |error: ApiError| FirstChunkFailure {
        error,
        retryable: false,
    };
    match read {
        Ok(Some(chunk)) if chunk.finish_reason == "error" => {
            Err(fail(engine_error_chunk(&chunk.error)))
        }
        // The engine ended the request itself (e.g. shutting down) before any token: another
        // engine may take it; after tokens it is a failure (never a finish reason).
        Ok(Some(chunk)) if chunk.finish_reason == ABORT => Err(FirstChunkFailure {
            error: aborted(),
            retryable: chunk.token_ids.is_empty(),
        }),
        Ok(Some(chunk)) => Ok(chunk),
        Ok(None) => Err(FirstChunkFailure {
            error: ApiError::engine_failed("engine closed the stream without output"),
            retryable: true,
        }),
        Err(CallError::Rpc(status)) => {
            let message = public_detail(status.message(), engine_request_id);
            let detail = format!("{}: {message}", code_name(status.code()));
            if is_caller_mistake(status.code()) {
                let error =
                    ApiError::bad_request(format!("engine rejected the request: {message}"));
                // The engine's refusals of the client's response_format (a schema its grammar
                // library rejects) begin so (switchyard_proto/sampling_params.py).
                Err(fail(if message.starts_with("response_format: ") {
                    error.with_param("response_format")
                } else {
                    error
                }))
            } else if status.code() == tonic::Code::Unavailable {
                Err(FirstChunkFailure {
                    error: ApiError::engine_unavailable(format!(
                        "engine unavailable during generate: {detail}"
                    )),
                    retryable: true,
                })
            } else {
                // UNKNOWN "transport error", CANCELLED by a dying peer, a reset stream: the
                // engine is unwell, not the request wrong — another engine may take it.
                Err(FirstChunkFailure {
                    error: ApiError::engine_failed(format!(
                        "engine error during generate: {detail}"
                    ))
                    .with_code("engine_error"),
                    retryable: true,
                })
            }
        }
        Err(err) => Err(fail(call_error(err, engine_request_id))),
    }
}

/// An engine's message as a client may see it: the engine-side id never shows.
fn public_detail(message: &str, engine_request_id: &str) -> String {
    if engine_request_id.is_empty() {
        message.to_owned()
    } else {
        message.replace(engine_request_id, "<request>")
    }
}

/// A chunk after the first of a segment (RequestRun.read).
pub fn next_chunk(
    read: Result<Option<pb::GenerateChunk>, CallError>,
    engine_request_id: &str,
) -> Result<pb::GenerateChunk, ApiError> {
    match read {
        Ok(Some(chunk)) if chunk.finish_reason == "error" => Err(engine_error_chunk(&chunk.error)),
        Ok(Some(chunk)) if chunk.finish_reason == ABORT => Err(aborted()),
        Ok(Some(chunk)) => Ok(chunk),
        Ok(None) => Err(
            ApiError::engine_failed("engine closed the stream without finishing")
                .with_code("engine_error"),
        ),
        Err(err) => Err(call_error(err, engine_request_id)),
    }
}

fn call_error(err: CallError, engine_request_id: &str) -> ApiError {
    let message = match err {
        CallError::Rpc(status) => format!(
            "engine failed mid-stream: {}: {}",
            code_name(status.code()),
            public_detail(status.message(), engine_request_id)
        ),
        CallError::Cancelled => "the generation was cancelled".to_owned(),
        CallError::Busy => "the generation's stream was read twice at once".to_owned(),
    };
    ApiError::engine_failed(message).with_code("engine_error")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    fn chunk(finish: &str, error: &str) -> pb::GenerateChunk {
        pb::GenerateChunk {
            finish_reason: finish.into(),
            error: error.into(),
            ..Default::default()
        }
    }

    #[test]
    fn first_chunk_texts() {
        let unavailable =
            first_chunk(Err(CallError::Rpc(Status::unavailable("down"))), "").unwrap_err();
        assert!(unavailable.retryable);
        assert_eq!(unavailable.error.status, 503);
        assert_eq!(
            unavailable.error.message,
            "engine unavailable during generate: UNAVAILABLE: down"
        );
        let refused =
            first_chunk(Err(CallError::Rpc(Status::invalid_argument("bad ids"))), "").unwrap_err();
        assert_eq!(
            (refused.error.status, refused.error.message.as_str()),
            (400, "engine rejected the request: bad ids")
        );
        let failed = first_chunk(Ok(Some(chunk("error", ""))), "").unwrap_err();
        assert_eq!(failed.error.message, "engine error: unknown");
        assert!(first_chunk(Ok(None), "").unwrap_err().retryable);
        assert_eq!(
            first_chunk_timeout("e1", Duration::from_secs(300)).message,
            "engine e1 produced no output within 300 s"
        );
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5");
    }

    #[test]
    fn any_engine_failure_before_output_is_retryable_and_hides_the_engine_id() {
        for status in [
            Status::unknown("transport error"),
            Status::cancelled("peer went away"),
            Status::internal("h2 protocol error: stream reset"),
            Status::already_exists("request id 'cmpl-77-r1' exists"),
        ] {
            let failed = first_chunk(Err(CallError::Rpc(status)), "cmpl-77-r1").unwrap_err();
            assert!(failed.retryable, "{}", failed.error.message);
            assert!(
                !failed.error.message.contains("cmpl-77"),
                "{}",
                failed.error.message
            );
        }
        let mid = next_chunk(
            Err(CallError::Rpc(Status::unknown("id cmpl-9 lost"))),
            "cmpl-9",
        )
        .unwrap_err();
        assert_eq!(
            mid.message,
            "engine failed mid-stream: UNKNOWN: id <request> lost"
        );
    }

    #[test]
    fn an_engine_abort_is_a_failure_never_a_finish() {
        let before_output = first_chunk(Ok(Some(chunk("abort", ""))), "").unwrap_err();
        assert!(before_output.retryable);
        assert_eq!(before_output.error.code.as_deref(), Some("engine_aborted"));
        let mut with_tokens = chunk("abort", "");
        with_tokens.token_ids = vec![5];
        assert!(
            !first_chunk(Ok(Some(with_tokens)), "")
                .unwrap_err()
                .retryable
        );
        let mid_stream = next_chunk(Ok(Some(chunk("abort", ""))), "").unwrap_err();
        assert_eq!(
            (mid_stream.status, mid_stream.code.as_deref()),
            (502, Some("engine_aborted"))
        );
    }

    #[test]
    fn mid_stream_texts() {
        let err = next_chunk(Err(CallError::Rpc(Status::internal("boom"))), "").unwrap_err();
        assert_eq!(err.message, "engine failed mid-stream: INTERNAL: boom");
        assert_eq!(err.code.as_deref(), Some("engine_error"));
        assert_eq!(
            next_chunk(Ok(None), "").unwrap_err().message,
            "engine closed the stream without finishing"
        );
        assert!(next_chunk(Ok(Some(chunk("length", ""))), "").is_ok());
    }
}
