//! `RequestScope`: what one request holds on the engines — for each (engine, engine-side id), the
//! KV reservations, sends and generations not yet let go of — recorded before each call that
//! takes it (a call cancelled half-way may still have left it on the engine) and cleared only
//! when the engine is known to have let go. `abandon` gives back everything left (an Abort to
//! every engine that may still hold something), whatever way the request ends; each engine's
//! count of requests with work on it follows the holds.

use super::fleet::FleetEngine;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    PrepRecv,
    RemoteSend,
    StartGenerate,
}

impl Verb {
    pub fn name(self) -> &'static str {
        match self {
            Verb::PrepRecv => "prep_recv",
            Verb::RemoteSend => "remote_send",
            Verb::StartGenerate => "start_generate",
        }
    }
}

/// What one engine may still hold for one engine-side request id.
struct Hold {
    num: u32,
    engine: Arc<FleetEngine>,
    engine_request_id: String,
    /// prep_recv issued, not consumed by a finished generation here.
    reservations: u32,
    /// remote_send issued from here, not answered.
    sends: u32,
    /// StartGenerate streams here that have not delivered their finish.
    generations: u32,
}

impl Hold {
    fn live(&self) -> bool {
        self.reservations > 0 || self.sends > 0 || self.generations > 0
    }
}

/// A hold's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Reservation,
    Send,
    Generation,
}

/// An Abort the scope wants sent: what an engine may still hold.
pub struct Release {
    pub engine: Arc<FleetEngine>,
    pub engine_request_id: String,
}

#[derive(Default)]
pub struct RequestScope {
    /// (verb, engine) in issue order: the default route, error reports and tests read it.
    verbs: Vec<(Verb, u32)>,
    /// Verb calls not answered yet, oldest first (the policy timeout names the newest).
    waiting: Vec<(u64, Verb, u32)>,
    next_call: u64,
    holds: Vec<Hold>,
    closed: bool,
}

impl RequestScope {
    /// A verb is about to be issued on `engine` for `engine_request_id`, taking `held`;
    /// returns the call's ticket for `answered`. Err after the request ended (a policy still
    /// running after its request closed).
    pub fn enter(
        &mut self,
        num: u32,
        engine: &Arc<FleetEngine>,
        verb: Verb,
        engine_request_id: &str,
        held: Held,
    ) -> Result<u64, &'static str> {
        if self.closed {
            return Err("request already ended");
        }
        self.verbs.push((verb, num));
        let hold = match self
            .holds
            .iter_mut()
            .position(|h| h.num == num && h.engine_request_id == engine_request_id)
        {
            Some(at) => &mut self.holds[at],
            None => {
                engine.enter();
                self.holds.push(Hold {
                    num,
                    engine: engine.clone(),
                    engine_request_id: engine_request_id.to_owned(),
                    reservations: 0,
                    sends: 0,
                    generations: 0,
                });
                self.holds.last_mut().expect("just pushed")
            }
        };
        match held {
            Held::Reservation => hold.reservations += 1,
            Held::Send => hold.sends += 1,
            Held::Generation => hold.generations += 1,
        }
        self.next_call += 1;
        if verb != Verb::StartGenerate {
            self.waiting.push((self.next_call, verb, num));
        }
        Ok(self.next_call)
    }

    /// The call `ticket` was answered (or failed, or was cancelled).
    pub fn answered(&mut self, ticket: u64) {
        self.waiting.retain(|(t, _, _)| *t != ticket);
    }

    /// The engine let go of one `held` for this id (a send answered; a generation delivered its
    /// finish, which also consumed the reservations it had there).
    pub fn released(&mut self, num: u32, engine_request_id: &str, held: Held) {
        let Some(at) = self
            .holds
            .iter()
            .position(|h| h.num == num && h.engine_request_id == engine_request_id)
        else {
            return;
        };
        let hold = &mut self.holds[at];
        match held {
            Held::Reservation => hold.reservations = hold.reservations.saturating_sub(1),
            Held::Send => hold.sends = hold.sends.saturating_sub(1),
            Held::Generation => {
                hold.generations = hold.generations.saturating_sub(1);
                if hold.generations == 0 {
                    hold.reservations = 0;
                }
            }
        }
        if !hold.live() {
            let hold = self.holds.swap_remove(at);
            hold.engine.leave();
        }
    }

    /// Every hold still live, cleared: the Aborts to send (a failure, a retry, a stop string,
    /// the end of the request).
    pub fn abandon(&mut self) -> Vec<Release> {
        self.waiting.clear();
        self.holds
            .drain(..)
            .map(|hold| {
                hold.engine.leave();
                Release {
                    engine: hold.engine,
                    engine_request_id: hold.engine_request_id,
                }
            })
            .collect()
    }

    /// The request ended: nothing more may be taken; what is left is given back.
    pub fn close(&mut self) -> Vec<Release> {
        self.closed = true;
        self.abandon()
    }

    pub fn verbs(&self) -> &[(Verb, u32)] {
        &self.verbs
    }

    /// The newest verb call not answered yet.
    pub fn waiting_on(&self) -> Option<(Verb, u32)> {
        self.waiting.last().map(|&(_, verb, num)| (verb, num))
    }

    /// The engines it touched, in first-touch order.
    pub fn touched(&self) -> Vec<u32> {
        let mut touched: Vec<u32> = Vec::new();
        for &(_, num) in &self.verbs {
            if !touched.contains(&num) {
                touched.push(num);
            }
        }
        touched
    }

    pub fn holds_anything(&self) -> bool {
        !self.holds.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::fleet::Fleet;
    use crate::executor::test_engines::NullVerbs;

    #[test]
    fn holds_follow_the_engines_and_abandon_returns_the_live_ones() {
        let fleet = Fleet::default();
        fleet.set_engine(0, Arc::new(NullVerbs), "a:1".into());
        fleet.set_engine(1, Arc::new(NullVerbs), "b:1".into());
        let (e0, e1) = (fleet.engine(0).unwrap(), fleet.engine(1).unwrap());
        let mut scope = RequestScope::default();
        let t = scope
            .enter(1, &e1, Verb::PrepRecv, "r", Held::Reservation)
            .unwrap();
        let s = scope
            .enter(0, &e0, Verb::RemoteSend, "r", Held::Send)
            .unwrap();
        assert_eq!(scope.waiting_on(), Some((Verb::RemoteSend, 0)));
        scope.answered(s);
        scope.released(0, "r", Held::Send);
        assert_eq!((e0.active(), e1.active()), (0, 1));
        scope.answered(t);
        assert_eq!(scope.waiting_on(), None);
        scope
            .enter(1, &e1, Verb::StartGenerate, "r", Held::Generation)
            .unwrap();
        scope.released(1, "r", Held::Generation);
        assert_eq!(
            e1.active(),
            0,
            "a delivered generation consumed the reservation"
        );
        assert_eq!(scope.touched(), vec![1, 0]);
        scope
            .enter(0, &e0, Verb::PrepRecv, "r-1", Held::Reservation)
            .unwrap();
        let released = scope.close();
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].engine_request_id, "r-1");
        assert_eq!(e0.active(), 0);
        assert!(scope
            .enter(0, &e0, Verb::PrepRecv, "r", Held::Reservation)
            .is_err());
    }
}
