//! router_core: Switchyard's per-request hot path (placeholder until issue 4 lands).

/// Placeholder so the crate builds.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[cfg(feature = "python")]
mod python {
    use pyo3::prelude::*;

    #[pymodule]
    fn _router_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", super::version())?;
        Ok(())
    }
}
