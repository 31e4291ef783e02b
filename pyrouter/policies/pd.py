"""pd: cache-aware prefill/decode disaggregation.

The decode engine reserves KV for the prompt (all but its last token, which it prefills itself
so it can sample); the prefill engine computes the uncached part and pushes it across. Two
shortcuts keep it cheap: no `remote_send` when the decode engine already holds the prefix, and
no prefill engine at all when most of the prompt is cached there (`local_prefill_ratio`).
"""
from __future__ import annotations

from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import GenerationStream
from pyrouter.errors import NoCapacity, TransferFailed
from pyrouter.policy_registry import Param, policy
from pyrouter.request import RouterRequest


@policy("pd", roles=("prefill", "decode"), params={"local_prefill_ratio": Param(0.8, ge=0, le=1)})
async def route(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    decode = cluster.best("decode", req)
    end = req.prompt_len - 1
    if end <= 0:  # a one-token prompt has nothing to disaggregate
        req.note_route("pd", prefill="-", decode=decode.id, matched=0, decode_start=0)
        return decode.start_generate(req, begin=0)
    kv = await decode.prep_recv(req, end=end)
    if kv.matched >= kv.end:
        req.note_route("pd", prefill="-", decode=decode.id, matched=kv.matched,
                       decode_start=kv.end, skipped="remote_send")
        return decode.start_generate(req, begin=kv.end)
    if kv.matched >= float(cluster.params["local_prefill_ratio"]) * kv.end:
        # Mostly cached on the decode engine: prefilling the rest there beats a transfer.
        req.note_route("pd", prefill="-", decode=decode.id, matched=kv.matched,
                       decode_start=kv.matched, skipped="prefill")
        return decode.start_generate(req, begin=kv.matched)
    try:
        prefill = cluster.best("prefill", req, exclude=(decode,))
    except NoCapacity:  # no second engine: say so in the route header rather than fail
        req.note_route("pd", prefill="-", decode=decode.id, matched=kv.matched,
                       decode_start=kv.matched, fallback="no_prefill_engine")
        return decode.start_generate(req, begin=kv.matched)
    try:
        await prefill.remote_send(req, kv, begin=kv.matched, end=kv.end)
    except TransferFailed:  # DESIGN: a failed transfer falls back to local prefill
        req.note_route("pd", prefill=prefill.id, decode=decode.id, matched=kv.matched,
                       decode_start=kv.matched, fallback="transfer_failed")
        return decode.start_generate(req, begin=kv.matched)
    req.note_route("pd", prefill=prefill.id, decode=decode.id, matched=kv.matched,
                   decode_start=kv.end)
    return decode.start_generate(req, begin=kv.end)
