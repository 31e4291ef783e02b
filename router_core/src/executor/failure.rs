//! Engine and verb failures as the client sees them, each mapped once: a verb that failed while a
//! policy decided, a segment's first chunk that did not come (admission, or after a hand-off),
//! and a chunk after it. A failure before any output is `retryable` on another engine when the
//! engine was unwell rather than the request wrong; `engine` names the engine that failed when
//! it is known (only it leaves rotation).

use super::request_exec::VerbError;
use super::scope::Verb;
use crate::engine_rpc::{code_name, is_caller_mistake, CallError};
use crate::front::api_error::{ApiError, ShapedError};
use crate::front::engine_names::engine_name;
use crate::rpc::pb;
use std::time::Duration;
use tonic::Status;

/// The engine's refusals of the client's own `response_format` begin so (a schema its grammar
/// library rejects): the client's 400 whatever the policy did.
const RESPONSE_FORMAT_REFUSED: &str = "response_format: ";

/// A request's attempt that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// What the client gets (status, OpenAI error body).
    pub error: ShapedError,
    /// The body's code and message (the retry logic and the logs read them).
    pub code: String,
    pub message: String,
    /// Nothing reached the client and the engine, not the request, was at fault: another
    /// engine may take it.
    pub retryable: bool,
    /// The engine that failed, when known (it leaves rotation before a retry).
    pub engine: Option<u32>,
}

impl Failure {
    pub fn fatal(error: ApiError) -> Self {
        Failure {
            error: ShapedError::from(&error),
            code: error.code.clone().unwrap_or_default(),
            message: error.message,
            retryable: false,
            engine: None,
        }
    }

    fn on(error: ApiError, engine: Option<u32>) -> Self {
        Failure {
            retryable: true,
            engine,
            ..Failure::fatal(error)
        }
    }

    /// An error the deciding side shaped itself: never retried here.
    pub fn shaped(error: ShapedError) -> Self {
        let body: serde_json::Value = serde_json::from_slice(&error.body).unwrap_or_default();
        let text = |key: &str| body["error"][key].as_str().unwrap_or_default().to_owned();
        Failure {
            code: text("code"),
            message: text("message"),
            error,
            retryable: false,
            engine: None,
        }
    }

    pub fn message(&self) -> String {
        self.message.clone()
    }

    /// No healthy engine could take it (a retry may wait for one to come back).
    pub fn is_no_capacity(&self) -> bool {
        self.error.status == 503 && self.code == "no_capacity"
    }
}

/// Where a failure happened (its message says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A segment's generation, before its first chunk.
    Generate,
    /// A verb the policy awaited.
    PolicyVerbs,
    /// A live migration's verbs.
    Migration,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Generate => "generate",
            Stage::PolicyVerbs => "policy verbs",
            Stage::Migration => "migration",
        }
    }
}

/// An engine's message as a client may see it: the engine-side id never shows.
pub fn public_detail(message: &str, engine_request_id: &str) -> String {
    if engine_request_id.is_empty() {
        message.to_owned()
    } else {
        message.replace(engine_request_id, "<request>")
    }
}

/// 500: a policy raised, answered wrongly or used the verbs wrongly; only its request fails.
pub fn policy_failed(policy: &str, detail: &str) -> ApiError {
    ApiError::internal(format!("policy '{policy}' failed: {detail}"))
        .with_type("policy_error")
        .with_code("policy_error")
}

/// What a failed engine call is, from its status: `attempt_verbs` are the verbs this attempt
/// issued, in order (the last is the one that failed).
pub fn engine_status(
    status: &Status,
    stage: Stage,
    policy: &str,
    attempt_verbs: &[(Verb, u32)],
    engine_request_id: &str,
) -> Failure {
    let details = public_detail(status.message(), engine_request_id);
    let detail = format!("{}: {details}", code_name(status.code()));
    let failed_on = attempt_verbs.last().map(|&(_, num)| num);
    let code = status.code();
    if code == tonic::Code::InvalidArgument && details.starts_with(RESPONSE_FORMAT_REFUSED) {
        return Failure::fatal(ApiError::bad_request(details).with_param("response_format"));
    }
    if is_caller_mistake(code) {
        let plain_generate = attempt_verbs.len() == 1 && attempt_verbs[0].0 == Verb::StartGenerate;
        if plain_generate && stage == Stage::Generate {
            return Failure::fatal(ApiError::bad_request(format!(
                "engine rejected the request: {details}"
            )));
        }
        return Failure::fatal(policy_failed(
            policy,
            &format!("engine rejected a verb ({detail})"),
        ));
    }
    let stage = stage.name();
    if code == tonic::Code::Unavailable {
        return Failure::on(
            ApiError::engine_unavailable(format!("engine unavailable during {stage}: {detail}")),
            failed_on,
        );
    }
    if code == tonic::Code::ResourceExhausted {
        // The engine is well and full (no KV pages for a reservation): taking it out of rotation
        // would move its load onto the others; the client is told to come back instead.
        let engine = failed_on.map_or_else(|| "?".to_owned(), engine_name);
        return Failure::fatal(
            ApiError::no_capacity(format!("engine {engine} is full ({stage}): {detail}"))
                .with_code("engine_full"),
        );
    }
    // Any other status before output — UNKNOWN "transport error", CANCELLED by a dying peer, a
    // reset stream — is an engine that is unwell, not a request that is wrong: retryable too.
    Failure::on(
        ApiError::engine_failed(format!("engine error during {stage}: {detail}"))
            .with_code("engine_error"),
        failed_on,
    )
}

/// A verb the policy awaited failed and the policy let it through.
pub fn verb_failure(
    error: &VerbError,
    stage: Stage,
    policy: &str,
    attempt_verbs: &[(Verb, u32)],
    engine_request_id: &str,
) -> Failure {
    match error {
        VerbError::Order(why) => {
            Failure::fatal(policy_failed(policy, &format!("wrong verb order: {why}")))
        }
        VerbError::Transfer(why) => Failure::fatal(
            ApiError::engine_failed(format!("KV transfer failed: {why}"))
                .with_code("transfer_failed"),
        ),
        VerbError::Engine { error, .. } => match error {
            CallError::Rpc(status) => {
                engine_status(status, stage, policy, attempt_verbs, engine_request_id)
            }
            CallError::Cancelled => Failure::fatal(
                ApiError::engine_failed("the engine call was cancelled").with_code("engine_error"),
            ),
            CallError::Busy => Failure::fatal(ApiError::internal(
                "an engine stream was read twice at once",
            )),
        },
    }
}

/// No chunk within the first-chunk deadline.
pub fn first_chunk_timeout(engine: u32, deadline: Duration) -> Failure {
    Failure::fatal(
        ApiError::engine_failed(format!(
            "engine {} produced no output within {} s",
            engine_name(engine),
            seconds(deadline)
        ))
        .with_code("engine_timeout"),
    )
}

/// A duration in seconds as Python's `{:g}` writes it (no trailing zeros).
pub fn seconds(d: Duration) -> String {
    let s = format!("{:.6}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The finish reason of a request the engine ended itself: never shown to a client.
const ABORT: &str = "abort";

/// A chunk whose finish reason is "error", as the client sees it; `error` is the engine's
/// message.
fn engine_error_chunk(error: &str) -> ApiError {
    let detail = if error.is_empty() { "unknown" } else { error };
    ApiError::engine_failed(format!("engine error: {detail}")).with_code("engine_error")
}

/// A segment's first chunk on engine `engine` (the attempt's `attempt_verbs`, the last its
/// StartGenerate). Engine-internal endings never reach a client: `error` is a failure, and
/// `abort` (the engine ended the request itself, e.g. while shutting down) is one too —
/// retryable on another engine when nothing has been produced.
pub fn first_chunk(
    read: Result<Option<pb::GenerateChunk>, CallError>,
    engine: u32,
    policy: &str,
    attempt_verbs: &[(Verb, u32)],
    engine_request_id: &str,
) -> Result<pb::GenerateChunk, Failure> {
    match read {
        Ok(Some(chunk)) if chunk.finish_reason == "error" => {
            Err(Failure::fatal(engine_error_chunk(&chunk.error)))
        }
        Ok(Some(chunk)) if chunk.finish_reason == ABORT => {
            let message = format!("engine {} aborted the request", engine_name(engine));
            if chunk.token_ids.is_empty() {
                Err(Failure::on(
                    ApiError::engine_unavailable(message).with_code("engine_aborted"),
                    Some(engine),
                ))
            } else {
                Err(Failure::fatal(
                    ApiError::engine_failed(message).with_code("engine_aborted"),
                ))
            }
        }
        Ok(Some(chunk)) => Ok(chunk),
        Ok(None) => Err(Failure::on(
            ApiError::engine_failed("engine closed the stream without output")
                .with_code("engine_error"),
            Some(engine),
        )),
        Err(CallError::Rpc(status)) => Err(engine_status(
            &status,
            Stage::Generate,
            policy,
            attempt_verbs,
            engine_request_id,
        )),
        Err(CallError::Cancelled) => Err(Failure::on(
            ApiError::engine_failed("engine error during generate: the call was cancelled")
                .with_code("engine_error"),
            Some(engine),
        )),
        Err(CallError::Busy) => Err(Failure::fatal(ApiError::internal(
            "an engine stream was read twice at once",
        ))),
    }
}

/// A chunk after the first of a segment.
pub fn next_chunk(
    read: Result<Option<pb::GenerateChunk>, CallError>,
    engine: u32,
    engine_request_id: &str,
) -> Result<pb::GenerateChunk, ApiError> {
    match read {
        Ok(Some(chunk)) if chunk.finish_reason == "error" => Err(engine_error_chunk(&chunk.error)),
        Ok(Some(chunk)) if chunk.finish_reason == ABORT => Err(ApiError::engine_failed(format!(
            "engine {} aborted the request",
            engine_name(engine)
        ))
        .with_code("engine_aborted")),
        Ok(Some(chunk)) => Ok(chunk),
        Ok(None) => Err(
            ApiError::engine_failed("engine closed the stream without finishing")
                .with_code("engine_error"),
        ),
        Err(err) => {
            let message = match err {
                CallError::Rpc(status) => format!(
                    "engine failed mid-stream: {}: {}",
                    code_name(status.code()),
                    public_detail(status.message(), engine_request_id)
                ),
                CallError::Cancelled => "the generation was cancelled".to_owned(),
                CallError::Busy => "the generation's stream was read twice at once".to_owned(),
            };
            Err(ApiError::engine_failed(message).with_code("engine_error"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(finish: &str, error: &str) -> pb::GenerateChunk {
        pb::GenerateChunk {
            finish_reason: finish.into(),
            error: error.into(),
            ..Default::default()
        }
    }

    const GENERATE: &[(Verb, u32)] = &[(Verb::StartGenerate, 1)];

    fn first(read: Result<Option<pb::GenerateChunk>, CallError>) -> Failure {
        first_chunk(read, 1, "p", GENERATE, "").unwrap_err()
    }

    #[test]
    fn first_chunk_texts() {
        let unavailable = first(Err(CallError::Rpc(Status::unavailable("down"))));
        assert!(unavailable.retryable);
        assert_eq!(unavailable.engine, Some(1));
        assert_eq!(unavailable.error.status, 503);
        assert_eq!(
            unavailable.message,
            "engine unavailable during generate: UNAVAILABLE: down"
        );
        let refused = first(Err(CallError::Rpc(Status::invalid_argument("bad ids"))));
        assert_eq!(
            (refused.error.status, refused.message.as_str()),
            (400, "engine rejected the request: bad ids")
        );
        let schema = first(Err(CallError::Rpc(Status::invalid_argument(
            "response_format: no such type",
        ))));
        let body: serde_json::Value = serde_json::from_slice(&schema.error.body).unwrap();
        assert_eq!(body["error"]["param"], "response_format");
        let failed = first(Ok(Some(chunk("error", ""))));
        assert_eq!(failed.message, "engine error: unknown");
        assert!(!failed.retryable);
        assert!(first(Ok(None)).retryable);
        let full = first(Err(CallError::Rpc(Status::resource_exhausted("no pages"))));
        assert_eq!(
            (full.error.status, full.code.as_str(), full.retryable),
            (503, "engine_full", false)
        );
        assert_eq!(
            first_chunk_timeout(1, Duration::from_secs(300)).message,
            "engine e1 produced no output within 300 s"
        );
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5");
    }

    #[test]
    fn a_policys_verb_rejected_is_the_policys_failure() {
        let verbs = [(Verb::PrepRecv, 1), (Verb::StartGenerate, 1)];
        let failed = engine_status(
            &Status::invalid_argument("bad end"),
            Stage::Generate,
            "pd",
            &verbs,
            "",
        );
        assert_eq!(failed.error.status, 500);
        assert_eq!(
            failed.message,
            "policy 'pd' failed: engine rejected a verb (INVALID_ARGUMENT: bad end)"
        );
        let order = verb_failure(
            &VerbError::Order("x".into()),
            Stage::PolicyVerbs,
            "pd",
            &verbs,
            "",
        );
        assert_eq!(order.message, "policy 'pd' failed: wrong verb order: x");
        let transfer = verb_failure(
            &VerbError::Transfer("e0 -> e1: UNKNOWN: boom".into()),
            Stage::PolicyVerbs,
            "pd",
            &verbs,
            "",
        );
        assert_eq!(transfer.code, "transfer_failed");
    }

    #[test]
    fn any_engine_failure_before_output_is_retryable_and_hides_the_engine_id() {
        for status in [
            Status::unknown("transport error"),
            Status::cancelled("peer went away"),
            Status::internal("h2 protocol error: stream reset"),
            Status::already_exists("request id 'cmpl-77-r1' exists"),
        ] {
            let failed = first_chunk(Err(CallError::Rpc(status)), 1, "p", GENERATE, "cmpl-77-r1")
                .unwrap_err();
            assert!(failed.retryable, "{}", failed.message);
            assert!(!failed.message.contains("cmpl-77"), "{}", failed.message);
        }
        let mid = next_chunk(
            Err(CallError::Rpc(Status::unknown("id cmpl-9 lost"))),
            1,
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
        let before_output = first(Ok(Some(chunk("abort", ""))));
        assert!(before_output.retryable);
        assert_eq!(before_output.code, "engine_aborted");
        let mut with_tokens = chunk("abort", "");
        with_tokens.token_ids = vec![5];
        assert!(!first(Ok(Some(with_tokens))).retryable);
        let mid_stream = next_chunk(Ok(Some(chunk("abort", ""))), 1, "").unwrap_err();
        assert_eq!(
            (mid_stream.status, mid_stream.code.as_deref()),
            (502, Some("engine_aborted"))
        );
    }

    #[test]
    fn mid_stream_texts() {
        let err = next_chunk(Err(CallError::Rpc(Status::internal("boom"))), 1, "").unwrap_err();
        assert_eq!(err.message, "engine failed mid-stream: INTERNAL: boom");
        assert_eq!(err.code.as_deref(), Some("engine_error"));
        assert_eq!(
            next_chunk(Ok(None), 1, "").unwrap_err().message,
            "engine closed the stream without finishing"
        );
        assert!(next_chunk(Ok(Some(chunk("length", ""))), 1, "").is_ok());
    }
}
