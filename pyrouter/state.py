"""Everything one router instance holds."""
from __future__ import annotations

import atexit
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyrouter.admission import AdmissionConfig
from pyrouter.engines.membership import EngineMembership
from pyrouter.metrics.router_metrics import RouterMetrics
from pyrouter.model_groups import ModelGroup, ModelSpec, group_for
from pyrouter.replicas.peers import RouterPeers
from pyrouter.runtime.dispatch import Dispatcher, PolicySlot
from pyrouter.runtime.policy_dir import PolicyDir
from pyrouter.security.engine_allow import EngineAllowList
from pyrouter.security.keys import KeyRing
from pyrouter.security.rate_limit import RateRules
from pyrouter.session_affinity import SessionAffinityConfig
from router_core import DetokenizerVocab, RouterTracer, SamplingRefused, check_sampling
from switchyard_tokenizer.tokenizer import EngineTokenizer

if TYPE_CHECKING:
    from pyrouter.replicas.admin_propagation import AdminPropagation
    from pyrouter.runtime.records import RequestRecorder


@dataclass(slots=True)
class RouterConfig:
    served_model: str
    max_context: int = 8192
    max_inflight: int = 4096
    keys: KeyRing = field(default_factory=KeyRing)
    # Sampling defaults for requests that omit them (vLLM likewise applies a model's
    # generation defaults); OpenAI's own defaults are 1.0 / 1.0.
    default_temperature: float = 1.0
    default_top_p: float = 1.0
    # Bounded work per client (docs/reliability.md): body size, the time a body may take to
    # arrive (408), the time a connection may sit without a complete request (headers not
    # finished, or idle between requests; then it is closed), per-caller limits (429).
    max_body_bytes: int = 4 << 20
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 30.0
    rate: RateRules = field(default_factory=RateRules)
    # SIGTERM: /ready turns 503 and new requests get 503 at once; requests in flight get this
    # long to finish before their streams are ended with an error event.
    drain_s: float = 30.0
    engine_allow: EngineAllowList = field(default_factory=lambda: EngineAllowList([]))

    def __post_init__(self) -> None:
        if self.max_context < 2 or self.max_inflight < 1:
            raise ValueError("max_context must be >= 2 and max_inflight >= 1")
        if self.max_body_bytes < 1024 or not (self.body_timeout_s > 0 and self.idle_timeout_s > 0
                                              and self.drain_s >= 0):
            raise ValueError("max_body_bytes must be >= 1024, the timeouts > 0, drain_s >= 0")
        # The defaults a request without its own values takes meet the rules the request would.
        try:
            check_sampling(self.default_temperature, self.default_top_p, top_k=0, max_tokens=1,
                           min_tokens=0)
        except SamplingRefused as refused:
            raise ValueError(f"default {refused}") from None


@dataclass(slots=True)
class RouterState:
    config: RouterConfig
    tokenizer: EngineTokenizer
    engines: EngineMembership
    slot: PolicySlot
    dispatcher: Dispatcher
    detok_vocab: DetokenizerVocab  # built once from the tokenizer; every response's detokenizer
    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    # --policy-dir: the only place PUT /admin/policy may load a file from (None: nowhere).
    policy_dir: PolicyDir | None = None
    # The admission queue's settings in force (the front applies them; /admin/admission).
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    draining: bool = False  # SIGTERM received: nothing new is admitted
    # Session affinity's settings in force (the front applies them; /admin/session-affinity).
    sessions: SessionAffinityConfig = field(default_factory=SessionAffinityConfig)
    # router_core's tracer when tracing is configured (router_core/src/otel/router_tracer.rs):
    # the front's spans, the policies' decisions among them, go through it.
    tracer: RouterTracer | None = field(default_factory=lambda: router_tracer())
    # The finished requests' records, into the metrics and outcomes.
    recorder: RequestRecorder | None = None
    # Every served model's group by name, the first being the one above (tokenizer, engines,
    # slot, dispatcher); empty: that one alone (pyrouter/model_groups.py).
    models: dict[str, ModelGroup] = field(default_factory=dict)
    # The other router replicas named by --peer / --peers-dns (pyrouter/replicas/peers.py).
    peers: RouterPeers = field(default_factory=RouterPeers)
    # Admin changes shared with those peers (pyrouter/replicas/admin_propagation.py); None: alone.
    replication: AdminPropagation | None = None

    def group(self, model: str | None = None) -> ModelGroup:
        """The served model's group (None: the first); 404 `model_not_found` for others."""
        default = next(iter(self.models.values()), None) or ModelGroup(
            ModelSpec(self.config.served_model, None), self.engines, self.slot, self.dispatcher)
        return group_for(self.models or {default.name: default}, model, default)


def router_tracer() -> RouterTracer | None:
    """The process's router tracer (made once, from the environment), flushed at exit."""
    tracer = RouterTracer.from_env()
    if tracer is not None:
        atexit.register(tracer.shutdown)
    return tracer

