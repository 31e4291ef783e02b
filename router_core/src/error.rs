//! The crate's one error type: every fallible public function returns `Result<T, RouterCoreError>`.

use thiserror::Error;

/// Why a router_core call rejected its input.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RouterCoreError {
    /// An argument is out of range or malformed (user input: the binding raises `ValueError`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An engine id that was never added (or was removed): the binding raises `KeyError`.
    #[error("unknown engine {0}")]
    UnknownEngine(u32),
    /// A tokenizer.json this crate cannot read.
    #[error("invalid tokenizer.json: {0}")]
    InvalidTokenizer(String),
    /// A request field the router rejects (an HTTP 400 naming `param`; the binding raises
    /// `ValueError`).
    #[error("{message}")]
    InvalidRequest { param: String, message: String },
    /// The model's chat template is missing or failed to render (the binding raises `ValueError`).
    #[error("{0}")]
    ChatTemplate(String),
    /// A server could not start or stop (address in use, runtime failure): `OSError`.
    #[error("{0}")]
    Server(String),
}

/// Shorthand for results carrying [`RouterCoreError`].
pub type Result<T> = std::result::Result<T, RouterCoreError>;
