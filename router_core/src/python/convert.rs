//! Error mapping shared by the binding modules: crate errors become typed Python exceptions.

use crate::error::RouterCoreError;
use pyo3::exceptions::{PyKeyError, PyOSError, PyValueError};
use pyo3::PyErr;

impl From<RouterCoreError> for PyErr {
    fn from(err: RouterCoreError) -> PyErr {
        match err {
            RouterCoreError::UnknownEngine(_) => PyKeyError::new_err(err.to_string()),
            RouterCoreError::InvalidArgument(_)
            | RouterCoreError::InvalidTokenizer(_)
            | RouterCoreError::InvalidRequest { .. }
            | RouterCoreError::ChatTemplate(_) => PyValueError::new_err(err.to_string()),
            RouterCoreError::Server(_) => PyOSError::new_err(err.to_string()),
        }
    }
}

/// Below this many items a call is sub-microsecond and releasing the GIL would cost more
/// than it saves.
pub const GIL_RELEASE_MIN_ITEMS: usize = 64;

pub use super::ints::{extract_u32s, extract_u64s};
