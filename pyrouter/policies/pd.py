"""pd: cache-aware prefill/decode disaggregation.

The decode engine reserves KV for the prompt (all but its last token, which it prefills itself
so it can sample); the prefill engine computes the uncached part and pushes it across. Two
shortcuts keep it cheap: no send when the decode engine already holds the prefix, and no prefill
engine at all when most of the prompt is cached there (`local_prefill_ratio`). router_core
carries the placement out (the shortcuts, and the decode engine's own prefill when a transfer
fails) and says which ran in the route header.
"""
from __future__ import annotations

from pyrouter.cluster import ClusterView
from pyrouter.errors import NoCapacity
from pyrouter.request import RouterRequest
from pyrouter.runtime.policy_registry import Param, policy
from router_core import Pd


@policy("pd", roles=("prefill", "decode"), params={"local_prefill_ratio": Param(0.8, ge=0, le=1)})
async def route(req: RouterRequest, cluster: ClusterView) -> Pd:
    decode = cluster.best("decode", req)
    try:
        prefill = cluster.best("prefill", req, exclude=(decode,))
        req.note_route("pd")
    except NoCapacity:  # no second engine: say so in the route header rather than fail
        prefill = None
        req.note_route("pd", fallback="no_prefill_engine")
    return Pd(prefill, decode, local_prefill_ratio=float(cluster.params["local_prefill_ratio"]))
