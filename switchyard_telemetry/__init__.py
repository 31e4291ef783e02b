"""Observability shared by the router and the engines: one OpenTelemetry SDK set-up
(`tracer_from_env`), the JSONL span file as an SDK exporter, W3C trace context in gRPC metadata,
and the span attribute names (OpenTelemetry GenAI conventions plus `switchyard.*`)."""
