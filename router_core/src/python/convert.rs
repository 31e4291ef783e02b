//! Error mapping and argument conversion shared by the binding modules.

use crate::error::RouterCoreError;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyKeyError, PyOverflowError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

impl From<RouterCoreError> for PyErr {
    fn from(err: RouterCoreError) -> PyErr {
        match err {
            RouterCoreError::UnknownEngine(_) => PyKeyError::new_err(err.to_string()),
            RouterCoreError::InvalidArgument(_) | RouterCoreError::InvalidTokenizer(_) => {
                PyValueError::new_err(err.to_string())
            }
        }
    }
}

/// Below this many items a call is sub-microsecond and releasing the GIL would cost more
/// than it saves.
pub const GIL_RELEASE_MIN_ITEMS: usize = 64;

/// Token ids from a list, tuple, buffer of 4- or 8-byte ints (array.array, numpy) or any
/// sequence of ints; each must fit in u32. This runs on every request before the GIL is released,
/// so lists take a direct C-API path (about 3x faster than generic extraction).
pub fn extract_u32s(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if let Ok(list) = obj.downcast::<PyList>() {
        return items_u32s(list.as_any(), list.len(), ffi::PyList_GetItem);
    }
    if let Ok(tuple) = obj.downcast::<PyTuple>() {
        return items_u32s(tuple.as_any(), tuple.len(), ffi::PyTuple_GetItem);
    }
    if let Some(out) = buffer_u32s(obj)? {
        return Ok(out);
    }
    obj.extract::<Vec<u32>>()
}

/// The C-API getter of a list or tuple item (returns a borrowed reference).
type GetItem = unsafe extern "C" fn(*mut ffi::PyObject, ffi::Py_ssize_t) -> *mut ffi::PyObject;

fn items_u32s(seq: &Bound<'_, PyAny>, len: usize, get_item: GetItem) -> PyResult<Vec<u32>> {
    let py = seq.py();
    let mut out = Vec::with_capacity(len);
    for i in 0..len {
        // SAFETY: we hold the GIL, `i` < the list's length, and nothing below runs Python code
        // (PyLong_AsUnsignedLong only reads ints and raises TypeError for anything else), so the
        // borrowed item stays alive and the sequence cannot change while we read it.
        let value = unsafe {
            let item = get_item(seq.as_ptr(), i as ffi::Py_ssize_t);
            if item.is_null() {
                return Err(PyErr::fetch(py));
            }
            ffi::PyLong_AsUnsignedLong(item)
        };
        if value == std::os::raw::c_ulong::MAX {
            if let Some(err) = PyErr::take(py) {
                return Err(err);
            }
        }
        out.push(u32::try_from(value).map_err(|_| overflow(value))?);
    }
    Ok(out)
}

/// Integers from an object exposing the buffer protocol, or None when it exposes none.
fn buffer_u32s(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u32>>> {
    if let Ok(buf) = PyBuffer::<u32>::get(obj) {
        return Ok(Some(buf.to_vec(obj.py())?));
    }
    if let Ok(buf) = PyBuffer::<i32>::get(obj) {
        return signed_to_u32(buf.to_vec(obj.py())?.into_iter().map(i64::from)).map(Some);
    }
    if let Ok(buf) = PyBuffer::<i64>::get(obj) {
        return signed_to_u32(buf.to_vec(obj.py())?.into_iter()).map(Some);
    }
    if let Ok(buf) = PyBuffer::<u64>::get(obj) {
        let values = buf.to_vec(obj.py())?;
        return values
            .into_iter()
            .map(|v| u32::try_from(v).map_err(|_| overflow(v)))
            .collect::<PyResult<Vec<u32>>>()
            .map(Some);
    }
    Ok(None)
}

fn signed_to_u32(values: impl Iterator<Item = i64>) -> PyResult<Vec<u32>> {
    values
        .map(|v| u32::try_from(v).map_err(|_| overflow(v)))
        .collect()
}

fn overflow(value: impl std::fmt::Display) -> PyErr {
    PyOverflowError::new_err(format!("token id {value} does not fit in u32"))
}
