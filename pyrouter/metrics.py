"""Prometheus metrics of the router (own registry, so tests can build several routers)."""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                    60, 120)


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("switchyard_router_requests", "Finished HTTP generation requests",
                                ["policy", "status"], registry=r)
        self.routes = Counter("switchyard_router_route", "Pattern that actually ran",
                              ["pattern"], registry=r)
        self.ttft = Histogram("switchyard_router_ttft_seconds", "Time to first token",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.latency = Histogram("switchyard_router_request_seconds", "Request latency",
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.completion_tokens = Counter("switchyard_router_completion_tokens",
                                         "Generated tokens", registry=r)
        self.prompt_tokens = Counter("switchyard_router_prompt_tokens", "Prompt tokens",
                                     registry=r)
        # Set when /metrics is scraped (from RouterState.inflight), not twice per request.
        self.inflight = Gauge("switchyard_router_inflight", "Requests in flight", registry=r)
        self.policy_errors = Counter("switchyard_router_policy_errors",
                                     "Requests failed by a policy bug", ["policy"], registry=r)
        self.policy_events = Counter("switchyard_router_policy_events",
                                     "Policy decisions worth counting (pattern and role switches)",
                                     ["kind", "detail"], registry=r)
        self.engine_healthy = Gauge("switchyard_router_engine_healthy", "1 = in rotation",
                                    ["engine", "address"], registry=r)
        self.errors = Counter("switchyard_router_errors", "Error responses by status and code",
                              ["status", "code"], registry=r)
        # Labelled children by label values: labels() validates and locks on every call.
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: Counter, *values: str) -> Any:
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def count_route(self, pattern: str) -> None:
        self._child(self.routes, pattern).inc()

    def count_event(self, kind: str, detail: str) -> None:
        self._child(self.policy_events, kind, detail).inc()

    def count_request(self, policy: str, status: str) -> None:
        self._child(self.requests, policy, status).inc()

    def count_error(self, status: int, code: str) -> None:
        self._child(self.errors, str(status), code).inc()
