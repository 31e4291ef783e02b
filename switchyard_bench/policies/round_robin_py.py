"""round_robin_py: round_robin's picks written as a user's Python policy (no Rust built-in takes
a policy of this name, so every request is decided in Python): the router benchmark's
"switchyard-py" row and the tests that count what a Python policy costs a request."""
from __future__ import annotations

from pyrouter import Dp, policy
from pyrouter.cluster import ClusterView, session_note
from pyrouter.request import RouterRequest

NAME = "round_robin_py"


@policy(NAME)
async def route(req: RouterRequest, cluster: ClusterView) -> Dp:
    engines, pin = cluster.dp_candidates(req)
    turn = cluster.state.get("turn", 0)
    cluster.state["turn"] = turn + 1
    engine = engines[turn % len(engines)]
    req.note_route("dp", engine=engine.id, via="round_robin", **session_note(pin))
    return Dp(engine)
