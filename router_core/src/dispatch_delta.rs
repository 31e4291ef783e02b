//! What a router replica dispatched to one engine since it last told its peers (issue 25, one
//! load view): the engine table records its own dispatches into an outbox of these when peers
//! are configured, the peer stream sends them (router_core/src/peer/), and a peer's table adds
//! them next to its own dispatch counts — covered, like those, by the next Stats it asks for.

use std::collections::BTreeMap;

/// Dispatch counts for one engine (see `EngineLoad::router_tokens` and its neighbours).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchDelta {
    /// Prefill + decode tokens of generations dispatched.
    pub tokens: u64,
    /// Prefill tokens dispatched (generations and KV sends).
    pub prefill_tokens: u64,
    /// Generations dispatched.
    pub generations: u64,
    /// Prefill tokens seen finish.
    pub prefilled_tokens: u64,
}

impl DispatchDelta {
    pub fn is_empty(&self) -> bool {
        *self == DispatchDelta::default()
    }

    /// Adds `other` (saturating: a hostile peer cannot wrap the counts).
    pub fn add(&mut self, other: &DispatchDelta) {
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.prefill_tokens = self.prefill_tokens.saturating_add(other.prefill_tokens);
        self.generations = self.generations.saturating_add(other.generations);
        self.prefilled_tokens = self.prefilled_tokens.saturating_add(other.prefilled_tokens);
    }
}

/// This replica's dispatches by engine id since the outbox was last taken.
#[derive(Debug, Default)]
pub struct DeltaOutbox {
    by_engine: BTreeMap<u32, DispatchDelta>,
}

impl DeltaOutbox {
    pub fn record(&mut self, engine_id: u32, delta: DispatchDelta) {
        if !delta.is_empty() {
            self.by_engine.entry(engine_id).or_default().add(&delta);
        }
    }

    /// Everything recorded since the last take, by engine id; the outbox is empty after.
    pub fn take(&mut self) -> BTreeMap<u32, DispatchDelta> {
        std::mem::take(&mut self.by_engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_sums_per_engine_and_empties_when_taken() {
        let mut outbox = DeltaOutbox::default();
        let one = DispatchDelta {
            tokens: 10,
            prefill_tokens: 8,
            generations: 1,
            prefilled_tokens: 0,
        };
        outbox.record(0, one);
        outbox.record(0, one);
        outbox.record(1, DispatchDelta::default()); // nothing to say: no entry
        outbox.record(
            2,
            DispatchDelta {
                prefilled_tokens: 5,
                ..DispatchDelta::default()
            },
        );
        let taken = outbox.take();
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[&0].tokens, 20);
        assert_eq!(taken[&0].generations, 2);
        assert_eq!(taken[&2].prefilled_tokens, 5);
        assert!(outbox.take().is_empty());
    }

    #[test]
    fn adding_saturates() {
        let mut d = DispatchDelta {
            tokens: u64::MAX - 1,
            ..DispatchDelta::default()
        };
        d.add(&DispatchDelta {
            tokens: 5,
            ..DispatchDelta::default()
        });
        assert_eq!(d.tokens, u64::MAX);
    }
}
