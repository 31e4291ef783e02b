"""LatencyModel: the engine's step time as a linear function of the step's shape, fitted on the
start-up profile (latency_profile.py) plus recent real steps, sent to routers in Stats.

The model, in the spirit of DistServe's and Vidur's linear step models::

    step_ms = c_const                              (per step: scheduling, weights read once)
            + c_prefill_tokens    · Σ n            (new prefill tokens: the matmuls, per token)
            + c_prefill_seqs      · chunks         (per prefill sequence: its own attention calls)
            + c_prefill_attention · Σ n·ctx + n(n+1)/2  (prefill query-key pairs: attention FLOPs)
            + c_prefill_context   · Σ ctx + n      (KV positions each prefill chunk gathers)
            + c_decode_seqs       · B              (a decode's matmuls, logits row and sampling)
            + c_decode_context    · Σ ctx_b        (KV positions decodes read: memory bound)
            + c_decode_context_over · max(0, Σ ctx_b - K)  (the part past the last-level cache)

summed over the step's prefill chunks (n new tokens on top of ctx cached ones) and its B
decodes. Why these terms: a step's matmul cost is linear in the tokens it runs (prefill tokens
and decodes separately, since a decode also pays a logits row and sampling); attention is
linear in query-key pairs for prefill and in KV read for decodes (the torch backend copies each
chunk's whole context, and every decode's, once per layer, which on CPU costs more than the
FLOPs); several short prefills in one step each pay their own attention calls. On a CPU the
decodes' K/V gathered per layer stops fitting the last-level cache past K positions and each
further position costs several times more (measured here: 8 x 1025 decodes 190 ms of CPU, 32 x
1025 1370 ms, not 760), so a hinge at K = L3 bytes / K+V bytes per position per layer joins the
linear terms; the router evaluates it as `decode_context_over:K`. Terms are named
in `Stats` so router_core (router_core/src/latency_model.rs, same definitions) evaluates the
same model; `VERSION` changes when a definition does.

The fit minimises the sum of absolute relative errors (each row divided by its measured time),
so a 5 ms decode step counts as much as a 2 s prefill, and steps stalled by a noisy neighbour
(on a shared machine they are many, and always slow, never fast) pull the fit far less than in
least squares; coefficients are kept non-negative (a term that would go negative is dropped and
the rest refitted) so predictions grow with work outside the profiled grid. Recent real steps
join the profile rows in the fit, so the model follows a machine that got slower or faster;
on a CPU engine the fit is on CPU time and a live wall/CPU ratio turns it into wall time (see
LatencyModel), because on a shared machine the same step's wall time swings 2x with the
neighbours' load while its CPU time stays within a few percent.
"""
from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

VERSION = "switchyard-step-v1"
# Every term router_core knows, in its order; FIT_TERMS is the subset this engine fits (all;
# the hinge only when the engine has a knee).
TERMS = ("const", "prefill_tokens", "prefill_seqs", "prefill_attention", "prefill_context",
         "decode_seqs", "decode_context", "decode_context_over")
FIT_TERMS = TERMS
HINGE = "decode_context_over"
_REFIT_EVERY = 16  # new rows between refits (Stats asks twice a second; a fit is ~1 ms)
_RATIO_WINDOW = 32  # steps whose wall/CPU ratio scales the predictions


@dataclass(frozen=True, slots=True)
class StepShape:
    """One step: prefill chunks as (cached_before, new_tokens) plus decodes and the KV positions
    they read in all (each decode's context including its new token)."""

    prefill_chunks: tuple[tuple[int, int], ...] = ()
    decode_seqs: int = 0
    decode_context: int = 0

    @property
    def prefill_tokens(self) -> int:
        return sum(n for _, n in self.prefill_chunks)

    def features(self, knee: float = math.inf) -> dict[str, float]:
        if not self.prefill_chunks:  # most steps decode only: nothing to sum over
            return {"const": 1.0, "prefill_tokens": 0.0, "prefill_seqs": 0.0,
                    "prefill_attention": 0.0, "prefill_context": 0.0,
                    "decode_seqs": float(self.decode_seqs),
                    "decode_context": float(self.decode_context),
                    HINGE: max(0.0, self.decode_context - knee)}
        chunks = [(float(c), float(n)) for c, n in self.prefill_chunks if n > 0]
        return {
            "const": 1.0,
            "prefill_tokens": sum(n for _, n in chunks),
            "prefill_seqs": float(len(chunks)),
            "prefill_attention": sum(n * c + n * (n + 1) / 2 for c, n in chunks),
            "prefill_context": sum(c + n for c, n in chunks),
            "decode_seqs": float(self.decode_seqs),
            "decode_context": float(self.decode_context),
            HINGE: max(0.0, self.decode_context - knee),
        }


def last_level_cache_bytes() -> int | None:
    """This CPU's last-level cache size (Linux sysfs), or None when it cannot be read."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    sizes: dict[int, int] = {}
    try:
        for entry in os.listdir(base):
            if not entry.startswith("index"):
                continue
            with open(os.path.join(base, entry, "level"), encoding="ascii") as f:
                level = int(f.read())
            with open(os.path.join(base, entry, "size"), encoding="ascii") as f:
                text = f.read().strip()
            unit = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            sizes[level] = int(text.rstrip("KM")) * unit
    except (OSError, ValueError):
        return None
    return sizes[max(sizes)] if sizes else None


def decode_knee(kv_bytes_per_position: int) -> int | None:
    """K for the hinge: KV positions whose K and V of one layer fill the last-level cache."""
    cache = last_level_cache_bytes()
    return cache // kv_bytes_per_position if cache and kv_bytes_per_position > 0 else None


def _fit_weighted(rows: np.ndarray, step_ms: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Least squares of (rows·c - ms)·scale with c >= 0: a term whose coefficient would go
    negative is dropped and the rest refitted (a handful of terms: a few solves at most)."""
    x, y = rows * scale[:, None], step_ms * scale
    active = [j for j in range(rows.shape[1]) if np.any(rows[:, j])]
    coeffs = np.zeros(rows.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coeffs[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return coeffs


def fit_nonnegative(rows: np.ndarray, step_ms: np.ndarray, rounds: int = 8) -> np.ndarray:
    """Coefficients >= 0 minimising Σ |rows·c - ms| / ms: the median-like relative error, by
    iteratively reweighted least squares (a row's weight is 1/sqrt of its last relative
    residual), so steps stalled by a neighbour's burst do not drag the fit up."""
    base = 1.0 / np.maximum(step_ms, 1e-3)
    scale = base
    coeffs = _fit_weighted(rows, step_ms, scale)
    for _ in range(rounds):
        residual = np.abs(rows @ coeffs - step_ms) * base
        scale = base / np.sqrt(np.maximum(residual, 0.01))
        coeffs = _fit_weighted(rows, step_ms, scale)
    return coeffs


class StepSample(NamedTuple):
    features: list[float]  # in LatencyModel.terms order
    wall_ms: float
    cpu_ms: float  # process CPU time of the step (= wall_ms where CPU time is not measured)


class LatencyModel:
    """clock="cpu" (CPU engines): the terms are fitted on each step's process CPU time, which
    does not move when neighbours compete for the cores, and predictions are scaled to wall
    time by the median wall/CPU ratio of the last steps — so the model tracks the machine's
    current contention within a few steps instead of carrying the profile's. clock="wall"
    (GPU engines: host CPU time says nothing about kernels): fitted on wall time directly."""

    def __init__(self, window: int = 256, terms: Sequence[str] = FIT_TERMS,
                 clock: str = "cpu", knee: int | None = None) -> None:
        unknown = set(terms) - set(TERMS)
        if unknown:
            raise ValueError(f"unknown latency model terms {sorted(unknown)}")
        if clock not in ("cpu", "wall"):
            raise ValueError(f"clock must be 'cpu' or 'wall', got {clock!r}")
        # The hinge needs its knee: without one (GPU, unknown cache) the term is left out.
        self.terms = tuple(t for t in terms if t != HINGE or knee)
        self.knee = knee
        self.clock = clock
        self.source = "none"  # "profile" (measured at start), "cache" (loaded), "online" (live only)
        self._profile: list[StepSample] = []
        self._live: deque[StepSample] = deque(maxlen=window)
        self._ratios: deque[float] = deque(maxlen=_RATIO_WINDOW)  # recent live wall / CPU
        self._profile_ratio = 1.0
        self._step_ms: deque[float] = deque(maxlen=window)
        self._decode_only_ms: deque[float] = deque(maxlen=window)
        self._recording_profile = False
        self._fitted: np.ndarray | None = None  # in the fit clock's ms
        self._unfitted = 0  # rows recorded since the last fit
        self._profile_changed = False

    def __len__(self) -> int:
        return len(self._profile) + len(self._live)

    def record(self, wall_ms: float, shape: StepShape, cpu_ms: float | None = None) -> None:
        feats = shape.features(self._knee())
        cpu = float(cpu_ms) if cpu_ms and cpu_ms > 0 else float(wall_ms)
        sample = StepSample([feats[t] for t in self.terms], float(wall_ms), cpu)
        if self._recording_profile:
            self._profile.append(sample)
        else:
            self._live.append(sample)
            self._ratios.append(sample.wall_ms / sample.cpu_ms)
            self._step_ms.append(wall_ms)
            if shape.decode_seqs and not shape.prefill_chunks:
                self._decode_only_ms.append(wall_ms)
        self._unfitted += 1

    @contextmanager
    def recording_profile(self) -> Iterator[None]:
        """Steps recorded inside go to the profile (kept for good), not the live window."""
        self._recording_profile = True
        try:
            yield
        finally:
            self._recording_profile = False
            self._profile_updated("profile")

    def _profile_updated(self, source: str) -> None:
        self.source = source
        self._profile_changed = True
        ratios = [s.wall_ms / s.cpu_ms for s in self._profile]
        self._profile_ratio = float(np.median(ratios)) if ratios else 1.0

    def clear_live(self) -> None:
        """Forget live steps (the profile's warm-up, say); the profile stays."""
        self._live.clear()
        self._ratios.clear()
        self._step_ms.clear()
        self._decode_only_ms.clear()
        self._profile_changed = True

    def profile_rows(self) -> list[StepSample]:
        return list(self._profile)

    def load_profile(self, rows: Sequence[Sequence[Any]], source: str) -> None:
        """Rows as profile_rows() gives them (or their JSON form: [features, wall_ms, cpu_ms])."""
        samples = [StepSample([float(x) for x in feats], float(wall), float(cpu))
                   for feats, wall, cpu in rows]
        if any(len(s.features) != len(self.terms) or s.cpu_ms <= 0 for s in samples):
            raise ValueError(f"profile rows need {len(self.terms)} features and times > 0")
        self._profile = samples
        self._profile_updated(source)

    def _knee(self) -> float:
        return float(self.knee) if self.knee else math.inf

    def _name(self, term: str) -> str:
        return f"{term}:{self.knee}" if term == HINGE else term

    def _target(self, sample: StepSample) -> float:
        return sample.cpu_ms if self.clock == "cpu" else sample.wall_ms

    def wall_per_fit_ms(self) -> float:
        """Wall ms per ms of the fit's clock now: the median over the last steps (1 for "wall")."""
        if self.clock == "wall":
            return 1.0
        return float(np.median(self._ratios)) if self._ratios else self._profile_ratio

    def _fit(self) -> np.ndarray | None:
        if (self._profile_changed or self._unfitted >= _REFIT_EVERY
                or (self._unfitted and self._fitted is None)):
            rows = self._profile + list(self._live)
            if rows:
                x = np.asarray([s.features for s in rows], dtype=np.float64)
                y = np.asarray([self._target(s) for s in rows], dtype=np.float64)
                self._fitted = fit_nonnegative(x, y)
                if self.source == "none":
                    self.source = "online"
            self._unfitted = 0
            self._profile_changed = False
        return self._fitted

    def coefficients(self) -> dict[str, float]:
        """term -> wall ms per unit of its feature, at the current contention; {} before any step.
        The hinge is named with its knee, as router_core reads it: `decode_context_over:K`."""
        fitted = self._fit()
        if fitted is None:
            return {}
        scale = self.wall_per_fit_ms()
        return {self._name(t): float(c) * scale for t, c in zip(self.terms, fitted, strict=True)}

    def predict(self, shape: StepShape) -> float:
        fitted = self._fit()
        if fitted is None:
            return 0.0
        feats = shape.features(self._knee())
        scale = self.wall_per_fit_ms()
        return sum(float(c) * scale * feats[t] for t, c in zip(self.terms, fitted, strict=True))

    def fit_error(self) -> float:
        """Median relative error of the fit on the profile rows, in the fit's clock (0 without a
        profile): how well the terms explain the profiled steps."""
        fitted = self._fit()
        if not self._profile or fitted is None:
            return 0.0
        x = np.asarray([s.features for s in self._profile])
        y = np.asarray([self._target(s) for s in self._profile])
        return float(np.median(np.abs(x @ fitted - y) / y))

    def recent_step_ms(self, n: int = 32) -> list[float]:
        return list(self._step_ms)[-n:]

    def decode_step_ms(self, n: int = 32) -> float:
        recent = list(self._decode_only_ms)[-n:]
        return float(np.mean(recent)) if recent else 0.0
