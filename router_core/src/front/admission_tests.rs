use super::*;
use crate::engine_table::Role;
use crate::scoring::ScoreWeights;

/// One healthy engine that is saturated by one request.
fn one_slot() -> (Arc<AdmissionGate>, Arc<RouterCore>) {
    let core = RouterCore::new(4, 9, ScoreWeights::default(), 1000, 60.0).unwrap();
    lock(&core.table).upsert(0, Role::Any);
    let gate = Arc::new(AdmissionGate::default());
    gate.configure(AdmissionSettings {
        max_inflight_per_engine: 1,
        max_queue_len: 3,
        ..AdmissionSettings::default()
    });
    (gate, Arc::new(core))
}

async fn until_queued(gate: &AdmissionGate, n: usize) {
    while gate
        .queue_lengths()
        .iter()
        .map(|(_, len)| len)
        .sum::<usize>()
        != n
    {
        tokio::task::yield_now().await;
    }
}

fn outcomes(gate: &AdmissionGate) -> Vec<(i32, &'static str)> {
    gate.drain_waits()
        .into_iter()
        .map(|w| (w.priority, w.outcome))
        .collect()
}

#[tokio::test]
async fn off_by_default_and_open_while_there_is_room() {
    let gate = Arc::new(AdmissionGate::default());
    let core = one_slot().1;
    let now = Instant::now();
    assert!(gate
        .enter(Some(core.clone()), 0, "a", None, now)
        .await
        .unwrap()
        .is_none());
    let (gate, core) = one_slot();
    let permit = gate.enter(Some(core.clone()), 0, "a", None, now).await;
    assert!(permit.unwrap().is_some());
    // No healthy engine: nothing to wait for (the request meets the usual "no capacity").
    lock(&core.table).set_health(0, false).unwrap();
    assert!(gate.enter(Some(core), 0, "a", None, now).await.is_ok());
}

#[tokio::test]
async fn queued_requests_go_through_by_priority_as_room_frees() {
    let (gate, core) = one_slot();
    let now = Instant::now();
    let first = gate
        .enter(Some(core.clone()), 0, "a", None, now)
        .await
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (n, priority) in [(1, 10), (2, 10), (3, 0)] {
        let (g, core, order) = (gate.clone(), core.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let permit = g.enter(Some(core), priority, "a", None, now).await;
            lock(&order).push(priority);
            drop(permit); // its admission ends at once: the next may go
        }));
        until_queued(&gate, n).await;
    }
    drop(first);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*lock(&order), [0, 10, 10]);
    assert_eq!(
        outcomes(&gate),
        [
            (0, "admitted"),
            (0, "admitted"),
            (10, "admitted"),
            (10, "admitted")
        ]
    );
}

#[tokio::test]
async fn a_full_queue_is_a_429_and_a_passed_deadline_a_503() {
    let (gate, core) = one_slot();
    let now = Instant::now();
    let _busy = gate
        .enter(Some(core.clone()), 0, "a", None, now)
        .await
        .unwrap();
    let shed = gate
        .enter(
            Some(core.clone()),
            0,
            "a",
            Some(Duration::from_millis(20)),
            now,
        )
        .await
        .err()
        .unwrap();
    assert_eq!(
        (shed.error.status, shed.error.code.as_deref()),
        (503, Some("queue_timeout"))
    );
    assert!(shed.retry_after_s >= 1);
    let mut waiting = Vec::new();
    for n in 1..=3 {
        let (g, core) = (gate.clone(), core.clone());
        waiting.push(tokio::spawn(async move {
            g.enter(Some(core), 5, "a", None, now).await.is_ok()
        }));
        until_queued(&gate, n).await;
    }
    let full = gate.enter(Some(core.clone()), 0, "a", None, now).await;
    let full = full.err().unwrap();
    assert_eq!(
        (full.error.status, full.error.code.as_deref()),
        (429, Some("queue_full"))
    );
    // A client that goes away leaves the queue.
    waiting.pop().unwrap().abort();
    until_queued(&gate, 2).await;
    let recorded = outcomes(&gate);
    assert_eq!(
        recorded,
        [
            (0, "admitted"),
            (0, "timeout"),
            (0, "queue_full"),
            (5, "gone")
        ]
    );
}
