"""cache_aware: data parallel to the engine whose cached prefix saves most, balanced against load.

router_core's scorer weighs uncached prefill tokens, queued prefill, decode load and KV pressure;
the weights are this policy's parameters (passed per call), so the whole decision is one Rust
call.
"""
from __future__ import annotations

from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import GenerationStream
from pyrouter.policy_registry import Param, policy
from pyrouter.request import RouterRequest

WEIGHTS = ("prefill_weight", "queue_weight", "decode_weight", "kv_weight")


@policy("cache_aware", params={k: Param(1.0, ge=0) for k in WEIGHTS})
async def route(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    engine = cluster.best("any", req)
    req.note_route("cache_aware", engine=engine.id, matched=cluster.matched(engine, req))
    return engine.start_generate(req, begin=0)
