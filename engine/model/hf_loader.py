"""Read a Hugging Face style model directory: config.json + *.safetensors (+ tokenizer.json).

Accepts both config spellings: `rope_theta`/`rope_scaling` (transformers 4) and
`rope_parameters` (transformers 5).
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any

import torch
from safetensors.torch import load_file

from engine.model.config import ModelConfig, ModelConfigError

_SUPPORTED_MODEL_TYPES = ("llama", "mistral")


class HFFormatError(ValueError):
    """The directory is not a Llama-family checkpoint this engine can load."""


def read_hf_config(directory: str) -> ModelConfig:
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise HFFormatError(f"{directory} has no config.json")
    with open(path, encoding="utf-8") as f:
        raw: dict[str, Any] = json.load(f)
    model_type = raw.get("model_type")
    if model_type not in _SUPPORTED_MODEL_TYPES:
        raise HFFormatError(f"unsupported model_type {model_type!r}; supported: "
                            f"{', '.join(_SUPPORTED_MODEL_TYPES)}")
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise HFFormatError("projection biases are not supported")
    try:
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        eos = raw.get("eos_token_id")
        eos_ids = [] if eos is None else [int(e) for e in (eos if isinstance(eos, list) else [eos])]
        theta, scaling = _rope(raw)
        return ModelConfig(
            model_id=str(raw.get("_name_or_path") or os.path.basename(os.path.abspath(directory))),
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )
    except KeyError as err:
        raise HFFormatError(f"config.json lacks {err}") from err
    except ModelConfigError as err:
        raise HFFormatError(f"{path}: {err}") from err


def _rope(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    params = raw.get("rope_parameters")
    if isinstance(params, dict):
        theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    else:
        theta = float(raw.get("rope_theta", 10000.0))
        scaling = dict(raw["rope_scaling"]) if raw.get("rope_scaling") else {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    return theta, (None if kind == "default" else scaling)


def read_hf_weights(directory: str) -> dict[str, torch.Tensor]:
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    if not files:
        raise HFFormatError(f"{directory} has no *.safetensors files")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(file))
    return weights
