"""Everything one router instance holds; the aiohttp app carries it under STATE."""
from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from engine.tokenizer import EngineTokenizer
from pyrouter.dispatch import Dispatcher, PolicySlot
from pyrouter.engines.membership import EngineSet
from pyrouter.metrics import RouterMetrics


@dataclass(slots=True)
class RouterConfig:
    served_model: str
    max_context: int = 8192
    max_inflight: int = 4096
    api_keys: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.max_context < 2 or self.max_inflight < 1:
            raise ValueError("max_context must be >= 2 and max_inflight >= 1")


@dataclass(slots=True)
class RouterState:
    config: RouterConfig
    tokenizer: EngineTokenizer
    engines: EngineSet
    slot: PolicySlot
    dispatcher: Dispatcher
    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    inflight: int = 0


STATE = web.AppKey("switchyard_state", RouterState)
