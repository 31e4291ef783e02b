//! `DetokenizerVocab`: every token id's bytes, read from a Hugging Face tokenizer.json.
//!
//! The decoder section decides how a token's string becomes bytes, mirroring `tokenizers`:
//! - `ByteLevel` (GPT-2, Llama 3, SmolLM2): each character maps back to one byte;
//! - SentencePiece (`Metaspace`, or `Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip]`):
//!   "▁" is a space, `<0xNN>` is byte NN when the decoder has `ByteFallback`, and one leading
//!   space of the output is stripped (the one the encoder prepended);
//! - no decoder: the token string's UTF-8.
//!
//! Added tokens (the `added_tokens` list) go through the same decoder, as in `tokenizers`;
//! those marked special are dropped when the detokenizer skips special tokens.

use super::byte_level::ByteLevelMap;
use crate::error::{Result, RouterCoreError};
use serde_json::Value;

/// Largest token id accepted (a corrupt file must not make us allocate gigabytes).
const MAX_VOCAB: usize = 1 << 24;

/// How token strings become bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct DecoderSpec {
    byte_level: bool,
    metaspace: bool,
    byte_fallback: bool,
    strip_leading_spaces: usize,
}

/// Bytes of every token id, in one arena.
#[derive(Debug, Clone)]
pub struct DetokenizerVocab {
    arena: Vec<u8>,
    /// Token i's bytes are arena[offsets[i]..offsets[i + 1]].
    offsets: Vec<u32>,
    special: Vec<bool>,
    /// How many leading spaces of the whole output the decoder strips (SentencePiece: 1).
    strip_leading_spaces: usize,
}

impl DetokenizerVocab {
    /// Parses a tokenizer.json document.
    pub fn from_tokenizer_json(text: &str) -> Result<Self> {
        let doc: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
        let spec = decoder_spec(doc.get("decoder").unwrap_or(&Value::Null))?;
        let mut strings: Vec<Option<String>> = Vec::new();
        let mut special: Vec<bool> = Vec::new();
        let model = doc
            .get("model")
            .ok_or_else(|| invalid("no \"model\" section".into()))?;
        for (token, id) in model_vocab(model)? {
            place(&mut strings, &mut special, id, token, false)?;
        }
        if let Some(added) = doc.get("added_tokens").and_then(Value::as_array) {
            for entry in added {
                let id = entry
                    .get("id")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| invalid("added token without id".into()))?;
                let content = entry
                    .get("content")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("added token without content".into()))?;
                let is_special = entry
                    .get("special")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                place(
                    &mut strings,
                    &mut special,
                    id,
                    content.to_owned(),
                    is_special,
                )?;
            }
        }
        let map = ByteLevelMap::new();
        let mut arena = Vec::new();
        let mut offsets = Vec::with_capacity(strings.len() + 1);
        offsets.push(0u32);
        for token in &strings {
            if let Some(token) = token {
                arena.extend_from_slice(&token_bytes(token, &spec, &map));
            }
            let end =
                u32::try_from(arena.len()).map_err(|_| invalid("vocabulary too large".into()))?;
            offsets.push(end);
        }
        Ok(DetokenizerVocab {
            arena,
            offsets,
            special,
            strip_leading_spaces: spec.strip_leading_spaces,
        })
    }

    /// Number of token ids (highest id + 1).
    pub fn len(&self) -> usize {
        self.special.len()
    }

    pub fn is_empty(&self) -> bool {
        self.special.is_empty()
    }

    /// The bytes token `id` decodes to (empty for ids with no token), or None when out of range.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let (start, end) = (*self.offsets.get(i)?, *self.offsets.get(i + 1)?);
        self.arena.get(start as usize..end as usize)
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    pub fn strip_leading_spaces(&self) -> usize {
        self.strip_leading_spaces
    }
}

fn invalid(msg: String) -> RouterCoreError {
    RouterCoreError::InvalidTokenizer(msg)
}

fn place(
    strings: &mut Vec<Option<String>>,
    special: &mut Vec<bool>,
    id: u64,
    token: String,
    is_special: bool,
) -> Result<()> {
    let i = usize::try_from(id)
        .ok()
        .filter(|i| *i < MAX_VOCAB)
        .ok_or_else(|| invalid(format!("token id {id} too large")))?;
    if strings.len() <= i {
        strings.resize(i + 1, None);
        special.resize(i + 1, false);
    }
    strings[i] = Some(token);
    special[i] = is_special;
    Ok(())
}

/// (token string, id) pairs of the model's vocabulary.
fn model_vocab(model: &Value) -> Result<Vec<(String, u64)>> {
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    let vocab = model
        .get("vocab")
        .ok_or_else(|| invalid("model has no vocab".into()))?;
    match (kind, vocab) {
        ("BPE" | "WordLevel", Value::Object(map)) => map
            .iter()
            .map(|(token, id)| {
                id.as_u64()
                    .map(|id| (token.clone(), id))
                    .ok_or_else(|| invalid(format!("bad id for token {token:?}")))
            })
            .collect(),
        ("Unigram", Value::Array(pieces)) => pieces
            .iter()
            .enumerate()
            .map(|(id, piece)| {
                piece
                    .get(0)
                    .and_then(Value::as_str)
                    .map(|token| (token.to_owned(), id as u64))
                    .ok_or_else(|| invalid(format!("bad Unigram piece {id}")))
            })
            .collect(),
        (other, _) => Err(invalid(format!("unsupported model type {other:?}"))),
    }
}

fn decoder_spec(decoder: &Value) -> Result<DecoderSpec> {
    let mut spec = DecoderSpec::default();
    add_decoder(decoder, &mut spec)?;
    Ok(spec)
}

fn add_decoder(decoder: &Value, spec: &mut DecoderSpec) -> Result<()> {
    if decoder.is_null() {
        return Ok(());
    }
    match decoder.get("type").and_then(Value::as_str).unwrap_or("") {
        "Sequence" => {
            for d in decoder
                .get("decoders")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                add_decoder(d, spec)?;
            }
        }
        "ByteLevel" => spec.byte_level = true,
        "ByteFallback" => spec.byte_fallback = true,
        "Fuse" => {}
        "Replace" => {
            let pattern = decoder
                .get("pattern")
                .and_then(|p| p.get("String"))
                .and_then(Value::as_str);
            let content = decoder.get("content").and_then(Value::as_str);
            match (pattern, content) {
                (Some("▁"), Some(" ")) => spec.metaspace = true,
                _ => return Err(invalid(format!("unsupported Replace decoder {decoder}"))),
            }
        }
        "Strip" => {
            let content = decoder
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or(" ");
            if content == " " {
                spec.strip_leading_spaces =
                    decoder.get("start").and_then(Value::as_u64).unwrap_or(0) as usize;
            }
        }
        "Metaspace" => {
            spec.metaspace = true;
            let scheme = decoder.get("prepend_scheme").and_then(Value::as_str);
            let legacy = decoder.get("add_prefix_space").and_then(Value::as_bool);
            if scheme.map_or(legacy.unwrap_or(true), |s| s != "never") {
                spec.strip_leading_spaces = 1;
            }
        }
        other => return Err(invalid(format!("unsupported decoder {other:?}"))),
    }
    Ok(())
}

/// The bytes one token string decodes to under `spec`.
fn token_bytes(token: &str, spec: &DecoderSpec, map: &ByteLevelMap) -> Vec<u8> {
    if spec.byte_fallback {
        if let Some(b) = fallback_byte(token) {
            return vec![b];
        }
    }
    if spec.byte_level {
        return map.token_bytes(token);
    }
    if spec.metaspace {
        return token.replace('▁', " ").into_bytes();
    }
    token.as_bytes().to_vec()
}

/// `<0xNN>` -> NN.
fn fallback_byte(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
#[path = "vocab_tests.rs"]
pub(crate) mod tests;
