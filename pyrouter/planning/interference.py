"""What prefills cost the decodes that share their engine: the TPOT a decode sees over its life.

A decode produces one token per engine step. A step that also carries a prefill chunk takes
longer by the chunk's work, so over a decode's life its mean time per token is

    tpot = decode_step / (1 - f)

where f is the share of the engine's time spent on prefill work beyond the plain decode step
(over W seconds: W = n·decode_step + prefill_extra(W), tpot = W / n). f is not a threshold: the
router knows every prefill it places, and router_core predicts each one's extra time, so
`PrefillShare` keeps, per engine, that extra time decayed over the horizon a decode lives
(`horizon_s`, the recent requests' predicted decode time), and f = what it holds / horizon.
"""
from __future__ import annotations

import math

_F_MAX = 0.95          # an engine never spends all its time on prefill (it would never decode)
_HORIZON_S = (0.05, 120.0)
_ALPHA = 0.1


class PrefillShare:
    def __init__(self) -> None:
        self._held: dict[str, tuple[float, float]] = {}  # engine -> (extra ms, at)
        self.horizon_s = 1.0
        self._horizon_seen = 0

    def note_decode_time(self, decode_s: float) -> None:
        """A request placed to meet its SLO: its predicted decode time (output tokens x TPOT),
        the horizon over which prefills placed now slow the decodes running now."""
        if not (decode_s > 0 and math.isfinite(decode_s)):
            return
        alpha = max(_ALPHA, 1.0 / (self._horizon_seen + 1))
        self._horizon_seen += 1
        horizon = self.horizon_s + alpha * (decode_s - self.horizon_s)
        self.horizon_s = min(_HORIZON_S[1], max(_HORIZON_S[0], horizon))

    def _held_now(self, engine: str, now: float) -> float:
        held, at = self._held.get(engine, (0.0, now))
        return held * math.exp(-(now - at) / self.horizon_s)

    def share(self, engine: str, now: float, extra_ms: float = 0.0) -> float:
        """f on `engine`, with `extra_ms` more prefill placed there now."""
        held = self._held_now(engine, now) + max(0.0, extra_ms)
        return min(_F_MAX, held / (self.horizon_s * 1000.0))

    def add(self, engine: str, now: float, extra_ms: float) -> None:
        """A prefill with `extra_ms` of work beyond the decode steps was placed on `engine`."""
        if extra_ms > 0 and math.isfinite(extra_ms):
            self._held[engine] = (self._held_now(engine, now) + extra_ms, now)


def tpot_under(decode_step_ms: float, share: float) -> float:
    """A decode's mean time per token on an engine spending `share` of its time on prefill."""
    return decode_step_ms / (1.0 - min(_F_MAX, max(0.0, share)))


def prefill_extra_ms(prefill_ms: float, prefill_steps: int, decode_step_now_ms: float) -> float:
    """What a chunked prefill adds to the steps its engine's decodes were taking anyway."""
    if not math.isfinite(prefill_ms):
        return 0.0
    return max(0.0, prefill_ms - prefill_steps * max(0.0, decode_step_now_ms))
