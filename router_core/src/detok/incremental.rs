//! `IncrementalDetokenizer`: token ids in, text out, one chunk at a time.
//!
//! Two things are held back between pushes:
//! - bytes of an unfinished UTF-8 character (a token may end mid-character), so emitted text is
//!   always valid; invalid sequences become U+FFFD exactly as a lossy decode of the whole stream;
//! - text that could still be the start of a stop string, so a stop string split across chunks
//!   is still caught. On a match the text ends right before the stop string and the stream stops.
//!
//! The concatenation of everything emitted equals `tokenizers`' decode of the whole sequence (cut
//! at the first stop string).

use super::vocab::DetokenizerVocab;
use crate::error::{Result, RouterCoreError};
use std::sync::Arc;

#[derive(Debug)]
pub struct IncrementalDetokenizer {
    vocab: Arc<DetokenizerVocab>,
    stop: Vec<String>,
    longest_stop: usize,
    skip_special_tokens: bool,
    /// Leading spaces still to strip from the start of the output (SentencePiece).
    strip_left: usize,
    /// Bytes of an unfinished UTF-8 character.
    pending: Vec<u8>,
    /// Decoded text not yet emitted (a possible stop-string prefix).
    held: String,
    emitted: String,
    stopped_on: Option<usize>,
}

impl IncrementalDetokenizer {
    /// Empty stop strings are ignored (they would match everywhere; OpenAI clients send them).
    pub fn new(
        vocab: Arc<DetokenizerVocab>,
        mut stop: Vec<String>,
        skip_special_tokens: bool,
    ) -> Result<Self> {
        stop.retain(|s| !s.is_empty());
        let longest_stop = stop.iter().map(String::len).max().unwrap_or(0);
        let strip_left = vocab.strip_leading_spaces();
        Ok(IncrementalDetokenizer {
            vocab,
            stop,
            longest_stop,
            skip_special_tokens,
            strip_left,
            pending: Vec::new(),
            held: String::new(),
            emitted: String::new(),
            stopped_on: None,
        })
    }

    /// Feeds new ids; returns the text now safe to emit and whether a stop string was hit.
    /// After a stop, further pushes return ("", true). Unknown ids are an error (nothing is
    /// consumed from that call).
    pub fn push(&mut self, token_ids: &[u32]) -> Result<(String, bool)> {
        if self.stopped_on.is_some() {
            return Ok((String::new(), true));
        }
        if let Some(bad) = token_ids
            .iter()
            .find(|id| self.vocab.token_bytes(**id).is_none())
        {
            return Err(RouterCoreError::InvalidArgument(format!(
                "token id {bad} is outside the vocabulary (size {})",
                self.vocab.len()
            )));
        }
        for &id in token_ids {
            if self.skip_special_tokens && self.vocab.is_special(id) {
                continue;
            }
            let mut bytes = self.vocab.token_bytes(id).unwrap_or_default();
            while self.strip_left > 0 && !bytes.is_empty() {
                if bytes[0] == b' ' {
                    bytes = &bytes[1..];
                    self.strip_left -= 1;
                } else {
                    self.strip_left = 0;
                }
            }
            self.pending.extend_from_slice(bytes);
        }
        self.decode_pending(false);
        Ok(self.release())
    }

    /// End of stream: everything held back (an unfinished character becomes U+FFFD).
    pub fn flush(&mut self) -> String {
        if self.stopped_on.is_some() {
            return String::new();
        }
        self.decode_pending(true);
        let (mut text, stopped) = self.release();
        if !stopped {
            let rest = std::mem::take(&mut self.held);
            self.emitted.push_str(&rest);
            text.push_str(&rest);
        }
        text
    }

    /// Everything emitted so far.
    pub fn text(&self) -> &str {
        &self.emitted
    }

    pub fn stopped(&self) -> bool {
        self.stopped_on.is_some()
    }

    /// The stop string that ended the stream, if one did.
    pub fn stop_string(&self) -> Option<&str> {
        self.stopped_on
            .and_then(|i| self.stop.get(i))
            .map(String::as_str)
    }

    /// Moves the valid UTF-8 prefix of `pending` into `held`; at the end of the stream an
    /// unfinished character is replaced too.
    fn decode_pending(&mut self, final_chunk: bool) {
        let mut start = 0;
        while start < self.pending.len() {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(text) => {
                    self.held.push_str(text);
                    start = self.pending.len();
                }
                Err(err) => {
                    let valid = start + err.valid_up_to();
                    // Safe slicing: from_utf8 validated exactly this range.
                    self.held
                        .push_str(&String::from_utf8_lossy(&self.pending[start..valid]));
                    match err.error_len() {
                        Some(bad) => {
                            self.held.push('\u{FFFD}');
                            start = valid + bad;
                        }
                        None if final_chunk => {
                            self.held.push('\u{FFFD}');
                            start = self.pending.len();
                        }
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
    }

    /// Emits what cannot be part of a stop string; stops on a full match.
    fn release(&mut self) -> (String, bool) {
        if let Some((at, which)) = self.first_stop() {
            let text = self.held[..at].to_owned();
            self.emitted.push_str(&text);
            self.held.clear();
            self.pending.clear();
            self.stopped_on = Some(which);
            return (text, true);
        }
        let keep = self.stop_prefix_suffix_len();
        let cut = self.held.len() - keep;
        let text: String = self.held.drain(..cut).collect();
        self.emitted.push_str(&text);
        (text, false)
    }

    /// (byte offset, stop index) of the stop string that completes first in `held` (smallest
    /// end; on a tie the one starting earlier). Judging by where a match ends, as generation
    /// would, makes the result independent of how the tokens were chunked.
    fn first_stop(&self) -> Option<(usize, usize)> {
        self.stop
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|at| (at + s.len(), at, i)))
            .min()
            .map(|(_, at, i)| (at, i))
    }

    /// Length of the longest suffix of `held` that a stop string starts with.
    fn stop_prefix_suffix_len(&self) -> usize {
        let max = self.longest_stop.saturating_sub(1).min(self.held.len());
        (1..=max)
            .rev()
            .find(|&k| {
                let start = self.held.len() - k;
                self.held.is_char_boundary(start)
                    && self.stop.iter().any(|s| s.starts_with(&self.held[start..]))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;
