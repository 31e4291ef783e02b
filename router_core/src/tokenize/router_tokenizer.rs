//! `RouterTokenizer`: text and chat messages to token ids, exactly as the engine's Python
//! `EngineTokenizer` does it — the same tokenizer.json through the same `tokenizers` code (its
//! pure-Rust regex engine instead of oniguruma), and the same chat template semantics.

use super::chat_template::ChatTemplate;
use super::messages::ChatMessage;
use crate::error::{Result, RouterCoreError};
use std::str::FromStr;
use std::sync::OnceLock;
use tokenizers::Tokenizer;

pub struct RouterTokenizer {
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    chat_template_source: Option<String>,
    bos_token_id: Option<u32>,
    eos_token_ids: Vec<u32>,
    bos_token: String,
    eos_token: String,
    vocab_size: usize,
    max_token_bytes: OnceLock<usize>,
}

impl RouterTokenizer {
    /// From the state the engine keeps (`EngineTokenizer.to_state()`): the tokenizer.json text,
    /// the chat template (None or empty: the model has none), the bos id and the eos ids (the
    /// first one is the template's `eos_token`).
    pub fn new(
        tokenizer_json: &str,
        chat_template: Option<&str>,
        bos_token_id: Option<u32>,
        eos_token_ids: Vec<u32>,
    ) -> Result<Self> {
        let tokenizer = Tokenizer::from_str(tokenizer_json)
            .map_err(|err| RouterCoreError::InvalidTokenizer(err.to_string()))?;
        let token_text = |id: Option<u32>| {
            id.and_then(|id| tokenizer.id_to_token(id))
                .unwrap_or_default()
        };
        let bos_token = token_text(bos_token_id);
        let eos_token = token_text(eos_token_ids.first().copied());
        let chat_template = chat_template.filter(|source| !source.is_empty());
        Ok(RouterTokenizer {
            template: chat_template.map(ChatTemplate::new),
            chat_template_source: chat_template.map(str::to_owned),
            vocab_size: tokenizer.get_vocab_size(true),
            tokenizer,
            bos_token_id,
            eos_token_ids,
            bos_token,
            eos_token,
            max_token_bytes: OnceLock::new(),
        })
    }

    /// The most UTF-8 bytes one token stands for, so a text of B bytes needs at least
    /// B / max_token_bytes tokens: a length check that tokenises nothing. Worked out on first
    /// use (one decode per id).
    pub fn max_token_bytes(&self) -> usize {
        *self.max_token_bytes.get_or_init(|| {
            (0..self.vocab_size as u32)
                .filter_map(|id| self.tokenizer.decode(&[id], false).ok())
                .map(|text| text.len())
                .max()
                .unwrap_or(1)
                .max(1)
        })
    }

    /// Number of ids, added tokens included (ids are in `0..vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template_source.as_deref()
    }

    /// A completion prompt: `add_special_tokens` applies the tokenizer's post-processor (e.g. a
    /// leading BOS), as the engine's `encode` does by default.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        // encode_fast skips the offsets the router never reads; the ids are the same.
        let encoding = self
            .tokenizer
            .encode_fast(text, add_special_tokens)
            .map_err(|err| RouterCoreError::InvalidArgument(format!("cannot encode: {err}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The chat template rendered for `messages`.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self.template.as_ref().ok_or_else(|| {
            RouterCoreError::ChatTemplate("this model has no chat template".into())
        })?;
        template.render(
            messages,
            add_generation_prompt,
            &self.bos_token,
            &self.eos_token,
        )
    }

    /// A chat prompt's ids: the rendered template encoded without adding special tokens (the
    /// template writes them), as the router does for /v1/chat/completions.
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>> {
        let text = self.apply_chat_template(messages, add_generation_prompt)?;
        self.encode(&text, false)
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(RouterCoreError::InvalidArgument(format!(
                "token id {bad} out of range [0, {})",
                self.vocab_size
            )));
        }
        self.tokenizer
            .decode(ids, skip_special_tokens)
            .map_err(|err| RouterCoreError::InvalidArgument(format!("cannot decode: {err}")))
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-level BPE over the bytes of "ab" with one merge and two special tokens, in the
    /// shape the engine writes for GGUF models (switchyard_tokenizer/gguf_tokenizer.py).
    fn tiny_tokenizer_json(add_bos: bool) -> String {
        let post = if add_bos {
            r#"{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],"special_tokens":{"<s>":{"id":"<s>","ids":[0],"tokens":["<s>"]}}}"#
        } else {
            "null"
        };
        format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,
            "added_tokens":[
              {{"id":0,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}},
              {{"id":1,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}}],
            "normalizer":null,
            "pre_tokenizer":{{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}},
            "post_processor":{post},
            "decoder":{{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true}},
            "model":{{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,
              "end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
              "vocab":{{"<s>":0,"</s>":1,"a":2,"b":3,"ab":4,"Ġ":5}},"merges":["a b"]}}}}"#
        )
    }

    #[test]
    fn encodes_merges_and_special_tokens() {
        let tok =
            RouterTokenizer::new(&tiny_tokenizer_json(false), None, Some(0), vec![1]).unwrap();
        assert_eq!(tok.vocab_size(), 6);
        assert_eq!(tok.encode("ab", false).unwrap(), vec![4]);
        assert_eq!(tok.encode("ba", false).unwrap(), vec![3, 2]);
        assert_eq!(tok.encode("ab</s>a", false).unwrap(), vec![4, 1, 2]);
        assert_eq!(tok.encode("", true).unwrap(), Vec::<u32>::new());
        assert_eq!(tok.decode(&[4, 1], false).unwrap(), "ab</s>");
        assert_eq!(tok.decode(&[4, 1], true).unwrap(), "ab");
        assert!(tok.decode(&[6], false).is_err());
    }

    #[test]
    fn post_processor_adds_bos_only_with_special_tokens() {
        let tok = RouterTokenizer::new(&tiny_tokenizer_json(true), None, Some(0), vec![1]).unwrap();
        assert_eq!(tok.encode("ab", true).unwrap(), vec![0, 4]);
        assert_eq!(tok.encode("ab", false).unwrap(), vec![4]);
    }

    #[test]
    fn chat_uses_bos_and_first_eos_strings() {
        let template =
            "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}";
        let tok = RouterTokenizer::new(
            &tiny_tokenizer_json(false),
            Some(template),
            Some(0),
            vec![1, 0],
        )
        .unwrap();
        let messages = [ChatMessage::new("user", "ab")];
        assert_eq!(
            tok.apply_chat_template(&messages, true).unwrap(),
            "<s>ab</s>"
        );
        assert_eq!(tok.encode_chat(&messages, true).unwrap(), vec![0, 4, 1]);
    }

    #[test]
    fn missing_template_and_bad_json_are_errors() {
        let tok =
            RouterTokenizer::new(&tiny_tokenizer_json(false), Some(""), None, vec![]).unwrap();
        assert_eq!(tok.chat_template(), None);
        assert_eq!(
            tok.encode_chat(&[ChatMessage::new("user", "a")], true),
            Err(RouterCoreError::ChatTemplate(
                "this model has no chat template".into()
            ))
        );
        assert!(matches!(
            RouterTokenizer::new("{not json", None, None, vec![]),
            Err(RouterCoreError::InvalidTokenizer(_))
        ));
    }
}
