"""balanced_pd: the prefill engine computes tokens[:decode_start], the decode engine the rest.

`decode_start` comes from the `ratio` parameter (share of the prompt the prefill engine takes)
or, when `ratio` is None, from live load: it evens out the prefill engine's queued tokens and the
decode engine's unfinished tokens, so a busy decode engine prefills less.
"""
from __future__ import annotations

from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import EngineHandle, GenerationStream
from pyrouter.errors import BadRequest, NoCapacity, TransferFailed
from pyrouter.policy_registry import Param, policy
from pyrouter.request import RouterRequest


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
async def route(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    decode = cluster.best("decode", req)
    try:
        prefill = cluster.best("prefill", req, exclude=(decode,))
    except NoCapacity:  # no second engine: run locally and say so in the route header
        req.note_route("balanced_pd", prefill="-", decode=decode.id, matched=0, decode_start=0,
                       fallback="no_prefill_engine")
        return decode.start_generate(req, begin=0)
    decode_start = _decode_start(req, cluster, prefill, decode)
    if decode_start <= 0:
        req.note_route("balanced_pd", prefill="-", decode=decode.id, matched=0, decode_start=0)
        return decode.start_generate(req, begin=0)
    kv = await decode.prep_recv(req, end=decode_start)
    if kv.matched < kv.end:
        try:
            await prefill.remote_send(req, kv, begin=kv.matched, end=kv.end)
        except TransferFailed:  # fall back to prefilling everything on the decode engine
            req.note_route("balanced_pd", prefill=prefill.id, decode=decode.id,
                           matched=kv.matched, decode_start=kv.matched,
                           fallback="transfer_failed")
            return decode.start_generate(req, begin=kv.matched)
    req.note_route("balanced_pd", prefill=prefill.id, decode=decode.id, matched=kv.matched,
                   decode_start=kv.end)
    return decode.start_generate(req, begin=kv.end)
