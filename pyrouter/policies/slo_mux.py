"""slo_mux: Tropical's SLO-aware multiplexing. Engines are prefill or multiplexing engines.

A request goes straight to a multiplexing engine (prefill and decode colocated) when its prefill
fits that engine's TPOT slack this iteration, KV stays under the watermark and its TTFT SLO
holds (pyrouter/planning/slo_fit.py) — and so may a prefill engine that passes the same tests,
so that where decodes have slack slo_mux runs as data parallel; otherwise a prefill engine
prefills it and a multiplexing engine decodes it (KV crosses, as in pd). Roles switch at run time: a prefill engine turns
multiplexing when every multiplexing engine is over the KV watermark, a multiplexing engine
turns prefill when prefills keep waiting past their TTFT slack. The request's own `slo` wins
over the `ttft_ms` / `tpot_ms` parameters. A request whose prefill engine would give its first
output only past the router's first-output timeout is refused at once, 503 `overloaded`
(pyrouter/planning/late_refusal.py).

Several router replicas keep one set of roles: a replica that switches a role publishes them and
the others adopt them (pyrouter/runtime/shared_policy_state.py), so the newest switch holds everywhere.
"""
from __future__ import annotations

import logging

from pyrouter.cluster import ClusterView
from pyrouter.degrade import serves
from pyrouter.errors import NoCapacity
from pyrouter.planning.late_refusal import refuse_past_timeout
from pyrouter.planning.slo_fit import MUX, PREFILL, MuxRoles, dp_fit, mux_fit, queue_saturated
from pyrouter.request import RouterRequest
from pyrouter.runtime.policy_registry import Param, policy
from pyrouter.runtime.shared_policy_state import share_state
from router_core import Dp, Pd

log = logging.getLogger("switchyard.router")
PARAMS = {"ttft_ms": Param(2000.0, gt=0), "tpot_ms": Param(200.0, gt=0),
          "kv_watermark": Param(0.9, gt=0, le=1), "tpot_margin": Param(0.9, gt=0),
          "switch_interval_s": Param(5.0, ge=0), "wait_ratio": Param(0.5, ge=0)}
share_state("slo_mux", "roles", MuxRoles)


def _switch_roles(cluster: ClusterView, roles: MuxRoles, req: RouterRequest) -> None:
    loads = {e.id: cluster.load(e) for e in cluster.engines("any")}
    watermark = float(cluster.params["kv_watermark"])
    note = roles.maybe_switch(
        {e: load.kv_pressure > watermark for e, load in loads.items()},
        {e: load.running_decodes for e, load in loads.items()},
        {e: load.queued_prefill_tokens for e, load in loads.items()},
        float(cluster.params["switch_interval_s"]), float(cluster.params["wait_ratio"]))
    if note is not None:
        log.info("slo_mux role switch %s", note)
        cluster.note_event("role_switch", note)
        req.route.params["switched"] = note.split(" ")[0]


@policy("slo_mux", roles=("decode", "prefill", "decode"), params=PARAMS)
async def route(req: RouterRequest, cluster: ClusterView) -> Dp | Pd:
    engines = {e.id: e for e in cluster.engines("any")}
    if not engines:
        raise NoCapacity("no healthy engine", code="no_capacity")
    roles: MuxRoles = cluster.state.setdefault("roles", MuxRoles())
    roles.sync({e.id: e.role for e in engines.values()})
    slo = cluster.slo(req)
    ttft_ms = float(slo.ttft_ms or cluster.params["ttft_ms"])
    tpot_ms = float(slo.tpot_ms or cluster.params["tpot_ms"])
    preds = cluster.predict(req)
    mux = [engines[e] for e in roles.of(MUX)]
    # A prefill engine that can decode takes a request whole too when it fits there (its queue
    # is short, its decodes have slack): colocating beats a transfer, so wherever decodes have
    # slack slo_mux is data parallel, and it disaggregates only what fits nowhere.
    colocate = mux + [engines[e] for e in roles.of(PREFILL) if serves(engines[e].role, "decode")]
    fits = {e.id: mux_fit(preds[e.id], cluster.load(e).running_decodes, ttft_ms, tpot_ms,
                          float(cluster.params["tpot_margin"])) for e in colocate}
    fitting = [e for e in colocate if fits[e.id] is None]
    # While the engines keep up (no queue alone is past the TTFT SLO), data parallel wherever
    # decodes have slack and the TTFT SLO holds (least predicted TTFT): the few long steps a
    # colocated prefill costs its engine's decodes are spread over their life and their slack
    # absorbs them. Once saturated, the multiplexing rules below (every step within the TPOT SLO,
    # or a prefill engine) keep the decodes within SLO while the queues are long.
    # A queue that is one long prompt does not count (slo_fit.queue_saturated).
    saturated = any(queue_saturated(preds[e.id], e.longest_queued_prefill, ttft_ms)
                    for e in engines.values())
    direct = [] if saturated else [
        e for e in colocate if dp_fit(preds[e.id], cluster.load(e).running_decodes, ttft_ms,
                                      req.sampling.max_tokens)]
    if direct or fitting:  # path 2: straight to an engine, prefill next to its decodes
        engine = min(direct or fitting,
                     key=lambda e: (preds[e.id].ttft_ms, -preds[e.id].matched_tokens, e.num))
        req.note_route("slo_mux", path="mux" if engine in fitting else "dp", engine=engine.id,
                       ttft_ms=round(preds[engine.id].ttft_ms, 1),
                       slack_ms=round(preds[engine.id].tpot_slack_ms, 1))
        _switch_roles(cluster, roles, req)
        return Dp(engine)
    # path 1: prefill engine, then decode on the multiplexing engine with the most slack
    prefill_engines = [engines[e] for e in roles.of(PREFILL)]
    decoders = mux or prefill_engines
    decode = max(decoders, key=lambda e: (preds[e.id].kv_ok, _finite(preds[e.id].tpot_slack_ms),
                                          -e.num))
    candidates = [e for e in prefill_engines if e is not decode]
    why = ",".join(sorted({str(r) for r in fits.values()})) or "no_mux_engine"
    every_ttft_ms = [p.ttft_ms for p in preds.values()]
    if not candidates:
        refuse_past_timeout(preds[decode.id].ttft_ms, every_ttft_ms, cluster.first_output_timeout_s)
        req.note_route("slo_mux", path="mux_forced", engine=decode.id, reason=why)
        return Dp(decode)
    prefill = min(candidates, key=lambda e: (preds[e.id].ttft_ms, e.num))
    roles.late.append(preds[prefill.id].ttft_ms > ttft_ms)
    try:
        # Every prefill engine's queue is past the router's first-output timeout (sustained
        # overload): refused now rather than failing after that wait (planning/late_refusal.py).
        refuse_past_timeout(preds[prefill.id].ttft_ms, every_ttft_ms,
                            cluster.first_output_timeout_s)
    except NoCapacity:
        _switch_roles(cluster, roles, req)  # its lateness still counts towards a role switch
        raise
    # router_core carries the disaggregation out and notes prefill, decode, matched and
    # decode_start (a failed transfer: the decode engine prefills, fallback=transfer_failed).
    req.note_route("slo_mux", path="pd", reason=why)
    _switch_roles(cluster, roles, req)
    return Pd(prefill, decode)


def _finite(value: float) -> float:
    return value if value == value else float("-inf")  # NaN (no model) sorts last
