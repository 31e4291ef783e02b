"""Loading a Hugging Face style directory: a tiny random Llama saved by transformers
(config.json + model.safetensors) gives the same logits through our runner as transformers.

Covers RoPE scaling (llama3 and linear; positions run past original_max_position_embeddings so
scaling matters), tied and untied embeddings, and GQA. fp32; tolerance max |diff| < 1e-4.
"""
from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch

from engine.batch import ScheduledChunk
from engine.kvcache.kv_storage import KVStorage
from engine.model.hf_loader import HFFormatError, read_hf_config
from engine.model.loader import LoadedModel, load_model
from engine.model.runner import ModelRunner

pytestmark = pytest.mark.model

TOL = 1e-4
VOCAB = 49152  # SmolLM2's tokenizer is copied into the directory, so the vocab matches it

CASES: dict[str, dict[str, Any]] = {
    "llama3_tied_gqa": dict(
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    "linear_untied": dict(
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False,
        rope_scaling={"rope_type": "linear", "factor": 2.0}),
    "plain_mqa": dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False),
}


def _save_tiny_llama(directory: str, overrides: dict[str, Any],
                     tokenizer_json: str) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, max_position_embeddings=512, rope_theta=10000.0,
                         initializer_range=0.2, bos_token_id=1, eos_token_id=2, **overrides)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(directory)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tokenizer_json)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                   "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}, f)
    return model


def _our_logits(loaded: LoadedModel, ids: list[int], chunk: int,
                decodes: int) -> tuple[list[int], torch.Tensor]:
    """Prefill `ids[:-decodes]` in chunks (logits at each chunk's end), then feed the rest one
    token at a time. Returns (positions whose logits we have, logits)."""
    kv = KVStorage.for_model(loaded.config, num_pages=32, page_size=8)
    runner = ModelRunner(loaded, kv)
    table = list(range(31, -1, -1))  # reversed: pages are not in position order
    positions: list[int] = []
    rows = []
    prefill = len(ids) - decodes
    for start in range(0, prefill, chunk):
        piece = ids[start:min(start + chunk, prefill)]
        rows.append(runner.run([ScheduledChunk("x", piece, start, table, True)])[0])
        positions.append(start + len(piece) - 1)
    for pos in range(prefill, len(ids)):
        rows.append(runner.run([ScheduledChunk("x", [ids[pos]], pos, table, True)])[0])
        positions.append(pos)
    return positions, torch.stack(rows)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CASES))
def test_hf_directory_logits_match_transformers(
        case: str, tmp_path: os.PathLike[str], loaded_model_fp32: LoadedModel) -> None:
    directory = str(tmp_path)
    reference = _save_tiny_llama(directory, CASES[case], loaded_model_fp32.tokenizer.to_json())
    loaded = load_model(directory, dtype=torch.float32)
    assert loaded.config.tie_word_embeddings == CASES[case]["tie_word_embeddings"]
    assert loaded.tokenizer.eos_token_ids == [2]
    ids = torch.randint(0, VOCAB, (150,), generator=torch.Generator().manual_seed(1)).tolist()
    positions, ours = _our_logits(loaded, ids, chunk=37, decodes=12)
    with torch.no_grad():
        ref = reference(torch.tensor([ids])).logits[0, positions].float()
    assert ref.abs().max().item() > 1.0  # the random model is not trivially flat
    diff = (ours - ref).abs().max().item()
    assert diff < TOL, f"{case}: max logit diff {diff}"
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def _write_config(directory: str, **fields: Any) -> None:
    base = {"model_type": "llama", "vocab_size": 100, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}
    base.update(fields)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(base, f)


def test_old_style_rope_config_is_read(tmp_path: os.PathLike[str]) -> None:
    _write_config(str(tmp_path), rope_theta=500000.0, eos_token_id=[7, 9],
                  rope_scaling={"type": "linear", "factor": 4.0})
    config = read_hf_config(str(tmp_path))
    assert config.rope_theta == 500000.0
    assert config.rope_scaling == {"type": "linear", "factor": 4.0}
    assert config.eos_token_ids == [7, 9]
    assert config.num_kv_heads == 4 and config.head_dim == 8


@pytest.mark.parametrize("fields", [
    {"model_type": "gpt2"},
    {"num_attention_heads": 3},  # not a multiple of the 2 kv heads
    {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    {"attention_bias": True},
])
def test_unsupported_configs_are_clear_errors(tmp_path: os.PathLike[str],
                                              fields: dict[str, Any]) -> None:
    _write_config(str(tmp_path), num_key_value_heads=2, **fields)
    with pytest.raises(HFFormatError):
        read_hf_config(str(tmp_path))


def test_directory_without_weights_is_a_clear_error(tmp_path: os.PathLike[str]) -> None:
    _write_config(str(tmp_path))
    with pytest.raises(HFFormatError):
        load_model(str(tmp_path))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CASES))
def test_hf_directory_in_fast_mode_is_close_to_exact(
        case: str, tmp_path: os.PathLike[str], loaded_model_fp32: LoadedModel) -> None:
    """Dense HF weights are quantised to Q8_0 for the fast mode (tied and untied heads, GQA,
    RoPE scaling): its logits stay within 5% of the logit range of the exact mode's."""
    directory = str(tmp_path)
    _save_tiny_llama(directory, CASES[case], loaded_model_fp32.tokenizer.to_json())
    ids = torch.randint(0, VOCAB, (80,), generator=torch.Generator().manual_seed(2)).tolist()
    logits = {}
    for mode in ("exact", "fast"):
        loaded = load_model(directory, mode=mode)
        kv = KVStorage.for_model(loaded.config, num_pages=8, page_size=16,
                                 dtype=torch.bfloat16 if mode == "fast" else torch.float32)
        runner = ModelRunner(loaded, kv, "cpu" if mode == "fast" else "torch")
        logits[mode] = runner.run([ScheduledChunk("x", ids, 0, list(range(8)), True)])[0]
    scale = logits["exact"].abs().max().item()
    assert (logits["fast"] - logits["exact"]).abs().max().item() < 0.05 * scale
