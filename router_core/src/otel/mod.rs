//! The router's spans, made in Rust: the request task's `router.request`, `router.segment` and
//! `verb.*` spans (request_spans.rs), the SDK set-up and its exporters — the JSONL span file in
//! the engines' format and OTLP — (router_tracer.rs, jsonl.rs), and the W3C `traceparent` that
//! carries a span to the engines and across to the Python decision (traceparent.rs).

pub mod jsonl;
pub mod request_spans;
#[cfg(test)]
mod request_spans_tests;
pub mod router_tracer;
pub mod traceparent;

pub use request_spans::{verb_span, RequestSpans, RequestSummary, SpanGuard};
pub use router_tracer::{existing_router_tracer, router_tracer, Exporters, RouterTracer};
