//! `RouterTokenizer` for Python: text and chat messages to token ids with the GIL released.

use crate::tokenize::{parse_chat_messages, ChatMessage, RouterTokenizer};
use pyo3::prelude::*;
use pythonize::depythonize;
use serde_json::Value;
use std::sync::Arc;

#[pyclass(name = "RouterTokenizer", module = "router_core._router_core", frozen)]
pub struct PyRouterTokenizer {
    inner: Arc<RouterTokenizer>,
}

/// `messages` (a list of `{"role", "content"}` dicts; content a string or a list of content
/// parts) checked and normalised as the router does for /v1/chat/completions.
fn chat_messages(messages: &Bound<'_, PyAny>) -> PyResult<Vec<ChatMessage>> {
    let value: Value = depythonize(messages).map_err(|err| {
        pyo3::exceptions::PyValueError::new_err(format!("messages must be JSON-like: {err}"))
    })?;
    Ok(parse_chat_messages(&value)?)
}

impl PyRouterTokenizer {
    /// The tokenizer itself, for a front that shares it (python/in_process.rs).
    pub(super) fn shared(&self) -> Arc<RouterTokenizer> {
        self.inner.clone()
    }
}

#[pymethods]
impl PyRouterTokenizer {
    /// The arguments are `EngineTokenizer.to_state()`'s keys, so
    /// `RouterTokenizer(**engine_tokenizer.to_state())` builds the same tokenizer.
    #[new]
    #[pyo3(signature = (tokenizer_json, chat_template = None, bos_token_id = None, eos_token_ids = Vec::new()))]
    fn new(
        py: Python<'_>,
        tokenizer_json: &str,
        chat_template: Option<&str>,
        bos_token_id: Option<u32>,
        eos_token_ids: Vec<u32>,
    ) -> PyResult<Self> {
        let inner = py.allow_threads(|| {
            RouterTokenizer::new(tokenizer_json, chat_template, bos_token_id, eos_token_ids)
        })?;
        Ok(PyRouterTokenizer {
            inner: Arc::new(inner),
        })
    }

    #[pyo3(signature = (text, add_special_tokens = true))]
    fn encode(&self, py: Python<'_>, text: &str, add_special_tokens: bool) -> PyResult<Vec<u32>> {
        Ok(py.allow_threads(|| self.inner.encode(text, add_special_tokens))?)
    }

    #[pyo3(signature = (messages, add_generation_prompt = true))]
    fn apply_chat_template(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        add_generation_prompt: bool,
    ) -> PyResult<String> {
        let messages = chat_messages(messages)?;
        Ok(py.allow_threads(|| {
            self.inner
                .apply_chat_template(&messages, add_generation_prompt)
        })?)
    }

    /// The ids of a chat request's prompt: the template rendered, then encoded without adding
    /// special tokens.
    #[pyo3(signature = (messages, add_generation_prompt = true))]
    fn encode_chat(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        add_generation_prompt: bool,
    ) -> PyResult<Vec<u32>> {
        let messages = chat_messages(messages)?;
        Ok(py.allow_threads(|| self.inner.encode_chat(&messages, add_generation_prompt))?)
    }

    #[pyo3(signature = (token_ids, skip_special_tokens = false))]
    fn decode(
        &self,
        py: Python<'_>,
        token_ids: Vec<u32>,
        skip_special_tokens: bool,
    ) -> PyResult<String> {
        Ok(py.allow_threads(|| self.inner.decode(&token_ids, skip_special_tokens))?)
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    fn id_to_token(&self, token_id: u32) -> Option<String> {
        self.inner.id_to_token(token_id)
    }

    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    #[getter]
    fn bos_token_id(&self) -> Option<u32> {
        self.inner.bos_token_id()
    }

    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.inner.eos_token_ids().to_vec()
    }

    #[getter]
    fn chat_template(&self) -> Option<String> {
        self.inner.chat_template().map(str::to_owned)
    }
}
