"""Synthetic traces that cover the space of workloads rather than a few points in it.

A trace is declared by `SyntheticParams`: lognormal prompt and output lengths (a median and a
tail, the sigma of the log), the correlation of their logs (a Gaussian copula), prefix sharing
(a fraction of requests opens with one of a few shared prefixes) and arrival burstiness (gamma
gaps with a coefficient of variation, optionally modulated by on/off phases). `params_for_seed`
draws those parameters from declared ranges, so one integer names a whole workload: a seed
picks a regime (decode-heavy, prefill-heavy, short chat, or anything in between; `regime_of`),
then draws every parameter within that regime's ranges.

The generator seed fixes the parameters; the run's own seed (the tournament's `--seed`) draws
the lengths, prefixes and gaps from them, as sonnet's seed does, and the salt decides only the
prompts' token content. Lengths are at scale 1 (a datacenter model); `scale` and
`output_scale` size them for a profile, and prompt + output is clipped to the model's context.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from switchyard_bench.workloads.base import RequestShape, Workload, WorkloadError, check_positive
from switchyard_bench.workloads.vocabulary import RealVocabulary


@dataclass(frozen=True, slots=True)
class Lognormal:
    median: float  # tokens
    sigma: float  # of the log: the tail (p90 = median x e^(1.28 sigma))

    def __post_init__(self) -> None:
        check_positive(median=self.median)
        if not 0 <= self.sigma <= 3:
            raise WorkloadError(f"a length's sigma must be in [0, 3], got {self.sigma}")


@dataclass(frozen=True, slots=True)
class OnOff:
    """Arrivals alternate an on phase at `peak_ratio` times the off phase's rate; the mean rate
    is kept. A period (one on and one off phase) lasts `period_requests` mean gaps."""

    period_requests: float
    on_fraction: float  # of each period's time
    peak_ratio: float

    def __post_init__(self) -> None:
        check_positive(period_requests=self.period_requests)
        if not 0 < self.on_fraction < 1 or not self.peak_ratio >= 1:
            raise WorkloadError("on/off: on fraction in (0, 1), peak ratio >= 1")

    def warp(self, unit: np.ndarray) -> np.ndarray:
        """Offsets of a unit-rate process in operational time -> in real time (mean rate 1),
        where the rate is peak_ratio x higher in the on phases; each period starts on."""
        off_rate = 1.0 / (self.on_fraction * self.peak_ratio + 1.0 - self.on_fraction)
        on_rate = self.peak_ratio * off_rate
        period = self.period_requests
        periods, into = np.divmod(unit, period)
        on_work = self.on_fraction * period * on_rate  # arrivals expected in one on phase
        in_on = into < on_work
        within = np.where(in_on, into / on_rate,
                          self.on_fraction * period + (into - on_work) / off_rate)
        warped: np.ndarray = periods * period + within
        return warped


@dataclass(frozen=True, slots=True)
class SyntheticParams:
    regime: str
    prompt: Lognormal
    output: Lognormal
    rho: float  # correlation of log prompt and log output length
    prefix_share: float  # fraction of requests opening with a shared prefix
    prefix_tokens: int  # a shared prefix's length (a shorter prompt keeps all but its last token)
    prefixes: int  # distinct shared prefixes, each equally likely
    arrival_cv: float  # coefficient of variation of the gaps (1: Poisson)
    on_off: OnOff | None = None

    def __post_init__(self) -> None:
        check_positive(prefix_tokens=self.prefix_tokens, prefixes=self.prefixes,
                       arrival_cv=self.arrival_cv)
        if not -1 < self.rho < 1 or not 0 <= self.prefix_share <= 1:
            raise WorkloadError("rho must be in (-1, 1) and prefix share in [0, 1]")


@dataclass(frozen=True, slots=True)
class Regime:
    """Where a regime's medians lie (log-uniform between the bounds, tokens at scale 1)."""

    name: str
    prompt_median: tuple[float, float]
    output_median: tuple[float, float]


REGIMES = (
    # Long decodes beside ~1k-token prompts: the mix issue 46 found adaptive losing on.
    Regime("decode-heavy", (500.0, 4000.0), (200.0, 600.0)),
    Regime("prefill-heavy", (2000.0, 8000.0), (8.0, 64.0)),
    Regime("short-chat", (50.0, 600.0), (30.0, 300.0)),
    Regime("mixed", (100.0, 8000.0), (8.0, 600.0)),
)
# Ranges every regime shares.
SIGMA = (0.2, 0.9)  # of each length's log
RHO = (-0.5, 0.7)
NO_SHARING = 0.4  # chance a workload shares no prefix at all
PREFIX_SHARE = (0.1, 0.9)
PREFIX_OF_MEDIAN = (0.1, 0.8)  # a shared prefix's length, as a share of the prompt median
PREFIXES = (1, 32)
ARRIVAL_CV = (0.7, 3.0)
ON_OFF_CHANCE = 0.3
PERIOD_REQUESTS = (20.0, 100.0)
ON_FRACTION = (0.2, 0.5)
PEAK_RATIO = (2.0, 8.0)


def _log_uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    low, high = bounds
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def regime_of(seed: int) -> Regime:
    """Stratified rather than drawn: seeds 2r and 2r + 1 take regime r mod 4, so any four
    consecutive even (or odd) seeds hold one workload of each regime and a handful of
    generated workloads already covers them all."""
    return REGIMES[(seed // 2) % len(REGIMES)]


def params_for_seed(seed: int) -> SyntheticParams:
    """The workload generator seed `seed` names: a regime, then each parameter in its range."""
    if seed < 0:
        raise WorkloadError(f"a generator seed is >= 0, got {seed}")
    rng = np.random.default_rng([0x5EED, seed])
    regime = regime_of(seed)
    prompt = Lognormal(_log_uniform(rng, regime.prompt_median), float(rng.uniform(*SIGMA)))
    output = Lognormal(_log_uniform(rng, regime.output_median), float(rng.uniform(*SIGMA)))
    rho = float(rng.uniform(*RHO))
    share = 0.0 if rng.random() < NO_SHARING else float(rng.uniform(*PREFIX_SHARE))
    prefix_tokens = max(1, round(prompt.median * rng.uniform(*PREFIX_OF_MEDIAN)))
    prefixes = int(round(_log_uniform(rng, PREFIXES)))
    cv = _log_uniform(rng, ARRIVAL_CV)
    on_off = None
    if rng.random() < ON_OFF_CHANCE:
        on_off = OnOff(float(rng.uniform(*PERIOD_REQUESTS)), float(rng.uniform(*ON_FRACTION)),
                       _log_uniform(rng, PEAK_RATIO))
    return SyntheticParams(regime.name, prompt, output, rho, share, prefix_tokens, prefixes, cv,
                           on_off)


class SyntheticArrivals:
    """Gamma gaps with the workload's CV at mean rate `rate`, warped by its on/off phases; the
    same seed at another rate gives the same pattern stretched by the ratio of the rates."""

    def __init__(self, params: SyntheticParams, generator_seed: int, rate: float) -> None:
        check_positive(rate=rate)
        self.params, self.generator_seed, self.rate = params, generator_seed, rate

    def offsets(self, count: int, seed: int) -> list[float]:
        if count <= 0:
            return []
        shape = 1.0 / self.params.arrival_cv ** 2
        rng = np.random.default_rng([0xA771, self.generator_seed, seed])
        gaps = rng.gamma(shape, 1.0 / shape, size=count - 1)
        unit = np.concatenate(([0.0], np.cumsum(gaps)))
        if self.params.on_off is not None:
            unit = self.params.on_off.warp(unit)
        return (unit / self.rate).tolist()


class SyntheticWorkload(Workload):
    """The workload `params` declare, named gen-N after the generator seed N (which, with
    `seed`, also seeds its draws)."""

    def __init__(self, vocab: RealVocabulary, params: SyntheticParams, generator_seed: int,
                 seed: int = 0, scale: float = 1.0, output_scale: float = 1.0,
                 max_context: int | None = None) -> None:
        check_positive(scale=scale, output_scale=output_scale)
        if max_context is not None and max_context < 2:
            raise WorkloadError(f"max context must hold a prompt and an output, got {max_context}")
        self.params = params
        self.generator_seed, self.seed = generator_seed, seed
        self.scale, self.output_scale, self.max_context = scale, output_scale, max_context
        self.name = f"gen-{generator_seed}"
        self._vocab = vocab

    def draw(self, index: int) -> tuple[int, int, int | None]:
        """Request `index`'s prompt and output lengths and its shared prefix (None: its own),
        a function of (generator seed, seed, index) only."""
        p = self.params
        rng = np.random.default_rng([0x1E75, self.generator_seed, self.seed, index])
        z_prompt, z_free = rng.standard_normal(2)
        z_output = p.rho * z_prompt + math.sqrt(1.0 - p.rho ** 2) * z_free
        n_in = max(1, round(p.prompt.median * self.scale * math.exp(p.prompt.sigma * z_prompt)))
        n_out = max(1, round(p.output.median * self.output_scale
                             * math.exp(p.output.sigma * z_output)))
        if self.max_context is not None:  # the tail is clipped to what the model holds
            n_out = min(n_out, self.max_context - 1)
            n_in = min(n_in, self.max_context - n_out)
        prefix = int(rng.integers(p.prefixes)) if rng.random() < p.prefix_share else None
        return n_in, n_out, prefix

    def shape(self, index: int, salt: int) -> RequestShape:
        n_in, n_out, prefix = self.draw(index)
        if prefix is None:
            return RequestShape(self._vocab.block(n_in, self.name, salt, index), n_out)
        shared = min(max(1, round(self.params.prefix_tokens * self.scale)), n_in - 1)
        head = self._vocab.block(shared, self.name, "prefix", salt, prefix)
        return RequestShape(head + self._vocab.block(n_in - shared, self.name, salt, index),
                            n_out)

    @classmethod
    def from_seed(cls, vocab: RealVocabulary, generator_seed: int, seed: int = 0,
                  scale: float = 1.0, output_scale: float = 1.0,
                  max_context: int | None = None) -> SyntheticWorkload:
        """The workload generator seed `generator_seed` names (`params_for_seed`)."""
        return cls(vocab, params_for_seed(generator_seed), generator_seed, seed, scale,
                   output_scale, max_context)

    def arrivals(self, rate: float) -> SyntheticArrivals:
        return SyntheticArrivals(self.params, self.generator_seed, rate)

    def describe(self) -> dict[str, Any]:
        p = self.params
        on_off = p.on_off
        return {"workload": self.name, "regime": p.regime, "seed": self.seed,
                "prompt": f"median {p.prompt.median * self.scale:.0f} sigma {p.prompt.sigma:.2f}",
                "output": f"median {p.output.median * self.output_scale:.0f} "
                          f"sigma {p.output.sigma:.2f}",
                "rho": round(p.rho, 3), "prefix_share": round(p.prefix_share, 3),
                "prefix_tokens": p.prefix_tokens, "prefixes": p.prefixes,
                "arrival_cv": round(p.arrival_cv, 3),
                "on_off": None if on_off is None else
                f"period {on_off.period_requests:.0f} requests, on {on_off.on_fraction:.2f}, "
                f"peak x{on_off.peak_ratio:.2f}"}
