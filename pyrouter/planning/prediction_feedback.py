"""The latency model's closed loop: each finished request's TTFT and TPOT against what the policy
predicted for it, and a correction for later predictions of the same kind on the same engine.

router_core predicts from the engines' fitted step models and the queues it can see; what it
cannot see (a transfer's real cost, co-located engines slowing each other, a model fitted on
another load) shows up as a steady ratio between what happened and what was predicted. The
correction is that ratio, smoothed in log space — per (engine, pattern) for TPOT, per pattern
across engines for TTFT (see `correction`) — so one outlier moves it little and over- and
under-prediction weigh the same, clamped so a burst of odd requests cannot make the router
believe anything absurd.

One thing a TPOT prediction cannot see is not the model's error: how much prefill the router
places on the decode engine after the request was placed, against the share of it the
prediction foresaw. In a burst that is the whole burst; a correction learned from the burst's
first completions (which decoded beside every later prefill) scaled every later prediction by up
to the clamp, and no placement fitted any more (docs/experiments.md "The closed loop's TPOT
correction in a burst"). So the router tells the loop what it places (`note_prefill`), each
prediction carries the decode engine's total at placement (`placed`), and TPOT learns against
the prediction in hindsight: the raw one with, per decoded token, the prefill work actually
placed in place of the share it foresaw (more or less of it).

A policy attaches its prediction to the request (`req.predicted`); the dispatcher holds it while
the request runs (`running`, `first_token`: per engine, which running requests are still within
their SLO) and observes the TTFT at the first token and the TPOT when the request ends
(Dispatcher._attempt, Dispatcher.record); `/metrics` exports every ratio
(`switchyard:prediction_error_ratio{kind,pattern}`), and `summary()` gives the tournament its
per-cell error.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from pyrouter.planning.recent_error import RecentError

TTFT, TPOT = "ttft", "tpot"
_ALPHA = 0.1            # weight of each new observation in the smoothed log ratio
_CLAMP = (0.25, 4.0)    # the correction never scales a prediction beyond these
_KEEP = 4096            # recent |log ratio| values kept for summaries
_ALL = "*"              # the key of a pattern's correction across engines
# Running predictions held at most (a request whose end never came frees its place this way).
_RUNNING_MAX = 65536

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
    # Per decoded token, the prefill work raw_tpot_ms counts on from prefills placed later (the
    # share it expects); and the prefill work placed on decode_engine up to this placement
    # (PredictionFeedback.placed; None: the policy does not report what it places).
    foreseen_prefill_ms: float = 0.0
    placed_ms: float | None = None
    meets: bool = True   # placed to meet its SLO (False: placed knowing it would be late)
    ttft_slo_ms: float = math.inf  # the TTFT objective it was placed against


class PredictionFeedback:
    def __init__(self, sink: ErrorSink | None = None) -> None:
        self._log_ratio: dict[tuple[str, str, str], float] = {}
        self._seen: dict[tuple[str, str, str], int] = {}
        self._recent: dict[tuple[str, str], list[float]] = {}
        self._placed_ms: dict[str, float] = {}
        self._running: dict[str, PredictedOutcome] = {}  # request key -> its prediction
        self._running_by_engine: dict[str, list[int]] = {}  # decode engine -> [running, meets]
        # The corrected predictions' error over each pattern's last requests (adaptive's
        # fallback reads it: error_fallback.py).
        self.recent = RecentError()
        self.sink = sink

    def running(self, key: str, predicted: PredictedOutcome) -> None:
        """A request placed with `predicted` is running until `ended(key)` (placed again on a
        retry: the new placement replaces the old)."""
        self.ended(key)
        if len(self._running) >= _RUNNING_MAX:
            self.ended(next(iter(self._running)))
        self._running[key] = predicted
        counts = self._running_by_engine.setdefault(predicted.decode_engine, [0, 0])
        counts[0] += 1
        counts[1] += int(predicted.meets)

    def first_token(self, key: str, ttft_ms: float) -> None:
        """The running request `key` gave its first token after `ttft_ms`: past its objective,
        it is late whatever it was placed to do."""
        predicted = self._running.get(key)
        if predicted is not None and predicted.meets and ttft_ms > predicted.ttft_slo_ms:
            self._running[key] = replace(predicted, meets=False)
            self._running_by_engine[predicted.decode_engine][1] -= 1

    def ended(self, key: str) -> None:
        """The request `key` has ended (whatever its status), or was never placed: nothing."""
        predicted = self._running.pop(key, None)
        if predicted is not None:
            counts = self._running_by_engine[predicted.decode_engine]
            counts[0] -= 1
            counts[1] -= int(predicted.meets)

    @property
    def running_requests(self) -> int:
        """Requests placed with a prediction that have not ended yet."""
        return len(self._running)

    def share_within_slo(self, engine: str) -> float:
        """Of the requests running on `engine` that the router placed with a prediction, the
        share still within their SLO: placed to meet it and not late with the first token (1.0
        when it placed none there). Slowing a late one loses no request within SLO."""
        running, meets = self._running_by_engine.get(engine, (0, 0))
        return meets / running if running else 1.0

    def note_prefill(self, engine: str, extra_ms: float) -> None:
        """A prefill that adds `extra_ms` to `engine`'s decode steps was placed there."""
        if extra_ms > 0 and math.isfinite(extra_ms):
            self._placed_ms[engine] = self._placed_ms.get(engine, 0.0) + extra_ms

    def placed(self, engine: str) -> float:
        """The prefill work placed on `engine` so far (ms beyond its decode steps)."""
        return self._placed_ms.get(engine, 0.0)

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
                tpot_s: float | None, decoded_tokens: int = 0) -> None:
        """Compare what happened with what was predicted: the TTFT at the first token, the TPOT
        when the request ends (the one not known yet is None; Dispatcher). The correction
        learns from the raw prediction (a plain average of actual / raw, stable however many
        requests were predicted with the old correction) — for TPOT, the raw prediction in
        hindsight of the prefills placed after it (`_tpot_in_hindsight`); the error reported is
        the corrected prediction's, the one the policy decided with. `decoded_tokens`: the
        tokens after the first (what tpot_s is the mean over)."""
        hindsight_tpot = self._tpot_in_hindsight(predicted, tpot_s, decoded_tokens)
        for kind, engine, used_ms, raw_ms, got_s in (
                (TTFT, predicted.prefill_engine, predicted.ttft_ms, predicted.raw_ttft_ms,
                 ttft_s),
                (TPOT, predicted.decode_engine, predicted.tpot_ms, hindsight_tpot, tpot_s)):
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
            self.recent.observe(kind, predicted.pattern, ratio)
            recent = self._recent.setdefault((kind, predicted.pattern), [])
            recent.append(abs(math.log(ratio)))
            if len(recent) > _KEEP:
                del recent[: len(recent) - _KEEP]
            if self.sink is not None:
                self.sink(kind, predicted.pattern, ratio)

    def _tpot_in_hindsight(self, predicted: PredictedOutcome, tpot_s: float | None,
                           decoded_tokens: int) -> float:
        """The raw TPOT prediction with the prefill work placed on the decode engine since, per
        decoded token, in place of the share of it the prediction foresaw — more when more came,
        less when fewer did (crediting only the excess would make every quiet stretch read as
        the step model over-predicting, and the correction learn optimism). The work placed
        since counts at most as the request's whole decode time (work placed while it decoded
        but run after it ended did not slow it)."""
        raw = predicted.raw_tpot_ms
        if predicted.placed_ms is None or tpot_s is None or decoded_tokens <= 0 \
                or not _usable(raw):
            return raw
        decode_ms = tpot_s * 1000.0 * decoded_tokens
        since = min(decode_ms, max(0.0, self.placed(predicted.decode_engine)
                                   - predicted.placed_ms))
        in_hindsight = raw - predicted.foreseen_prefill_ms + since / decoded_tokens
        # placement.py's foreseen share is part of its raw prediction (_foreseen_prefill), so this
        # is at least the plain decode step there; a prediction that claims to have foreseen more
        # than it predicted falls back to the raw one.
        return in_hindsight if _usable(in_hindsight) else raw

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
