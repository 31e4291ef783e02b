"""round_robin: data parallel, each new request to the next healthy engine in turn (a request
with a session: its session's engine, cluster.session)."""
from __future__ import annotations

from pyrouter.cluster import ClusterView, session_note
from pyrouter.engines.handle import GenerationStream
from pyrouter.policy_registry import policy
from pyrouter.request import RouterRequest


@policy("round_robin")
async def route(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    engines, pin = cluster.dp_candidates(req)
    turn = cluster.state.get("turn", 0)
    cluster.state["turn"] = turn + 1
    engine = engines[turn % len(engines)]
    req.note_route("dp", engine=engine.id, via="round_robin", **session_note(pin))
    return engine.start_generate(req, begin=0)
