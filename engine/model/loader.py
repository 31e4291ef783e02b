"""load_model: a GGUF file or HF directory (or the default SmolLM2) -> a ready LoadedModel.

Weights are dequantized once and cached on disk (weight_cache), together with the config and
tokenizer, so the second start never parses the GGUF file again.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

from engine.model.config import ModelConfig
from engine.model.fast_llama import FastLlamaModel, fast_state
from engine.model.llama import LlamaModel
from engine.model.q4_weights import int4_supported, is_q4_part
from engine.model.quant_weights import RawBlocks
from engine.model.weight_cache import load_cached, store
from switchyard_tokenizer.default_model import default_model_path
from switchyard_tokenizer.tokenizer import EngineTokenizer

SUPPORTED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                    "float16": torch.float16}


_FAST_VARIANT = "fast-blocks-1"


class ModelLoadError(ValueError):
    """The model path or dtype is not usable."""


MODES = ("exact", "fast")


@dataclass(slots=True)
class LoadedModel:
    config: ModelConfig
    model: LlamaModel | FastLlamaModel
    tokenizer: EngineTokenizer
    source: str

    @property
    def is_fast(self) -> bool:
        return isinstance(self.model, FastLlamaModel)


def parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        if dtype not in SUPPORTED_DTYPES.values():
            raise ModelLoadError(f"unsupported dtype {dtype}")
        return dtype
    name = dtype.removeprefix("torch.")
    if name not in SUPPORTED_DTYPES:
        raise ModelLoadError(f"unsupported dtype {dtype!r}; use one of {sorted(SUPPORTED_DTYPES)}")
    return SUPPORTED_DTYPES[name]


def _read_source(source: str, keep_q4: bool) -> tuple[ModelConfig, dict[str, torch.Tensor],
                                                     EngineTokenizer]:
    if os.path.isdir(source):
        from engine.model.hf_loader import read_hf_config, read_hf_weights

        config = read_hf_config(source)
        return config, read_hf_weights(source), EngineTokenizer.from_hf_dir(
            source, config.eos_token_ids)
    from engine.model.gguf_loader import read_gguf_config, read_gguf_weights
    from switchyard_tokenizer.gguf_metadata import open_gguf

    reader = open_gguf(source)
    config = read_gguf_config(reader, source)
    weights = read_gguf_weights(reader, config, keep_q4=keep_q4)
    return config, weights, EngineTokenizer.from_gguf_reader(reader)


def _load_fast(source: str, device: torch.device | str, use_cache: bool) -> LoadedModel:
    """The fast CPU mode: packed block-quantised weights (FastLlamaModel)."""
    if torch.device(device).type != "cpu":
        raise ModelLoadError("the fast mode runs on CPU; use mode 'exact' on CUDA")
    use_cache = use_cache and not os.path.isdir(source)
    cached = load_cached(source, torch.float32, _FAST_VARIANT) if use_cache else None
    if cached is not None:
        state, extra = cached
        config = ModelConfig(**extra["config"])
        tokenizer = EngineTokenizer.from_state(extra["tokenizer"])
    else:
        if os.path.isdir(source):
            config, dense, tokenizer = _read_source(source, keep_q4=False)
            blocks: dict[str, RawBlocks] = {}
        else:
            from engine.model.gguf_loader import read_gguf_blocks, read_gguf_config
            from switchyard_tokenizer.gguf_metadata import open_gguf

            reader = open_gguf(source)
            config = read_gguf_config(reader, source)
            dense, blocks = read_gguf_blocks(reader, config)
            tokenizer = EngineTokenizer.from_gguf_reader(reader)
        state = fast_state(config, dense, blocks)
        if use_cache:
            store(source, torch.float32, state,
                  {"config": dataclasses.asdict(config), "tokenizer": tokenizer.to_state()},
                  _FAST_VARIANT)
    return LoadedModel(config=config, model=FastLlamaModel(config, state), tokenizer=tokenizer,
                       source=source)


def load_model(path: str | None = None, dtype: torch.dtype | str | None = torch.float32,
               device: torch.device | str = "cpu", use_cache: bool = True,
               int4: bool | None = None, mode: str = "exact") -> LoadedModel:
    """`mode` "exact": dense weights in `dtype` (float32 = the reference numerics); "fast":
    block-quantised weights and batch-invariant CPU kernels (`dtype` is ignored).
    `int4` (exact mode): use the 4-bit kernel for the GGUF's Q4_1 tensors on small batches.
    None = wherever supported (bfloat16 on CPU); float32 is always dense."""
    source = path if path is not None else default_model_path()
    if not os.path.exists(source):
        raise ModelLoadError(f"model path {source!r} does not exist")
    if mode not in MODES:
        raise ModelLoadError(f"unknown mode {mode!r}; use one of {MODES}")
    if mode == "fast":
        return _load_fast(source, device, use_cache)
    torch_dtype = parse_dtype(dtype)
    supported = int4_supported(torch_dtype, torch.device(device))
    if int4 and not supported:
        raise ModelLoadError("int4 weights need dtype bfloat16 on CPU")
    use_int4 = supported if int4 is None else int4
    # Only GGUF files are cached: an HF directory's safetensors already map without any work.
    use_cache = use_cache and not os.path.isdir(source)
    variant = "q4" if supported else ""
    cached = load_cached(source, torch_dtype, variant) if use_cache else None
    if cached is not None:
        weights, extra = cached
        config = ModelConfig(**extra["config"])
        tokenizer = EngineTokenizer.from_state(extra["tokenizer"])
    else:
        config, weights, tokenizer = _read_source(source, keep_q4=supported)
        # Dense weights are cached in the target dtype; 4-bit parts keep their own types.
        weights = {k: v if is_q4_part(k) else v.to(torch_dtype) for k, v in weights.items()}
        if use_cache:
            store(source, torch_dtype, weights,
                  {"config": dataclasses.asdict(config), "tokenizer": tokenizer.to_state()},
                  variant)
    model = LlamaModel(config, weights, dtype=torch_dtype, device=device, use_int4=use_int4)
    return LoadedModel(config=config, model=model, tokenizer=tokenizer, source=source)
