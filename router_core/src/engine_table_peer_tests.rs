//! The engine table's side of the peer exchange: its own dispatches go to the outbox, a peer's
//! deltas count next to its own until the next Stats asked for after they arrived.

use super::*;

fn quiet_stats() -> StatsUpdate {
    StatsUpdate::idle(10, 1.0)
}

fn table() -> EngineTable {
    let mut t = EngineTable::new();
    t.upsert(0, Role::Any);
    t.upsert(1, Role::Any);
    t
}

#[test]
fn alone_the_table_keeps_no_outbox() {
    let mut t = table();
    t.on_dispatch(0, 100, 10).unwrap();
    assert!(t.take_peer_outbox().is_empty());
}

#[test]
fn own_dispatches_fill_the_outbox_once() {
    let mut t = table();
    t.record_for_peers(true);
    let stamp = t.on_dispatch(0, 100, 10).unwrap();
    t.on_prefill_dispatch(1, 30).unwrap();
    t.on_prefill_done(0, 100, stamp).unwrap();
    t.on_complete(0).unwrap(); // no count of its own: it leaves with the Stats
    let out = t.take_peer_outbox();
    assert_eq!(
        out[&0],
        DispatchDelta {
            tokens: 110,
            prefill_tokens: 100,
            generations: 1,
            prefilled_tokens: 100
        }
    );
    assert_eq!(out[&1].prefill_tokens, 30);
    assert_eq!(out[&1].tokens, 0);
    assert!(t.take_peer_outbox().is_empty(), "taken once");
}

#[test]
fn a_prefill_done_the_stats_already_cover_is_not_told() {
    let mut t = table();
    t.record_for_peers(true);
    let stamp = t.on_dispatch(0, 100, 10).unwrap();
    t.stats_requested(0).unwrap();
    t.take_peer_outbox();
    t.on_prefill_done(0, 100, stamp).unwrap();
    assert!(t.take_peer_outbox().is_empty());
}

#[test]
fn a_peers_delta_counts_until_the_next_stats_asked_after_it() {
    let mut t = table();
    t.record_for_peers(true);
    let peer = DispatchDelta {
        tokens: 210,
        prefill_tokens: 200,
        generations: 2,
        prefilled_tokens: 50,
    };
    t.on_peer_delta(0, &peer).unwrap();
    let row = t.get(0).unwrap();
    assert_eq!(
        (row.router_tokens, row.router_seqs, row.inflight),
        (210, 2, 0)
    );
    assert_eq!(row.pending_prefill_tokens(), 150);
    assert_eq!(t.get(1).unwrap().router_tokens, 0, "only its engine");
    assert!(
        t.take_peer_outbox().is_empty(),
        "a peer's work is not sent on"
    );
    // A Stats answer asked for before the delta arrived does not cover it...
    t.stats_requested(0).unwrap();
    t.on_peer_delta(0, &peer).unwrap();
    t.update_stats(0, &quiet_stats()).unwrap();
    assert_eq!(t.get(0).unwrap().router_tokens, 210);
    // ...the next one does: a peer that sends nothing more is no longer counted.
    t.stats_requested(0).unwrap();
    t.update_stats(0, &quiet_stats()).unwrap();
    let row = t.get(0).unwrap();
    assert_eq!((row.router_tokens, row.router_seqs), (0, 0));
    assert_eq!(row.pending_prefill_tokens(), 0);
}

#[test]
fn a_peers_prefills_done_never_go_below_what_is_queued() {
    let mut t = table();
    t.on_dispatch(0, 40, 1).unwrap();
    let done = DispatchDelta {
        prefilled_tokens: 1000,
        ..DispatchDelta::default()
    };
    t.on_peer_delta(0, &done).unwrap();
    assert_eq!(t.get(0).unwrap().pending_prefill_tokens(), 0);
    assert_eq!(t.get(0).unwrap().router_prefilled_tokens, 40);
    assert_eq!(
        t.on_peer_delta(7, &done),
        Err(RouterCoreError::UnknownEngine(7))
    );
}
