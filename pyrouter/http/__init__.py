"""The router's own routes behind the Rust front (router_core/src/front/): /ready, /metrics,
/openapi.json and the admin API (ops.py), and the drain."""
