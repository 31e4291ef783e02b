"""LatencyModel: least squares of step_ms on [1, prefill_tokens, decode_seqs, context_tokens]."""
from __future__ import annotations

import random

from engine.core.latency_model import LatencyModel


def test_recovers_known_coefficients() -> None:
    model = LatencyModel(window=200)
    assert model.coefficients() == [0.0, 0.0, 0.0, 0.0] and model.decode_step_ms() == 0.0
    rng = random.Random(0)
    truth = [4.0, 0.05, 0.8, 0.002]
    for _ in range(200):
        prefill = rng.choice([0, 0, rng.randint(1, 512)])
        decodes = rng.randint(0 if prefill else 1, 32)
        context = rng.randint(0, 8000)
        ms = truth[0] + truth[1] * prefill + truth[2] * decodes + truth[3] * context
        model.record(ms, prefill, decodes, context)
    fitted = model.coefficients()
    for got, want in zip(fitted, truth, strict=True):
        assert abs(got - want) <= 0.01 * abs(want) + 1e-3
    assert abs(model.predict(100, 4, 1000) - (4 + 5 + 3.2 + 2)) < 0.1
    assert model.decode_step_ms() > 0 and len(model.recent_step_ms(8)) == 8


def test_few_or_collinear_samples_stay_finite() -> None:
    model = LatencyModel()
    for _ in range(3):
        model.record(10.0, 0, 1, 100)
    assert all(abs(c) < 1e6 for c in model.coefficients())
    assert abs(model.predict(0, 1, 100) - 10.0) < 0.5
