"""The 4-bit path: raw Q4_1 codes reproduce the GGUF's dequantized weights exactly, and the int4
kernel computes the same products as a dense matmul of those weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from engine.model.gguf_loader import unpermute_rows
from engine.model.loader import LoadedModel
from engine.model.q4_weights import Int4Weight, int4_supported, q4_1_parts
from switchyard_tokenizer.gguf_metadata import open_gguf

pytestmark = pytest.mark.model


def test_q4_1_parts_rebuild_the_dequantized_tensor(smollm2_path: str) -> None:
    reader = open_gguf(smollm2_path)
    checked = 0
    for tensor in reader.tensors:
        if tensor.tensor_type != GGMLQuantizationType.Q4_1 or not tensor.name.startswith("blk.1."):
            continue
        rows = int(tensor.shape[-1])
        codes, scale, minimum = q4_1_parts(tensor.data, rows)
        rebuilt = (codes.reshape(rows, -1, 32) * scale[..., None] + minimum[..., None])
        expected = dequantize(tensor.data, tensor.tensor_type).reshape(rows, -1)
        assert np.array_equal(rebuilt.reshape(rows, -1), expected), tensor.name
        assert codes.max() <= 15
        checked += 1
    assert checked == 7  # q, k, v, o, gate, up, down


def test_unpermute_is_a_row_permutation_applied_per_head() -> None:
    rows = np.arange(12)[:, None] * np.ones((1, 4))
    undone = unpermute_rows(rows, num_heads=2)
    # per head of 6 rows: interleaved pairs (0,1),(2,3),(4,5) become halves (0,2,4),(1,3,5)
    assert undone[:, 0].tolist() == [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11]


def test_int4_kernel_matches_dense_matmul() -> None:
    assert int4_supported(torch.bfloat16, torch.device("cpu"))
    torch.manual_seed(0)
    n, k = 96, 128
    state = {"w.q4_codes": torch.randint(0, 16, (n, k), dtype=torch.uint8),
             "w.q4_scale": torch.rand(n, k // 32) * 0.02 + 0.001,
             "w.q4_min": -torch.rand(n, k // 32) * 0.1}
    weight = Int4Weight.from_state(state, ["w"])
    assert weight is not None
    dense = (state["w.q4_codes"].float().view(n, -1, 32) * state["w.q4_scale"][..., None]
             + state["w.q4_min"][..., None]).view(n, k)
    x = torch.randn(5, k).to(torch.bfloat16)
    ours = weight.matmul(x).float()
    ref = x.float() @ dense.t()
    # bf16 output and bf16 scale/zero rounding: ~1% of the output's magnitude
    assert (ours - ref).abs().max().item() < 0.02 * ref.abs().max().item()
    assert Int4Weight.from_state(state, ["w", "missing"]) is None


def test_fp32_model_never_uses_int4(loaded_model_fp32: LoadedModel) -> None:
    assert not loaded_model_fp32.model.uses_int4
