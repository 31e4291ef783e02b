//! Session affinity on the fast path: a request with a session id goes to its session's engine
//! (crate::session_affinity: consistent hashing with bounded load) under whichever data-parallel
//! built-in is active. The built-in itself then runs with that engine as its only candidate, so
//! the route header is the one it always writes for that engine, plus `session=stuck` (the
//! session's home took it) or `session=overflow` (the home was over the bound).

use super::api_error::ApiError;
use super::fast_path::{FastChoice, FastPolicy};
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

/// `policy`'s choice among the engines `member` admits; with a session, on the session's engine.
pub fn choose_fast(
    policy: &FastPolicy,
    core: &RouterCore,
    tokens: &[u32],
    member: &dyn Fn(u32) -> bool,
    session: Option<(&SessionAffinity, &RequestSession)>,
) -> Result<FastChoice, ApiError> {
    let pick = session.and_then(|(affinity, s)| affinity.pick(core, s, member));
    let Some(pick) = pick else {
        return policy.choose_among(core, tokens, member);
    };
    match policy.choose_among(core, tokens, &|e| e == pick.engine && member(e)) {
        Ok(mut choice) => {
            choice.route = format!("{} session={}", choice.route, pick.outcome());
            Ok(choice)
        }
        // The policy does not take that engine (cache_aware: not of role 'any'): its own pick.
        Err(_) => policy.choose_among(core, tokens, member),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_table::Role;
    use crate::front::fast_path::FastPolicyKind;
    use crate::scoring::ScoreWeights;
    use crate::session_affinity::{SessionRing, DEFAULT_LOAD_BOUND};

    fn session(id: &str, load_bound: f64) -> RequestSession {
        RequestSession {
            id: id.to_owned(),
            load_bound,
        }
    }

    /// Healthy engines 0..n with the given requests in flight.
    fn core_with(inflight: &[u64]) -> RouterCore {
        let core = RouterCore::new(4, 0, ScoreWeights::default(), 1000, 60.0).unwrap();
        for (id, n) in inflight.iter().enumerate() {
            let id = id as u32;
            let mut table = lock(&core.table);
            table.upsert(id, Role::Any);
            for _ in 0..*n {
                table.on_dispatch(id, 0, 0).unwrap();
            }
            drop(table);
            lock(&core.index).add_engine(id, false);
        }
        core
    }

    fn policies() -> [FastPolicy; 3] {
        [
            FastPolicy::new(FastPolicyKind::RoundRobin, "round_robin"),
            FastPolicy::new(FastPolicyKind::LeastLoad, "least_load"),
            FastPolicy::new(
                FastPolicyKind::CacheAware(ScoreWeights::default()),
                "cache_aware",
            ),
        ]
    }

    #[test]
    fn a_session_sticks_to_its_engine_under_every_built_in() {
        let core = core_with(&[0, 0, 0]);
        let affinity = SessionAffinity::default();
        let chat = session("chat-7", DEFAULT_LOAD_BOUND);
        let all = |_| true;
        for policy in policies() {
            let home = choose_fast(&policy, &core, &[1], &all, Some((&affinity, &chat))).unwrap();
            assert!(home.route.ends_with(" session=stuck"), "{}", home.route);
            for _ in 0..5 {
                let again =
                    choose_fast(&policy, &core, &[1], &all, Some((&affinity, &chat))).unwrap();
                assert_eq!(again, home);
            }
            let plain = choose_fast(&policy, &core, &[1], &all, None).unwrap();
            assert!(!plain.route.contains("session="), "{}", plain.route);
        }
    }

    #[test]
    fn an_overloaded_home_overflows_and_a_group_is_respected() {
        let ring = SessionRing::new(&[0, 1]);
        let home = ring.walk(crate::session_affinity::session_key("s"))[0];
        let mut inflight = [0, 0];
        inflight[home as usize] = 2;
        let core = core_with(&inflight);
        let affinity = SessionAffinity::default();
        let s = session("s", DEFAULT_LOAD_BOUND);
        let ll = FastPolicy::new(FastPolicyKind::RoundRobin, "round_robin");
        let all = |_| true;
        let over = choose_fast(&ll, &core, &[1], &all, Some((&affinity, &s))).unwrap();
        assert_eq!(over.engine, 1 - home);
        assert!(over.route.ends_with(" session=overflow"), "{}", over.route);
        // A looser bound (the one in force when the request came) keeps it home:
        // cap = ceil(2 × 3 / 2) = 3.
        let loose = session("s", 2.0);
        let stuck = choose_fast(&ll, &core, &[1], &all, Some((&affinity, &loose))).unwrap();
        assert_eq!(stuck.engine, home);
        // Only the engines the request's model group holds are taken.
        let only_other = |e: u32| e != home;
        let grouped = choose_fast(&ll, &core, &[1], &only_other, Some((&affinity, &s))).unwrap();
        assert_eq!(grouped.engine, 1 - home);
        assert!(
            grouped.route.ends_with(" session=stuck"),
            "{}",
            grouped.route
        );
    }

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
