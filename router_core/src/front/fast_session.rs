//! Session affinity on the fast path: a request with a session id goes to its session's engine
//! (crate::session_affinity: consistent hashing with bounded load) under whichever data-parallel
//! built-in is active. The built-in itself then runs with that engine as its only candidate, so
//! the route header is the one it always writes for that engine, plus `session=stuck` (the
//! session's home took it) or `session=overflow` (the home was over the bound).

use super::session_id::RequestSession;
use crate::router::{lock, RouterCore};
use crate::session_affinity::{serving_loads, RingCache, SessionPick, SessionSettings};
use std::sync::{PoisonError, RwLock};

/// The operator's settings and the ring over the serving engines, shared by every request.
#[derive(Debug, Default)]
pub struct SessionAffinity {
    settings: RwLock<SessionSettings>,
    rings: RingCache,
}

impl SessionAffinity {
    pub fn settings(&self) -> SessionSettings {
        *self.settings.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_settings(&self, settings: SessionSettings) {
        *self
            .settings
            .write()
            .unwrap_or_else(PoisonError::into_inner) = settings;
    }

    /// The engine for `session` among the healthy engines `member` admits (None: none).
    pub fn pick(
        &self,
        core: &RouterCore,
        session: &RequestSession,
        member: &dyn Fn(u32) -> bool,
    ) -> Option<SessionPick> {
        let loads = serving_loads(&lock(&core.table), member);
        self.rings.pick(&session.id, &loads, session.load_bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_table::Role;
    use crate::scoring::ScoreWeights;

    #[test]
    fn a_session_picks_among_the_healthy_members_under_its_own_bound() {
        let core = RouterCore::new(4, 0, ScoreWeights::default(), 1000, 60.0).unwrap();
        for id in 0..3 {
            lock(&core.table).upsert(id, Role::Any);
        }
        let affinity = SessionAffinity::default();
        let session = RequestSession {
            id: "chat".into(),
            load_bound: 1.25,
        };
        let all = |_| true;
        let home = affinity.pick(&core, &session, &all).unwrap();
        assert_eq!(affinity.pick(&core, &session, &all), Some(home));
        assert!(!home.overflowed);
        let elsewhere = affinity
            .pick(&core, &session, &|e| e != home.engine)
            .unwrap();
        assert_ne!(elsewhere.engine, home.engine);
        lock(&core.table).set_health(home.engine, false).unwrap();
        assert_ne!(
            affinity.pick(&core, &session, &all).unwrap().engine,
            home.engine
        );
        assert_eq!(affinity.pick(&core, &session, &|_| false), None);
        affinity.set_settings(SessionSettings::new(2.0, true).unwrap());
        assert!(affinity.settings().from_user);
    }
}
