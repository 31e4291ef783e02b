use super::*;
use crate::engine_table::{EngineTable, Role};

fn queue_of(requests: &[(i32, &str)], weights: &[(&str, f64)]) -> AdmissionQueue {
    let settings = AdmissionSettings {
        weights: weights.iter().map(|(k, w)| ((*k).to_owned(), *w)).collect(),
        ..AdmissionSettings::default()
    };
    let now = 0.0;
    let mut queue = AdmissionQueue::new();
    for (priority, caller) in requests {
        queue.push(
            *priority,
            caller,
            settings.weight(caller),
            now,
            now,
            Order::FairShare,
            0,
        );
    }
    queue
}

/// (priority, caller) in the order the queue lets them through.
fn drained(queue: &mut AdmissionQueue) -> Vec<(i32, String)> {
    std::iter::from_fn(|| queue.pop_head().map(|q| (q.priority, q.caller))).collect()
}

fn callers(order: &[(i32, String)]) -> String {
    order.iter().map(|(_, c)| c.as_str()).collect()
}

#[test]
fn lower_priority_numbers_go_first_then_arrival() {
    let mut queue = queue_of(&[(10, "a"), (10, "a"), (0, "a"), (-5, "a"), (0, "a")], &[]);
    let priorities: Vec<i32> = drained(&mut queue).into_iter().map(|(p, _)| p).collect();
    assert_eq!(priorities, [-5, 0, 0, 10, 10]);
    let mut queue = queue_of(&[(3, "x"), (3, "y"), (3, "z")], &[]);
    assert_eq!(callers(&drained(&mut queue)), "xyz");
}

#[test]
fn callers_share_turns_equally_by_default() {
    // "a" queued six before "b" queued two: they alternate while both have requests waiting.
    let mut queue = queue_of(&[(0, "a"); 6], &[]);
    let now = 0.0;
    for _ in 0..2 {
        queue.push(0, "b", 1.0, now, now, Order::FairShare, 0);
    }
    assert_eq!(callers(&drained(&mut queue)), "ababaaaa");
}

#[test]
fn weights_set_each_callers_share() {
    let requests: Vec<(i32, &str)> = (0..6).flat_map(|_| [(0, "a"), (0, "b")]).collect();
    let mut queue = queue_of(&requests, &[("a", 2.0)]);
    let order = callers(&drained(&mut queue));
    // While both have requests waiting, "a" has twice the turns of "b".
    assert_eq!(order[..9].matches('a').count(), 6, "{order}");
    assert_eq!(&order[..4], "abab");
}

#[test]
fn priority_comes_before_fair_share() {
    let mut queue = queue_of(&[(5, "a"), (5, "a"), (5, "b"), (1, "a"), (1, "a")], &[]);
    let order = drained(&mut queue);
    assert_eq!(order[..2], [(1, "a".into()), (1, "a".into())]);
    assert_eq!(order[2..].iter().filter(|(p, _)| *p == 5).count(), 3);
}

#[test]
fn an_idle_caller_saves_up_no_credit() {
    let mut queue = queue_of(&[(0, "a"); 4], &[]);
    queue.pop_head();
    queue.pop_head(); // virtual time is now past "b"'s never-used finish tag
    let now = 0.0;
    queue.push(0, "b", 1.0, now, now, Order::FairShare, 0);
    queue.push(0, "b", 1.0, now, now, Order::FairShare, 0);
    // "b" starts at the queue's virtual time: one turn ahead of "a"'s next, then alternating
    // (with credit from the turns it missed it would go twice first: "bbaa").
    assert_eq!(callers(&drained(&mut queue)), "baba");
}

#[test]
fn removed_requests_leave_the_order() {
    let mut queue = queue_of(&[(0, "a"), (0, "b"), (0, "c")], &[]);
    let second = queue.waiting.values().nth(1).unwrap().ticket;
    assert_eq!(queue.remove(second).unwrap().caller, "b");
    assert!(queue.remove(second).is_none());
    assert_eq!(queue.len_by_priority(), vec![(0, 2)]);
    assert_eq!(callers(&drained(&mut queue)), "ac");
    assert!(queue.is_empty());
}

#[test]
fn saturation_is_read_from_the_engine_table_and_the_routers_count() {
    let mut table = EngineTable::new();
    table.upsert(0, Role::Any);
    table.upsert(1, Role::Any);
    let by_requests = AdmissionSettings {
        max_inflight_per_engine: 2,
        ..AdmissionSettings::default()
    };
    let by_tokens = AdmissionSettings {
        max_queued_prefill_tokens: 100,
        ..AdmissionSettings::default()
    };
    assert!(!AdmissionSettings::default().enabled());
    assert!(by_requests.enabled() && by_tokens.enabled());
    assert_eq!(open_engines(table.all(), &by_requests), Some(2));
    assert!(has_room(2, 3, 0, &by_requests) && !has_room(2, 4, 0, &by_requests));
    assert_eq!(open_engines(table.all(), &by_tokens), Some(2));
    assert!(has_room(2, 9, 1, &by_tokens) && !has_room(2, 0, 2, &by_tokens));
    table.on_dispatch(0, 150, 8).unwrap(); // engine 0: 150 prefill tokens queued
    assert_eq!(open_engines(table.all(), &by_tokens), Some(1));
    assert_eq!(open_engines(table.all(), &by_requests), Some(2));
    table.on_dispatch(1, 100, 8).unwrap();
    assert_eq!(open_engines(table.all(), &by_tokens), Some(0));
    assert!(!has_room(0, 0, 0, &by_tokens));
    table.set_health(0, false).unwrap();
    assert_eq!(open_engines(table.all(), &by_requests), Some(1));
    assert!(!has_room(1, 2, 0, &by_requests));
    table.set_health(1, false).unwrap();
    assert_eq!(
        open_engines(table.all(), &by_requests),
        None,
        "no healthy engine: no wait"
    );
}

#[test]
fn deadline_ordered_requests_go_earliest_deadline_first_before_fair_shares() {
    let mut queue = queue_of(&[(0, "a"), (0, "b")], &[]);
    queue.push(0, "late", 1.0, 0.0, 9.0, Order::Deadline, 100);
    queue.push(0, "soon", 1.0, 1.0, 2.0, Order::Deadline, 10);
    queue.push(-1, "urgent", 1.0, 1.0, 50.0, Order::Deadline, 1);
    let last = queue.push(1, "x", 1.0, 1.0, 1.0, Order::Deadline, 1000);
    assert_eq!(queue.tokens_ahead(last), 111);
    assert_eq!(queue.tokens_ahead(12345), 0);
    let order: Vec<String> = drained(&mut queue).into_iter().map(|(_, c)| c).collect();
    assert_eq!(order, ["urgent", "soon", "late", "a", "b", "x"]);
}
