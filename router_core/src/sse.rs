//! OpenAI streaming chunks as ready-to-send `data: {...}\n\n` bytes.
//!
//! The parts of a chunk that never change during a stream (id, object, created, model) are
//! serialised once; each delta only escapes its text, so encoding costs one small copy.

use crate::error::{Result, RouterCoreError};
use serde_json::json;

/// Which OpenAI stream format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// `/v1/completions`: `object: "text_completion"`, `choices[0].text`.
    Completion,
    /// `/v1/chat/completions`: `object: "chat.completion.chunk"`, `choices[0].delta`.
    Chat,
}

impl StreamKind {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "completion" => Ok(StreamKind::Completion),
            "chat" => Ok(StreamKind::Chat),
            other => Err(RouterCoreError::InvalidArgument(format!(
                "kind must be 'completion' or 'chat', got {other:?}"
            ))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SseEncoder {
    kind: StreamKind,
    /// `data: {"id":...,"object":...,"created":...,"model":...,"choices":[`
    head: Vec<u8>,
    /// `data: {"id":...,"object":...,"created":...,"model":...,`
    head_without_choices: Vec<u8>,
}

const DATA: &[u8] = b"data: ";
const END: &[u8] = b"\n\n";

impl SseEncoder {
    pub fn new(request_id: &str, model: &str, created: u64, kind: StreamKind) -> Self {
        let object = match kind {
            StreamKind::Completion => "text_completion",
            StreamKind::Chat => "chat.completion.chunk",
        };
        let mut head_without_choices = DATA.to_vec();
        head_without_choices.extend_from_slice(b"{\"id\":");
        push_json_str(&mut head_without_choices, request_id);
        head_without_choices.extend_from_slice(b",\"object\":");
        push_json_str(&mut head_without_choices, object);
        head_without_choices
            .extend_from_slice(format!(",\"created\":{created},\"model\":").as_bytes());
        push_json_str(&mut head_without_choices, model);
        head_without_choices.push(b',');
        let mut head = head_without_choices.clone();
        head.extend_from_slice(b"\"choices\":[");
        SseEncoder {
            kind,
            head,
            head_without_choices,
        }
    }

    /// Chat only: the first chunk, announcing the assistant role.
    pub fn role_chunk(&self) -> Result<Vec<u8>> {
        if self.kind != StreamKind::Chat {
            return Err(RouterCoreError::InvalidArgument(
                "role_chunk is for chat streams".into(),
            ));
        }
        let mut out = self.head.clone();
        out.extend_from_slice(
            b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}",
        );
        out.extend_from_slice(END);
        Ok(out)
    }

    /// A text chunk; with `finish_reason` it is the last content chunk.
    pub fn delta(&self, text: &str, finish_reason: Option<&str>) -> Vec<u8> {
        self.delta_with_ids(text, None, finish_reason)
    }

    /// A text chunk and, when the request asked for them (`return_token_ids`), the ids of the
    /// tokens it carries.
    pub fn delta_with_ids(
        &self,
        text: &str,
        token_ids: Option<&[u32]>,
        finish_reason: Option<&str>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + text.len() + 96);
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"{\"index\":0,");
        match self.kind {
            StreamKind::Completion => {
                out.extend_from_slice(b"\"text\":");
                push_json_str(&mut out, text);
            }
            StreamKind::Chat if text.is_empty() && finish_reason.is_some() => {
                out.extend_from_slice(b"\"delta\":{}");
            }
            StreamKind::Chat => {
                out.extend_from_slice(b"\"delta\":{\"content\":");
                push_json_str(&mut out, text);
                out.push(b'}');
            }
        }
        if let Some(ids) = token_ids {
            out.extend_from_slice(b",\"token_ids\":");
            out.extend_from_slice(serde_json::to_string(ids).unwrap_or_default().as_bytes());
        }
        out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        match finish_reason {
            Some(reason) => push_json_str(&mut out, reason),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b"}]}");
        out.extend_from_slice(END);
        out
    }

    /// The usage chunk (`stream_options.include_usage`): empty choices plus token counts.
    pub fn usage(&self, prompt_tokens: u64, completion_tokens: u64, cached_tokens: u64) -> Vec<u8> {
        let usage = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        });
        let mut out = self.head_without_choices.clone();
        out.extend_from_slice(b"\"choices\":[],\"usage\":");
        out.extend_from_slice(usage.to_string().as_bytes());
        out.push(b'}');
        out.extend_from_slice(END);
        out
    }

    /// The stream terminator.
    pub fn done() -> &'static [u8] {
        b"data: [DONE]\n\n"
    }
}

/// Appends `s` as a JSON string literal.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail, and a &str always serialises.
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn parse(chunk: &[u8]) -> Value {
        let text = std::str::from_utf8(chunk).unwrap();
        let body = text
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn completion_chunks() {
        let enc = SseEncoder::new("cmpl-1", "m\"odel", 7, StreamKind::Completion);
        let v = parse(&enc.delta("hé \"x\"\n", None));
        assert_eq!(v["id"], "cmpl-1");
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["created"], 7);
        assert_eq!(v["model"], "m\"odel");
        assert_eq!(v["choices"][0]["text"], "hé \"x\"\n");
        assert_eq!(v["choices"][0]["finish_reason"], Value::Null);
        assert_eq!(
            parse(&enc.delta("", Some("length")))["choices"][0]["finish_reason"],
            "length"
        );
        assert!(enc.role_chunk().is_err());
    }

    #[test]
    fn chat_chunks_and_usage() {
        let enc = SseEncoder::new("chatcmpl-1", "m", 1, StreamKind::Chat);
        assert_eq!(
            parse(&enc.role_chunk().unwrap())["choices"][0]["delta"]["role"],
            "assistant"
        );
        let v = parse(&enc.delta("hi", None));
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(v["choices"][0]["delta"]["content"], "hi");
        let last = parse(&enc.delta("", Some("stop")));
        assert_eq!(last["choices"][0]["delta"], serde_json::json!({}));
        assert_eq!(last["choices"][0]["finish_reason"], "stop");
        let u = parse(&enc.usage(10, 5, 3));
        assert_eq!(u["choices"], serde_json::json!([]));
        assert_eq!(u["usage"]["total_tokens"], 15);
        assert_eq!(u["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
        assert_eq!(SseEncoder::done(), b"data: [DONE]\n\n");
        assert!(StreamKind::parse("embeddings").is_err());
    }
}
