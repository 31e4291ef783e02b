//! `Dispatched`: one generation's place in the engine table — counted in flight with its prefill
//! and decode tokens from the moment it is placed, its prefill counted as queued until its first
//! token, released (exactly once) when it ends. A decision takes it at once, before its verbs go
//! out: the decisions that follow in the same instant (a burst decided back to back) see the
//! engine it loaded, as they would if it had started.

use super::placement::{Placement, SegmentPlan};
use crate::router::{lock, RouterCore};
use std::sync::Arc;

pub struct Dispatched {
    core: Arc<RouterCore>,
    pub num: u32,
    /// Prefill tokens still counted as queued, with the dispatch's stamp (engine_table.rs
    /// `on_prefill_done`); None once done.
    prefill: Option<(u64, u64)>,
}

impl Dispatched {
    /// `prefill` + `decode` tokens dispatched to engine `num` now (None: the engine is not in
    /// the table).
    pub fn new(core: Arc<RouterCore>, num: u32, prefill: u64, decode: u64) -> Option<Self> {
        let stamp = lock(&core.table).on_dispatch(num, prefill, decode).ok()?;
        Some(Dispatched {
            core,
            num,
            prefill: Some((prefill, stamp)),
        })
    }

    /// Its prefill is done (the first token arrived, or the call ended): predictions stop
    /// counting it as queued before the engine's next Stats.
    pub fn prefill_done(&mut self) {
        if let Some((tokens, stamp)) = self.prefill.take() {
            // Err: the engine was removed meanwhile.
            let _ = lock(&self.core.table).on_prefill_done(self.num, tokens, stamp);
        }
    }
}

impl Drop for Dispatched {
    fn drop(&mut self) {
        self.prefill_done();
        // Err: the engine was removed meanwhile.
        let _ = lock(&self.core.table).on_complete(self.num);
    }
}

/// The engine and the (prefill, decode) tokens of the generation `placement` starts with, for a
/// request of `len` tokens so far with `left` still to generate: a segment's as given; a
/// disaggregation's decode engine prefills its tail (the last token, or from its end); a split
/// starts on the lead when it emits tokens, else on the follow.
pub fn first_generation(placement: &Placement, len: u64, left: u64) -> (u32, u64, u64) {
    let decoding = |limit: Option<u32>| limit.map_or(left, |n| left.min(u64::from(n)));
    match placement {
        Placement::Segment(SegmentPlan {
            engine,
            begin,
            max_new_tokens,
            ..
        }) => (
            *engine,
            len.saturating_sub(*begin),
            decoding(*max_new_tokens),
        ),
        Placement::Pd(pd) => {
            let end = pd
                .end
                .unwrap_or(len.saturating_sub(1))
                .min(len.saturating_sub(1));
            (pd.decode, len - end, left)
        }
        Placement::Split(split) if split.lead_tokens > 0 => {
            (split.lead, len, decoding(Some(split.lead_tokens)))
        }
        Placement::Split(split) => (split.follow, len - split.at.min(len), left),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::placement::{PdPlan, SplitPlan};

    #[test]
    fn the_first_generation_of_each_placement() {
        let dp = Placement::Segment(SegmentPlan::whole(2));
        assert_eq!(first_generation(&dp, 100, 16), (2, 100, 16));
        let pd = Placement::Pd(PdPlan {
            prefill: Some(0),
            decode: 1,
            end: None,
            local_prefill_ratio: None,
        });
        assert_eq!(first_generation(&pd, 100, 16), (1, 1, 16));
        let lead = Placement::Split(SplitPlan {
            lead: 0,
            follow: 1,
            at: 0,
            lead_tokens: 2,
        });
        assert_eq!(first_generation(&lead, 100, 16), (0, 100, 2));
        let follow = Placement::Split(SplitPlan {
            lead: 0,
            follow: 1,
            at: 64,
            lead_tokens: 0,
        });
        assert_eq!(first_generation(&follow, 100, 16), (1, 36, 16));
    }
}
