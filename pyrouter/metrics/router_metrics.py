"""Prometheus metrics of the router, in vLLM's naming under `switchyard:` (own registry, so tests
can build several routers). docs/observability.md lists every name; the engines export theirs on
their own port (engine/server/metrics.py).

Request-level metrics are labelled `pattern` (what ran), `engine` and `role`: the engine that
produced the first token for TTFT, the segment's engine for inter-token latency, the last
segment's engine for TPOT and end-to-end latency. They are observed once, when a request ends,
from the timestamps its timeline collected (pyrouter/request_timeline.py).
"""
from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from pyrouter.admission import AdmissionMetrics
from pyrouter.metrics.batched_histogram import BatchedHistogram

# vLLM's buckets for the same quantities (seconds).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0)
TOKEN_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                         0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
               30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0)
REQUEST_LABELS = ("pattern", "engine", "role")
# actual / predicted: 1 is exact; symmetric in log space around it.
PREDICTION_RATIO_BUCKETS = (0.25, 0.4, 0.5, 0.67, 0.8, 0.9, 1.0, 1.11, 1.25, 1.5, 2.0, 2.5, 4.0)


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram("switchyard:time_to_first_token_seconds",
                              "Time to first token, as the client saw it", REQUEST_LABELS,
                              buckets=TTFT_BUCKETS, registry=r)
        self.tpot = Histogram("switchyard:time_per_output_token_seconds",
                              "Mean time per output token after the first, per request",
                              REQUEST_LABELS, buckets=TOKEN_LATENCY_BUCKETS, registry=r)
        self.itl = BatchedHistogram("switchyard:inter_token_latency_seconds",
                                    "Time between consecutive output tokens", REQUEST_LABELS,
                                    TOKEN_LATENCY_BUCKETS)
        r.register(self.itl)
        self.e2e = Histogram("switchyard:e2e_request_latency_seconds",
                             "Request latency from arrival to the last byte", REQUEST_LABELS,
                             buckets=E2E_BUCKETS, registry=r)
        self.requests = Counter("switchyard:requests", "Finished generation requests",
                                ["policy", "pattern", "status"], registry=r)
        self.model_requests = Counter("switchyard:model_requests", "Finished generation "
                                      "requests per served model", ["model", "status"],
                                      registry=r)
        self.errors = Counter("switchyard:request_errors", "Failed requests by error type "
                              "(the OpenAI error body's code)", ["type"], registry=r)
        self.prompt_tokens = Counter("switchyard:prompt_tokens", "Prompt tokens of finished "
                                     "requests", ["pattern"], registry=r)
        self.generation_tokens = Counter("switchyard:generation_tokens", "Tokens sent to "
                                         "clients", ["pattern"], registry=r)
        self.pattern_selections = Counter("switchyard:pattern_selections",
                                          "Pattern the policy chose for an admitted request",
                                          ["policy", "pattern"], registry=r)
        self.policy_switches = Counter("switchyard:policy_switches",
                                       "Policy decisions that change how later requests run "
                                       "(adaptive pattern switches, slo_mux role switches)",
                                       ["kind", "switch", "reason"], registry=r)
        self.prediction_error = Histogram(
            "switchyard:prediction_error_ratio", "What happened / what the policy predicted, "
            "per finished request (kind = ttft | tpot; the latency model's closed loop)",
            ["kind", "pattern"], buckets=PREDICTION_RATIO_BUCKETS, registry=r)
        self.policy_errors = Counter("switchyard:policy_errors", "Requests failed by a policy "
                                     "bug", ["policy"], registry=r)
        # Set when /metrics is scraped (from RouterState), not twice per request.
        self.in_flight = Gauge("switchyard:router_requests_in_flight", "Requests in flight in "
                               "the router", registry=r)
        self.engine_healthy = Gauge("switchyard:engine_healthy", "1 = the engine takes work",
                                    ["engine", "role", "address"], registry=r)
        self.admission = AdmissionMetrics(r)  # the admission queue (pyrouter/admission.py)
        # Labelled children by label values: labels() validates and locks on every call.
        self._children: dict[tuple[object, ...], Any] = {}

    def child(self, metric: Any, *values: str) -> Any:
        key = (metric, *values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def count_event(self, kind: str, detail: str) -> None:
        """A policy event: `detail` is "<from>-><to> (<reason>)" (pyrouter/planning/)."""
        switch, _, reason = detail.partition(" (")
        self.child(self.policy_switches, kind, switch, reason.rstrip(")")).inc()

    def observe_prediction_error(self, kind: str, pattern: str, ratio: float) -> None:
        self.child(self.prediction_error, kind, pattern).observe(ratio)

    def count_selection(self, policy: str, pattern: str) -> None:
        self.child(self.pattern_selections, policy, pattern).inc()

    def count_error(self, error_type: str) -> None:
        self.child(self.errors, error_type).inc()
