"""least_load: data parallel to the engine with the fewest unfinished tokens (a request with a
session: its session's engine, cluster.session)."""
from __future__ import annotations

from pyrouter.cluster import ClusterView, session_note
from pyrouter.engines.handle import GenerationStream
from pyrouter.policy_registry import policy
from pyrouter.request import RouterRequest


@policy("least_load")
async def route(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    engines, pin = cluster.dp_candidates(req)
    # Unfinished tokens (engine Stats + router-side dispatches); in-flight count breaks ties so
    # a burst between two Stats polls still spreads out.
    engine = min(engines, key=lambda e: (cluster.unfinished_tokens(e),
                                         int(cluster.load(e).inflight), e.num))
    req.note_route("dp", engine=engine.id, via="least_load",
                   unfinished=cluster.unfinished_tokens(engine), **session_note(pin))
    return engine.start_generate(req, begin=0)
