"""One served model's policy side: the policy new requests get (PolicySlot, replaced atomically
by PUT /admin/policy), and the Dispatcher that runs it for each decision with what it decides
with — the engines, the outcome window, the closed loop's feedback — and what watches it (the
fallback to the previous policy when the active one keeps failing).

The policy instance is captured when a request starts, so a switch never touches in-flight requests.
Carrying a decision out — the verbs, the first chunk, retries, error mapping, the close — is
router_core's executor's; here a policy bug is a PolicyFailed (500, logged with the policy's
name) and anything a policy raises on purpose (NoCapacity, BadRequest) keeps its status.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from pyrouter.cluster import ClusterView, EngineDirectory, EventSink
from pyrouter.errors import BadRequest, PolicyFailed, VerbOrderError
from pyrouter.outcomes import Outcome, RecentOutcomes, slo_met
from pyrouter.planning.prediction_feedback import PredictionFeedback
from pyrouter.request import RouterRequest
from pyrouter.runtime.policy_fallback import PolicyFallback
from pyrouter.runtime.policy_registry import ActivePolicy
from pyrouter.runtime.policy_run import Placement, PolicyRun

log = logging.getLogger("switchyard.router")


class PolicySlot:
    """The policy new requests get; replaced atomically by PUT /admin/policy. Listeners hear of
    every replacement (the Rust built-ins follow the active policy)."""

    def __init__(self, active: ActivePolicy) -> None:
        self._current = active
        self.previous: ActivePolicy | None = None  # what a failing policy falls back to
        self._listeners: list[Callable[[ActivePolicy], None]] = []

    @property
    def current(self) -> ActivePolicy:
        return self._current

    @current.setter
    def current(self, active: ActivePolicy) -> None:
        self.previous, self._current = self._current, active
        self.previous.retire()
        for listener in self._listeners:
            listener(active)

    def fall_back(self) -> None:
        """Back to the policy before the current one (fresh state; once: no way back)."""
        if self.previous is not None:
            previous = self.previous
            self.current = ActivePolicy(previous.spec, previous.params)
            self.previous = None

    def on_change(self, listener: Callable[[ActivePolicy], None]) -> None:
        self._listeners.append(listener)

    def off_change(self, listener: Callable[[ActivePolicy], None]) -> None:
        """Stop telling `listener` (one given to on_change; no error if it was not)."""
        if listener in self._listeners:
            self._listeners.remove(listener)


class Dispatcher:
    def __init__(self, engines: EngineDirectory, slot: PolicySlot,
                 policy_timeout_s: float = 300.0, events: EventSink | None = None) -> None:
        self.engines = engines
        self.slot = slot
        self.fallback = PolicyFallback(slot, events=events)
        # A policy that never decides must not hold its client forever (PD on a long prompt
        # on CPU can legitimately take a while, hence minutes, not seconds).
        self.policy_timeout_s = policy_timeout_s
        self.outcomes = RecentOutcomes()
        self.events = events  # policies' decisions worth counting (metrics)
        # Predictions against outcomes (the latency model's closed loop; metrics set its sink).
        self.feedback = PredictionFeedback()

    def record_outcome(self, at: float, pattern: str, ok: bool, ttft_s: float | None,
                       tpot_s: float | None, slo_ttft_ms: float | None,
                       slo_tpot_ms: float | None) -> None:
        """One finished request into the outcome window (pyrouter/runtime/records.py)."""
        self.outcomes.record(Outcome(at, pattern, ok, ttft_s, tpot_s,
                                     slo_met(ttft_s, tpot_s, slo_ttft_ms, slo_tpot_ms)))

    def view(self, active: ActivePolicy) -> ClusterView:
        return ClusterView(self.engines, active, self.outcomes, self.events, self.feedback,
                           self.policy_timeout_s)

    async def decide(self, req: RouterRequest, active: ActivePolicy
                     ) -> tuple[Placement, PolicyRun]:
        """Run `active` to its first placement for `req` (its run, to ask again after a hand-off
        and to close)."""
        run = PolicyRun(active, req, self.view(active), self.policy_timeout_s)
        try:
            placement = await run.first()
        except (PolicyFailed, BadRequest, VerbOrderError) as exc:
            # A 400 is the policy's when nothing reached an engine (its own parameters).
            self.fallback.record(active, not isinstance(exc, BadRequest)
                                 or not (req.verbs is not None and req.verbs.verbs))
            await run.aclose()
            raise
        except BaseException:
            await run.aclose()
            raise
        self.fallback.record(active, policy_failed=False)
        return placement, run
