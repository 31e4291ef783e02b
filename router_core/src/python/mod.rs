//! The PyO3 binding: thin wrappers that convert arguments to owned Rust values, release the GIL
//! for the work, and map [`crate::RouterCoreError`] to Python exceptions.

mod admission;
mod bridge_jobs;
mod bridge_values;
mod convert;
mod detok;
mod double_call;
mod engine_client;
mod engine_double;
mod engine_info;
mod engine_upkeep;
mod front;
mod gil_off_worker;
mod hashing;
mod in_process;
mod index;
mod interpreter_exit;
mod ints;
mod loop_clock;
mod names;
mod peer;
mod placements;
mod pollable;
mod prediction;
mod request_verbs;
mod router;
mod sampling;
#[cfg(feature = "mocks")]
mod servers;
mod session_affinity;
mod table;
mod tokenize;
mod tracing;
mod verb_values;

use pyo3::prelude::*;

#[pymodule]
fn _router_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", crate::version())?;
    hashing::register(m)?;
    admission::register(m)?;
    interpreter_exit::register(m)?;
    tracing::register(m)?;
    names::register(m)?;
    sampling::register(m)?;
    session_affinity::register(m)?;
    m.add_class::<index::PyPrefixIndex>()?;
    m.add_class::<table::PyEngineLoad>()?;
    m.add_class::<table::PyEngineTable>()?;
    m.add_class::<router::PyScoreWeights>()?;
    m.add_class::<router::PyCandidate>()?;
    m.add_class::<router::PyScoreResult>()?;
    m.add_class::<router::PyRouterCore>()?;
    m.add_class::<prediction::PyEnginePrediction>()?;
    m.add_class::<detok::PyDetokenizerVocab>()?;
    m.add_class::<detok::PyIncrementalDetokenizer>()?;
    m.add_class::<detok::PySseEncoder>()?;
    m.add_class::<tokenize::PyRouterTokenizer>()?;
    #[cfg(feature = "mocks")]
    {
        m.add_class::<servers::PyMockEngineServer>()?;
        m.add_class::<servers::PyMockOpenAIWorker>()?;
    }
    m.add_class::<front::PyRouterFront>()?;
    m.add_class::<front::PyRequestRecord>()?;
    m.add_class::<front::PySegmentRecord>()?;
    m.add_class::<in_process::PyInProcessFront>()?;
    m.add_class::<in_process::PyInProcessRequest>()?;
    m.add_class::<pollable::PyPendingCall>()?;
    m.add_class::<request_verbs::PyRequestVerbs>()?;
    m.add_class::<engine_client::PyEngineRpcClient>()?;
    m.add_class::<engine_info::PyModelInfo>()?;
    m.add_class::<engine_info::PyConfigured>()?;
    m.add_class::<engine_upkeep::PyEngineUpkeep>()?;
    m.add_class::<engine_upkeep::PyUpkeepPace>()?;
    engine_upkeep::register_constants(m)?;
    m.add_class::<peer::PyRouterPeerExchange>()?;
    bridge_values::register(m)?;
    verb_values::register(m)?;
    placements::register(m)?;
    Ok(())
}
