"""Sampler unit tests on synthetic logits: filters, greedy, per-request seeded generators."""
from __future__ import annotations

import torch

from engine.core.sampler import SampleRow, make_generator, sample
from switchyard_engine_api.sampling_params import SamplingParams


def _row(seed: int | None = None, **kw: object) -> SampleRow:
    params = SamplingParams(**kw)  # type: ignore[arg-type]
    return SampleRow(params, make_generator(seed), [])


def test_greedy_and_top_k_1_pick_the_argmax() -> None:
    logits = torch.tensor([[0.1, 3.0, 2.9, -1.0]])
    assert sample(logits, [_row()])[0] == [1]
    assert sample(logits, [_row(seed=3, temperature=2.0, top_k=1)])[0] == [1]


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.tensor([[10.0, 9.0, 0.0, 0.0, 0.0]])
    seen = {sample(logits, [_row(seed=s, temperature=1.0, top_p=0.5)])[0][0] for s in range(40)}
    assert seen == {0}
    seen = {sample(logits, [_row(seed=s, temperature=1.0, top_p=0.99)])[0][0] for s in range(40)}
    assert seen == {0, 1}


def test_top_k_limits_the_candidates() -> None:
    logits = torch.tensor([[1.0, 1.0, 1.0, 0.9, 0.9]])
    seen = {sample(logits, [_row(seed=s, temperature=1.0, top_k=3)])[0][0] for s in range(60)}
    assert seen == {0, 1, 2}


def test_banned_ids_are_never_chosen() -> None:
    logits = torch.tensor([[5.0, 1.0, 0.0]])
    row = SampleRow(SamplingParams(), make_generator(0), banned_ids=[0])
    assert sample(logits, [row])[0] == [1]


def test_seeded_rows_do_not_depend_on_batch_neighbours() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    alone = [sample(logits[1:2], [_row(seed=7, temperature=1.0)])[0][0] for _ in range(1)]
    generators = [_row(seed=s, temperature=1.0) for s in (1, 7, 9)]
    batched = sample(logits, generators)[0]
    assert batched[1] == alone[0]
    # The same seed replays the same stream over several steps.
    a, b = _row(seed=42, temperature=0.8), _row(seed=42, temperature=0.8)
    stream_a = [sample(logits[0:1], [a])[0][0] for _ in range(10)]
    stream_b = [sample(logits[0:1], [b])[0][0] for _ in range(10)]
    assert stream_a == stream_b and len(set(stream_a)) > 1


def test_logprobs_are_of_the_raw_distribution() -> None:
    logits = torch.tensor([[0.0, 1.0]])
    tokens, logprobs = sample(logits, [_row(return_logprobs=True)])
    assert tokens == [1]
    assert abs(logprobs[0] - float(torch.log_softmax(logits, -1)[0, 1])) < 1e-6
