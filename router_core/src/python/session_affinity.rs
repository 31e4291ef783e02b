//! Session affinity for the Python policies: the same ring and bound as the fast path
//! (crate::session_affinity), over the engines a policy offers.

use super::router::PyRouterCore;
use crate::router::lock;
use crate::session_affinity::{serving_loads, RingCache, SessionSettings};
use pyo3::prelude::*;
use std::sync::LazyLock;

/// The ring of the engine set the Python policies offered last (rebuilt when it changes).
static RINGS: LazyLock<RingCache> = LazyLock::new(RingCache::default);

/// The engine for `session_id` among `engines` (healthy ones; ids), with its in-flight load
/// from `core`'s table, under the bound `load_bound` (>= 1): `(engine, overflowed)`, or None
/// when none of `engines` is healthy in the table.
#[pyfunction]
fn session_pick(
    core: PyRef<'_, PyRouterCore>,
    session_id: &str,
    engines: Vec<u32>,
    load_bound: f64,
) -> PyResult<Option<(u32, bool)>> {
    let settings = SessionSettings::new(load_bound, false)?;
    let loads = serving_loads(&lock(&core.core.table), &|e| engines.contains(&e));
    let pick = RINGS.pick(session_id, &loads, settings.load_bound);
    Ok(pick.map(|p| (p.engine, p.overflowed)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(session_pick, m)?)
}
