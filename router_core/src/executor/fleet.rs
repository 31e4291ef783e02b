//! `Fleet`: the engines the executor can reach — each one's verbs (the router's gRPC client, or
//! an in-process double) and address — and the router core whose engine table it accounts its
//! work on. The deciding side keeps it current (engines added and removed, the core rebuilt).

use super::engine_verbs::EngineVerbs;
use crate::router::RouterCore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// One engine as the executor reaches it.
pub struct FleetEngine {
    pub verbs: Arc<dyn EngineVerbs>,
    /// HOST:PORT (a RemoteSend names its receiver by it).
    pub address: String,
    /// Requests with work on this engine right now: a reservation, a send or a generation that
    /// has not ended (a drain waits for them).
    active: AtomicU64,
}

impl FleetEngine {
    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Acquire)
    }

    pub(super) fn enter(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn leave(&self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
pub struct Fleet {
    engines: RwLock<HashMap<u32, Arc<FleetEngine>>>,
    core: RwLock<Option<Arc<RouterCore>>>,
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

impl Fleet {
    /// Engine `num` is reached through `verbs` at `address` (replacing what it was reached
    /// through; requests already running keep their old handle).
    pub fn set_engine(&self, num: u32, verbs: Arc<dyn EngineVerbs>, address: String) {
        let engine = Arc::new(FleetEngine {
            verbs,
            address,
            active: AtomicU64::new(0),
        });
        write(&self.engines).insert(num, engine);
    }

    pub fn remove_engine(&self, num: u32) {
        write(&self.engines).remove(&num);
    }

    pub fn engine(&self, num: u32) -> Option<Arc<FleetEngine>> {
        read(&self.engines).get(&num).cloned()
    }

    /// Requests with work on engine `num` (0 for an engine not here).
    pub fn active(&self, num: u32) -> u64 {
        self.engine(num).map_or(0, |e| e.active())
    }

    pub fn set_core(&self, core: Arc<RouterCore>) {
        *write(&self.core) = Some(core);
    }

    pub fn core(&self) -> Option<Arc<RouterCore>> {
        read(&self.core).clone()
    }
}
