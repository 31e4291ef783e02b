//! The PyO3 binding: thin wrappers that convert arguments to owned Rust values, release the GIL
//! for the work, and map [`crate::RouterCoreError`] to Python exceptions.

mod convert;
mod hashing;

use pyo3::prelude::*;

#[pymodule]
fn _router_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", crate::version())?;
    hashing::register(m)?;
    Ok(())
}
