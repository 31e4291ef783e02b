"""The latency model's closed loop: each finished request's TTFT and TPOT against what the policy
predicted for it, and a correction for later predictions of the same kind on the same engine.

router_core predicts from the engines' fitted step models and the queues it can see; what it
cannot see (a transfer's real cost, co-located engines slowing each other, prefills that arrive
while a request decodes, a model fitted on another load) shows up as a steady ratio between
what happened and what was predicted. The correction is that ratio, smoothed in log space — per
(engine, pattern) for TPOT, per pattern across engines for TTFT (see `correction`) — so one
outlier moves it little and over- and under-prediction weigh the same, clamped so a burst of
odd requests cannot make the router believe anything absurd.

A policy attaches its prediction to the request (`req.predicted`); the dispatcher observes the
outcome when the request ends (Dispatcher.record), `/metrics` exports every ratio
(`switchyard:prediction_error_ratio{kind,pattern}`), and `summary()` gives the tournament its
per-cell error.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

TTFT, TPOT = "ttft", "tpot"
_ALPHA = 0.1            # weight of each new observation in the smoothed log ratio
_CLAMP = (0.25, 4.0)    # the correction never scales a prediction beyond these
_KEEP = 4096            # recent |log ratio| values kept for summaries
_ALL = "*"              # the key of a pattern's correction across engines

# (kind, pattern, actual / predicted): what the metrics observe.
ErrorSink = Callable[[str, str, float], None]


@dataclass(frozen=True, slots=True)
class PredictedOutcome:
    """What a policy predicted for one request where it placed it."""

    pattern: str         # "dp", "pd", ... (the route's pattern word)
    prefill_engine: str  # where its first token is computed (TTFT)
    decode_engine: str   # where it decodes (TPOT)
    ttft_ms: float       # what the policy decided with (corrected)
    tpot_ms: float
    raw_ttft_ms: float   # router_core's prediction before the correction
    raw_tpot_ms: float


class PredictionFeedback:
    def __init__(self, sink: ErrorSink | None = None) -> None:
        self._log_ratio: dict[tuple[str, str, str], float] = {}
        self._seen: dict[tuple[str, str, str], int] = {}
        self._recent: dict[tuple[str, str], list[float]] = {}
        self.sink = sink

    def correction(self, engine: str, pattern: str, kind: str) -> float:
        """Factor to multiply a fresh prediction by (1.0 until something was observed). TTFT's is
        the pattern's across engines: its error is mostly the queue the router could not see yet
        (Stats are 0.5 s apart), which no engine owns — and a per-engine factor learned from the
        first requests of a burst makes the engine that happened to be over-predicted look
        cheap to every request after them (measured: 4 H100 engines, a burst, 97% -> 87%). TPOT's
        is per engine: it is the engine's own step model that is off."""
        if kind == TTFT:
            engine = _ALL
        # A pattern not seen yet takes the error of every pattern's predictions: leaving it at 1.0
        # would make it look cheaper than a seen one whose predictions run short.
        value = self._log_ratio.get((engine, pattern, kind),
                                    self._log_ratio.get((engine, _ALL, kind)))
        if value is None:
            return 1.0
        return min(_CLAMP[1], max(_CLAMP[0], math.exp(value)))

    def observe(self, predicted: PredictedOutcome, ttft_s: float | None,
                tpot_s: float | None) -> None:
        """A request ended: compare what happened with what was predicted. The correction
        learns from the raw prediction (a plain average of actual / raw, stable however many
        requests were predicted with the old correction); the error reported is the corrected
        prediction's, the one the policy decided with."""
        for kind, engine, used_ms, raw_ms, got_s in (
                (TTFT, predicted.prefill_engine, predicted.ttft_ms, predicted.raw_ttft_ms,
                 ttft_s),
                (TPOT, predicted.decode_engine, predicted.tpot_ms, predicted.raw_tpot_ms,
                 tpot_s)):
            if got_s is None or got_s <= 0 or not (_usable(used_ms) and _usable(raw_ms)):
                continue
            for key in ((engine, predicted.pattern, kind), (_ALL, predicted.pattern, kind),
                        (engine, _ALL, kind), (_ALL, _ALL, kind)):
                seen = self._seen.get(key, 0)
                # The first observations set the level quickly; later ones move it slowly.
                alpha = max(_ALPHA, 1.0 / (seen + 1))
                before = self._log_ratio.get(key, 0.0)
                self._log_ratio[key] = before + alpha * (math.log(got_s * 1000.0 / raw_ms)
                                                         - before)
                self._seen[key] = seen + 1
            ratio = got_s * 1000.0 / used_ms
            recent = self._recent.setdefault((kind, predicted.pattern), [])
            recent.append(abs(math.log(ratio)))
            if len(recent) > _KEEP:
                del recent[: len(recent) - _KEEP]
            if self.sink is not None:
                self.sink(kind, predicted.pattern, ratio)

    def summary(self) -> dict[str, dict[str, float | int]]:
        """Per "kind/pattern": requests observed and the median |error| as a ratio - 1 (0.2 =
        predictions were 20% off, either way)."""
        out: dict[str, dict[str, float | int]] = {}
        for (kind, pattern), values in sorted(self._recent.items()):
            ordered = sorted(values)
            median = ordered[len(ordered) // 2]
            out[f"{kind}/{pattern}"] = {"n": len(values),
                                        "median_abs_error": round(math.exp(median) - 1, 4)}
        return out


def _usable(ms: float) -> bool:
    return ms > 0 and math.isfinite(ms)
