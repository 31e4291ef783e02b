"""Observability of the Python processes (the engines) and what `switchyard trace` reads: one
OpenTelemetry SDK set-up (`tracer_from_env`), the JSONL span file as an SDK exporter and its
reader, W3C trace context in gRPC metadata, and the span attribute names (OpenTelemetry GenAI
conventions plus `switchyard.*`). The router makes its spans in Rust (router_core/src/otel)
from the same environment, in the same JSONL format."""
