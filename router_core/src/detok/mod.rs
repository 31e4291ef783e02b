//! Streaming output: token ids -> text (incremental, UTF-8 safe, stop strings across chunks).

mod byte_level;
mod incremental;
pub(crate) mod vocab;

pub use incremental::IncrementalDetokenizer;
pub use vocab::DetokenizerVocab;
