//! What the client receives, built from the engine's token chunks: detokenised incrementally
//! (stop strings matched across chunk and segment seams), as SSE events — one per token, as
//! OpenAI streams — or as one JSON body, with usage. No I/O here: the request task feeds chunks
//! in and writes out the bytes this returns.

use super::openai_request::RequestKind;
use crate::detok::{DetokenizerVocab, IncrementalDetokenizer};
use crate::sse::{SseEncoder, StreamKind};
use serde_json::{json, Value};
use std::sync::Arc;

/// The finish reason a client may see (internal ones such as "handoff" never reach it).
pub fn client_finish(reason: &str) -> &'static str {
    match reason {
        "length" => "length",
        "abort" => "abort",
        _ => "stop",
    }
}

/// The bytes one engine chunk produced, and whether a stop string ended the response there.
#[derive(Debug, Default, PartialEq)]
pub struct ChunkOutput {
    pub bytes: Vec<u8>,
    pub stopped: bool,
}

pub struct ResponseBody {
    kind: RequestKind,
    stream: bool,
    include_usage: bool,
    return_token_ids: bool,
    detok: IncrementalDetokenizer,
    encoder: SseEncoder,
    request_id: String,
    model: String,
    created: u64,
    /// Non-streaming: the text and ids so far; streaming, the ids no event has carried yet (a
    /// token whose text is held back rides on the next event).
    text: String,
    ids: Vec<u32>,
    completion_tokens: u64,
    finish: &'static str,
}

impl ResponseBody {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        vocab: Arc<DetokenizerVocab>,
        stop: Vec<String>,
        kind: RequestKind,
        stream: bool,
        include_usage: bool,
        return_token_ids: bool,
        request_id: &str,
        model: &str,
        created: u64,
    ) -> crate::Result<Self> {
        let stream_kind = match kind {
            RequestKind::Completion => StreamKind::Completion,
            RequestKind::Chat => StreamKind::Chat,
        };
        Ok(ResponseBody {
            kind,
            stream,
            include_usage,
            return_token_ids,
            detok: IncrementalDetokenizer::new(vocab, stop, true)?,
            encoder: SseEncoder::new(request_id, model, created, stream_kind),
            request_id: request_id.to_owned(),
            model: model.to_owned(),
            created,
            text: String::new(),
            ids: Vec::new(),
            completion_tokens: 0,
            finish: "stop",
        })
    }

    pub fn completion_tokens(&self) -> u64 {
        self.completion_tokens
    }

    /// Streaming only: what goes out before the first token (chat announces the role).
    pub fn opening(&self) -> Vec<u8> {
        match (self.stream, self.kind) {
            (true, RequestKind::Chat) => self.encoder.role_chunk().unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// One engine chunk (hand-offs already hidden: `finish` is the request's own end, if this
    /// chunk carries it).
    pub fn push(&mut self, token_ids: &[u32], finish: Option<&str>) -> crate::Result<ChunkOutput> {
        self.completion_tokens += token_ids.len() as u64;
        let finish = finish.map(client_finish);
        if self.stream {
            return self.push_events(token_ids, finish);
        }
        self.ids.extend_from_slice(token_ids);
        let (text, stopped) = self.detok.push(token_ids)?;
        self.text.push_str(&text);
        if stopped {
            self.finish = "stop";
        } else if let Some(finish) = finish {
            self.finish = finish;
            self.text.push_str(&self.detok.flush());
        }
        Ok(ChunkOutput {
            bytes: Vec::new(),
            stopped,
        })
    }

    /// One SSE event per token; the finish reason rides on the last token's event (a stop
    /// string completing on that token wins); a token whose text is held back (a partial UTF-8
    /// sequence, a possible stop string) yields no event.
    fn push_events(
        &mut self,
        token_ids: &[u32],
        finish: Option<&'static str>,
    ) -> crate::Result<ChunkOutput> {
        let mut out = ChunkOutput::default();
        if token_ids.is_empty() {
            if let Some(finish) = finish {
                self.delta_tokens(&[], Some(finish), &mut out)?;
            }
            return Ok(out);
        }
        let last = token_ids.len() - 1;
        for (i, token) in token_ids.iter().enumerate() {
            let reason = if i == last { finish } else { None };
            self.delta_tokens(std::slice::from_ref(token), reason, &mut out)?;
            if out.stopped {
                break;
            }
        }
        Ok(out)
    }

    fn delta_tokens(
        &mut self,
        ids: &[u32],
        finish: Option<&'static str>,
        out: &mut ChunkOutput,
    ) -> crate::Result<()> {
        let (mut text, stopped) = self.detok.push(ids)?;
        let reason = if stopped { Some("stop") } else { finish };
        if reason.is_some() && !stopped {
            text.push_str(&self.detok.flush());
        }
        if self.return_token_ids {
            self.ids.extend_from_slice(ids);
        }
        if !text.is_empty() || reason.is_some() {
            let ids = std::mem::take(&mut self.ids);
            let ids = self.return_token_ids.then_some(ids.as_slice());
            out.bytes
                .extend_from_slice(&self.encoder.delta_with_ids(&text, ids, reason));
        }
        out.stopped = stopped;
        Ok(())
    }

    /// The end of a response that finished (or stopped on a stop string): streaming, the usage
    /// event (when asked for) and `[DONE]`; otherwise the whole JSON body.
    pub fn finish(&mut self, prompt_tokens: u64, cached_tokens: u64) -> Vec<u8> {
        if self.stream {
            let mut out = Vec::new();
            if self.include_usage {
                out.extend_from_slice(&self.encoder.usage(
                    prompt_tokens,
                    self.completion_tokens,
                    cached_tokens,
                ));
            }
            out.extend_from_slice(SseEncoder::done());
            return out;
        }
        let text = std::mem::take(&mut self.text);
        let mut choice = json!({"index": 0, "logprobs": null, "finish_reason": self.finish});
        match self.kind {
            RequestKind::Chat => {
                choice["message"] = json!({"role": "assistant", "content": text});
            }
            RequestKind::Completion => choice["text"] = Value::String(text),
        }
        if self.return_token_ids {
            choice["token_ids"] = json!(self.ids);
        }
        let object = match self.kind {
            RequestKind::Chat => "chat.completion",
            RequestKind::Completion => "text_completion",
        };
        json!({
            "id": self.request_id, "object": object, "created": self.created,
            "model": self.model, "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": self.completion_tokens,
                      "total_tokens": prompt_tokens + self.completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached_tokens}},
        })
        .to_string()
        .into_bytes()
    }

    /// Streaming: a failure after the headers went out ends the stream with an error event and
    /// `[DONE]` (a non-streaming response answers with the error status instead).
    pub fn error_events(error_body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(error_body.len() + 32);
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(error_body);
        out.extend_from_slice(b"\n\n");
        out.extend_from_slice(SseEncoder::done());
        out
    }

    pub fn is_stream(&self) -> bool {
        self.stream
    }
}

#[cfg(test)]
#[path = "response_body_tests.rs"]
mod tests;
