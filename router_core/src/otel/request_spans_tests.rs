//! A traced request's spans as the request task makes them, read back from the JSONL file the
//! tracer writes: one trace under the client's span, segments under the request, the policy's
//! decision and the verbs it awaited under its segment, each generation under its segment, and
//! the request's attributes.

use super::request_spans::{verb_span, RequestSpans, RequestSummary};
use super::router_tracer::{Exporters, RouterTracer};
use super::traceparent::{self, TRACEPARENT};
use opentelemetry::KeyValue;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

const CLIENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn tracer(name: &str) -> (Arc<RouterTracer>, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!(
        "switchyard-spans-{name}-{}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let exporters = Exporters {
        trace_file: Some(path.to_string_lossy().into_owned()),
        ..Exporters::default()
    };
    // Every request, as these tests read each one's spans (the default keeps one in ten; the
    // SDK reads the variable itself, and every test here sets the same value).
    std::env::set_var("OTEL_TRACES_SAMPLER", "parentbased_always_on");
    let tracer = RouterTracer::new(&exporters, None).expect("tracer");
    (Arc::new(tracer), path)
}

fn spans(tracer: &RouterTracer, path: &std::path::Path) -> Vec<Value> {
    tracer.flush();
    let text = std::fs::read_to_string(path).expect("span file");
    let _ = std::fs::remove_file(path);
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn summary<'a>(status: &'a str, error_type: Option<&'a str>) -> RequestSummary<'a> {
    RequestSummary {
        chat: true,
        model: "m",
        max_tokens: 8,
        temperature: 0.0,
        input_tokens: 5,
        output_tokens: 3,
        request_id: "client-1",
        engine_request_id: "eng-1",
        policy: "tandem",
        status,
        route: "tandem lead=e0 follow=e1",
        pattern: Some("tandem"),
        ttft_ms: Some(1.25),
        error_type,
    }
}

#[test]
fn a_two_segment_request_is_one_tree() {
    let (tracer, path) = tracer("tree");
    let headers = vec![(TRACEPARENT.to_owned(), CLIENT.to_owned())];
    let mut request = RequestSpans::start(&tracer, &headers, Instant::now()).expect("sampled");
    request.begin_segment();
    let first = request.segment_context().expect("open");
    let decision = request.begin_decision().expect("a segment is open");
    // A verb the policy awaits hangs under its decision.
    let (verb, metadata) =
        verb_span(&tracer, &decision, "prep_recv", "e1", SystemTime::now()).expect("sampled");
    assert_eq!(metadata.len(), 2, "traceparent and the KV parent");
    drop(verb);
    request.end_decision(
        vec![KeyValue::new("switchyard.pattern", "tandem")],
        "e0",
        "any",
        "policy",
    );
    let metadata = request.start_generate("e0");
    assert_eq!(metadata.len(), 1);
    request.segment_on("e0");
    request.segment_ended(1, "handoff");
    request.begin_segment();
    let second = request.segment_context().expect("open");
    assert_ne!(first.span_id(), second.span_id());
    let _ = request.start_generate("e1");
    request.segment_on("e1");
    request.segment_ended(2, "length");
    request.finish(summary("ok", None));

    let spans = spans(&tracer, &path);
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["span_id"].as_str().expect("id"), s))
        .collect();
    let name_of = |s: &Value| s["name"].as_str().expect("name").to_owned();
    let parent_name = |s: &Value| {
        s["parent_id"]
            .as_str()
            .and_then(|p| by_id.get(p))
            .map(|p| name_of(p))
    };
    let mut names: Vec<(String, Option<String>)> =
        spans.iter().map(|s| (name_of(s), parent_name(s))).collect();
    names.sort();
    let pair = |n: &str, p: Option<&str>| (n.to_owned(), p.map(str::to_owned));
    assert_eq!(
        names,
        vec![
            pair("router.decision", Some("router.segment")),
            pair("router.request", None),
            pair("router.segment", Some("router.request")),
            pair("router.segment", Some("router.request")),
            pair("verb.prep_recv", Some("router.decision")),
            pair("verb.start_generate", Some("router.segment")),
            pair("verb.start_generate", Some("router.segment")),
        ]
    );
    assert!(spans.iter().all(|s| s["trace_id"] == CLIENT[3..35]));
    let root = spans
        .iter()
        .find(|s| s["name"] == "router.request")
        .expect("root");
    assert_eq!(root["parent_id"], "00f067aa0ba902b7");
    assert_eq!(root["service"], "switchyard-router");
    assert_eq!(root["instance"], "router");
    assert_eq!(root["status"], "ok");
    let attrs = &root["attrs"];
    assert_eq!(attrs["switchyard.request_id"], "client-1");
    assert_eq!(attrs["gen_ai.operation.name"], "chat");
    assert_eq!(attrs["switchyard.engines"], "e0,e1");
    assert_eq!(attrs["switchyard.ttft_ms"], 1.25);
    let ends: Vec<(&Value, &Value)> = spans
        .iter()
        .filter(|s| s["name"] == "router.segment")
        .map(|s| {
            (
                &s["attrs"]["switchyard.segment.end_reason"],
                &s["attrs"]["switchyard.segment.tokens"],
            )
        })
        .collect();
    assert_eq!(ends.len(), 2);
    assert!(ends.contains(&(&Value::from("handoff"), &Value::from(1))));
    assert!(ends.contains(&(&Value::from("length"), &Value::from(2))));
    for s in &spans {
        if let Some(p) = s["parent_id"].as_str().and_then(|p| by_id.get(p)) {
            let within = p["start_ms"].as_f64() <= s["start_ms"].as_f64()
                && s["end_ms"].as_f64() <= p["end_ms"].as_f64();
            assert!(within, "{} outside {}", name_of(s), name_of(p));
        }
    }
}

#[test]
fn an_unsampled_client_trace_makes_nothing_and_a_failure_says_why() {
    let (tracer, path) = tracer("unsampled");
    let unsampled = vec![(TRACEPARENT.to_owned(), CLIENT.replace("-01", "-00"))];
    assert!(RequestSpans::start(&tracer, &unsampled, Instant::now()).is_none());
    let mut failed = RequestSpans::start(&tracer, &[], Instant::now()).expect("sampled");
    failed.begin_segment();
    let metadata = failed.start_generate("e0");
    let sent = traceparent::parse(&metadata[0].1).expect("a traceparent");
    failed.generate_failed("engine e0 unavailable".to_owned());
    failed.finish(summary("error", Some("engine_unavailable")));
    let spans = spans(&tracer, &path);
    assert_eq!(spans.len(), 3, "{spans:?}");
    let root = spans
        .iter()
        .find(|s| s["name"] == "router.request")
        .expect("root");
    assert!(root["parent_id"].is_null());
    assert_eq!(root["status"], "error");
    assert_eq!(root["attrs"]["error.type"], "engine_unavailable");
    let verb = spans
        .iter()
        .find(|s| s["name"] == "verb.start_generate")
        .expect("verb");
    assert_eq!(verb["status"], "error");
    assert_eq!(verb["span_id"], format!("{:016x}", sent.span_id()));
}
