//! A prediction's shortlist: of a fleet's predictions for one request, the engines a placement
//! planner should weigh — the `k` healthy ones that would give it its first token soonest (they
//! may prefill it: role any or prefill) and the `k` that would decode it fastest (role any or
//! decode; KV room first). A planner that weighs every prefill engine against every decode
//! engine (adaptive: pyrouter/planning/placement.py) then costs O(k²) a request, not O(N²): over
//! 1,024 engines the full grid is a million placements a request. An engine left out is worse
//! than k others on both counts, so it would not be chosen for either side of a placement; a
//! fleet of at most k engines is never cut.

use crate::engine_table::Role;
use crate::prediction::EnginePrediction;
use std::cmp::Ordering;

/// The predictions of `preds` on the shortlist (in `preds`' order), or all of them when no more
/// than `k` are healthy. Unhealthy engines are never on it (no planner places on them).
pub fn shortlist(preds: Vec<EnginePrediction>, k: usize) -> Vec<EnginePrediction> {
    let healthy: Vec<usize> = (0..preds.len()).filter(|&i| preds[i].healthy).collect();
    if healthy.len() <= k {
        return preds.into_iter().filter(|p| p.healthy).collect();
    }
    let mut kept = vec![false; preds.len()];
    let prefills = healthy
        .iter()
        .copied()
        .filter(|&i| preds[i].role.serves(Some(Role::Prefill)));
    for i in best(prefills.collect(), k, |a, b| {
        by_f64(preds[a].ttft_ms, preds[b].ttft_ms)
    }) {
        kept[i] = true;
    }
    let decodes = healthy
        .iter()
        .copied()
        .filter(|&i| preds[i].role.serves(Some(Role::Decode)));
    for i in best(decodes.collect(), k, |a, b| {
        // KV room first (a decode engine without it cannot take the request), then the step.
        preds[b]
            .kv_ok
            .cmp(&preds[a].kv_ok)
            .then_with(|| by_f64(preds[a].decode_step_ms, preds[b].decode_step_ms))
    }) {
        kept[i] = true;
    }
    preds
        .into_iter()
        .zip(kept)
        .filter_map(|(p, keep)| keep.then_some(p))
        .collect()
}

/// The `k` best of `items` by `order` (ties: the lower index, so the choice is deterministic),
/// in O(len): a partial selection, not a sort.
fn best(mut items: Vec<usize>, k: usize, order: impl Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let cmp = |a: &usize, b: &usize| order(*a, *b).then(a.cmp(b));
    if items.len() > k && k > 0 {
        items.select_nth_unstable_by(k - 1, cmp);
    }
    items.truncate(k);
    items
}

/// NaN (no prediction) last.
fn by_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.total_cmp(&b),
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
    }
}

#[cfg(test)]
#[path = "prediction_shortlist_tests.rs"]
mod tests;
