"""Which pattern the adaptive policy runs, from live signals, with hysteresis.

Signals (smoothed over recent requests): the share of each prompt already cached on its best
engine, the ratio of predicted prefill time to decode time, and the decode engines' TPOT slack;
plus SLO attainment per pattern over the outcome window. The rule, in order:

  cache hits high                      -> cache_aware (most of the prefill is saved anyway)
  prefill-heavy, decodes have slack    -> slo_mux     (prefills ride on the decode slack)
  prefill-heavy, decodes without slack -> pd          (isolate decodes from prefill)
  decode-heavy                         -> tandem      (the lead also takes decode work)
  otherwise                            -> balanced_pd
  ...unless another pattern's recent SLO attainment beats the current one's by a margin.

A new choice must win `hysteresis` evaluations in a row, and the last switch must be at least
`min_dwell_s` old, so the policy does not flap.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pyrouter.outcomes import RecentOutcomes


@dataclass(slots=True)
class AdaptiveSignals:
    cache_hit: float = 0.0          # matched / prompt on the best engine, smoothed
    prefill_decode_ratio: float = 1.0  # predicted prefill ms / (max_tokens x decode step ms)
    decode_slack_ok: bool = True    # no decoding engine predicted over its TPOT SLO
    alpha: float = 0.2              # smoothing weight of each new request
    seen: int = 0

    def observe(self, cache_hit: float, ratio: float | None, slack_ok: bool) -> None:
        a = self.alpha if self.seen else 1.0  # the first request sets the starting point
        self.seen += 1
        self.cache_hit += a * (cache_hit - self.cache_hit)
        if ratio is not None:
            self.prefill_decode_ratio += a * (ratio - self.prefill_decode_ratio)
        self.decode_slack_ok = slack_ok


@dataclass(slots=True)
class AdaptiveThresholds:
    hit_threshold: float = 0.5
    prefill_heavy: float = 1.0
    decode_heavy: float = 0.2
    attainment_margin: float = 0.15
    min_samples: int = 10
    window_s: float = 30.0


def propose(signals: AdaptiveSignals, t: AdaptiveThresholds, current: str,
            outcomes: RecentOutcomes, candidates: list[str]) -> tuple[str, str]:
    """(pattern, reason) the signals point to now."""
    if signals.cache_hit >= t.hit_threshold:
        choice = ("cache_aware", "cache_hits")
    elif signals.prefill_decode_ratio >= t.prefill_heavy:
        choice = (("slo_mux", "prefill_heavy_with_slack") if signals.decode_slack_ok
                  else ("pd", "prefill_heavy_interference"))
    elif signals.prefill_decode_ratio <= t.decode_heavy:
        choice = ("tandem", "decode_heavy")
    else:
        choice = ("balanced_pd", "mixed")
    here = outcomes.summary(current, t.window_s)
    if here.with_slo >= t.min_samples and here.attainment is not None:
        for other in candidates:
            there = outcomes.summary(other, t.window_s)
            if (other != current and there.with_slo >= t.min_samples
                    and there.attainment is not None
                    and there.attainment > here.attainment + t.attainment_margin):
                choice = (other, "attainment")
    if choice[0] not in candidates:
        return current, "candidate_not_allowed"
    return choice


@dataclass(slots=True)
class Hysteresis:
    current: str
    needed: int = 2
    min_dwell_s: float = 5.0
    last_switch: float = -1e18
    _pending: str = ""
    _votes: int = 0
    switches: list[str] = field(default_factory=list)

    def vote(self, proposal: str, reason: str, now: float) -> str | None:
        """The switch note when `proposal` has won enough times in a row, else None."""
        if proposal == self.current:
            self._pending, self._votes = "", 0
            return None
        self._votes = self._votes + 1 if proposal == self._pending else 1
        self._pending = proposal
        if self._votes < self.needed or now - self.last_switch < self.min_dwell_s:
            return None
        note = f"{self.current}->{proposal} ({reason})"
        self.current, self.last_switch = proposal, now
        self._pending, self._votes = "", 0
        self.switches.append(note)
        return note
