"""The disaggregated prefill both SLO-aware policies run: the decode engine reserves K/V for all
but the last token, the prefill engine computes what the decode engine lacks and sends it.

Cache aware (no send when the decode engine already holds the prefix) and failure tolerant (a
failed transfer falls back to prefilling locally: docs/reliability.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from pyrouter.engines.handle import EngineHandle, SendResult
from pyrouter.errors import TransferFailed
from pyrouter.request import RouterRequest


@dataclass(frozen=True, slots=True)
class Disaggregated:
    begin: int                 # where the decode engine's start_generate begins
    matched: int               # tokens the decode engine already held
    sent_tokens: int           # tokens whose K/V crossed (0: nothing sent)
    send: SendResult | None    # the send's answer (None: no send, or it failed)
    failed: bool = False       # the transfer failed: the decode engine prefills from `matched`


async def disaggregate(req: RouterRequest, prefill: EngineHandle,
                       decode: EngineHandle) -> Disaggregated:
    end = len(req.tokens) - 1
    if end <= 0:
        return Disaggregated(0, 0, 0, None)
    kv = await decode.prep_recv(req, end=end)
    if kv.matched >= kv.end:
        return Disaggregated(kv.end, kv.matched, 0, None)
    try:
        send = await prefill.remote_send(req, kv, begin=kv.matched, end=kv.end)
    except TransferFailed:
        req.route.params["fallback"] = "transfer_failed"
        return Disaggregated(kv.matched, kv.matched, 0, None, failed=True)
    return Disaggregated(kv.end, kv.matched, kv.end - kv.matched, send)
