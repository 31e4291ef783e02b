"""ModelRunner's contract: output rows, the layer hook, KV placement, and clear errors on bad
batches (after which the runner keeps serving)."""
from __future__ import annotations

import pytest
import torch

from engine.batch import ScheduledChunk
from engine.kvcache.kv_storage import KVStorage, KVStorageError
from engine.model.loader import LoadedModel
from engine.model.runner import BadBatch, ModelRunner

pytestmark = pytest.mark.model

PAGE = 16


@pytest.fixture(scope="module")
def runner(loaded_model_fp32: LoadedModel) -> ModelRunner:
    return ModelRunner(loaded_model_fp32, KVStorage.for_model(loaded_model_fp32.config, 16, PAGE))


def test_rows_follow_need_logits_in_chunk_order(runner: ModelRunner) -> None:
    chunks = [ScheduledChunk("a", [10, 11, 12], 0, [0], True),
              ScheduledChunk("b", [20, 21], 0, [1], False),
              ScheduledChunk("c", [30], 0, [2], True)]
    logits = runner.run(chunks)
    assert logits.shape == (2, runner.config.vocab_size) and logits.dtype == torch.float32
    alone = runner.run([ScheduledChunk("c", [30], 0, [3], True)])
    assert torch.allclose(logits[1], alone[0], atol=1e-4)
    assert runner.run([]).shape == (0, runner.config.vocab_size)
    assert runner.run([ScheduledChunk("b", [20, 21], 0, [1], False)]).shape[0] == 0


def test_layer_hook_runs_after_each_layer_wrote_kv(runner: ModelRunner) -> None:
    seen: list[int] = []
    kv = runner.kv
    page = 5
    kv.layer(0)[page].zero_()

    def hook(layer: int) -> None:
        # this layer's K for the chunk's tokens is already in the page; the next one's is not
        k, _ = kv.read(layer, [page], 0, 4)
        assert k.abs().sum() > 0
        if layer + 1 < kv.num_layers:
            kv.layer(layer + 1)[page].zero_()
        seen.append(layer)

    runner.run([ScheduledChunk("h", [1, 2, 3, 4], 0, [page], True)], layer_hook=hook)
    assert seen == list(range(runner.config.num_layers))


def test_kv_lands_at_page_table_slots(runner: ModelRunner) -> None:
    kv = runner.kv
    ids = list(range(100, 120))  # 20 tokens over pages [9, 7]
    runner.run([ScheduledChunk("p", ids, 0, [9, 7], True)])
    k_paged, v_paged = kv.read(3, [9, 7], 0, 20)
    assert torch.equal(kv.layer(3)[7, 0, :4], k_paged[16:20])
    assert torch.equal(kv.layer(3)[9, 1], v_paged[:16])


@pytest.mark.parametrize("chunk, message", [
    (ScheduledChunk("e", [], 0, [0], True), "no tokens"),
    (ScheduledChunk("e", [1, 49152], 0, [0], True), "out of range"),
    (ScheduledChunk("e", [-1], 0, [0], True), "out of range"),
    (ScheduledChunk("e", [1] * 17, 0, [0], True), "pages cannot hold"),
    (ScheduledChunk("e", [1], 8192, [0] * 600, True), "beyond the model's context"),
    (ScheduledChunk("e", [1], 0, [99], True), "page id"),
    (ScheduledChunk("e", [1], -3, [0], True), "negative"),
])
def test_bad_chunks_raise_and_runner_keeps_serving(runner: ModelRunner, chunk: ScheduledChunk,
                                                   message: str) -> None:
    with pytest.raises(BadBatch, match=message):
        runner.run([chunk, ScheduledChunk("ok", [5], 0, [1], True)])
    assert runner.run([ScheduledChunk("ok", [5], 0, [1], True)]).shape[0] == 1


def test_duplicate_sequence_in_one_step_is_rejected(runner: ModelRunner) -> None:
    with pytest.raises(BadBatch):
        runner.run([ScheduledChunk("d", [1], 0, [0], True),
                    ScheduledChunk("d", [2], 1, [0], True)])


def test_kv_storage_rejects_bad_addresses(runner: ModelRunner) -> None:
    kv = runner.kv
    k = torch.zeros(3, kv.num_kv_heads, kv.head_dim)
    with pytest.raises(KVStorageError):
        kv.write(0, [0], 15, k, k)  # positions 15..17 need two pages
    with pytest.raises(KVStorageError):
        kv.write(0, [0], 0, k, torch.zeros(3, 1, 1))
    with pytest.raises(KVStorageError):
        kv.read(0, [kv.num_pages], 0, 1)
    expected = 2 * kv.num_layers * kv.num_kv_heads * kv.head_dim * 4
    assert kv.bytes_per_token() == expected
