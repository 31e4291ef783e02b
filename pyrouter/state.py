"""Everything one router instance holds; the aiohttp app carries it under STATE."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from engine.tokenizer import EngineTokenizer
from pyrouter.dispatch import Dispatcher, PolicySlot, RequestRun
from pyrouter.engines.membership import EngineSet
from pyrouter.metrics import RouterMetrics
from pyrouter.scope import RouterCounters
from router_core import DetokenizerVocab
from switchyard_telemetry.provider import tracer_from_env

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


@dataclass(slots=True)
class RouterConfig:
    served_model: str
    max_context: int = 8192
    max_inflight: int = 4096
    api_keys: frozenset[str] = frozenset()
    # Sampling defaults for requests that omit them (vLLM likewise applies a model's
    # generation defaults); OpenAI's own defaults are 1.0 / 1.0.
    default_temperature: float = 1.0
    default_top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.max_context < 2 or self.max_inflight < 1:
            raise ValueError("max_context must be >= 2 and max_inflight >= 1")
        if not 0.0 <= self.default_temperature <= 2.0 or not 0.0 < self.default_top_p <= 1.0:
            raise ValueError("default temperature must be in [0, 2] and top_p in (0, 1]")


@dataclass(slots=True)
class RouterState:
    config: RouterConfig
    tokenizer: EngineTokenizer
    engines: EngineSet
    slot: PolicySlot
    dispatcher: Dispatcher
    detok_vocab: DetokenizerVocab  # built once from the tokenizer; every response's detokenizer
    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    counters: RouterCounters = field(default_factory=RouterCounters)
    # Admitted requests still streaming, by request id (live migration finds them here).
    runs: dict[str, RequestRun] = field(default_factory=dict)
    # The OpenTelemetry tracer when tracing is configured (switchyard_telemetry/provider.py).
    tracer: Tracer | None = field(default_factory=lambda: router_tracer())


def router_tracer() -> Tracer | None:
    return tracer_from_env("switchyard-router", {"service.instance.id": "router"})


STATE = web.AppKey("switchyard_state", RouterState)
