"""adaptive: decides per request, from predicted outcomes, where it prefills and decodes.

For every placement the engines allow — data parallel on one engine, or disaggregated from a
prefill engine to a decode engine — router_core predicts this request's TTFT and TPOT and what
it costs the decodes already running (pyrouter/planning/placement.py), corrected by how wrong
such predictions have been (pyrouter/planning/prediction_feedback.py: the closed loop, fed when
each request ends). The policy takes the placement that keeps the most requests within their SLO;
when none lets this one meet its SLO, the one that harms the others least. So it is data
parallel (least predicted TTFT) while decodes have slack, disaggregates the requests whose
prefill would push a decode engine's TPOT over its SLO, and under overload keeps some engines
within SLO instead of letting every request miss.

Parameters are the SLO (a request's own `slo` wins), the KV watermark and `patterns` (which
placements may run: "dp,pd"). Every response says what ran and why:
`adaptive chose=pd prefill=e0 decode=e1 ttft_ms=812 tpot_ms=41 fits=1 harm=0`.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

from pyrouter.cluster import ClusterView
from pyrouter.degrade import degraded_note, serves
from pyrouter.engines.handle import EngineHandle, GenerationStream
from pyrouter.errors import NoCapacity
from pyrouter.planning.disaggregate import disaggregate
from pyrouter.planning.interference import PrefillShare
from pyrouter.planning.placement import (
    DP,
    PD,
    EngineState,
    Placement,
    Slo,
    TransferCost,
    candidates,
    choose,
    commit,
)
from pyrouter.policy_registry import Param, comma_names, policy
from pyrouter.request import RouterRequest

PARAMS = {"ttft_ms": Param(2000.0, gt=0), "tpot_ms": Param(200.0, gt=0),
          "kv_watermark": Param(0.9, gt=0, le=1),
          "patterns": Param("dp,pd", check=comma_names((DP, PD)))}


def _patterns(cluster: ClusterView) -> set[str]:
    """The placements allowed (the parameter's schema has checked the names)."""
    return {p.strip() for p in str(cluster.params["patterns"]).split(",") if p.strip()}


def _states(req: RouterRequest, cluster: ClusterView,
            engines: list[EngineHandle]) -> list[EngineState]:
    preds = cluster.predict(req)
    states = []
    for e in engines:
        load = cluster.load(e)
        states.append(EngineState(e.id, e.num, serves(e.role, "prefill"), serves(e.role, "decode"),
                                  int(load.running_decodes) + int(load.router_seqs), preds[e.id]))
    return states


def _slo(req: RouterRequest, cluster: ClusterView) -> Slo:
    slo = cluster.slo(req)
    return Slo(math.inf if slo.ttft_ms is None else slo.ttft_ms,
               math.inf if slo.tpot_ms is None else slo.tpot_ms)


@policy("adaptive", params=PARAMS)
async def route(req: RouterRequest, cluster: ClusterView) -> GenerationStream:
    engines = cluster.engines("any")
    if not engines:
        raise NoCapacity("no healthy engine", code="no_capacity")
    patterns = _patterns(cluster)
    state = cluster.state
    share: PrefillShare = state.setdefault("share", PrefillShare())
    transfer: TransferCost = state.setdefault("transfer", TransferCost())
    states = _states(req, cluster, engines)
    now, slo = time.monotonic(), _slo(req, cluster)
    every = candidates(states, len(req.tokens), req.sampling.max_tokens, slo, share, transfer,
                       cluster.feedback, now)
    # Only the allowed patterns; when none can run (pd with one engine), what can run at all.
    placements = [p for p in every if p.pattern in patterns] or every
    missing = [] if placements else [
        role for role, takes in (("prefill", [s.prefills for s in states]),
                                 ("decode", [s.decodes for s in states])) if not any(takes)]
    if missing:
        # No engine left for a role (a pd pair lost one): the healthy ones stand in for it, and
        # the route header says so, as cluster.best does (pyrouter/degrade.py).
        states = [replace(s, prefills=True, decodes=True) for s in states]
        placements = candidates(states, len(req.tokens), req.sampling.max_tokens, slo, share,
                                transfer, cluster.feedback, now)
    chosen = choose(placements, slo)
    for role in missing:
        req.route.degraded.append(degraded_note(
            role, chosen.prefill if role == "prefill" else chosen.decode))
    by_id = {e.id: e for e in engines}
    commit(chosen, share, now, req.sampling.max_tokens)
    req.predicted = chosen.outcome
    return await _run(req, chosen, by_id[chosen.prefill], by_id[chosen.decode], transfer)


async def _run(req: RouterRequest, chosen: Placement, prefill: EngineHandle,
               decode: EngineHandle, transfer: TransferCost) -> GenerationStream:
    note: dict[str, object] = {"chose": chosen.pattern}
    if chosen.pattern == DP:
        note["engine"] = decode.id
        begin = 0
    else:
        done = await disaggregate(req, prefill, decode)
        if done.send is not None:
            transfer.observe(done.sent_tokens, done.send.tail_ms)
        note.update(prefill=prefill.id, decode=decode.id, matched=done.matched,
                    decode_start=done.begin)
        if done.failed:
            note["fallback"] = "transfer_failed"
        begin = done.begin
    note.update(ttft_ms=round(chosen.ttft_ms, 1), tpot_ms=round(chosen.tpot_ms, 1),
                fits=int(chosen.meets), harm=chosen.harm)
    req.note_route("adaptive", **note)
    return decode.start_generate(req, begin=begin)
