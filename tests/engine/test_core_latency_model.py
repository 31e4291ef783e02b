"""LatencyModel: the fit (relative error, non-negative terms, live refinement) and its agreement
with router_core, which evaluates the same named terms for the router."""
from __future__ import annotations

import random

import numpy as np
import pytest

import router_core
from engine.core.latency_model import FIT_TERMS, TERMS, LatencyModel, StepShape, fit_nonnegative

TRUTH = {"const": 4.0, "prefill_tokens": 0.9, "prefill_seqs": 1.5, "prefill_attention": 2e-4,
         "prefill_context": 0.01, "decode_seqs": 0.8, "decode_context": 0.002}


def _random_shape(rng: random.Random) -> StepShape:
    chunks = tuple((rng.choice([0, 16, 512, 2000]), rng.randint(1, 512))
                   for _ in range(rng.choice([0, 0, 1, 2])))
    decodes = rng.randint(0 if chunks else 1, 48)
    return StepShape(chunks, decodes, decodes * rng.randint(1, 3000))


def _true_ms(shape: StepShape) -> float:
    feats = shape.features()
    return sum(c * feats[t] for t, c in TRUTH.items())


def test_recovers_known_coefficients_and_predicts_unseen_shapes() -> None:
    model = LatencyModel(window=300)
    assert model.coefficients() == {} and model.decode_step_ms() == 0.0
    assert model.source == "none"
    rng = random.Random(0)
    for _ in range(300):
        shape = _random_shape(rng)
        model.record(_true_ms(shape), shape)
    fitted = model.coefficients()
    assert model.source == "online" and set(fitted) == set(model.terms)
    assert set(model.terms) == set(FIT_TERMS) - {"decode_context_over"}, "no knee, no hinge"
    for term, want in TRUTH.items():
        assert fitted[term] == pytest.approx(want, rel=1e-6), term
    for _ in range(20):
        shape = _random_shape(rng)
        assert model.predict(shape) == pytest.approx(_true_ms(shape), rel=1e-6)
    assert model.decode_step_ms() > 0 and len(model.recent_step_ms(8)) == 8


def test_terms_that_would_go_negative_are_dropped() -> None:
    rng = np.random.default_rng(1)
    x = np.column_stack([np.ones(50), rng.uniform(0, 100, 50), rng.uniform(0, 100, 50)])
    y = 5.0 + 0.5 * x[:, 1] - 0.01 * x[:, 2]  # a (noisy) negative dependence on column 2
    coeffs = fit_nonnegative(x, y)
    assert (coeffs >= 0).all() and coeffs[2] == 0.0
    assert coeffs[1] == pytest.approx(0.5, rel=0.1)


def test_relative_error_bounds_an_outlier() -> None:
    model = LatencyModel()
    rng = random.Random(2)
    shapes = [_random_shape(rng) for _ in range(100)]
    for shape in shapes:
        model.record(_true_ms(shape), shape)
    model.record(_true_ms(shapes[0]) * 20, shapes[0])  # a step stalled by a noisy neighbour
    model.record(_true_ms(shapes[0]) * 20, shapes[0])
    errors = [abs(model.predict(s) / _true_ms(s) - 1) for s in shapes]
    assert float(np.median(errors)) < 0.05


def test_few_or_collinear_samples_stay_finite() -> None:
    model = LatencyModel()
    for _ in range(3):
        model.record(10.0, StepShape((), 1, 100))
    assert all(abs(c) < 1e6 for c in model.coefficients().values())
    assert model.predict(StepShape((), 1, 100)) == pytest.approx(10.0, rel=0.05)


def test_live_steps_refine_the_profile() -> None:
    """A machine that got twice as slow since the profile: live steps pull the fit along."""
    model = LatencyModel(window=256)
    rng = random.Random(3)
    with model.recording_profile():
        for _ in range(200):
            shape = _random_shape(rng)
            model.record(_true_ms(shape), shape)
    assert model.source == "profile" and len(model.profile_rows()) == 200
    probe = StepShape((), 16, 16 * 1000)
    before = model.predict(probe)
    assert before == pytest.approx(_true_ms(probe), rel=1e-6)
    for _ in range(256):
        shape = StepShape((), rng.randint(1, 48), rng.randint(1, 48) * 1000)
        model.record(2 * _true_ms(shape), shape)
    after = model.predict(probe)
    assert after > 1.25 * before  # profile and live rows weigh alike: about half-way
    model.clear_live()
    assert model.predict(probe) == pytest.approx(before, rel=1e-6)
    assert len(model) == 200 and model.recent_step_ms() == []


def test_profile_rows_load_back() -> None:
    model = LatencyModel()
    rng = random.Random(4)
    with model.recording_profile():
        for _ in range(50):
            shape = _random_shape(rng)
            model.record(_true_ms(shape), shape)
    other = LatencyModel()
    other.load_profile(model.profile_rows(), "cache")
    assert other.source == "cache" and other.coefficients() == model.coefficients()
    assert other.fit_error() == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError):
        other.load_profile([([1.0, 2.0], 3.0, 3.0)], "cache")
    with pytest.raises(ValueError):
        other.load_profile([([1.0, 2.0], 3.0)], "cache")
    with pytest.raises(ValueError):
        LatencyModel(terms=("const", "warp"))


def test_router_core_evaluates_the_same_model() -> None:
    """The engine's term definitions and router_core's agree: same coefficients, same shape,
    same prediction (router_core knows every term the engine may send)."""
    table = router_core.EngineTable()
    table.upsert(0, "any")
    rng = random.Random(5)
    model = LatencyModel(terms=TERMS, knee=5000)
    assert model.terms == TERMS
    model.load_profile([([1.0] * len(TERMS), 1.0, 1.0)], "cache")
    model.coefficients()
    model._fitted = np.asarray([rng.uniform(0.0, 1.0) * 10.0 ** -rng.randint(0, 5)
                                for _ in TERMS])  # set, not fitted
    named = model.coefficients()
    assert "decode_context_over:5000" in named
    table.update_stats(0, 0, 0, 0, 0, 0, 0.0, latency_model=named)
    assert table.get(0).latency_model == pytest.approx(named)
    for _ in range(50):
        shape = _random_shape(rng)
        want = model.predict(shape)
        got = table.predict_step_ms(0, list(shape.prefill_chunks), shape.decode_seqs,
                                    shape.decode_context)
        assert got == pytest.approx(want, rel=1e-9)


def test_cpu_clock_fits_cpu_time_and_scales_by_live_contention() -> None:
    """Neighbours that halve this engine's share of the CPU double wall times, not CPU times:
    the fit stays, the reported coefficients follow the last steps' wall/CPU ratio."""
    model = LatencyModel(clock="cpu")
    rng = random.Random(6)
    with model.recording_profile():
        for _ in range(100):
            shape = _random_shape(rng)
            model.record(1.25 * _true_ms(shape), shape, cpu_ms=_true_ms(shape))
    probe = _random_shape(rng)
    assert model.predict(probe) == pytest.approx(1.25 * _true_ms(probe), rel=1e-6)
    assert model.fit_error() == pytest.approx(0.0, abs=1e-9)
    for _ in range(40):
        shape = _random_shape(rng)
        model.record(3.0 * _true_ms(shape), shape, cpu_ms=_true_ms(shape))
    assert model.wall_per_fit_ms() == pytest.approx(3.0)
    assert model.predict(probe) == pytest.approx(3.0 * _true_ms(probe), rel=1e-6)
    wall = LatencyModel(clock="wall")
    for _ in range(50):
        shape = _random_shape(rng)
        wall.record(2.0 * _true_ms(shape), shape, cpu_ms=_true_ms(shape))
    assert wall.wall_per_fit_ms() == 1.0
    assert wall.predict(probe) == pytest.approx(2.0 * _true_ms(probe), rel=1e-6)
    with pytest.raises(ValueError):
        LatencyModel(clock="sundial")


def test_the_hinge_prices_decode_context_past_the_knee() -> None:
    model = LatencyModel(knee=1000)
    rng = random.Random(8)
    truth = {**TRUTH, "decode_context_over": 0.05}
    for _ in range(200):
        shape = _random_shape(rng)
        feats = shape.features(1000.0)
        model.record(sum(c * feats[t] for t, c in truth.items()), shape)
    fitted = model.coefficients()
    assert fitted["decode_context_over:1000"] == pytest.approx(0.05, rel=1e-6)
    probe = StepShape((), 4, 3000)
    assert model.predict(probe) == pytest.approx(
        4.0 + 4 * 0.8 + 3000 * 0.002 + 2000 * 0.05, rel=1e-6)
