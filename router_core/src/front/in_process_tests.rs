//! The request task run in-process over the seam tests and the simulator use: a bridge that
//! admits onto a scripted engine double (a `SegmentCall`), the client reading the response
//! (or going away), and what the close tells the deciding side.

use super::*;
use crate::detok::DetokenizerVocab;
use crate::engine_rpc::CallError;
use crate::executor::{
    EngineVerbs, Metadata, Placement, RequestExec, RouteNote, SegmentPlan, VerbFuture,
};
use crate::front::api_error::{ApiError, ShapedError};
use crate::front::bridge::{
    BoxFuture, DecideSpec, Decision, Observation, OpsRequest, OpsResponse, Refused, SegmentEnd,
};
use crate::front::segment_call::{ReadFuture, SegmentCall};
use crate::front::FrontConfig;
use crate::rpc::pb;
use crate::tokenize::RouterTokenizer;
use futures_util::StreamExt;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

// Four words; no decoder: a token's text is its word.
const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
    "added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},
    "post_processor":null,"decoder":null,
    "model":{"type":"WordLevel","vocab":{"a":0,"b":1,"c":2,"d":3},"unk_token":"a"}}"#;

/// An engine double: one chunk per read, then a read that never answers (an engine still
/// generating).
#[derive(Default)]
struct ScriptedCall {
    chunks: Mutex<VecDeque<pb::GenerateChunk>>,
    cancelled: AtomicBool,
}

impl SegmentCall for ScriptedCall {
    fn next(&self) -> ReadFuture<'_> {
        let chunk = self.chunks.lock().unwrap().pop_front();
        Box::pin(async move {
            match chunk {
                Some(chunk) => Ok(Some(chunk)),
                None => std::future::pending::<Result<_, CallError>>().await,
            }
        })
    }

    fn finish(&self, _runtime: &tokio::runtime::Handle) {}

    fn cancel(&self) -> bool {
        !self.cancelled.swap(true, Ordering::AcqRel)
    }
}

/// The engine 0 of these tests: each StartGenerate streams `script` (the first call is
/// `call`, which the tests inspect).
struct ScriptedEngine {
    call: Arc<ScriptedCall>,
    script: Vec<pb::GenerateChunk>,
    started: AtomicUsize,
}

impl EngineVerbs for ScriptedEngine {
    fn prep_recv(&self, _: pb::PrepRecvRequest, _: Metadata) -> VerbFuture<pb::PrepRecvResponse> {
        Box::pin(async { Err(CallError::Cancelled) })
    }

    fn remote_send(
        &self,
        _: pb::RemoteSendRequest,
        _: Metadata,
    ) -> VerbFuture<pb::RemoteSendResponse> {
        Box::pin(async { Err(CallError::Cancelled) })
    }

    fn start_generate(
        &self,
        _: pb::StartGenerateRequest,
        _: Metadata,
        _: &tokio::runtime::Handle,
    ) -> Arc<dyn SegmentCall> {
        if self.started.fetch_add(1, Ordering::AcqRel) == 0 {
            return self.call.clone();
        }
        let call = ScriptedCall::default();
        call.chunks.lock().unwrap().extend(self.script.clone());
        Arc::new(call)
    }

    fn abort(&self, _: String, _: bool) -> VerbFuture<bool> {
        Box::pin(async { Ok(false) })
    }
}

/// Decides every request onto engine 0 (data parallel); counts its decisions.
struct TestBridge {
    decisions: Arc<AtomicUsize>,
}

impl PolicyBridge for TestBridge {
    type Run = ();

    fn decide(
        &self,
        _spec: DecideSpec,
        _exec: Arc<RequestExec>,
    ) -> BoxFuture<Result<Decision<()>, Refused>> {
        self.decisions.fetch_add(1, Ordering::AcqRel);
        let mut route = RouteNote::new("dp");
        route.set("engine", "e0");
        Box::pin(std::future::ready(Ok(Decision {
            placement: Placement::Segment(SegmentPlan::whole(0)),
            route,
            policy: "test".into(),
            run: None,
            observer: None,
            explanation: Vec::new(),
        })))
    }

    fn next_segment(
        &self,
        _run: &(),
        _end: SegmentEnd,
        _exec: Arc<RequestExec>,
    ) -> BoxFuture<Result<Option<Decision<()>>, Refused>> {
        let err = ShapedError::from(&ApiError::internal("no second segment"));
        Box::pin(std::future::ready(Err(Refused::Shaped(err))))
    }

    fn observe(&self, _observer: &(), _observation: Observation) {}

    fn close(&self, _run: ()) {}

    fn cancel_decision(&self, _key: &str) {}

    fn ops(&self, _request: OpsRequest) -> BoxFuture<OpsResponse> {
        Box::pin(std::future::ready(OpsResponse {
            status: 404,
            content_type: "application/json".into(),
            headers: Vec::new(),
            body: Vec::new(),
        }))
    }

    fn engine_unavailable(&self, _engine: u32, _message: String) {}

    fn warn(&self, _message: String) {}
}

fn chunk(ids: &[i32], finish: &str) -> pb::GenerateChunk {
    pb::GenerateChunk {
        token_ids: ids.to_vec(),
        finish_reason: finish.into(),
        ..Default::default()
    }
}

type Decisions = Arc<AtomicUsize>;

fn front(
    first: pb::GenerateChunk,
    rest: Vec<pb::GenerateChunk>,
) -> (Arc<Front<TestBridge>>, Arc<ScriptedCall>, Decisions) {
    let script: Vec<pb::GenerateChunk> = std::iter::once(first).chain(rest).collect();
    let call = Arc::new(ScriptedCall::default());
    call.chunks.lock().unwrap().extend(script.clone());
    let decisions = Decisions::default();
    let config = FrontConfig {
        served_model: "m".into(),
        max_context: 64,
        max_inflight: 8,
        api_keys: Vec::new(),
        default_temperature: 1.0,
        default_top_p: 1.0,
        first_chunk_timeout: Duration::from_secs(5),
        max_body_bytes: 1 << 20,
        body_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
    };
    let bridge = TestBridge {
        decisions: decisions.clone(),
    };
    let front = Front::new(
        config,
        Arc::new(RouterTokenizer::new(TOKENIZER, None, None, vec![]).unwrap()),
        Arc::new(DetokenizerVocab::from_tokenizer_json(TOKENIZER).unwrap()),
        bridge,
        tokio::runtime::Handle::current(),
        0,
    );
    let engine = ScriptedEngine {
        call: call.clone(),
        script,
        started: AtomicUsize::new(0),
    };
    front
        .fleet
        .set_engine(0, Arc::new(engine), "scripted:1".into());
    (Arc::new(front), call, decisions)
}

/// The one finished request's record (ok, completion tokens).
fn record<B: PolicyBridge>(front: &Front<B>) -> (bool, u64) {
    let (records, _) = front.drain_records();
    assert_eq!(records.len(), 1);
    (records[0].ok, records[0].completion_tokens)
}

const BODY: &[u8] = br#"{"prompt": [0, 1], "max_tokens": 3, "stream": true,
                         "return_token_ids": true}"#;

fn start(front: &Arc<Front<TestBridge>>) -> InProcessRequest {
    let headers = HeaderMap::new();
    start_in_process(
        front.clone(),
        RequestKind::Completion,
        BODY,
        &headers,
        "127.0.0.1",
        None,
    )
}

#[tokio::test]
async fn a_request_streams_every_token_and_closes_delivered() {
    let rest = vec![chunk(&[2], ""), chunk(&[3], "length")];
    let (front, call, decisions) = front(chunk(&[1], ""), rest);
    let started = start(&front);
    let task = tokio::spawn(started.task.unwrap());
    let head = started.head.await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(head.headers()["x-switchyard-route"], "dp engine=e0");
    let body = axum::body::to_bytes(head.into_body(), usize::MAX)
        .await
        .unwrap();
    task.await.unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    for ids in ["[1]", "[2]", "[3]"] {
        assert!(text.contains(&format!("\"token_ids\":{ids}")), "{text}");
    }
    assert!(text.contains("\"finish_reason\":\"length\"") && text.ends_with("[DONE]\n\n"));
    assert_eq!(decisions.load(Ordering::Acquire), 1);
    assert_eq!(record(&front), (true, 3));
    // It delivered its finish: nothing to cancel, nothing held.
    assert!(!call.cancelled.load(Ordering::Acquire));
    assert_eq!(front.fleet.active(0), 0);
    assert_eq!(front.inflight(), 0);
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_engine_call() {
    // Two tokens, then an engine that is still generating when the client leaves.
    let (front, call, _decisions) = front(chunk(&[1], ""), vec![chunk(&[2], "")]);
    let started = start(&front);
    let task = tokio::spawn(started.task.unwrap());
    let head = started.head.await.unwrap();
    let mut body = head.into_body().into_data_stream();
    let mut seen = String::new();
    while !seen.contains("[2]") {
        let bytes = body.next().await.unwrap().unwrap();
        seen.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    drop(body);
    task.await.unwrap();
    assert_eq!(record(&front), (false, 2));
    assert!(call.cancelled.load(Ordering::Acquire));
    assert_eq!(front.fleet.active(0), 0);
    assert_eq!(front.inflight(), 0);
}

#[tokio::test]
async fn a_refused_body_answers_at_once_without_a_task() {
    let (front, _call, decisions) = front(chunk(&[1], ""), Vec::new());
    let headers = HeaderMap::new();
    let started = start_in_process(
        front,
        RequestKind::Completion,
        b"{not json",
        &headers,
        "127.0.0.1",
        None,
    );
    assert!(started.task.is_none());
    assert_eq!(started.head.await.unwrap().status(), 400);
    assert_eq!(decisions.load(Ordering::Acquire), 0);
}

/// The front over one engine that one request saturates: the admission gate holds the next,
/// a queue of one.
fn gated_front(first: pb::GenerateChunk) -> (Arc<Front<TestBridge>>, Decisions) {
    use crate::admission_queue::AdmissionSettings;
    use crate::engine_table::Role;
    use crate::router::{lock, RouterCore};
    use crate::scoring::ScoreWeights;
    let (front, _call, decisions) = front(first, Vec::new());
    let core = RouterCore::new(4, 9, ScoreWeights::default(), 1000, 60.0).unwrap();
    lock(&core.table).upsert(0, Role::Any);
    front.fleet.set_core(Arc::new(core));
    front.admission.configure(AdmissionSettings {
        max_inflight_per_engine: 1,
        max_queue_len: 1,
        ..AdmissionSettings::default()
    });
    (front, decisions)
}

fn queued(front: &Front<TestBridge>) -> usize {
    front.admission.queue_lengths().iter().map(|(_, n)| n).sum()
}

async fn until_queued(front: &Front<TestBridge>, n: usize) {
    while queued(front) != n {
        tokio::task::yield_now().await;
    }
}

/// The gated front with a first request running (its response's head taken, its task
/// spawned) and a second one queued behind it (its task spawned).
async fn one_running_one_queued() -> (
    Arc<Front<TestBridge>>,
    Decisions,
    tokio::task::JoinHandle<()>,
    Response,
    InProcessRequest,
    tokio::task::JoinHandle<()>,
) {
    let (front, decisions) = gated_front(chunk(&[1], ""));
    // The first request takes the engine's one place and keeps generating.
    let running = start(&front);
    let running_task = tokio::spawn(running.task.unwrap());
    let running_head = running.head.await.unwrap();
    let mut waiting = start(&front);
    let waiting_task = tokio::spawn(waiting.task.take().unwrap());
    until_queued(&front, 1).await;
    (
        front,
        decisions,
        running_task,
        running_head,
        waiting,
        waiting_task,
    )
}

#[tokio::test]
async fn the_admission_gate_holds_sheds_and_lets_through_in_process() {
    let (front, decisions, running_task, running_head, mut waiting, waiting_task) =
        one_running_one_queued().await;
    assert_eq!(running_head.status(), 200);
    // The second waits at the gate: no head, nothing decided for it.
    assert!(waiting.head.try_recv().is_err());
    assert_eq!(decisions.load(Ordering::Acquire), 1);
    // The third finds the queue full: 429 queue_full with Retry-After, and no task ran for it.
    let full = start(&front);
    tokio::spawn(full.task.unwrap()).await.unwrap();
    let shed = full.head.await.unwrap();
    assert_eq!(shed.status(), 429);
    assert!(shed.headers().contains_key("retry-after"));
    let body = axum::body::to_bytes(shed.into_body(), usize::MAX)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).contains("queue_full"));
    assert_eq!(decisions.load(Ordering::Acquire), 1);
    // The first client goes away: its close frees the place, the second goes through.
    drop(running_head);
    running_task.await.unwrap();
    let head = waiting.head.await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(queued(&front), 0);
    drop(head);
    waiting_task.await.unwrap();
    assert_eq!(decisions.load(Ordering::Acquire), 2);
    assert_eq!(front.inflight(), 0);
}

#[tokio::test]
async fn a_queued_request_whose_client_goes_away_leaves_the_queue() {
    let (front, decisions, running_task, running_head, waiting, waiting_task) =
        one_running_one_queued().await;
    drop(waiting.head);
    waiting_task.await.unwrap();
    assert_eq!(queued(&front), 0);
    // It never reached the deciding side; the running request is untouched.
    assert_eq!(decisions.load(Ordering::Acquire), 1);
    assert_eq!(front.inflight(), 1);
    let outcomes: Vec<_> = front
        .admission
        .drain_waits()
        .into_iter()
        .map(|w| w.outcome)
        .collect();
    assert_eq!(outcomes, ["admitted", "gone"]);
    drop(running_head);
    running_task.await.unwrap();
    assert_eq!(front.inflight(), 0);
}
