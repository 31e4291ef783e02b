//! One engine's upkeep, in Rust: its KV event stream applied to the prefix index, and the load
//! the engine pushes on that stream applied to the engine table ([`kv_follow`]); its health and
//! Stats polled at the fleet's pace ([`pace::UpkeepPace`]) — for an engine that pushes, only
//! every `liveness_s`, to notice that it died; for one that does not (or whose stream is down),
//! every `poll_s`, for its load. Python hears only what changes — the engine turning healthy or
//! unhealthy ([`EngineUpkeep::wait_change`]) — so an idle fleet costs the router a few small RPCs
//! per engine and liveness interval on tokio and no interpreter at all (before, every poll's
//! answers crossed into Python, were parsed there and went back into the table: 0.35-0.75 ms
//! of router CPU each).

pub mod kv_follow;
pub mod pace;
pub mod stats;

use crate::engine_rpc::EngineRpc;
use crate::router::{lock, RouterCore};
use pace::UpkeepPace;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::AbortHandle;

/// A health check that takes longer than this counts as unhealthy.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
const STATS_TIMEOUT: Duration = Duration::from_secs(2);

/// The engine as its latest poll found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub serving: bool,
    /// Why it is not serving ("" while it is).
    pub reason: String,
}

pub struct EngineUpkeep {
    engine_id: u32,
    rpc: EngineRpc,
    /// Replaced when the engines' KV layout is learned (the router rebuilds its core).
    core: Mutex<Arc<RouterCore>>,
    pace: Arc<UpkeepPace>,
    health: watch::Sender<Health>,
    draining: AtomicBool,
    polls: AtomicU64,
    /// Streams pushing the engine's load now (a replaced follower's may overlap the new one's).
    push_streams: AtomicUsize,
    /// Pushed Stats applied so far (a poll's answer older than the latest push is not applied).
    pushes: AtomicU64,
    /// Wakes a poll loop waiting out a liveness interval: the pushes stopped, or a request
    /// failed on the engine, and its load or health is to be polled at `poll_s` again.
    pace_changed: Notify,
    runtime: tokio::runtime::Handle,
    tasks: Mutex<Tasks>,
}

/// The upkeep's two tasks (None once stopped). Each holds the upkeep, so it ends only when
/// they are aborted: whoever owns the upkeep calls `stop`.
#[derive(Default)]
struct Tasks {
    poll: Option<AbortHandle>,
    follow: Option<AbortHandle>,
}

impl EngineUpkeep {
    /// Starts polling `engine_id` through `rpc` and following its KV events (on `runtime`)
    /// into `core`; the engine counts as unhealthy until its first poll answers.
    pub fn start(
        engine_id: u32,
        rpc: EngineRpc,
        core: Arc<RouterCore>,
        pace: Arc<UpkeepPace>,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Self> {
        let upkeep = Arc::new(EngineUpkeep {
            engine_id,
            rpc,
            core: Mutex::new(core),
            pace,
            health: watch::Sender::new(Health {
                serving: false,
                reason: "not polled yet".to_owned(),
            }),
            draining: AtomicBool::new(false),
            polls: AtomicU64::new(0),
            push_streams: AtomicUsize::new(0),
            pushes: AtomicU64::new(0),
            pace_changed: Notify::new(),
            runtime: runtime.clone(),
            tasks: Mutex::new(Tasks::default()),
        });
        *lock(&upkeep.tasks) = Tasks {
            poll: Some(runtime.spawn(upkeep.clone().poll_loop()).abort_handle()),
            follow: Some(upkeep.spawn_follower()),
        };
        upkeep
    }

    fn spawn_follower(self: &Arc<Self>) -> AbortHandle {
        self.runtime
            .spawn(kv_follow::follow(self.clone()))
            .abort_handle()
    }

    pub fn core(&self) -> Arc<RouterCore> {
        lock(&self.core).clone()
    }

    pub fn health(&self) -> Health {
        self.health.borrow().clone()
    }

    /// Polls so far (health checks asked).
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Pushed Stats applied so far.
    pub fn pushes(&self) -> u64 {
        self.pushes.load(Ordering::Relaxed)
    }

    /// The engine's KV event stream is open and pushing its load.
    pub fn pushing(&self) -> bool {
        self.push_streams.load(Ordering::Relaxed) > 0
    }

    /// A stream of the engine's began pushing its load ([`kv_follow::PushingStream`]).
    fn push_began(&self) {
        if self.push_streams.fetch_add(1, Ordering::Relaxed) == 0 {
            self.pace.push_started();
        }
    }

    /// That stream ended: the poll loop goes back to `poll_s` at once.
    fn push_ended(&self) {
        if self.push_streams.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.pace.push_ended();
            self.pace_changed.notify_one();
        }
    }

    /// The engine's health once it differs from `known` (at once if it already does).
    pub async fn wait_change(&self, known: bool) -> Health {
        let mut seen = self.health.subscribe();
        let changed = seen
            .wait_for(|health| health.serving != known)
            .await
            .map(|health| health.clone());
        // The sender lives as long as self, so this never fails; an answer all the same.
        changed.unwrap_or_else(|_| self.health())
    }

    /// The table and index to apply to from now on: a new core after the KV layout was
    /// learned. The event follower starts over there, asking for a snapshot.
    pub fn set_core(self: &Arc<Self>, core: Arc<RouterCore>) {
        *lock(&self.core) = core;
        let mut tasks = lock(&self.tasks);
        if let Some(follow) = tasks.follow.take() {
            follow.abort();
            tasks.follow = Some(self.spawn_follower());
        }
    }

    /// Draining: out of rotation whatever its health, until removed.
    pub fn set_draining(&self, draining: bool) {
        self.draining.store(draining, Ordering::Relaxed);
        let core = self.core();
        let _unknown = lock(&core.table).set_health(self.engine_id, self.usable(draining));
    }

    /// A request failed on the engine: out of rotation (its load forgotten) until a poll finds
    /// it serving again. False when it was unhealthy already.
    pub fn mark_unhealthy(&self, reason: &str) -> bool {
        let was = self.health().serving;
        self.settle(Health {
            serving: false,
            reason: reason.to_owned(),
        });
        // Polled again within `poll_s`, not a liveness interval, to come back as soon as it serves.
        self.pace_changed.notify_one();
        was
    }

    /// Ends the polls and the event stream.
    pub fn stop(&self) {
        let mut tasks = lock(&self.tasks);
        for task in [tasks.poll.take(), tasks.follow.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
    }

    fn usable(&self, draining: bool) -> bool {
        self.health.borrow().serving && !draining
    }

    async fn poll_loop(self: Arc<Self>) {
        loop {
            let health = self.poll().await;
            self.settle(health);
            self.pause().await;
        }
    }

    /// Until the next poll: a liveness interval while the engine serves and pushes its load,
    /// cut short (to a `poll_s` interval from then) should either stop; else a `poll_s` interval.
    async fn pause(&self) {
        let jitter = rand::random::<f64>();
        let poll_pace = self.pace.jittered(false, jitter);
        if !(self.pushing() && self.health().serving) {
            tokio::time::sleep(poll_pace).await;
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(self.pace.jittered(true, jitter)) => {}
            () = self.pace_changed.notified() => tokio::time::sleep(poll_pace).await,
        }
    }

    /// Health, then (when serving) Stats into the table — unless a push arrived while the Stats
    /// call was out: the push is as new or newer.
    async fn poll(&self) -> Health {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let down = |reason: String| Health {
            serving: false,
            reason,
        };
        if !self.rpc.healthy(HEALTH_TIMEOUT).await {
            return down("health check: not SERVING or unreachable".to_owned());
        }
        let core = self.core();
        let pushes = self.pushes();
        if lock(&core.table).stats_requested(self.engine_id).is_err() {
            return down("not in the engine table".to_owned());
        }
        let answer = match self.rpc.stats(Some(STATS_TIMEOUT)).await {
            Ok(answer) => answer,
            Err(status) => return down(format!("Stats failed: {}", status.message())),
        };
        // The core may have been replaced while the call was out; apply to the current one.
        let core = self.core();
        let applied = {
            let mut table = lock(&core.table);
            // Pushes are counted under this lock (kv_follow), so none lands between the two.
            if self.pushes() == pushes {
                stats::apply_stats(&mut table, self.engine_id, &answer)
            } else {
                stats::check_stats(&answer)
            }
        };
        match applied {
            Ok(()) => Health {
                serving: true,
                reason: String::new(),
            },
            Err(err) => down(format!("Stats answer not usable: {err}")),
        }
    }

    /// The table's health and load follow `health`; waiters hear of a flip.
    fn settle(&self, health: Health) {
        let core = self.core();
        {
            let mut table = lock(&core.table);
            if !health.serving {
                let _unknown = stats::forget_load(&mut table, self.engine_id);
            }
            let usable = health.serving && !self.draining.load(Ordering::Relaxed);
            let _unknown = table.set_health(self.engine_id, usable);
        }
        self.health.send_if_modified(|now| {
            let flipped = now.serving != health.serving;
            if flipped {
                *now = health;
            }
            flipped
        });
    }
}
