//! The request task run in-process over the seam tests and the simulator use: a bridge that
//! admits onto a scripted engine double (a `SegmentCall`), the client reading the response
//! (or going away), and what the close tells the deciding side.

use super::*;
use crate::detok::DetokenizerVocab;
use crate::engine_rpc::CallError;
use crate::front::api_error::ApiError;
use crate::front::bridge::{
    AdmitOutcome, AdmitSpec, Admitted, BoxFuture, OpsRequest, OpsResponse, RequestEnd, Segment,
};
use crate::front::segment_call::{ReadFuture, SegmentCall};
use crate::front::FrontConfig;
use crate::rpc::pb;
use crate::tokenize::RouterTokenizer;
use futures_util::StreamExt;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Admits every request onto `call` with `first` as its first chunk; records each close.
struct TestBridge {
    call: Arc<ScriptedCall>,
    first: pb::GenerateChunk,
    ends: Arc<Mutex<Vec<RequestEnd>>>,
}

impl PolicyBridge for TestBridge {
    type Run = ();

    fn admit(&self, _spec: AdmitSpec) -> BoxFuture<AdmitOutcome<()>> {
        let segment = Segment {
            call: self.call.clone(),
            engine: "e0".into(),
        };
        Box::pin(std::future::ready(AdmitOutcome {
            run: Some(()),
            policy: "test".into(),
            result: Ok(Admitted {
                segment,
                first: self.first.clone(),
                route: "dp engine=e0".into(),
                pattern: "dp".into(),
            }),
        }))
    }

    fn cancel_admission(&self, _engine_request_id: &str) {}

    fn next_segment(
        &self,
        _run: &(),
        _segment_tokens: Vec<u32>,
    ) -> BoxFuture<Result<(Segment, pb::GenerateChunk), ShapedError>> {
        let err = ShapedError::from(&ApiError::internal("no second segment"));
        Box::pin(std::future::ready(Err(err)))
    }

    fn close(&self, _run: (), end: RequestEnd) -> BoxFuture<()> {
        self.ends.lock().unwrap().push(end);
        Box::pin(std::future::ready(()))
    }

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

type Ends = Arc<Mutex<Vec<RequestEnd>>>;

fn front(
    first: pb::GenerateChunk,
    rest: Vec<pb::GenerateChunk>,
) -> (Arc<Front<TestBridge>>, Arc<ScriptedCall>, Ends) {
    let call = Arc::new(ScriptedCall::default());
    call.chunks.lock().unwrap().extend(rest);
    let ends = Ends::default();
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
        call: call.clone(),
        first,
        ends: ends.clone(),
    };
    let front = Front::new(
        config,
        Arc::new(RouterTokenizer::new(TOKENIZER, None, None, vec![]).unwrap()),
        Arc::new(DetokenizerVocab::from_tokenizer_json(TOKENIZER).unwrap()),
        bridge,
        tokio::runtime::Handle::current(),
        0,
    );
    (Arc::new(front), call, ends)
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
    let (front, call, ends) = front(chunk(&[1], ""), rest);
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
    let ends = ends.lock().unwrap();
    assert_eq!(ends.len(), 1);
    assert_eq!((ends[0].status, ends[0].completion_tokens), ("ok", 3));
    assert!(ends[0].delivered && !call.cancelled.load(Ordering::Acquire));
    assert_eq!(front.inflight(), 0);
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_engine_call() {
    // Two tokens, then an engine that is still generating when the client leaves.
    let (front, call, ends) = front(chunk(&[1], ""), vec![chunk(&[2], "")]);
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
    let ends = ends.lock().unwrap();
    assert_eq!((ends[0].status, ends[0].delivered), ("error", false));
    assert!(call.cancelled.load(Ordering::Acquire));
    assert_eq!(front.inflight(), 0);
}

#[tokio::test]
async fn a_refused_body_answers_at_once_without_a_task() {
    let (front, _call, ends) = front(chunk(&[1], ""), Vec::new());
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
    assert!(ends.lock().unwrap().is_empty());
}
