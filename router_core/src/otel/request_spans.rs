//! One request's spans as the front's request task makes them:
//!
//! ```text
//! router.request             child of the client's traceparent, if it sent a valid one
//!   router.segment [k]       from asking for segment k (the fast pick, the policy's admission
//!                            or its next segment) to that segment's end
//!     router.decision        the Python policy's, with why it chose (its explanation) and the
//!                            verbs the executor ran for it: verb.prep_recv / verb.remote_send
//!     verb.start_generate    the segment's generation -> the engine's engine.generate
//! ```
//!
//! Spans are started and ended as the request goes (the engines need their ids while it
//! runs); the request's own attributes go on its span when it closes.

use super::router_tracer::RouterTracer;
use super::traceparent::{self, KV_PARENT, TRACEPARENT};
use opentelemetry::trace::{Span as _, SpanContext, Status};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::Span;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A span that ends when dropped (or at the time given to `end_at`).
pub struct SpanGuard {
    span: Span,
}

impl SpanGuard {
    pub fn new(span: Span) -> Self {
        SpanGuard { span }
    }

    pub fn context(&self) -> &SpanContext {
        self.span.span_context()
    }

    pub fn traceparent(&self) -> String {
        traceparent::format(self.context())
    }

    pub fn set(&mut self, attribute: KeyValue) {
        self.span.set_attribute(attribute);
    }

    pub fn set_all(&mut self, attributes: Vec<KeyValue>) {
        self.span.set_attributes(attributes);
    }

    pub fn fail(&mut self, description: String) {
        self.span.set_status(Status::error(description));
    }

    pub fn end_at(mut self, at: SystemTime) {
        self.span.end_with_timestamp(at);
    }
}

/// A verb's span name and gRPC method (static: no allocation per call).
fn verb_names(verb: &str) -> (&'static str, &'static str) {
    match verb {
        "prep_recv" => ("verb.prep_recv", "PrepRecv"),
        "remote_send" => ("verb.remote_send", "RemoteSend"),
        "start_generate" => ("verb.start_generate", "StartGenerate"),
        "abort" => ("verb.abort", "Abort"),
        _ => ("verb.other", "other"),
    }
}

/// A verb's span (`verb.<verb>`, under `parent`: a segment, or the decision that called it),
/// and the gRPC metadata that carries it to the engine: `traceparent`, and for a PrepRecv the
/// parent too, as `switchyard-kv-parent` (the KV transfer into the reservation happens under
/// the decision). None when `parent` is not sampled.
pub fn verb_span(
    tracer: &RouterTracer,
    parent: &SpanContext,
    verb: &str,
    engine: &str,
    start: SystemTime,
) -> Option<(SpanGuard, Vec<(String, String)>)> {
    if !parent.is_sampled() {
        return None;
    }
    let (name, method) = verb_names(verb);
    let span = SpanGuard::new(tracer.start(
        name,
        Some(parent),
        start,
        vec![
            KeyValue::new("switchyard.engine", engine.to_owned()),
            KeyValue::new("rpc.method", method),
        ],
    ));
    let mut metadata = vec![(TRACEPARENT.to_owned(), span.traceparent())];
    if verb == "prep_recv" {
        metadata.push((KV_PARENT.to_owned(), traceparent::format(parent)));
    }
    Some((span, metadata))
}

/// `Instant` -> wall clock, for spans that began before their request's spans were made.
pub fn wall_time(at: Instant) -> SystemTime {
    SystemTime::now() - at.elapsed()
}

struct OpenSegment {
    span: SpanGuard,
    /// The policy's decision for it, while the policy decides (its verbs hang under it).
    decision: Option<SpanGuard>,
    /// Its generation's verb span, while it runs (fast path: one per try).
    generate: Option<SpanGuard>,
    /// Its end is recorded (tokens, reason). A segment handed off ends when the next one
    /// begins; the last stays open until the request closes, after the deciding side's spans
    /// under it.
    ended: bool,
}

pub struct RequestSpans {
    tracer: Arc<RouterTracer>,
    request: SpanGuard,
    segment: Option<OpenSegment>,
    segments: i64,
    /// The engines of the request's segments, in order, repeats included.
    engines: Vec<String>,
}

impl RequestSpans {
    /// The request's span under the client's `traceparent` (if any), when the sampler keeps
    /// it; None for an unsampled request, which then costs nothing more.
    pub fn start(
        tracer: &Arc<RouterTracer>,
        client_headers: &[(String, String)],
        started: Instant,
    ) -> Option<Self> {
        let parent = traceparent::from_headers(client_headers);
        let span = tracer.start(
            "router.request",
            parent.as_ref(),
            wall_time(started),
            Vec::new(),
        );
        if !span.span_context().is_sampled() {
            return None;
        }
        Some(RequestSpans {
            tracer: tracer.clone(),
            request: SpanGuard::new(span),
            segment: None,
            segments: 0,
            engines: Vec::new(),
        })
    }

    /// Segment k begins: its decision is about to be made.
    pub fn begin_segment(&mut self) {
        self.segment_ended(0, "abandoned");
        self.segment = None;
        let span = SpanGuard::new(self.tracer.start(
            "router.segment",
            Some(self.request.context()),
            SystemTime::now(),
            vec![KeyValue::new("switchyard.segment.index", self.segments)],
        ));
        self.segments += 1;
        self.segment = Some(OpenSegment {
            span,
            decision: None,
            generate: None,
            ended: false,
        });
    }

    /// The policy decides the open segment: its span (`router.decision`), whose context the
    /// verbs it awaits hang under. None when no segment is open.
    pub fn begin_decision(&mut self) -> Option<SpanContext> {
        let segment = self.segment.as_mut()?;
        let span = SpanGuard::new(self.tracer.start(
            "router.decision",
            Some(segment.span.context()),
            SystemTime::now(),
            Vec::new(),
        ));
        let context = span.context().clone();
        segment.decision = Some(span);
        Some(context)
    }

    /// The segment's decision was carried out up to its generation on `engine` (of `role`),
    /// decided by `decided_by` ("policy", "placement", "migration") for the reasons in
    /// `explanation`: its span ends.
    pub fn end_decision(
        &mut self,
        mut explanation: Vec<KeyValue>,
        engine: &str,
        role: &str,
        decided_by: &'static str,
    ) {
        let index = self.segments - 1;
        if let Some(mut span) = self.segment.as_mut().and_then(|s| s.decision.take()) {
            explanation.extend([
                KeyValue::new("switchyard.decided_by", decided_by),
                KeyValue::new("switchyard.segment.index", index),
                KeyValue::new("switchyard.engine", engine.to_owned()),
                KeyValue::new("switchyard.engine.role", role.to_owned()),
            ]);
            span.set_all(explanation);
        }
    }

    /// The open segment's context (what a verb outside a decision hangs under).
    pub fn segment_context(&self) -> Option<SpanContext> {
        self.segment.as_ref().map(|s| s.span.context().clone())
    }

    /// The segment's generation starts on `engine`: the verb's span, and the metadata that
    /// carries it to the engine.
    pub fn start_generate(&mut self, engine: &str) -> Vec<(String, String)> {
        let Some(segment) = &mut self.segment else {
            return Vec::new();
        };
        match verb_span(
            &self.tracer,
            segment.span.context(),
            "start_generate",
            engine,
            SystemTime::now(),
        ) {
            Some((span, metadata)) => {
                segment.generate = Some(span);
                metadata
            }
            None => Vec::new(),
        }
    }

    /// An attempt failed before any output (it is retried elsewhere, or the request fails).
    pub fn generate_failed(&mut self, error: String) {
        if let Some(mut span) = self.segment.as_mut().and_then(|s| s.generate.take()) {
            span.fail(error);
        }
    }

    /// The segment's stream came back from `engine`.
    pub fn segment_on(&mut self, engine: &str) {
        if let Some(segment) = &mut self.segment {
            segment
                .span
                .set(KeyValue::new("switchyard.engine", engine.to_owned()));
            self.engines.push(engine.to_owned());
        }
    }

    /// The running segment ended after `tokens` tokens: the engine's finish reason, "handoff",
    /// "stop" (a stop string), or how the request ended. Its generation's span ends now, its
    /// own when the next segment begins, or when the request closes.
    pub fn segment_ended(&mut self, tokens: u64, reason: &str) {
        let Some(segment) = &mut self.segment else {
            return;
        };
        if segment.ended {
            return;
        }
        segment.ended = true;
        drop(segment.decision.take());
        drop(segment.generate.take());
        segment.span.set_all(vec![
            KeyValue::new("switchyard.segment.tokens", tokens as i64),
            KeyValue::new("switchyard.segment.end_reason", reason.to_owned()),
        ]);
    }

    /// The request's engines, sorted and distinct, comma-separated (the root's attribute).
    fn engines(&self) -> String {
        let mut engines = self.engines.clone();
        engines.sort();
        engines.dedup();
        engines.join(",")
    }

    /// Ends every span, with the request's own attributes on its span.
    pub fn finish(mut self, summary: RequestSummary<'_>) {
        let ok = summary.error_type.is_none();
        self.segment_ended(summary.output_tokens, summary.status);
        self.segment = None;
        let engines = self.engines();
        let error_type = summary.error_type.map(str::to_owned);
        self.request.set_all(summary.attributes(engines));
        if let Some(error_type) = error_type.filter(|_| !ok) {
            self.request.fail(error_type);
        }
    }
}

/// What the request's span says about it when it closes (pyrouter's metrics see the same).
pub struct RequestSummary<'a> {
    pub chat: bool,
    pub model: &'a str,
    pub max_tokens: i64,
    pub temperature: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub request_id: &'a str,
    pub engine_request_id: &'a str,
    pub policy: &'a str,
    /// "ok" or "error".
    pub status: &'a str,
    /// X-Switchyard-Route, and the pattern that ran (None: no engine took it).
    pub route: &'a str,
    pub pattern: Option<&'a str>,
    pub ttft_ms: Option<f64>,
    /// Why it failed (the error body's code), None when it did not.
    pub error_type: Option<&'a str>,
}

impl RequestSummary<'_> {
    /// The pattern as metrics label it: an adaptive policy's choice (`chose=` in the route)
    /// rather than its own name (pyrouter/request.py, Route.label).
    fn label(&self) -> String {
        let chose = self
            .route
            .split(' ')
            .find_map(|part| part.strip_prefix("chose="));
        chose
            .or(self.pattern)
            .filter(|p| !p.is_empty())
            .unwrap_or("none")
            .to_owned()
    }

    fn attributes(&self, engines: String) -> Vec<KeyValue> {
        let operation = if self.chat { "chat" } else { "text_completion" };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", operation),
            KeyValue::new("gen_ai.request.model", self.model.to_owned()),
            KeyValue::new("gen_ai.request.max_tokens", self.max_tokens),
            KeyValue::new("gen_ai.request.temperature", self.temperature),
            KeyValue::new("gen_ai.usage.input_tokens", self.input_tokens as i64),
            KeyValue::new("gen_ai.usage.output_tokens", self.output_tokens as i64),
            KeyValue::new("switchyard.request_id", self.request_id.to_owned()),
            KeyValue::new(
                "switchyard.engine_request_id",
                self.engine_request_id.to_owned(),
            ),
            KeyValue::new("switchyard.policy", self.policy.to_owned()),
            KeyValue::new("switchyard.status", self.status.to_owned()),
            KeyValue::new("switchyard.pattern", self.label()),
            KeyValue::new("switchyard.route", self.route.to_owned()),
            KeyValue::new("switchyard.engines", engines),
        ];
        if let Some(ttft_ms) = self.ttft_ms {
            let rounded = (ttft_ms * 1e3).round() / 1e3;
            attributes.push(KeyValue::new("switchyard.ttft_ms", rounded));
        }
        if let Some(error_type) = self.error_type {
            attributes.push(KeyValue::new("error.type", error_type.to_owned()));
        }
        attributes
    }
}
