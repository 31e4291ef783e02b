use super::*;
use crate::engine_table::Role;
use crate::front::clock::SystemClock;
use crate::scoring::ScoreWeights;
use std::sync::LazyLock;

static CLOCK: LazyLock<SystemClock> = LazyLock::new(SystemClock::default);

fn serves_all(_: u32) -> bool {
    true
}

/// A five-token request of `priority` from `caller`, with a TTFT objective or none.
async fn enter(
    gate: &Arc<AdmissionGate>,
    core: Option<Arc<RouterCore>>,
    priority: i32,
    caller: &str,
    slo_ttft_ms: Option<f64>,
) -> Result<Option<AdmissionPermit>, Shed> {
    let entry = Entry {
        priority,
        caller,
        slo_ttft_ms,
        slo_tpot_ms: None,
        arrived_s: CLOCK.now(),
        tokens: &[1, 2, 3, 4, 5],
        serves: &serves_all,
    };
    gate.enter(core, &*CLOCK, entry).await
}

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
    assert!(enter(&gate, Some(core.clone()), 0, "a", None)
        .await
        .unwrap()
        .is_none());
    let (gate, core) = one_slot();
    let permit = enter(&gate, Some(core.clone()), 0, "a", None).await;
    assert!(permit.unwrap().is_some());
    // No healthy engine: nothing to wait for (the request meets the usual "no capacity").
    lock(&core.table).set_health(0, false).unwrap();
    assert!(enter(&gate, Some(core), 0, "a", None).await.is_ok());
}

#[tokio::test]
async fn queued_requests_go_through_by_priority_as_room_frees() {
    let (gate, core) = one_slot();
    let first = enter(&gate, Some(core.clone()), 0, "a", None)
        .await
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (n, priority) in [(1, 10), (2, 10), (3, 0)] {
        let (g, core, order) = (gate.clone(), core.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let permit = enter(&g, Some(core), priority, "a", None).await;
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
    let _busy = enter(&gate, Some(core.clone()), 0, "a", None)
        .await
        .unwrap();
    let shed = enter(&gate, Some(core.clone()), 0, "a", Some(20.0))
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
            enter(&g, Some(core), 5, "a", None).await.is_ok()
        }));
        until_queued(&gate, n).await;
    }
    let full = enter(&gate, Some(core.clone()), 0, "a", None).await;
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

/// One engine whose step takes 3 ms plus 0.2 ms per prefill token, with `queued` prefill tokens
/// waiting (chunks of 512): 1000 queued take 206 ms, a five-token prompt 4 ms.
fn predicting(queued: u64) -> (Arc<AdmissionGate>, Arc<RouterCore>) {
    use crate::engine_table::StatsUpdate;
    use crate::latency_model::TERMS;
    let core = RouterCore::new(4, 9, ScoreWeights::default(), 1000, 60.0).unwrap();
    {
        let mut table = lock(&core.table);
        table.upsert(0, Role::Any);
        let coefficients = [3.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let stats = StatsUpdate {
            queued_prefill_tokens: queued,
            prefill_chunk_size: 512,
            latency_model: TERMS
                .iter()
                .map(|t| match *t {
                    "decode_context_over" => format!("{t}:10000"),
                    _ => (*t).to_owned(),
                })
                .zip(coefficients)
                .collect(),
            ..StatsUpdate::idle(1000, 0.0)
        };
        table.update_stats(0, &stats).unwrap();
    }
    let gate = Arc::new(AdmissionGate::default());
    gate.configure(AdmissionSettings {
        margin: 0.0,
        ..AdmissionSettings::default()
    });
    (gate, Arc::new(core))
}

#[tokio::test]
async fn a_request_predicted_in_time_goes_straight_through_and_one_predicted_late_is_shed() {
    let (gate, core) = predicting(1000);
    let permit = enter(&gate, Some(core.clone()), 0, "a", Some(1000.0)).await;
    let permit = permit.unwrap().expect("held by the gate");
    assert_eq!(permit.how(), Some("predicted"));
    // Its own prediction is counted until it is placed: with one engine, the next one waits.
    drop(permit);
    let shed = enter(&gate, Some(core.clone()), 0, "a", Some(100.0)).await;
    let shed = shed.err().expect("210 ms predicted against 100 ms");
    assert_eq!(
        (shed.error.status, shed.error.code.as_deref()),
        (503, Some("slo_unattainable"))
    );
    assert_eq!(shed.retry_after_s, 1);
    assert_eq!(outcomes(&gate), [(0, "admitted"), (0, "slo_unattainable")]);
    // Without an objective (none of its own, no default), never held nor shed by prediction.
    assert!(enter(&gate, Some(core.clone()), 0, "a", None)
        .await
        .unwrap()
        .is_none());
    // Predicted admission off: not either.
    gate.configure(AdmissionSettings {
        predicted: false,
        ..AdmissionSettings::default()
    });
    assert!(enter(&gate, Some(core), 0, "a", Some(100.0))
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn the_deployments_objective_stands_in_for_a_missing_one() {
    let (gate, core) = predicting(1000);
    gate.configure(AdmissionSettings {
        margin: 0.0,
        default_slo: crate::admission_queue::SloTargets {
            ttft_ms: Some(100.0),
            tpot_ms: None,
        },
        ..AdmissionSettings::default()
    });
    let shed = enter(&gate, Some(core.clone()), 0, "a", None).await;
    assert_eq!(
        shed.err().unwrap().error.code.as_deref(),
        Some("slo_unattainable")
    );
    // Its own objective wins.
    assert!(enter(&gate, Some(core), 0, "a", Some(1000.0)).await.is_ok());
}

#[tokio::test]
async fn requests_wait_while_a_placement_is_in_transit_then_go_earliest_deadline_first() {
    let (gate, core) = predicting(0);
    let mut first = enter(&gate, Some(core.clone()), 0, "a", Some(1000.0))
        .await
        .unwrap()
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (n, slo_ms) in [(1, 5000.0), (2, 2000.0)] {
        let (g, core, order) = (gate.clone(), core.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let mut permit = enter(&g, Some(core), 0, "a", Some(slo_ms))
                .await
                .unwrap()
                .unwrap();
            lock(&order).push((slo_ms, permit.how()));
            permit.placed(); // placed at once: the next may go
        }));
        until_queued(&gate, n).await;
    }
    first.placed();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        *lock(&order),
        [(2000.0, Some("queued")), (5000.0, Some("queued"))]
    );
    // Each first token teaches the closed loop: this one came sooner than its 4 ms.
    first.first_token(CLOCK.now());
    assert!(gate.corrections().0 < 1.0);
}

#[tokio::test]
async fn a_queued_request_is_shed_once_it_can_no_longer_make_it() {
    let (gate, core) = predicting(0);
    let _in_transit = enter(&gate, Some(core.clone()), 0, "a", Some(1000.0))
        .await
        .unwrap()
        .unwrap();
    let began = CLOCK.now();
    let shed = enter(&gate, Some(core), 0, "a", Some(100.0)).await;
    let waited = CLOCK.now() - began;
    let code = shed.err().unwrap().error.code;
    // At the head it is refused as its budget falls under its own prefill (4 ms), or by its
    // deadline's timer: whichever comes first, never long after 100 ms.
    assert!(
        matches!(code.as_deref(), Some("slo_unattainable" | "queue_timeout")),
        "{code:?}"
    );
    assert!((0.09..0.5).contains(&waited), "{waited}");
}
