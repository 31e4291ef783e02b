"""balanced_pd: the prefill engine computes tokens[:decode_start], the decode engine the rest.

`decode_start` comes from the `ratio` parameter (share of the prompt the prefill engine takes)
or, when `ratio` is None, from live load: it evens out the prefill engine's queued tokens and the
decode engine's unfinished tokens, so a busy decode engine prefills less.
"""
from __future__ import annotations

from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import EngineHandle
from pyrouter.errors import BadRequest, NoCapacity
from pyrouter.request import RouterRequest
from pyrouter.runtime.policy_registry import Param, policy
from router_core import Pd


def _decode_start(req: RouterRequest, cluster: ClusterView, prefill: EngineHandle,
                  decode: EngineHandle) -> int:
    n = req.prompt_len - 1  # the decode engine always prefills the last token itself
    ratio = cluster.params.get("ratio")
    if ratio is not None:
        if not isinstance(ratio, int | float) or not 0.0 <= ratio <= 1.0:
            raise BadRequest("balanced_pd ratio must be a number in [0, 1]", param="ratio")
        start = int(n * ratio)
    else:
        p_load = cluster.unfinished_tokens(prefill)
        d_load = cluster.unfinished_tokens(decode)
        start = (n + d_load - p_load) // 2  # p_load + start == d_load + (n - start)
    start = max(0, min(n, start))
    page = int(cluster.params["align"])
    return start if start == n or page <= 1 else start - start % page


@policy("balanced_pd", roles=("prefill", "decode"),
        params={"ratio": Param(None, kind=float, ge=0, le=1, nullable=True),
                "align": Param(16, ge=1)})
async def route(req: RouterRequest, cluster: ClusterView) -> Pd:
    decode = cluster.best("decode", req)
    try:
        prefill = cluster.best("prefill", req, exclude=(decode,))
    except NoCapacity:  # no second engine: run locally and say so in the route header
        req.note_route("balanced_pd", fallback="no_prefill_engine")
        return Pd(None, decode, end=0)
    req.note_route("balanced_pd")
    decode_start = _decode_start(req, cluster, prefill, decode)
    return Pd(prefill, decode, end=decode_start)
