"""long_prompts_pd: disaggregate only prompts long enough to pay for the KV transfer.

Short prompts run whole on the decode engine (route `dp engine=...`); longer ones are prefilled
on the prefill engine and pushed to the decode engine (route `pd ...`). Mounted into the router
with --policy-dir (deploy/compose.yaml, and the Kubernetes ConfigMap built from this directory);
edit it and the router reloads it.
"""
from __future__ import annotations

from pyrouter import policy


@policy("long_prompts_pd", roles=("prefill", "decode"), params={"min_pd_tokens": 64})
async def route(req, cluster):
    decode = cluster.best("decode", req)
    if req.prompt_len < cluster.params["min_pd_tokens"]:
        req.note_route("dp", engine=decode.id, via="long_prompts_pd")
        return decode.start_generate(req, begin=0)
    prefill = cluster.best("prefill", req, exclude=(decode,))
    kv = await decode.prep_recv(req, end=req.prompt_len - 1)
    if kv.matched < kv.end:
        await prefill.remote_send(req, kv, begin=kv.matched, end=kv.end)
    req.note_route("pd", prefill=prefill.id, decode=decode.id, matched=kv.matched,
                   decode_start=kv.end, via="long_prompts_pd")
    return decode.start_generate(req, begin=kv.end)
