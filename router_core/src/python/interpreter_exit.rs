//! Keeps tokio threads from meeting a finalizing interpreter. A tokio thread that wakes a Python
//! future (pollable.rs `PyWake`) takes the GIL, and `call_soon_threadsafe` lets go of it
//! while it writes the loop's wake-up byte: the loop thread can run the job, finish and start
//! the interpreter's exit before that thread wants the GIL back — and a thread taking the GIL
//! of a finalizing interpreter is ended by CPython with a forced unwind, which aborts the
//! process through Rust frames ("FATAL: exception not rethrown", exit status 134: seen in a
//! one-shot `python -m pyrouter.probe`, which exits right after its one answer).
//!
//! So the hand-offs are counted, and an `atexit` hook (which runs before finalization starts)
//! stops new ones and waits, without the GIL, for those under way.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static EXITING: AtomicBool = AtomicBool::new(false);
static HANDING_OVER: AtomicUsize = AtomicUsize::new(0);

/// How long the exit waits for hand-offs under way (each is a few microseconds of work).
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// One hand-off to Python under way; None once the interpreter is exiting (nobody would run
/// the job).
pub struct HandOver(());

impl HandOver {
    pub fn begin() -> Option<HandOver> {
        // SeqCst on both sides: either this sees EXITING or the exit sees the count.
        HANDING_OVER.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            HANDING_OVER.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(HandOver(()))
    }
}

impl Drop for HandOver {
    fn drop(&mut self) {
        HANDING_OVER.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The `atexit` hook: no new hand-offs; those under way get the GIL back and finish.
#[pyfunction]
fn _stop_handing_over(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.allow_threads(|| {
        let deadline = Instant::now() + EXIT_WAIT;
        while HANDING_OVER.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(_stop_handing_over, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}
