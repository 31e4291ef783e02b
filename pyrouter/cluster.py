"""The cluster view a policy gets: engines by role, loads, prefix matches and predictions, all
computed in router_core.

One view per admitted request, bound to the policy instance that admitted it, so `params` and
`state` stay those of that policy even if the router switches policy meanwhile. Scoring weights
are the policy's own parameters (`prefill_weight`, `queue_weight`, `decode_weight`,
`kv_weight`), passed to router_core per call.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from pyrouter.degrade import degraded_note
from pyrouter.engines.handle import EngineHandle
from pyrouter.engines.usable_engines import engines_by_num, usable_nums, usable_of_role
from pyrouter.errors import NoCapacity
from pyrouter.outcomes import RecentOutcomes
from pyrouter.planning.prediction_feedback import PredictionFeedback
from pyrouter.request import RouterRequest, SloSpec
from pyrouter.runtime.policy_registry import ActivePolicy
from router_core import (
    EngineLoad,
    EnginePrediction,
    RouterCore,
    ScoreResult,
    ScoreWeights,
    session_pick,
)

log = logging.getLogger("switchyard.router")
# router_core's score weights, as a policy's parameters (cache_aware's, any user policy's).
SCORE_WEIGHTS = ("prefill_weight", "queue_weight", "decode_weight", "kv_weight")
# (kind, detail) of a decision worth counting: role switches, adaptive switches (metrics, logs).
EventSink = Callable[[str, str], None]


class SessionPin(NamedTuple):
    """Where a request's session goes (ClusterView.session)."""

    engine: EngineHandle
    outcome: str  # "stuck": the session's engine took it; "overflow": it was over the bound


def session_note(pin: SessionPin | None) -> dict[str, str]:
    """What the route header adds for a session (`session=stuck|overflow`; nothing without)."""
    return {} if pin is None else {"session": pin.outcome}


class EngineDirectory(Protocol):
    """The engines a router knows (pyrouter/engines/membership.py's EngineMembership; FakeCluster; one
    served model's share of them, pyrouter/model_groups.py's ModelEngines)."""

    @property
    def engines(self) -> dict[str, EngineHandle]: ...

    @property
    def core(self) -> RouterCore: ...

    def healthy(self) -> list[EngineHandle]: ...

    def mark_unhealthy(self, engine_id: str) -> None: ...


class ClusterView:
    def __init__(self, engines: EngineDirectory, active: ActivePolicy,
                 outcomes: RecentOutcomes | None = None, events: EventSink | None = None,
                 feedback: PredictionFeedback | None = None,
                 first_output_timeout_s: float = math.inf) -> None:
        self._engines = engines
        self.policy = active
        # Recently finished requests (latency, SLO met, pattern): feedback for adaptive policies.
        self.outcomes = outcomes if outcomes is not None else RecentOutcomes()
        # The latency model's closed loop: how far predictions were off, per engine and pattern.
        self.feedback = feedback if feedback is not None else PredictionFeedback()
        self._events = events
        # The router fails a request whose first output takes longer than this (its
        # --policy-timeout-s): a placement predicted past it is an error, not a late answer.
        self.first_output_timeout_s = first_output_timeout_s
        weights = {k: float(v) for k, v in active.params.items() if k in SCORE_WEIGHTS}
        self.weights: ScoreWeights | None = ScoreWeights(**weights) if weights else None

    def sub(self, active: ActivePolicy) -> ClusterView:
        """A view for another policy run on this one's behalf (adaptive's sub-policies)."""
        return ClusterView(self._engines, active, self.outcomes, self._events, self.feedback,
                           self.first_output_timeout_s)

    def note_event(self, kind: str, detail: str) -> None:
        """Record a decision worth counting (a role switch, a pattern switch)."""
        log.debug("policy %s event %s: %s", self.policy.name, kind, detail)
        if self._events is not None:
            self._events(kind, detail)

    @property
    def params(self) -> dict[str, Any]:
        return self.policy.params

    @property
    def state(self) -> dict[str, Any]:
        """Private mutable state of the admitting policy instance (e.g. a round-robin cursor)."""
        return self.policy.state

    def slo(self, req: RouterRequest) -> SloSpec:
        """The request's latency objective: its own `slo` field, else the policy's `ttft_ms` /
        `tpot_ms` parameters (when it has them), else none."""
        params = self.policy.params
        ttft = req.slo.ttft_ms if req.slo.ttft_ms is not None else params.get("ttft_ms")
        tpot = req.slo.tpot_ms if req.slo.tpot_ms is not None else params.get("tpot_ms")
        return SloSpec(None if ttft is None else float(ttft), None if tpot is None else float(tpot))

    @property
    def core(self) -> RouterCore:
        return self._engines.core

    def engines(self, role: str = "any") -> list[EngineHandle]:
        """Healthy, non-draining engines that can take `role` work, in id order (listed once per
        change of the roster, not per call: a fleet of 1,024 engines costs a copy)."""
        return list(usable_of_role(self._engines, role))

    def score(self, role: str, req: RouterRequest) -> ScoreResult:
        """router_core's ScoreResult for `role`; also records on `req` the prompt tokens each
        engine holds (router_core matches against every engine: the ones holding none, 0)."""
        result = self.core.score(req.tokens, None if role == "any" else role, self.weights)
        by_num = engines_by_num(self._engines)
        matched = req.matched_by_engine if req.matched_by_engine is not None else {}
        # Only the engines holding a prefix: a pass over every candidate would cost a
        # 1,024-engine fleet a Python object per engine per request.
        for num, tokens in result.matches.items():
            if (engine := by_num.get(num)) is not None:
                matched[engine.id] = int(tokens)
        req.matched_by_engine = matched
        return result

    def best(self, role: str, req: RouterRequest,
             exclude: tuple[EngineHandle, ...] = ()) -> EngineHandle:
        """The engine router_core scores cheapest for `role` (prefix overlap + load). When no
        healthy engine takes `role`, the cheapest healthy engine of any role stands in and the
        route header says so (pyrouter/degrade.py); NoCapacity only when none is left at all."""
        engine = self._cheapest(role, req, exclude)
        if engine is None and role != "any":
            engine = self._cheapest("any", req, exclude)
            if engine is not None:
                note = degraded_note(role, engine.id)
                if note not in req.route.degraded:
                    req.route.degraded.append(note)
                    self.note_event("degraded", role)
        if engine is None:
            raise NoCapacity(f"no healthy engine with role {role!r}", code="no_capacity")
        return engine

    def _cheapest(self, role: str, req: RouterRequest,
                  exclude: tuple[EngineHandle, ...]) -> EngineHandle | None:
        result = self.score(role, req)
        # The best candidate is almost always usable: reading it alone spares building every
        # candidate's Python object.
        if result.best is not None and (engine := self._usable(result.best, exclude)):
            return engine
        for cand in result.candidates:
            if engine := self._usable(cand.engine_id, exclude):
                return engine
        return None

    def _usable(self, num: int, exclude: tuple[EngineHandle, ...]) -> EngineHandle | None:
        engine = self._by_num(num)
        if (engine is not None and engine.healthy and not engine.draining
                and engine not in exclude):
            return engine
        return None

    def matched(self, engine: EngineHandle, req: RouterRequest) -> int:
        """Prompt tokens the router believes `engine` holds (from the prefix index)."""
        if req.matched_by_engine is None:
            self.score(engine.role, req)
        return (req.matched_by_engine or {}).get(engine.id, 0)

    def predict(self, req: RouterRequest,
                shortlist: int | None = None) -> dict[str, EnginePrediction]:
        """router_core's predictions for this request on every engine, by engine id: matched
        prefix, prefill/queue/TTFT times, decode step with it added, TPOT slack against the
        request's (or policy's) TPOT SLO, KV use against the policy's `kv_watermark`.

        `shortlist` k: only the healthy, non-draining engines a placement planner should weigh —
        the k that would give this request its first token soonest and the k that would decode
        it fastest (router_core/src/prediction_shortlist.rs); all of them when there are no more
        than k. A planner weighing prefill engines against decode engines then costs a fleet of
        1,024 what it costs one of k."""
        tpot = self.slo(req).tpot_ms
        watermark = float(self.params.get("kv_watermark", 1.0))
        by_num = engines_by_num(self._engines)
        among = None if shortlist is None else usable_nums(self._engines, "any")
        predictions = {by_num[p.engine_id].id: p
                       for p in self.core.predict(req.tokens, tpot, watermark, among, shortlist)
                       if p.engine_id in by_num}
        req.predictions = predictions  # the decision's explanation in traces
        return predictions

    def session(self, req: RouterRequest, engines: list[EngineHandle]) -> SessionPin | None:
        """The engine of `req`'s session among `engines`, as the Rust fast path picks it
        (router_core's ring with bounded load on in-flight requests, under the bound in force
        when the request arrived); None when the request has no session."""
        if req.session_id is None:
            return None
        pick = session_pick(self.core, req.session_id, [e.num for e in engines],
                            req.session_load_bound)
        if pick is None:
            return None
        num, overflowed = pick
        engine = next(e for e in engines if e.num == num)
        return SessionPin(engine, "overflow" if overflowed else "stuck")

    def dp_candidates(self, req: RouterRequest) -> tuple[list[EngineHandle], SessionPin | None]:
        """The engines a data-parallel policy chooses among for `req`: its session's engine alone
        when it has a session, else every healthy engine; and the pin (None without a session).
        NoCapacity when no engine is healthy."""
        engines = self.engines("any")
        if not engines:
            raise NoCapacity("no healthy engine", code="no_capacity")
        pin = self.session(req, engines)
        return ([pin.engine] if pin is not None else engines), pin

    def engine(self, engine_id: str) -> EngineHandle | None:
        """The engine called `engine_id` ("e1"), healthy or not (None: not known)."""
        return self._engines.engines.get(engine_id)

    def load(self, engine: EngineHandle) -> EngineLoad:
        """router_core's EngineLoad: unfinished tokens, running decodes, KV pages, inflight."""
        return self.core.table.get(engine.num)

    def unfinished_tokens(self, engine: EngineHandle) -> int:
        load = self.load(engine)
        return load.unfinished_tokens + load.router_tokens

    def _by_num(self, num: int) -> EngineHandle | None:
        return engines_by_num(self._engines).get(num)
