//! The router's one OpenTelemetry SDK set-up, from the environment the Python processes read
//! (switchyard_telemetry/provider.py): tracing is on when an exporter is configured —
//! SWITCHYARD_TRACE_FILE (the JSONL span file), OTLP (OTEL_EXPORTER_OTLP_ENDPOINT /
//! OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or `otlp` in OTEL_TRACES_EXPORTER), `console` in
//! OTEL_TRACES_EXPORTER — and OTEL_SDK_DISABLED is not `true`. The SDK reads the rest of the
//! standard variables itself: OTEL_TRACES_SAMPLER / _ARG (default `parentbased_traceidratio` 0.1),
//! OTEL_BSP_* (the batch processor, on its own thread), OTEL_SERVICE_NAME,
//! OTEL_RESOURCE_ATTRIBUTES.
//!
//! Spans of a request are started with an explicit parent and times, never through an ambient
//! "current span": the request task, the verbs and the Python decision each say where their
//! span hangs.

use super::jsonl::JsonlExporter;
use opentelemetry::trace::{SpanBuilder, SpanContext, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, Span};
use opentelemetry_sdk::Resource;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

/// The sampler when OTEL_TRACES_SAMPLER does not name one: one request in ten, and a client's
/// own decision in its `traceparent` kept (`parentbased_traceidratio` 0.1). Every request
/// (`parentbased_always_on`, the OpenTelemetry default) cost the router 12-43% more CPU per
/// request on its fast path, past issue 22's 10% bound; docs/observability.md ("Cost").
const DEFAULT_SAMPLE_RATIO: f64 = 0.1;

fn default_sampler() -> Sampler {
    Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(DEFAULT_SAMPLE_RATIO)))
}

pub const ROUTER_SERVICE: &str = "switchyard-router";
pub const ROUTER_INSTANCE: &str = "router";

/// Which exporters the environment asks for (none: tracing off).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exporters {
    pub trace_file: Option<String>,
    pub otlp: bool,
    pub console: bool,
}

impl Exporters {
    /// From a variable lookup (`std::env::var` in the router; a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let set = |name: &str| get(name).filter(|v| !v.is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        let names: Vec<String> = set("OTEL_TRACES_EXPORTER")
            .map(|v| v.split(',').map(|n| n.trim().to_owned()).collect())
            .unwrap_or_default();
        let named = |n: &str| names.iter().any(|x| x == n);
        let exporters = Exporters {
            trace_file: set("SWITCHYARD_TRACE_FILE"),
            otlp: !named("none")
                && (named("otlp")
                    || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                    || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()),
            console: named("console"),
        };
        (exporters != Exporters::default()).then_some(exporters)
    }
}

/// The router's tracer: every span of the router's requests (the request task makes them all,
/// the policies' decisions and their verbs included).
pub struct RouterTracer {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

fn resource() -> Resource {
    let mut builder =
        Resource::builder().with_attribute(KeyValue::new("service.instance.id", ROUTER_INSTANCE));
    if std::env::var("OTEL_SERVICE_NAME").map_or(true, |v| v.is_empty()) {
        builder = builder.with_service_name(ROUTER_SERVICE);
    }
    builder.build()
}

impl RouterTracer {
    /// The tracer `exporters` asks for. OTLP's gRPC channel is made on `runtime` (its
    /// connection runs there; the batch processor's thread only waits on it).
    pub fn new(
        exporters: &Exporters,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> Result<Self, String> {
        let mut builder = SdkTracerProvider::builder().with_resource(resource());
        if std::env::var("OTEL_TRACES_SAMPLER").map_or(true, |v| v.is_empty()) {
            builder = builder.with_sampler(default_sampler());
        }
        if let Some(path) = &exporters.trace_file {
            let file = JsonlExporter::to_file(path)
                .map_err(|err| format!("SWITCHYARD_TRACE_FILE {path}: {err}"))?;
            builder = builder.with_batch_exporter(file);
        }
        if exporters.otlp {
            let _entered = runtime.map(|r| r.enter());
            let otlp = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .build()
                .map_err(|err| format!("OTLP exporter: {err}"))?;
            builder = builder.with_batch_exporter(otlp);
        }
        if exporters.console {
            builder = builder.with_batch_exporter(JsonlExporter::to_stdout());
        }
        let provider = builder.build();
        let tracer = provider.tracer("switchyard");
        Ok(RouterTracer { provider, tracer })
    }

    /// A span named `name` under `parent` (None: a new trace, as the sampler decides),
    /// started at `start`. Unsampled spans record nothing and are never exported.
    pub fn start(
        &self,
        name: impl Into<Cow<'static, str>>,
        parent: Option<&SpanContext>,
        start: SystemTime,
        attributes: Vec<KeyValue>,
    ) -> Span {
        let context = match parent {
            Some(parent) => Context::new().with_remote_span_context(parent.clone()),
            None => Context::new(),
        };
        let builder = SpanBuilder::from_name(name)
            .with_start_time(start)
            .with_attributes(attributes);
        self.tracer.build_with_context(builder, &context)
    }

    /// Sends every ended span to the exporters and waits for them.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }

    /// Flushes and stops the exporters (at exit); spans ended afterwards are dropped.
    pub fn shutdown(&self) {
        let _ = self.provider.shutdown();
    }
}

static ROUTER_TRACER: OnceLock<Option<Arc<RouterTracer>>> = OnceLock::new();

/// The process's router tracer, made from the environment on first use (None: tracing off, or
/// its exporter could not be made — said once on stderr).
pub fn router_tracer(runtime: &tokio::runtime::Handle) -> Option<&'static Arc<RouterTracer>> {
    ROUTER_TRACER
        .get_or_init(|| {
            let exporters = Exporters::from_lookup(|name| std::env::var(name).ok())?;
            RouterTracer::new(&exporters, Some(runtime))
                .map(Arc::new)
                .map_err(|err| eprintln!("switchyard: router tracing off: {err}"))
                .ok()
        })
        .as_ref()
}

/// The router tracer if one was made already (at exit: nothing to flush otherwise).
pub fn existing_router_tracer() -> Option<&'static Arc<RouterTracer>> {
    ROUTER_TRACER.get().and_then(Option::as_ref)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exporters(vars: &[(&str, &str)]) -> Option<Exporters> {
        Exporters::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn tracing_is_on_only_when_an_exporter_is_configured() {
        assert_eq!(exporters(&[]), None);
        assert_eq!(exporters(&[("SWITCHYARD_TRACE_FILE", "")]), None);
        let file = exporters(&[("SWITCHYARD_TRACE_FILE", "/tmp/s.jsonl")]).expect("on");
        assert_eq!(file.trace_file.as_deref(), Some("/tmp/s.jsonl"));
        assert!(!file.otlp && !file.console);
        let otlp = exporters(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")]);
        assert!(otlp.expect("on").otlp);
        assert!(
            exporters(&[("OTEL_TRACES_EXPORTER", "otlp")])
                .expect("on")
                .otlp
        );
        let both = exporters(&[("OTEL_TRACES_EXPORTER", "console, otlp")]).expect("on");
        assert!(both.console && both.otlp);
        assert_eq!(
            exporters(&[
                ("OTEL_TRACES_EXPORTER", "none"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4317")
            ]),
            None
        );
        assert_eq!(
            exporters(&[
                ("OTEL_SDK_DISABLED", "TRUE"),
                ("SWITCHYARD_TRACE_FILE", "/tmp/s.jsonl")
            ]),
            None
        );
    }
}
