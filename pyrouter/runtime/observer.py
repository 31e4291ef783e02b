"""How a placement went, back to what decided it: router_core tells the observer a decision
carried (its KV transfer's size and exposed time, its first token, its end), in batches delivered
before the next decision — the only time a policy reads what it learned — so the closed loop
costs the request no call into Python of its own."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyrouter.planning.prediction_feedback import PredictedOutcome, PredictionFeedback
from pyrouter.request import RouterRequest
from router_core import Observation

log = logging.getLogger("switchyard.router")
# Told a KV transfer's tokens and exposed time (ms) (adaptive's TransferCost.observe).
OnSent = Callable[[int, float], None]


@dataclass(slots=True)
class PlacementObserver:
    key: str
    feedback: PredictionFeedback
    predicted: PredictedOutcome | None
    on_sent: OnSent | None

    def observe(self, o: Observation) -> None:
        if o.kind == "started":
            if self.predicted is not None:
                self.feedback.running(self.key, self.predicted)
        elif o.kind == "sent":
            if self.on_sent is not None:
                self.on_sent(o.tokens, o.tail_ms)
        elif o.kind == "first_token":
            if self.predicted is not None:
                self.feedback.first_token(self.key, o.ttft_s * 1000.0)
                # The loop learns a TTFT when it happens, not when the request ends (learned at
                # the end, a long decode's TTFT came seconds after the placements that needed
                # it). From the attempt's start: a retried request's TTFT also holds the failed
                # attempt's time, which no placement could have foreseen.
                self.feedback.observe(self.predicted, o.attempt_s, None)
        elif o.kind == "ended":
            self.feedback.ended(self.key)
            if o.ok and self.predicted is not None:
                self.feedback.observe(self.predicted, None, o.tpot_s,
                                      max(0, o.completion_tokens - 1))


def observer_for(req: RouterRequest, feedback: PredictionFeedback) -> PlacementObserver | None:
    """The observer of `req`'s placement, when its policy predicted it or wants its transfer."""
    if req.predicted is None and req.on_sent is None:
        return None
    return PlacementObserver(req.key, feedback, req.predicted, req.on_sent)


def deliver(batch: list[tuple[PlacementObserver, Observation]]) -> None:
    for observer, observation in batch:
        try:
            observer.observe(observation)
        except Exception:  # a learning step failed: the requests it learns from stand
            log.exception("observing a placement failed")
