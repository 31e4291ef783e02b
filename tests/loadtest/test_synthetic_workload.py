"""The synthetic workload generator: one seed names one workload; its parameters stay in their
declared ranges; the lengths have the medians, tails and correlation asked for and fit the
context; shared prefixes are really shared; arrivals keep their mean rate and burstiness."""
from __future__ import annotations

import math

import numpy as np
import pytest

from switchyard_bench.workloads import RealVocabulary, WorkloadError, schedule
from switchyard_bench.workloads import synthetic as gen
from switchyard_bench.workloads.synthetic import (
    Lognormal,
    OnOff,
    SyntheticArrivals,
    SyntheticParams,
    SyntheticWorkload,
    params_for_seed,
)

SEEDS = range(200)


def _params(rho: float = 0.0, share: float = 0.0, cv: float = 1.0,
            on_off: OnOff | None = None) -> SyntheticParams:
    return SyntheticParams("test", Lognormal(1000.0, 0.6), Lognormal(250.0, 0.5), rho, share,
                           300, 4, cv, on_off)


def _within(value: float, bounds: tuple[float, float]) -> bool:
    return bounds[0] <= value <= bounds[1]


def test_a_generator_seed_names_one_workload(vocab: RealVocabulary) -> None:
    assert params_for_seed(17) == params_for_seed(17)
    assert len({params_for_seed(s) for s in range(20)}) == 20
    a, b = (SyntheticWorkload.from_seed(vocab, 17, seed=2) for _ in range(2))
    assert [a.shape(i, 5) for i in range(30)] == [b.shape(i, 5) for i in range(30)]
    assert a.name == "gen-17" and a.describe()["regime"] == params_for_seed(17).regime
    other_run = SyntheticWorkload.from_seed(vocab, 17, seed=3)  # the run's seed: other draws
    assert [a.draw(i) for i in range(30)] != [other_run.draw(i) for i in range(30)]
    with pytest.raises(WorkloadError):
        params_for_seed(-1)


def test_parameters_land_in_their_declared_ranges() -> None:
    regimes = {r.name: r for r in gen.REGIMES}
    for seed in SEEDS:
        p = params_for_seed(seed)
        regime = regimes[p.regime]
        assert regime is gen.regime_of(seed)
        assert _within(p.prompt.median, regime.prompt_median)
        assert _within(p.output.median, regime.output_median)
        assert _within(p.prompt.sigma, gen.SIGMA) and _within(p.output.sigma, gen.SIGMA)
        assert _within(p.rho, gen.RHO) and _within(p.arrival_cv, gen.ARRIVAL_CV)
        assert _within(p.prefixes, gen.PREFIXES)
        assert p.prefix_share == 0.0 or _within(p.prefix_share, gen.PREFIX_SHARE)
        assert _within(p.prefix_tokens / p.prompt.median,
                       (gen.PREFIX_OF_MEDIAN[0] - 0.01, gen.PREFIX_OF_MEDIAN[1] + 0.01))
        if p.on_off is not None:
            assert _within(p.on_off.period_requests, gen.PERIOD_REQUESTS)
            assert _within(p.on_off.on_fraction, gen.ON_FRACTION)
            assert _within(p.on_off.peak_ratio, gen.PEAK_RATIO)
    drawn = [params_for_seed(s) for s in SEEDS]
    # The ranges are covered, not one corner of them: both signs of rho, sharing and none,
    # bursty and smooth arrivals, on/off phases in some workloads only.
    assert min(p.rho for p in drawn) < -0.3 and max(p.rho for p in drawn) > 0.5
    assert 0.25 < sum(p.prefix_share == 0 for p in drawn) / len(drawn) < 0.55
    assert min(p.arrival_cv for p in drawn) < 0.8 and max(p.arrival_cv for p in drawn) > 2.5
    assert 0.2 < sum(p.on_off is not None for p in drawn) / len(drawn) < 0.4


def test_four_consecutive_seeds_of_a_parity_hold_every_regime() -> None:
    names = {r.name for r in gen.REGIMES}
    assert "decode-heavy" in names and "prefill-heavy" in names and "short-chat" in names
    for first in (0, 1, 10, 31):
        assert {gen.regime_of(first + 2 * k).name for k in range(4)} == names


@pytest.mark.parametrize("rho", [0.6, -0.6])
def test_lengths_have_the_requested_medians_and_correlation(vocab: RealVocabulary,
                                                            rho: float) -> None:
    w = SyntheticWorkload(vocab, _params(rho=rho), 0, seed=1)
    drawn = np.array([w.draw(i)[:2] for i in range(4000)], dtype=float)
    prompts, outputs = drawn[:, 0], drawn[:, 1]
    assert np.median(prompts) == pytest.approx(1000, rel=0.05)
    assert np.median(outputs) == pytest.approx(250, rel=0.05)
    # The tail: p90 / median = e^(1.2816 sigma).
    assert np.quantile(prompts, 0.9) / np.median(prompts) == pytest.approx(
        math.exp(1.2816 * 0.6), rel=0.08)
    corr = np.corrcoef(np.log(prompts), np.log(outputs))[0, 1]
    assert np.sign(corr) == np.sign(rho) and abs(corr - rho) < 0.05


def test_scales_size_the_lengths_and_the_context_clips_the_tail(vocab: RealVocabulary) -> None:
    full = SyntheticWorkload(vocab, _params(), 0, seed=1)
    small = SyntheticWorkload(vocab, _params(), 0, seed=1, scale=0.1, output_scale=0.5)
    for i in range(50):
        (p, o, _), (ps, os_, _) = full.draw(i), small.draw(i)
        assert abs(ps - p * 0.1) <= 1 and abs(os_ - o * 0.5) <= 1
    clipped = SyntheticWorkload(vocab, _params(), 0, seed=1, max_context=1200)
    drawn = [clipped.draw(i) for i in range(2000)]
    assert max(p + o for p, o, _ in drawn) <= 1200
    assert max(p + o for p, o, _ in drawn) == 1200  # the tail reaches the context, no further
    assert [len(clipped.shape(i, 0).prompt) for i in range(20)] == [p for p, _, _ in drawn[:20]]


def test_shared_prefixes_are_equal_tokens_and_fresh_per_salt(vocab: RealVocabulary) -> None:
    w = SyntheticWorkload(vocab, _params(share=0.5), 0, seed=1)
    drawn = [w.draw(i) for i in range(2000)]
    shared = [i for i, (_, _, prefix) in enumerate(drawn) if prefix is not None]
    assert len(shared) / len(drawn) == pytest.approx(0.5, abs=0.04)
    assert {drawn[i][2] for i in shared} == {0, 1, 2, 3}
    by_prefix: dict[int | None, list[int]] = {}
    for i in shared[:40]:
        by_prefix.setdefault(drawn[i][2], []).append(i)
    for members in by_prefix.values():
        heads = {tuple(w.shape(i, 7).prompt[:min(300, drawn[i][0] - 1)]) for i in members
                 if drawn[i][0] > 300}
        assert len(heads) == 1  # one prefix, token for token
    long = [k for k in shared if drawn[k][0] > 300]
    i, j = [k for k in long if drawn[k][2] == drawn[long[0]][2]][:2]
    assert w.shape(i, 7).prompt[300:] != w.shape(j, 7).prompt[300:]  # then each its own
    assert w.shape(i, 7).prompt[:300] != w.shape(i, 8).prompt[:300]  # another salt, no hit
    alone = next(k for k, (_, _, prefix) in enumerate(drawn) if prefix is None)
    assert w.shape(alone, 7).prompt[:50] != w.shape(i, 7).prompt[:50]


@pytest.mark.parametrize("cv,on_off", [(1.0, None), (2.5, None), (0.7, None),
                                       (1.0, OnOff(40.0, 0.3, 6.0))])
def test_arrivals_keep_the_rate_and_have_the_burstiness(cv: float, on_off: OnOff | None
                                                        ) -> None:
    process = SyntheticArrivals(_params(cv=cv, on_off=on_off), 3, rate=4.0)
    offsets = np.array(process.offsets(40_000, seed=1))
    gaps = np.diff(offsets)
    assert offsets[0] == 0.0 and (gaps >= 0).all()
    assert 1 / gaps.mean() == pytest.approx(4.0, rel=0.03)
    observed_cv = gaps.std() / gaps.mean()
    if on_off is None:
        assert observed_cv == pytest.approx(cv, rel=0.06)
    else:  # on/off phases make Poisson arrivals burstier: more arrive in the on phases
        assert observed_cv > 1.3
        period_s = on_off.period_requests / 4.0
        on = (offsets % period_s) < on_off.on_fraction * period_s
        assert on.mean() > on_off.on_fraction + 0.3
    # Another rate stretches the same pattern.
    slower = SyntheticArrivals(_params(cv=cv, on_off=on_off), 3, rate=2.0).offsets(100, 1)
    assert np.allclose(np.array(slower), offsets[:100] * 2.0, rtol=1e-9)


def test_the_schedule_takes_the_workloads_own_arrivals(vocab: RealVocabulary) -> None:
    w = SyntheticWorkload.from_seed(vocab, 5, seed=0, scale=0.1)
    items = schedule(w, 30, 9, w.arrivals(3.0), seed=0)
    assert [t for t, _, _ in items] == w.arrivals(3.0).offsets(30, 0)
    assert [(p, m) for _, p, m in items] == [tuple(w.shape(i, 9)) for i in range(30)]


def test_bad_parameters_are_clear_errors() -> None:
    with pytest.raises(WorkloadError, match="rho"):
        _params(rho=1.0)
    with pytest.raises(WorkloadError, match="sigma"):
        Lognormal(100.0, -0.1)
    with pytest.raises(WorkloadError, match="on/off"):
        OnOff(10.0, 1.0, 2.0)
