"""tandem: DynaServe's elastic split execution — a lead engine computes the first part of each
request (part of the prompt, or all of it plus the first k tokens), a follow engine receives
that KV, computes the rest and does the bulk of the decoding.

The split point and the pair come per request from the latency model and live load
(pyrouter/planning/tandem_split.py); each engine's prefill chunk is kept at its latency-
constrained utilisation point for the ITL SLO (pyrouter/planning/chunk_control.py). `tpot_ms`
is the ITL SLO (a request's own `slo.tpot_ms` wins); `k_default` tokens come from the lead when
that does not delay the first token, `k_max` when the follow's batch is over the SLO. A plan
whose first output would come only past the router's first-output timeout is refused at once,
503 `overloaded` (pyrouter/planning/late_refusal.py). The policy returns a `Split`; router_core
carries it out (the lead's segment, the KV's crossing, the follow's generation).
"""
from __future__ import annotations

from dataclasses import replace

from pyrouter.cluster import ClusterView
from pyrouter.errors import BadRequest, NoCapacity
from pyrouter.planning.chunk_control import ChunkController
from pyrouter.planning.late_refusal import refuse_past_timeout
from pyrouter.planning.tandem_split import TandemPlan, plan_tandem
from pyrouter.request import RouterRequest
from pyrouter.runtime.policy_registry import Param, policy
from router_core import Dp, Split

PARAMS = {"tpot_ms": Param(200.0, gt=0), "ttft_ms": Param(2000.0, gt=0),
          "k_default": Param(1, ge=0), "k_max": Param(8, ge=0), "align": Param(16, ge=1),
          "kv_watermark": Param(0.95, gt=0, le=1), "chunk_control": True,
          "chunk_min": Param(32, ge=1), "chunk_max": Param(2048, ge=1),
          "chunk_interval_s": Param(1.0, gt=0),
          # A fixed split instead of the planned one (baselines, experiments): the lead computes
          # split_ratio of the prompt, or all of it and lead_tokens tokens.
          "split_ratio": Param(None, kind=float, ge=0, le=1, nullable=True),
          "lead_tokens": Param(None, kind=int, ge=1, nullable=True)}


def _fixed(plan: TandemPlan, params: dict[str, object], tokens_len: int) -> TandemPlan:
    """The plan with a fixed split when the parameters ask for one."""
    ratio, k = params["split_ratio"], params["lead_tokens"]
    if isinstance(k, int) and not isinstance(k, bool) and k > 0:
        return replace(plan, split=tokens_len - 1, lead_tokens=k, reason="fixed")
    if isinstance(ratio, int | float) and not isinstance(ratio, bool):
        if not 0.0 <= ratio <= 1.0:
            raise BadRequest("tandem split_ratio must be in [0, 1]", param="split_ratio")
        align = int(str(params["align"]))
        split = int((tokens_len - 1) * ratio)
        split = split if split == tokens_len - 1 or align <= 1 else split - split % align
        return replace(plan, split=split, lead_tokens=0, reason="fixed")
    return plan


@policy("tandem", params=PARAMS)
async def route(req: RouterRequest, cluster: ClusterView) -> Split | Dp:
    engines = cluster.engines("any")
    if not engines:
        raise NoCapacity("no healthy engine", code="no_capacity")
    if len(engines) == 1:
        req.note_route("tandem", lead="-", follow=engines[0].id, s=0, k=0,
                       fallback="one_engine")
        return Dp(engines[0])
    params = cluster.params
    itl_ms = float(cluster.slo(req).tpot_ms or params["tpot_ms"])
    preds = cluster.predict(req)
    plan = plan_tandem(len(req.tokens), req.sampling.max_tokens, engines, preds,
                       cluster.core.table,
                       itl_ms, int(params["k_default"]), int(params["k_max"]),
                       int(params["align"]))
    if params["chunk_control"]:
        chunks: ChunkController = cluster.state.setdefault(
            "chunks", ChunkController(float(params["chunk_interval_s"])))
        for engine in (plan.lead, plan.follow):
            chunks.update(engine, cluster.core.table, itl_ms, len(req.tokens) // 2,
                          int(params["chunk_min"]), int(params["chunk_max"]))
    plan = _fixed(plan, params, len(req.tokens))
    # Sustained overload: a plan whose first output comes only past the router's first-output
    # timeout is refused now rather than failing after that wait (planning/late_refusal.py).
    refuse_past_timeout(plan.ttft_ms, [plan.ttft_ms, *(p.ttft_ms for p in preds.values())],
                        cluster.first_output_timeout_s)
    req.note_route("tandem", lead=plan.lead.id, follow=plan.follow.id, s=plan.split,
                   k=plan.lead_tokens, ttft_ms=round(plan.ttft_ms, 1), reason=plan.reason)
    # The lead prefills (and, with k, starts decoding), its KV crosses, the follow continues:
    # router_core carries it out (a failed transfer: the follow computes what it lacks).
    return Split(plan.lead, plan.follow, plan.split if not plan.lead_tokens else 0,
                 plan.lead_tokens)
