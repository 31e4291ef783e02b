"""Deterministic random weights of real model shapes, generated on the device.

The SmolLM2 file (98 MB) and Llama 3.1 8B cannot travel to the lent GPU machine, so GPU checks
use their shapes with seeded random weights: embeddings N(0, 0.02) (transformers' initialiser),
projections N(0, 1/fan_in) so each layer's branch keeps the scale of its input (with 0.02
everywhere the tied embedding dominates and the model only repeats its last token), norms near
1. Same seed, same device -> same weights; moved to the CPU they give the CPU path the very same
model.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from engine.model.hf_loader import read_hf_config
from engine.model.llama import LlamaModel
from engine.model.loader import LoadedModel

REPO = Path(__file__).resolve().parents[2]

SMOLLM2_135M: dict[str, Any] = {
    "model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
    "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 8192,
    "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
    "_name_or_path": "random-smollm2-135m-shape",
}
LLAMA31_8B: dict[str, Any] = {
    "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": 128001,
    "_name_or_path": "random-llama-3.1-8b-shape",
}


def weight_shapes(raw: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    hidden, inter = raw["hidden_size"], raw["intermediate_size"]
    head_dim = raw["head_dim"]
    q, kv = raw["num_attention_heads"] * head_dim, raw["num_key_value_heads"] * head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (raw["vocab_size"], hidden),
                                          "model.norm.weight": (hidden,)}
    if not raw["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (raw["vocab_size"], hidden)
    for i in range(raw["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (q, hidden),
            p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden),
            p + "self_attn.o_proj.weight": (hidden, q),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        })
    return shapes


def random_weights(raw: dict[str, Any], seed: int, device: torch.device | str,
                   dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Hugging Face-named tensors, drawn in a fixed order from one seeded generator."""
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(seed)
    weights = {}
    for name, shape in weight_shapes(raw).items():
        t = torch.empty(shape, dtype=torch.float32, device=device)
        if len(shape) == 1:
            t.normal_(1.0, 0.05, generator=generator)
        elif name == "model.embed_tokens.weight":
            t.normal_(0.0, 0.02, generator=generator)
        else:
            t.normal_(0.0, shape[1] ** -0.5, generator=generator)
        weights[name] = t.to(dtype)
    return weights


def model_config(raw: dict[str, Any]) -> Any:
    """The engine's ModelConfig for a raw config, through the HF loader's own parsing."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(raw))
        return read_hf_config(tmp)


def loaded_model(raw: dict[str, Any], weights: dict[str, torch.Tensor],
                 device: torch.device | str, dtype: torch.dtype) -> LoadedModel:
    """A LoadedModel without a tokenizer (runner-level checks feed token ids)."""
    config = model_config(raw)
    model = LlamaModel(config, weights, dtype=dtype, device=device)
    return LoadedModel(config=config, model=model, tokenizer=None,  # type: ignore[arg-type]
                       source=raw["_name_or_path"])


def smollm2_tokenizer_json() -> str:
    """SmolLM2's tokenizer.json: from the GPU bundle when carried, else from the local GGUF."""
    bundled = Path(os.environ.get("SWITCHYARD_GPU_BUNDLE", REPO / ".gpu-bundle"))
    path = bundled / "smollm2" / "tokenizer.json"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    from switchyard_tokenizer.default_model import default_model_path
    from switchyard_tokenizer.tokenizer import EngineTokenizer

    state = EngineTokenizer.from_gguf(default_model_path()).to_state()
    return str(state["tokenizer_json"])


def write_hf_dir(raw: dict[str, Any], weights: dict[str, torch.Tensor], directory: Path,
                 tokenizer_json: str) -> Path:
    """config.json + model.safetensors + tokenizer.json: what `switchyard engine --model` reads."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(raw))
    (directory / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    save_file({k: v.detach().to("cpu").contiguous() for k, v in weights.items()},
              str(directory / "model.safetensors"))
    return directory
