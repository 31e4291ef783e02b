"""The router's Prometheus metrics: `router_metrics.py` (every `switchyard:` name the router
exports; docs/observability.md lists them) and `batched_histogram.py` (n equal observations in
one call, for inter-token latency)."""
