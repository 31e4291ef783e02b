//! `DetokenizerVocab`, `IncrementalDetokenizer` and `SseEncoder` for Python. A push of a few
//! tokens costs well under a microsecond, less than releasing the GIL would, so only the
//! tokenizer.json parse and large pushes release it.

use super::convert::{extract_u32s, GIL_RELEASE_MIN_ITEMS};
use crate::detok::{DetokenizerVocab, IncrementalDetokenizer};
use crate::sse::{SseEncoder, StreamKind};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Arc;

#[pyclass(name = "DetokenizerVocab", module = "router_core._router_core", frozen)]
pub struct PyDetokenizerVocab {
    inner: Arc<DetokenizerVocab>,
}

impl PyDetokenizerVocab {
    /// The vocabulary itself, for a front that shares it (python/in_process.rs).
    pub(super) fn shared(&self) -> Arc<DetokenizerVocab> {
        self.inner.clone()
    }
}

#[pymethods]
impl PyDetokenizerVocab {
    /// Byte-level BPE (GPT-2 style) and SentencePiece (Metaspace, <0xNN> byte fallback).
    #[staticmethod]
    fn from_tokenizer_json(py: Python<'_>, tokenizer_json: &str) -> PyResult<Self> {
        let text = tokenizer_json.to_owned();
        let vocab = py.allow_threads(|| DetokenizerVocab::from_tokenizer_json(&text))?;
        Ok(PyDetokenizerVocab {
            inner: Arc::new(vocab),
        })
    }

    fn token_bytes<'py>(&self, py: Python<'py>, token_id: u32) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.inner.token_bytes(token_id).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!("token id {token_id} out of range"))
        })?;
        Ok(PyBytes::new(py, bytes))
    }

    fn is_special(&self, token_id: u32) -> bool {
        self.inner.is_special(token_id)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

#[pyclass(name = "IncrementalDetokenizer", module = "router_core._router_core")]
pub struct PyIncrementalDetokenizer {
    inner: IncrementalDetokenizer,
}

impl PyIncrementalDetokenizer {
    fn push_ids(&mut self, py: Python<'_>, ids: &[u32]) -> PyResult<(String, bool)> {
        if ids.len() < GIL_RELEASE_MIN_ITEMS {
            return Ok(self.inner.push(ids)?);
        }
        let inner = &mut self.inner;
        Ok(py.allow_threads(|| inner.push(ids))?)
    }
}

#[pymethods]
impl PyIncrementalDetokenizer {
    #[new]
    #[pyo3(signature = (vocab, stop = Vec::new(), skip_special_tokens = true),
           text_signature = "(vocab, stop=(), skip_special_tokens=True)")]
    fn new(
        vocab: &PyDetokenizerVocab,
        stop: Vec<String>,
        skip_special_tokens: bool,
    ) -> PyResult<Self> {
        let inner = IncrementalDetokenizer::new(vocab.inner.clone(), stop, skip_special_tokens)?;
        Ok(PyIncrementalDetokenizer { inner })
    }

    /// Feeds new ids; returns (text that is safe to emit, stopped).
    fn push(&mut self, py: Python<'_>, token_ids: &Bound<'_, PyAny>) -> PyResult<(String, bool)> {
        let ids = extract_u32s(token_ids)?;
        self.push_ids(py, &ids)
    }

    /// End of stream: whatever was held back (invalid trailing bytes become U+FFFD).
    fn flush(&mut self) -> String {
        self.inner.flush()
    }

    #[getter]
    fn text(&self) -> String {
        self.inner.text().to_owned()
    }

    #[getter]
    fn stopped(&self) -> bool {
        self.inner.stopped()
    }

    /// The stop string that ended the stream, if one did.
    #[getter]
    fn stop_string(&self) -> Option<String> {
        self.inner.stop_string().map(str::to_owned)
    }
}

#[pyclass(name = "SseEncoder", module = "router_core._router_core", frozen)]
pub struct PySseEncoder {
    inner: SseEncoder,
}

#[pymethods]
impl PySseEncoder {
    #[new]
    fn new(request_id: &str, model: &str, created: u64, kind: &str) -> PyResult<Self> {
        let kind = StreamKind::parse(kind)?;
        Ok(PySseEncoder {
            inner: SseEncoder::new(request_id, model, created, kind),
        })
    }

    fn role_chunk<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.inner.role_chunk()?))
    }

    #[pyo3(signature = (text, finish_reason = None))]
    fn delta<'py>(
        &self,
        py: Python<'py>,
        text: &str,
        finish_reason: Option<&str>,
    ) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.delta(text, finish_reason))
    }

    /// One call per engine chunk: push `token_ids` through `detok` and encode the new text.
    /// Returns (bytes to send — empty when there is no text and no finish_reason, stopped).
    /// On a stop string the chunk carries finish_reason "stop" unless one was given.
    #[pyo3(signature = (detok, token_ids, finish_reason = None))]
    fn delta_tokens<'py>(
        &self,
        py: Python<'py>,
        detok: &mut PyIncrementalDetokenizer,
        token_ids: &Bound<'py, PyAny>,
        finish_reason: Option<&str>,
    ) -> PyResult<(Bound<'py, PyBytes>, bool)> {
        let ids = extract_u32s(token_ids)?;
        let (mut text, stopped) = detok.push_ids(py, &ids)?;
        // A stop string that completes in this call ends the stream as "stop", whatever reason
        // the engine gave for the same token (it only saw ids, not text).
        let reason = if stopped { Some("stop") } else { finish_reason };
        if reason.is_some() && !stopped {
            text.push_str(&detok.inner.flush());
        }
        if text.is_empty() && reason.is_none() {
            return Ok((PyBytes::new(py, b""), stopped));
        }
        Ok((PyBytes::new(py, &self.inner.delta(&text, reason)), stopped))
    }

    #[pyo3(signature = (prompt_tokens, completion_tokens, cached_tokens = 0))]
    fn usage<'py>(
        &self,
        py: Python<'py>,
        prompt_tokens: u64,
        completion_tokens: u64,
        cached_tokens: u64,
    ) -> Bound<'py, PyBytes> {
        PyBytes::new(
            py,
            &self
                .inner
                .usage(prompt_tokens, completion_tokens, cached_tokens),
        )
    }

    #[staticmethod]
    fn done(py: Python<'_>) -> Bound<'_, PyBytes> {
        PyBytes::new(py, SseEncoder::done())
    }
}
