"""Arrival processes: the mean rate and the burstiness (squared coefficient of variation of the
gaps = 1 / burstiness) of gamma arrivals, Poisson as burstiness 1, and trace time scaling."""
from __future__ import annotations

import math

import numpy as np
import pytest

from switchyard_bench.workloads import ArrivalProcess, WorkloadError
from switchyard_bench.workloads.arrivals import scaled_trace_offsets

N = 40_000


def _gaps(process: ArrivalProcess, seed: int = 1) -> np.ndarray:
    offsets = process.offsets(N, seed)
    assert offsets[0] == 0.0 and len(offsets) == N
    return np.diff(offsets)


@pytest.mark.parametrize("rate,burstiness", [(4.0, 1.0), (0.5, 1.0), (10.0, 0.25),
                                             (2.0, 4.0)])
def test_rate_and_burstiness(rate, burstiness):
    gaps = _gaps(ArrivalProcess(rate, burstiness))
    assert (gaps >= 0).all()
    assert 1 / gaps.mean() == pytest.approx(rate, rel=0.03)
    cv2 = gaps.var() / gaps.mean() ** 2
    assert cv2 == pytest.approx(1 / burstiness, rel=0.08)


def test_poisson_gaps_are_exponential():
    gaps = _gaps(ArrivalProcess(2.0))
    # P(gap > mean) = e^-1 for an exponential distribution
    assert (gaps > 0.5).mean() == pytest.approx(math.exp(-1), abs=0.01)


def test_seeded_and_infinite_rate():
    p = ArrivalProcess(3.0, 0.5)
    assert p.offsets(50, 7) == p.offsets(50, 7)
    assert p.offsets(50, 7) != p.offsets(50, 8)
    assert ArrivalProcess(math.inf).offsets(5, 0) == [0.0] * 5
    assert p.offsets(0, 0) == []


@pytest.mark.parametrize("rate,burstiness", [(0.0, 1.0), (-1.0, 1.0), (math.nan, 1.0),
                                             (1.0, 0.0), (1.0, math.inf)])
def test_bad_parameters_are_clear_errors(rate, burstiness):
    with pytest.raises(WorkloadError):
        ArrivalProcess(rate, burstiness)


def test_trace_time_scale():
    assert scaled_trace_offsets([0.0, 1.0, 3.0], 0.5) == [0.0, 0.5, 1.5]
    with pytest.raises(WorkloadError):
        scaled_trace_offsets([0.0], 0.0)
