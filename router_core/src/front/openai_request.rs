//! OpenAI request bodies -> `GenerationRequest`, every field checked (bad input -> a 400 naming
//! the field). This checks the body's shape; the sampling rules themselves are crate::sampling,
//! the one set router and engine apply. Texts and the order of the checks are those the Python
//! front had, so clients see the same 400s.

use super::api_error::ApiError;
use super::response_format::{parse_response_format, ResponseFormat};
use super::session_id::RequestSession;
use crate::sampling::{check_sampling, py_float, SamplingFields};
use crate::tokenize::{parse_chat_messages, ChatMessage, RouterTokenizer};
use serde_json::{Map, Value};

/// Which endpoint: `/v1/completions` or `/v1/chat/completions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Completion,
    Chat,
}

impl RequestKind {
    pub fn name(self) -> &'static str {
        match self {
            RequestKind::Completion => "completion",
            RequestKind::Chat => "chat",
        }
    }

    /// The request id prefix, as OpenAI's bodies have it.
    pub fn id_prefix(self) -> &'static str {
        match self {
            RequestKind::Completion => "cmpl-",
            RequestKind::Chat => "chatcmpl-",
        }
    }

    fn default_max_tokens(self) -> i64 {
        match self {
            RequestKind::Completion => 16,
            RequestKind::Chat => 256,
        }
    }
}

/// What the prompt becomes ids with (the router's RouterTokenizer; a fake in tests).
pub trait PromptTokenizer {
    fn encode_prompt(&self, text: &str) -> crate::Result<Vec<u32>>;
    fn encode_chat(&self, messages: &[ChatMessage]) -> crate::Result<Vec<u32>>;
    fn vocab_size(&self) -> usize;
    /// The most UTF-8 bytes one token stands for (RouterTokenizer::max_token_bytes).
    fn max_token_bytes(&self) -> usize;
}

impl PromptTokenizer for RouterTokenizer {
    fn encode_prompt(&self, text: &str) -> crate::Result<Vec<u32>> {
        self.encode(text, true)
    }

    fn encode_chat(&self, messages: &[ChatMessage]) -> crate::Result<Vec<u32>> {
        RouterTokenizer::encode_chat(self, messages, true)
    }

    fn vocab_size(&self) -> usize {
        RouterTokenizer::vocab_size(self)
    }

    fn max_token_bytes(&self) -> usize {
        RouterTokenizer::max_token_bytes(self)
    }
}

/// The sampling a request asked for, checked and normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i64,
    pub max_tokens: i64,
    pub min_tokens: i64,
    pub seed: Option<i64>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// Structured output the engine's sampler enforces (None: free text).
    pub response_format: Option<ResponseFormat>,
    /// Scheduling priority, lower first (crate::sampling::PRIORITY_RANGE; 0 when unset): the
    /// router's admission queue and the engine's scheduler order by it.
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    pub kind: RequestKind,
    pub tokens: Vec<u32>,
    pub sampling: Sampling,
    pub stream: bool,
    pub include_usage: bool,
    pub return_token_ids: bool,
    pub slo_ttft_ms: Option<f64>,
    pub slo_tpot_ms: Option<f64>,
    /// The session it belongs to (X-Session-Id, or `user` when allowed; front/session_id.rs).
    pub session: Option<RequestSession>,
}

/// What the router serves and its defaults.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    pub served_model: String,
    pub max_context: i64,
    pub default_temperature: f64,
    pub default_top_p: f64,
}

type Fields = Map<String, Value>;

fn bad(message: String, param: &str) -> ApiError {
    ApiError::bad_request(message).with_param(param)
}

fn is_int(value: &Value) -> bool {
    value.is_i64() || value.is_u64()
}

/// Python's `value in (None, 0, 0.0)` (False == 0 in Python).
fn is_zero_or_null(value: &Value, also: f64) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => f64::from(u8::from(*b)) == 0.0 || f64::from(u8::from(*b)) == also,
        Value::Number(n) => n.as_f64().is_some_and(|v| v == 0.0 || v == also),
        _ => false,
    }
}

/// Python truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|v| v != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn number(body: &Fields, key: &str, default: f64, lo: f64, hi: f64) -> Result<f64, ApiError> {
    let value = match body.get(key) {
        None | Some(Value::Null) => return Ok(default),
        Some(v) => v,
    };
    let Some(n) = value.as_number().and_then(|n| n.as_f64()) else {
        return Err(bad(format!("'{key}' must be a number"), key));
    };
    if !(lo..=hi).contains(&n) {
        return Err(bad(
            format!(
                "'{key}' must be in [{}, {}], got {value}",
                py_float(lo),
                py_float(hi)
            ),
            key,
        ));
    }
    Ok(n)
}

fn integer(body: &Fields, key: &str, lo: i128, hi: i128) -> Result<Option<i128>, ApiError> {
    let value = match body.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let parsed = if is_int(value) {
        value
            .as_i64()
            .map(i128::from)
            .or_else(|| value.as_u64().map(i128::from))
    } else {
        None
    };
    let Some(n) = parsed else {
        return Err(bad(format!("'{key}' must be an integer"), key));
    };
    if !(lo..=hi).contains(&n) {
        return Err(bad(
            format!("'{key}' must be in [{lo}, {hi}], got {n}"),
            key,
        ));
    }
    Ok(Some(n))
}

const I64_LO: i128 = i64::MIN as i128;
const I64_HI: i128 = i64::MAX as i128;

fn flag(body: &Fields, key: &str) -> Result<bool, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(format!("'{key}' must be a boolean"), key)),
    }
}

/// `stop` as a list (a string is a list of one), an entry that is not a string as None: its
/// count and contents are the sampling rules' to judge.
fn stop_entries(body: &Fields) -> Result<Vec<Option<&str>>, ApiError> {
    match body.get("stop") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![Some(s.as_str())]),
        Some(Value::Array(items)) => Ok(items.iter().map(Value::as_str).collect()),
        Some(_) => Err(bad(
            "'stop' must be a string or a list of strings".into(),
            "stop",
        )),
    }
}

/// A prompt that cannot fit the context whatever it tokenises to is refused before any work is
/// spent on it: text longer than the context times the most bytes a token stands for, or more
/// token ids than the context.
fn cannot_fit(what: String, max_context: i64, param: &str) -> ApiError {
    bad(
        format!("the prompt's {what} cannot fit the context length {max_context}"),
        param,
    )
    .with_code("context_length_exceeded")
}

fn check_text_fits(
    bytes: usize,
    tok: &dyn PromptTokenizer,
    max_context: i64,
    param: &str,
) -> Result<(), ApiError> {
    let most = u128::try_from(max_context).unwrap_or(0) * tok.max_token_bytes() as u128;
    if bytes as u128 > most {
        return Err(cannot_fit(format!("{bytes} bytes"), max_context, param));
    }
    Ok(())
}

fn prompt_tokens(
    body: &Fields,
    tok: &dyn PromptTokenizer,
    max_context: i64,
) -> Result<Vec<u32>, ApiError> {
    let mut prompt = body.get("prompt");
    if let Some(Value::Array(batch)) = prompt {
        if batch.len() == 1 && (batch[0].is_string() || batch[0].is_array()) {
            prompt = Some(&batch[0]); // a batch of one
        }
    }
    match prompt {
        Some(Value::String(text)) => {
            check_text_fits(text.len(), tok, max_context, "prompt")?;
            Ok(tok.encode_prompt(text)?)
        }
        Some(Value::Array(ids)) if ids.len() as u128 > u128::try_from(max_context).unwrap_or(0) => {
            Err(cannot_fit(
                format!("{} token ids", ids.len()),
                max_context,
                "prompt",
            ))
        }
        Some(Value::Array(ids)) if !ids.is_empty() && ids.iter().all(is_int) => {
            let vocab = tok.vocab_size() as u64;
            ids.iter()
                .map(|id| match id.as_u64() {
                    Some(id) if id < vocab => Ok(id as u32),
                    _ => Err(bad(
                        format!("prompt token ids must be in [0, {vocab})"),
                        "prompt",
                    )),
                })
                .collect()
        }
        _ => Err(bad(
            "'prompt' must be a string or a list of token ids (batches of more than one prompt \
             are not supported)"
                .into(),
            "prompt",
        )),
    }
}

fn chat_tokens(
    body: &Fields,
    tok: &dyn PromptTokenizer,
    max_context: i64,
) -> Result<Vec<u32>, ApiError> {
    let messages = parse_chat_messages(body.get("messages").unwrap_or(&Value::Null))?;
    let bytes = messages.iter().map(|m| m.content.len()).sum();
    check_text_fits(bytes, tok, max_context, "messages")?;
    Ok(tok.encode_chat(&messages)?)
}

fn check_unsupported(body: &Fields) -> Result<(), ApiError> {
    if integer(body, "n", 1, 1)?.unwrap_or(1) != 1 || flag(body, "echo")? {
        return Err(bad("'n' > 1 and 'echo' are not supported".into(), "n"));
    }
    for key in [
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    ] {
        let value = body.get(key).unwrap_or(&Value::Null);
        let neutral = if key == "repetition_penalty" {
            1.0
        } else {
            0.0
        };
        if !is_zero_or_null(value, neutral) {
            return Err(bad(format!("'{key}' is not supported yet"), key));
        }
    }
    let logprobs = body.get("logprobs").unwrap_or(&Value::Null);
    let logprobs_off =
        matches!(logprobs, Value::Null | Value::Bool(false)) || logprobs.as_f64() == Some(0.0);
    if !logprobs_off || body.get("top_logprobs").is_some_and(truthy) {
        return Err(bad("'logprobs' are not supported yet".into(), "logprobs"));
    }
    check_output_constraints(body)
}

/// A tool call the client requires is refused rather than answered with free text: Switchyard
/// has no tool-call parser for its models' chat templates.
fn check_output_constraints(body: &Fields) -> Result<(), ApiError> {
    let has_tools = body.get("tools").is_some_and(truthy);
    let choice = body.get("tool_choice").unwrap_or(&Value::Null);
    let forced = match choice {
        Value::String(mode) => mode == "required",
        Value::Object(_) => true, // a named function
        _ => false,
    };
    if has_tools && forced {
        return Err(bad(
            "'tool_choice' that requires a tool call is not supported (the model answers in \
             text)"
                .into(),
            "tool_choice",
        )
        .with_code("unsupported_parameter"));
    }
    Ok(())
}

/// Parses and checks one request body (already JSON-decoded).
pub fn parse_generation(
    body: &Value,
    kind: RequestKind,
    tok: &dyn PromptTokenizer,
    limits: &RequestLimits,
) -> Result<GenerationRequest, ApiError> {
    let Value::Object(body) = body else {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    };
    match body.get("model") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if m == "default" || *m == limits.served_model => {}
        Some(other) => {
            let shown = match other {
                Value::String(s) => format!("'{s}'"),
                v => v.to_string(),
            };
            return Err(ApiError::not_found(format!(
                "model {shown} is not served here; use '{}' or 'default'",
                limits.served_model
            ))
            .with_param("model")
            .with_code("model_not_found"));
        }
    }
    check_unsupported(body)?;
    let tokens = match kind {
        RequestKind::Chat => chat_tokens(body, tok, limits.max_context)?,
        RequestKind::Completion => prompt_tokens(body, tok, limits.max_context)?,
    };
    if tokens.is_empty() {
        return Err(bad("the prompt is empty".into(), "prompt"));
    }
    let max_context = i128::from(limits.max_context);
    let max_completion_tokens = integer(body, "max_completion_tokens", 1, max_context)?;
    // Past the context, the check below names it; below 1, the sampling rules do.
    let max_tokens = integer(body, "max_tokens", I64_LO, I64_HI)?.or(max_completion_tokens);
    let max_tokens = max_tokens.unwrap_or(i128::from(kind.default_max_tokens()));
    if tokens.len() as i128 + max_tokens > max_context {
        return Err(bad(
            format!(
                "prompt ({} tokens) + max_tokens ({max_tokens}) exceeds the context length \
                 {max_context}",
                tokens.len()
            ),
            "max_tokens",
        )
        .with_code("context_length_exceeded"));
    }
    let stream = flag(body, "stream")?;
    let include_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) if stream => {
            !options.is_empty() && flag(options, "include_usage")?
        }
        Some(_) => {
            return Err(bad(
                "'stream_options' needs stream=true and must be an object".into(),
                "stream_options",
            ))
        }
    };
    let empty = Map::new();
    let slo = match body.get("slo") {
        Some(Value::Object(slo)) => slo,
        Some(v) if truthy(v) => {
            return Err(bad(
                "'slo' must be an object with ttft_ms / tpot_ms".into(),
                "slo",
            ))
        }
        _ => &empty,
    };
    let sampling = sampling(body, max_tokens, limits)?;
    let return_token_ids = flag(body, "return_token_ids")?;
    let slo_ms = |key| -> Result<Option<f64>, ApiError> {
        let ms = number(slo, key, 0.0, 0.0, 1e9)?;
        Ok((ms != 0.0).then_some(ms))
    };
    Ok(GenerationRequest {
        kind,
        tokens,
        sampling,
        stream,
        include_usage,
        return_token_ids,
        slo_ttft_ms: slo_ms("ttft_ms")?,
        slo_tpot_ms: slo_ms("tpot_ms")?,
        session: None,
    })
}

fn sampling(body: &Fields, max_tokens: i128, limits: &RequestLimits) -> Result<Sampling, ApiError> {
    // Only JSON types and the proto's widths (top_k int32, seed int64 or a u64's bits) are
    // checked here; every range is the sampling rules' (crate::sampling), so a client meets the
    // messages an engine gives for the same values.
    let inf = f64::INFINITY;
    let temperature = number(body, "temperature", limits.default_temperature, -inf, inf)?;
    let top_p = number(body, "top_p", limits.default_top_p, -inf, inf)?;
    let top_k = integer(body, "top_k", i32::MIN.into(), i32::MAX.into())?.unwrap_or(0);
    let min_tokens = integer(body, "min_tokens", I64_LO, I64_HI)?.unwrap_or(0);
    let seed = integer(body, "seed", I64_LO, u64::MAX.into())?;
    let stop = stop_entries(body)?;
    let ignore_eos = flag(body, "ignore_eos")?;
    let priority = integer(body, "priority", I64_LO, I64_HI)?.unwrap_or(0);
    // Every field named, deliberately, as at each SamplingFields literal (python/sampling.rs,
    // the tests): positional arguments would let its two floats or its integers swap places.
    let normalised = check_sampling(&SamplingFields {
        temperature,
        top_p,
        top_k,
        max_tokens,
        min_tokens,
        seed,
        stop_token_ids: &[],
        stop: &stop,
        priority,
    })?;
    let stop = stop.into_iter().flatten().map(str::to_owned).collect();
    // Every integer here was bounded to i64 above (max_tokens to the context length).
    let narrow = |v: i128| i64::try_from(v).unwrap_or(i64::MAX);
    Ok(Sampling {
        temperature,
        top_p: normalised.top_p,
        top_k: narrow(normalised.top_k),
        max_tokens: narrow(max_tokens),
        min_tokens: narrow(min_tokens),
        seed: seed.map(narrow),
        stop,
        ignore_eos,
        response_format: parse_response_format(body)?,
        // In PRIORITY_RANGE: the rules checked it.
        priority: i32::try_from(priority).unwrap_or_default(),
    })
}

#[cfg(test)]
#[path = "openai_request_tests.rs"]
mod tests;
