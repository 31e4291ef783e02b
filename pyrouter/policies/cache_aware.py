"""cache_aware: data parallel to the engine whose cached prefix saves most, balanced against load.

router_core's scorer weighs uncached prefill tokens, queued prefill, decode load and KV pressure;
the weights are this policy's parameters (passed per call), so the whole decision is one Rust
call. A request with a session is scored on its session's engine alone (cluster.session).
"""
from __future__ import annotations

from pyrouter.cluster import ClusterView, session_note
from pyrouter.engines.handle import GenerationStream
from pyrouter.policy_registry import Param, policy
from pyrouter.request import RouterRequest

WEIGHTS = ("prefill_weight", "queue_weight", "decode_weight", "kv_weight")


@policy("cache_aware", params={k: Param(1.0, ge=0) for k in WEIGHTS})
async def route(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    pin = cluster.session(req, cluster.engines("any"))  # a session's engine: the only candidate
    others = () if pin is None else tuple(e for e in cluster.engines("any") if e is not pin.engine)
    engine = cluster.best("any", req, exclude=others)
    req.note_route("cache_aware", engine=engine.id, matched=cluster.matched(engine, req),
                   **session_note(pin))
    return engine.start_generate(req, begin=0)
