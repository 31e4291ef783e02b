"""adaptive: decides per request, from predicted outcomes, where it prefills and decodes.

For every placement the engines allow — data parallel on one engine, or disaggregated from a
prefill engine to a decode engine — router_core predicts this request's TTFT and TPOT and what
it costs the decodes already running (pyrouter/planning/placement.py), corrected by how wrong
such predictions have been (pyrouter/planning/prediction_feedback.py: the closed loop, fed when
each request ends). The policy takes the placement that keeps the most requests within their SLO;
when none lets this one meet its SLO, the one that harms the others least (only decodes still
within their SLO count), on a queue already past the TTFT SLO once there is one. So it is data
parallel (least predicted TTFT) while decodes have slack, disaggregates the requests whose
prefill would push a decode engine's TPOT over its SLO, and under overload keeps some engines
within SLO instead of letting every request miss.

With `chunk_control` on (the default), each engine a request runs on gets the prefill chunk its
decodes can bear (pyrouter/planning/chunk_control.py `backlog_chunk`): the largest while the
running decodes' mean step over their life, through the engine's queued prefill in full chunks,
stays within the TPOT SLO (long decodes absorb a short backlog: a GPU under a burst); otherwise
the LCU chunk for the batch it will run once its waiting requests join, so that every step with a
chunk stays within the SLO — except on an idle engine where that chunk alone would take this
request's prefill past its TTFT SLO and the largest would not. And a data-parallel placement whose
prefill at its engine's current chunk would push running decodes over their SLO is weighed again
at that engine's LCU chunk (no harm, a TTFT longer by the smaller chunk's cost per token); chosen,
that chunk is sent at once and held while the engine's prefill queue lasts. On a GPU, whose step
has a small fixed cost, the engine then keeps its decodes within SLO and still prefills nearly as
fast, where otherwise the prompt would go late to another engine's queue (H100 profile, 2
engines: within 3 points of the best fixed policy in 25 of 25 cells, from 22; docs/experiments.md
"A harmful prefill weighed again at the LCU chunk"). Past capacity the chunk rule is what keeps the
decodes within SLO: on real CPU engines here under a sustained overload it took adaptive's
requests within SLO 1.6-2x higher (in the tournament on this machine's profile, +10 to +22
points on sonnet; on the H100 profile it mostly keeps the largest chunk and gains on azure-code
past capacity; docs/experiments.md "Real engines without replayed prompts").

With `tpot_hindsight` on (the default), the closed loop's TPOT correction learns against the
prediction in hindsight: the raw one with the prefill work the router actually placed on the
decode engine after it in place of the share it foresaw (prediction_feedback.py), not the plain
ratio. A burst a request decoded beside is not the step model's error, and neither is a lull. With
the chunk rule on it takes the H100 profile's tournament to within 3 points of the best fixed
policy in 22 of 25 cells (19 with the plain ratio) and keeps this machine's profile at 24 of 25
(docs/experiments.md "The TPOT correction learns in hindsight, both ways"). Off, the loop learns
the plain ratio, whose pessimism past capacity concentrates the load (better on H100 sonnet-long
@1.2 and shifting @1.5).

With `fallback` on (the default; docs/experiments.md "adaptive's fallback when its predictions
are off": on one seed it moved 4 of 120 tournament cells, by +21.3 to -0.7 points), a pattern
other than dp whose recent predictions are off by more than 1.5x on average (the closed loop's
window: mean |log(actual / predicted)| over its last 16 requests, at least 8 seen) is avoided
until that error falls below 1.25x: a request chosen for it runs data parallel on the engine with
the least predicted TTFT instead (`fallback=dp` in the route), but for every 4th, which runs as
chosen (`probe=pd`) so the pattern is still observed (pyrouter/planning/error_fallback.py).

A request whose chosen placement would give its first output only past the router's
first-output timeout (`--policy-timeout-s`) is refused at once, 503 `overloaded` with
Retry-After, instead of failing after that wait: under sustained overload the queue late
requests join would otherwise grow without bound.

Over a large fleet it weighs a shortlist, not every pair of engines: the `shortlist` (8) engines
that would give the request its first token soonest and the 8 that would decode it fastest
(router_core's prediction shortlist), every pair of them — at most 16 engines, 256 placements,
where weighing all of 1,024 engines would be a million placements a request. An engine left out
is worse than 8 others on both counts; a fleet of at most 8 engines is weighed whole, so nothing
changes below that.

Parameters are the SLO (a request's own `slo` wins), the KV watermark, `patterns` (which
placements may run: "dp,pd"), `chunk_control`, `tpot_hindsight`, `fallback` and `shortlist`. Every response
says what ran and why: `adaptive chose=pd prefill=e0 decode=e1 ttft_ms=812 tpot_ms=41 fits=1 harm=0
why=fits` — `why` is the rule that picked it (placement.py `choose`): `fits` (placed to meet its
SLO), `soonest` (late anyway, where it runs soonest), `queue_saturated` (late, onto a queue already
past the TTFT SLO), `step_saturated` (late, onto the engine whose decodes already step slower than
the TPOT SLO, when no engine is left whose decodes step within it and that it pushes none of
them over on).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

from pyrouter.cluster import ClusterView
from pyrouter.degrade import degraded_note, serves
from pyrouter.engines.handle import EngineHandle
from pyrouter.errors import NoCapacity
from pyrouter.planning.chunk_control import ChunkController, backlog_chunk, lcu_option
from pyrouter.planning.error_fallback import ErrorFallback
from pyrouter.planning.interference import PrefillShare
from pyrouter.planning.late_refusal import refuse_past_timeout
from pyrouter.planning.placement import (
    DP,
    PD,
    EngineState,
    Placement,
    Slo,
    TransferCost,
    at_chunk,
    candidates,
    choose_with_rule,
    commit,
)
from pyrouter.request import RouterRequest
from pyrouter.runtime.policy_registry import Param, comma_names, policy
from router_core import Dp, Pd

PARAMS = {"ttft_ms": Param(2000.0, gt=0), "tpot_ms": Param(200.0, gt=0),
          "kv_watermark": Param(0.9, gt=0, le=1),
          "patterns": Param("dp,pd", check=comma_names((DP, PD))), "chunk_control": True,
          "chunk_min": Param(32, ge=1), "chunk_max": Param(2048, ge=1),
          "chunk_interval_s": Param(1.0, gt=0), "tpot_hindsight": True, "fallback": True,
          "shortlist": Param(8, ge=1)}


def _patterns(cluster: ClusterView) -> set[str]:
    """The placements allowed (the parameter's schema has checked the names)."""
    return {p.strip() for p in str(cluster.params["patterns"]).split(",") if p.strip()}


def _states(req: RouterRequest, cluster: ClusterView,
            engines: list[EngineHandle]) -> list[EngineState]:
    """The engines worth weighing for this request (the prediction's shortlist: every engine of a
    fleet no larger than the `shortlist` parameter), as the planner sees them."""
    preds = cluster.predict(req, shortlist=int(cluster.params["shortlist"]))
    states = []
    for e in engines:
        if e.id not in preds:
            continue
        load = cluster.load(e)
        states.append(EngineState(e.id, e.num, serves(e.role, "prefill"), serves(e.role, "decode"),
                                  int(load.running_decodes) + int(load.router_seqs), preds[e.id],
                                  cluster.feedback.share_within_slo(e.id)))
    return states


def _slo(req: RouterRequest, cluster: ClusterView) -> Slo:
    slo = cluster.slo(req)
    return Slo(math.inf if slo.ttft_ms is None else slo.ttft_ms,
               math.inf if slo.tpot_ms is None else slo.tpot_ms)


@policy("adaptive", params=PARAMS)
async def route(req: RouterRequest, cluster: ClusterView) -> Dp | Pd:
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
    chunk_control = bool(cluster.params["chunk_control"]) and math.isfinite(slo.tpot_ms)
    if chunk_control:
        placements = placements + _at_lcu_chunks(req, cluster, placements, states, slo, share,
                                                  now)
    chosen, rule = choose_with_rule(placements, slo)
    fallback_note: dict[str, object] = {}
    if bool(cluster.params["fallback"]) and DP in patterns:
        chosen, fallback_note = _fall_back(chosen, placements, cluster, patterns)
    # Under sustained overload `choose` sends a request late anyway to the longest queue, so
    # that the other engines stay within SLO; once that queue would answer only past the
    # router's first-output timeout, the request is refused now instead of failing then.
    refuse_past_timeout(chosen.ttft_ms, [p.ttft_ms for p in placements],
                        cluster.first_output_timeout_s)
    for role in missing:
        req.route.degraded.append(degraded_note(
            role, chosen.prefill if role == "prefill" else chosen.decode))
    weighed = {s.id for s in states}
    by_id = {e.id: e for e in engines if e.id in weighed}
    req.predicted = commit(chosen, share, cluster.feedback, now, req.sampling.max_tokens,
                           bool(cluster.params["tpot_hindsight"]))
    if chunk_control:
        _control_chunks(req, cluster, slo, share, chosen,
                        [by_id[chosen.prefill], by_id[chosen.decode]])
    return _placement(req, chosen, by_id[chosen.prefill], by_id[chosen.decode], transfer,
                      {"why": rule, **fallback_note})


def _fall_back(chosen: Placement, placements: list[Placement], cluster: ClusterView,
               patterns: set[str]) -> tuple[Placement, dict[str, object]]:
    """`chosen`, or — its pattern's recent predictions too far off (error_fallback.py) — data
    parallel on the engine with the least predicted TTFT: a ranking of queues, which holds where
    their predicted lengths do not. The route's note says which."""
    fallback = cluster.state.get("fallback")
    if fallback is None:  # made once per policy run, not per request
        fallback = cluster.state["fallback"] = ErrorFallback()
    fallback.update(cluster.feedback.recent, patterns, DP)
    if not fallback.overrides(chosen.pattern):
        return chosen, ({"probe": chosen.pattern} if fallback.probing(chosen.pattern) else {})
    dps = [p for p in placements if p.pattern == DP and not p.chunk]
    if not dps:
        return chosen, {}
    fits_kv = [p for p in dps if p.kv_ok] or dps
    return min(fits_kv, key=lambda p: (p.ttft_ms, p.decode)), {"fallback": DP}


def _at_lcu_chunks(req: RouterRequest, cluster: ClusterView, placements: list[Placement],
                   states: list[EngineState], slo: Slo, share: PrefillShare,
                   now: float) -> list[Placement]:
    """Each data-parallel placement whose prefill, at its engine's current chunk, pushes running
    decodes over their SLO, again at the engine's LCU chunk (placement.py `at_chunk`): on a GPU
    the engine then keeps its decodes within SLO and still prefills nearly as fast, where
    otherwise the prompt would go late to another engine's queue."""
    params, table = cluster.params, cluster.core.table
    by_id = {s.id: s for s in states}
    out = []
    for p in placements:
        if p.pattern != DP or p.harm <= 0:
            continue
        e = by_id[p.prefill]
        option = lcu_option(table, e.num, slo.tpot_ms, len(req.tokens), int(params["chunk_min"]),
                            int(params["chunk_max"]))
        if option is not None:
            out.append(at_chunk(p, e, option, len(req.tokens), req.sampling.max_tokens, slo,
                                share, cluster.feedback, now))
    return out


def _control_chunks(req: RouterRequest, cluster: ClusterView, slo: Slo, share: PrefillShare,
                    chosen: Placement, engines: list[EngineHandle]) -> None:
    """A placement chosen at a lowered chunk holds it on its engine; otherwise each engine the
    request runs on gets the prefill chunk its decodes can bear (chunk_control.py
    `backlog_chunk`), unless an earlier placement's chunk still holds there. A decode's life in
    steps is the horizon recent requests placed to meet their SLO decode for, at the SLO's pace."""
    params = cluster.params
    chunks: ChunkController = cluster.state.setdefault(
        "chunks", ChunkController(float(params["chunk_interval_s"])))
    table = cluster.core.table
    if chosen.chunk:
        chunks.hold(engines[0], table, chosen.chunk)
        return
    life_steps = share.horizon_s * 1000.0 / slo.tpot_ms
    for engine in {e.id: e for e in engines}.values():
        if chunks.held(engine, table) or not chunks.due(engine.id):
            continue  # nothing to send: no chunk to work out
        chunk = backlog_chunk(table, engine.num, slo.tpot_ms, len(req.tokens), life_steps,
                              int(params["chunk_min"]), int(params["chunk_max"]), slo.ttft_ms)
        if chunk is not None:
            chunks.apply(engine, table, chunk)


def _placement(req: RouterRequest, chosen: Placement, prefill: EngineHandle,
               decode: EngineHandle, transfer: TransferCost,
               fallback_note: dict[str, object]) -> Dp | Pd:
    """The chosen placement for router_core to carry out: a disaggregation's transfer (its
    tokens and exposed time) teaches the transfer cost; router_core notes prefill, decode,
    matched and decode_start (and a failed transfer's fallback) after these."""
    note: dict[str, object] = {"chose": chosen.pattern}
    if chosen.pattern == DP:
        note["engine"] = decode.id
    if chosen.chunk:
        note["chunk"] = chosen.chunk
    note.update(ttft_ms=round(chosen.ttft_ms, 1), tpot_ms=round(chosen.tpot_ms, 1),
                fits=int(chosen.meets), harm=chosen.harm)
    note.update(fallback_note)
    req.note_route("adaptive", **note)
    if chosen.pattern == DP:
        return Dp(decode)
    req.on_sent = transfer.observe
    return Pd(prefill, decode)
