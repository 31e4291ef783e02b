"""Read a llama.cpp GGUF file: hyperparameters from `llama.*` metadata and weights dequantized
tensor by tensor (each by its own quantization type) into Hugging Face names and layout."""
from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from engine.model.config import ModelConfig, ModelConfigError
from engine.model.q4_weights import q4_1_parts
from engine.model.quant_weights import RawBlocks, q4_1_blocks, q8_0_blocks
from switchyard_tokenizer.gguf_metadata import GGUFFormatError, field_value

# GGUF tensor name (per block) -> Hugging Face name.
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
_SUPPORTED_ARCHS = ("llama",)


def read_gguf_config(reader: GGUFReader, path: str) -> ModelConfig:
    arch = field_value(reader, "general.architecture")
    if arch not in _SUPPORTED_ARCHS:
        raise GGUFFormatError(f"unsupported GGUF architecture {arch!r}")

    def need(key: str) -> Any:
        value = field_value(reader, f"{arch}.{key}")
        if value is None:
            raise GGUFFormatError(f"GGUF metadata lacks {arch}.{key}")
        return value

    hidden = int(need("embedding_length"))
    heads = int(need("attention.head_count"))
    kv_heads = int(field_value(reader, f"{arch}.attention.head_count_kv", heads))
    tokens = field_value(reader, "tokenizer.ggml.tokens") or []
    vocab = int(field_value(reader, f"{arch}.vocab_size", len(tokens)))
    head_dim = int(field_value(reader, f"{arch}.attention.key_length", hidden // heads))
    tensor_names = {t.name for t in reader.tensors}
    eos = field_value(reader, "tokenizer.ggml.eos_token_id")
    bos = field_value(reader, "tokenizer.ggml.bos_token_id")
    try:
        return ModelConfig(
            model_id=str(field_value(reader, "general.name", os.path.basename(path))),
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=int(need("feed_forward_length")),
            num_layers=int(need("block_count")),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(need("attention.layer_norm_rms_epsilon")),
            rope_theta=float(field_value(reader, f"{arch}.rope.freq_base", 10000.0)),
            rope_scaling=_rope_scaling(reader, arch),
            max_position_embeddings=int(need("context_length")),
            tie_word_embeddings="output.weight" not in tensor_names,
            bos_token_id=None if bos is None else int(bos),
            eos_token_ids=[] if eos is None else [int(eos)],
        )
    except ModelConfigError as err:
        raise GGUFFormatError(f"{path}: {err}") from err


def _rope_scaling(reader: GGUFReader, arch: str) -> dict[str, Any] | None:
    kind = field_value(reader, f"{arch}.rope.scaling.type")
    factor = field_value(reader, f"{arch}.rope.scaling.factor")
    if kind in (None, "none") or factor is None:
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(factor)}
    raise GGUFFormatError(f"unsupported GGUF rope scaling type {kind!r}")


def hf_name(gguf_name: str) -> str | None:
    """Hugging Face name of a GGUF tensor, or None for tensors the model does not use."""
    if gguf_name in _TOP_NAMES:
        return _TOP_NAMES[gguf_name]
    match = _BLOCK_RE.match(gguf_name)
    if match is None or match.group(2) not in _BLOCK_NAMES:
        return None
    return f"model.layers.{match.group(1)}.{_BLOCK_NAMES[match.group(2)]}.{match.group(3)}"


def unpermute_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's convert-time Q/K row permutation (per head, interleaved halves become
    the rotate-half layout Hugging Face uses)."""
    rows = weight.shape[0]
    per_half = rows // num_heads // 2
    shaped = weight.reshape(num_heads, per_half, 2, *weight.shape[1:])
    return shaped.swapaxes(1, 2).reshape(weight.shape)


def _row_heads(gguf_name: str, config: ModelConfig) -> int | None:
    """How many heads llama.cpp permuted this tensor's rows over (None: not permuted)."""
    if gguf_name.endswith("attn_q.weight"):
        return config.num_heads
    if gguf_name.endswith("attn_k.weight"):
        return config.num_kv_heads
    return None


def _to_torch(values: np.ndarray, heads: int | None) -> torch.Tensor:
    if heads is not None:
        values = unpermute_rows(values, heads)
    # Some arrays come back as read-only views of the memory-mapped file: copy those.
    return torch.from_numpy(np.array(values, copy=not values.flags.writeable))


def read_gguf_weights(reader: GGUFReader, config: ModelConfig,
                      keep_q4: bool = False) -> dict[str, torch.Tensor]:
    """All weights as float32 tensors in Hugging Face naming and [out, in] layout. With
    `keep_q4`, Q4_1 tensors also keep their 4-bit form (see q4_weights)."""
    weights: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            continue
        heads = _row_heads(tensor.name, config)
        values = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        expected = tuple(int(d) for d in reversed(tensor.shape.tolist()))
        weights[name] = _to_torch(values.reshape(expected), heads)
        if keep_q4 and tensor.tensor_type == GGMLQuantizationType.Q4_1:
            codes, scale, minimum = q4_1_parts(tensor.data, expected[0])
            weights[name + ".q4_codes"] = _to_torch(codes, heads)
            weights[name + ".q4_scale"] = _to_torch(scale, heads)
            weights[name + ".q4_min"] = _to_torch(minimum, heads)
    return weights


def read_gguf_blocks(reader: GGUFReader, config: ModelConfig
                     ) -> tuple[dict[str, torch.Tensor], dict[str, RawBlocks]]:
    """For the fast mode: Q4_1 and Q8_0 tensors as their raw blocks (exact bits), every other
    tensor dequantized to float32; Hugging Face naming and row order in both."""
    dense: dict[str, torch.Tensor] = {}
    blocks: dict[str, RawBlocks] = {}
    readers = {GGMLQuantizationType.Q4_1: q4_1_blocks, GGMLQuantizationType.Q8_0: q8_0_blocks}
    for tensor in reader.tensors:
        name = hf_name(tensor.name)
        if name is None:
            continue
        heads = _row_heads(tensor.name, config)
        expected = tuple(int(d) for d in reversed(tensor.shape.tolist()))
        read_blocks = readers.get(tensor.tensor_type)
        if read_blocks is not None and len(expected) == 2:
            raw = read_blocks(tensor.data, expected[0])
            if heads is not None:
                raw = raw.permute_rows(unpermute_rows(np.arange(expected[0]), heads))
            blocks[name] = raw
            continue
        values = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        dense[name] = _to_torch(values.reshape(expected), heads)
    return dense, blocks
