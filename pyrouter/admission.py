"""The router's admission gate: its settings (flags, `GET`/`PUT /admin/admission`) and its
metrics.

A request with a TTFT objective — its `slo.ttft_ms`, else the deployment's `--slo-ttft-ms` — is
admitted by its predicted outcome (router_core/src/admission_outlook.rs, on unless `predicted`
is off): let through when an engine would give it its first token in time, queued (earliest
deadline first within its priority) while it could once the work ahead drains, and refused at
once, 503 `slo_unattainable` with Retry-After, when it cannot; `margin` is how far past its
budget a prediction may go and still count as in time. Requests without an objective are never
refused that way.

While every engine is saturated, a request waits in the Rust front's queue (router_core/src/
front/admission.rs) — by `priority`, then in weighted fair shares per API key — and is shed with
429 `queue_full` when the queue is full, or 503 `queue_timeout` once its deadline passes (its
`slo.ttft_ms`, at most the queue timeout), both with `Retry-After`. The engines are saturated
when the router's unfinished requests reach `max_inflight_per_engine` times the open engines —
healthy ones with fewer than `max_queued_prefill_tokens` prefill tokens queued (their latest
Stats plus what the router sent since) — or when no engine is open.
With both limits 0 (the default) no engine is ever saturated and nothing queues.
docs/policies.md says more; docs/observability.md names the metrics.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

import router_core
from pyrouter.errors import BadRequest
from router_core import InProcessFront, RouterFront

# The flags `serve` passes on to its router.
ADMISSION_FLAGS = ("admit_max_inflight_per_engine", "admit_max_queued_prefill_tokens",
                   "admit_queue_size", "admit_queue_timeout_s", "admit_weight", "admit_predicted",
                   "admit_margin", "slo_ttft_ms", "slo_tpot_ms")
DEFAULT_MARGIN = router_core.ADMISSION_DEFAULT_MARGIN
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0,
                80.0)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(f"'{name}' must be an integer >= 0, got {value!r}", param=name)
    return value


def _positive(name: str, value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value <= 0):
        raise BadRequest(f"'{name}' must be a positive number, got {value!r}", param=name)
    return float(value)


def _switch(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("on", "off"):
        return value == "on"
    raise BadRequest(f"'{name}' must be true/false or \"on\"/\"off\", got {value!r}", param=name)


def _margin(value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not -1 < value <= 10):
        raise BadRequest(f"'margin' must be a number in (-1, 10], got {value!r}", param="margin")
    return float(value)


def _objective(name: str, value: Any) -> float | None:
    return None if value is None else _positive(name, value)


@dataclass(slots=True)
class AdmissionConfig:
    max_inflight_per_engine: int = 0
    max_queued_prefill_tokens: int = 0
    queue_size: int = 1024
    queue_timeout_s: float = 30.0
    # Fair-share weight per API key; keys not named weigh 1.
    weights: dict[str, float] = field(default_factory=dict)
    # Admission by predicted outcome, for requests with a TTFT objective.
    predicted: bool = True
    margin: float = DEFAULT_MARGIN
    # The deployment's SLO, for requests that bring none (ms; None: no objective).
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None

    def __post_init__(self) -> None:
        self.predicted = _switch("predicted", self.predicted)
        self.margin = _margin(self.margin)
        self.slo_ttft_ms = _objective("slo_ttft_ms", self.slo_ttft_ms)
        self.slo_tpot_ms = _objective("slo_tpot_ms", self.slo_tpot_ms)
        _count("max_inflight_per_engine", self.max_inflight_per_engine)
        _count("max_queued_prefill_tokens", self.max_queued_prefill_tokens)
        if _count("queue_size", self.queue_size) == 0:
            raise BadRequest("'queue_size' must be at least 1", param="queue_size")
        self.queue_timeout_s = _positive("queue_timeout_s", self.queue_timeout_s)
        if not isinstance(self.weights, dict) or not all(isinstance(k, str) and k
                                                         for k in self.weights):
            raise BadRequest("'weights' must map API keys to numbers", param="weights")
        self.weights = {k: _positive("weights", w) for k, w in self.weights.items()}

    def body(self) -> dict[str, Any]:
        """What the admin route reports: the weights' keys are secrets, so only how many."""
        return {"max_inflight_per_engine": self.max_inflight_per_engine,
                "max_queued_prefill_tokens": self.max_queued_prefill_tokens,
                "queue_size": self.queue_size, "queue_timeout_s": self.queue_timeout_s,
                "weighted_keys": len(self.weights),
                "enabled": bool(self.max_inflight_per_engine or self.max_queued_prefill_tokens),
                "predicted": self.predicted, "margin": self.margin,
                "slo_ttft_ms": self.slo_ttft_ms, "slo_tpot_ms": self.slo_tpot_ms}

    def apply(self, front: RouterFront | InProcessFront | None) -> None:
        """The front's queue takes these for requests from now on."""
        if front is not None:
            router_core.set_admission(
                front, max_inflight_per_engine=self.max_inflight_per_engine,
                max_queued_prefill_tokens=self.max_queued_prefill_tokens,
                max_queue_len=self.queue_size, queue_timeout_s=self.queue_timeout_s,
                weights=dict(self.weights), predicted=self.predicted, margin=self.margin,
                slo_ttft_ms=self.slo_ttft_ms, slo_tpot_ms=self.slo_tpot_ms)


def admission_config(args: argparse.Namespace) -> AdmissionConfig:
    """From the flags (BadRequest for bad values)."""
    weights: dict[str, float] = {}
    for item in getattr(args, "admit_weight", None) or []:
        key, sep, weight = str(item).rpartition("=")
        try:
            weights[key] = float(weight)
        except ValueError:
            key = ""
        if not sep or not key:
            raise BadRequest(f"--admit-weight takes KEY=WEIGHT, got {item!r}", param="weights")
    margin = getattr(args, "admit_margin", None)
    return AdmissionConfig(
        int(getattr(args, "admit_max_inflight_per_engine", 0) or 0),
        int(getattr(args, "admit_max_queued_prefill_tokens", 0) or 0),
        int(getattr(args, "admit_queue_size", 1024) or 1024),
        float(getattr(args, "admit_queue_timeout_s", 30.0) or 30.0), weights,
        (getattr(args, "admit_predicted", None) or "on") == "on",
        DEFAULT_MARGIN if margin is None else margin,
        getattr(args, "slo_ttft_ms", None), getattr(args, "slo_tpot_ms", None))


class AdmissionMetrics:
    """Queue length and time at the gate per priority, read from the front at each scrape."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.queue_length = Gauge(
            "switchyard:admission_queue_length", "Requests waiting in the admission queue",
            ["priority"], registry=registry)
        self.wait = Histogram(
            "switchyard:admission_wait_seconds", "Time at the admission gate, by priority and "
            "outcome (admitted, queue_full, timeout, slo_unattainable, gone)",
            ["priority", "outcome"],
            buckets=WAIT_BUCKETS, registry=registry)
        self.shed = Counter(
            "switchyard:admission_shed", "Requests the admission gate refused (queue_full: "
            "429; timeout, slo_unattainable: 503)", ["priority", "reason"], registry=registry)

    def record(self, front: RouterFront | None) -> None:
        if front is None:
            return
        self.queue_length.clear()  # priorities with nobody waiting read 0 by absence
        for queued in router_core.admission_queue_lengths(front):
            self.queue_length.labels(str(queued.priority)).set(queued.length)
        for wait in router_core.drain_admission_waits(front):
            priority = str(wait.priority)
            self.wait.labels(priority, wait.outcome).observe(wait.wait_s)
            if wait.outcome in ("queue_full", "timeout", "slo_unattainable"):
                self.shed.labels(priority, wait.outcome).inc()
