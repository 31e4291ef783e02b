//! The router's one executor: everything a request's engines are asked to do, carried out in
//! Rust whichever policy decided — a Rust built-in's pick, a Python policy's placement, or the
//! verbs a Python policy awaits itself. The verbs do the engine table's accounting as they are
//! issued and answered and record what they take in the request's scope (released exactly once,
//! however the request ends); failures are mapped to the client's errors once; a placement's
//! disaggregation or split runs here with no further call into Python. The request task
//! (front/generation.rs) drives it; tests and the simulator drive the same code over in-process
//! engine doubles (python/engine_double.rs).

pub mod carry_out;
mod dispatched;
mod engine_verbs;
pub mod failure;
mod first_token_due;
mod fleet;
mod placement;
mod request_exec;
mod retry_budget;
mod scope;
#[cfg(test)]
mod test_engines;

pub use carry_out::{Then, Transfer};
pub use engine_verbs::{EngineVerbs, Metadata, VerbFuture};
pub use failure::{Failure, Stage};
pub use first_token_due::{relative_due_ms, FirstTokenDue, OVERDUE_DUE_MS};
pub use fleet::{Fleet, FleetEngine};
pub use placement::{PdPlan, Placement, RouteNote, SegmentPlan, SplitPlan};
pub use request_exec::{
    ExecState, Generation, KvReservation, RequestExec, SendResult, TraceParent, VerbError,
};
pub use retry_budget::{BudgetState, RetryBudget};
pub use scope::{Held, RequestScope, Verb};
