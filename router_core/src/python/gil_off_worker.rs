//! Taking the GIL from a tokio worker thread blocks that worker until the asyncio loop's
//! thread lets go of it, which a loop busy in Python does only at the interpreter's switch
//! interval (5 ms). With two workers, two such waits stall every request the router serves:
//! the Python-policy path's p99 was 39 ms against a p50 of 2.8 ms (docs/benchmarks.md, "One
//! executor") while the loop recorded a batch of finished requests. So a hand-off to the loop
//! that needs the GIL runs on tokio's blocking pool instead — except on a thread that holds the
//! GIL already (the loop polling a Rust future: the in-process front, a verb's answer), where it
//! runs in place, in order, as the simulator's determinism needs.

use std::cell::Cell;

thread_local! {
    /// Polls under way on this thread that hold the GIL (`PollingWithGil`).
    static POLLING_WITH_GIL: Cell<usize> = const { Cell::new(0) };
}

/// While alive, this thread holds the GIL and polls a Rust future: hand-offs run in place.
pub struct PollingWithGil(());

impl PollingWithGil {
    pub fn begin(_py: pyo3::Python<'_>) -> Self {
        POLLING_WITH_GIL.with(|n| n.set(n.get() + 1));
        PollingWithGil(())
    }
}

impl Drop for PollingWithGil {
    fn drop(&mut self) {
        POLLING_WITH_GIL.with(|n| n.set(n.get() - 1));
    }
}

/// Whether this thread holds the GIL, polling a Rust future for the loop.
pub fn polling_with_gil() -> bool {
    POLLING_WITH_GIL.with(Cell::get) > 0
}

/// Runs `hand_off` (which takes the GIL) where waiting for the GIL stalls no request.
pub fn off_worker(hand_off: impl FnOnce() + Send + 'static) {
    if polling_with_gil() {
        return hand_off();
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(hand_off)),
        Err(_) => hand_off(),
    }
}
