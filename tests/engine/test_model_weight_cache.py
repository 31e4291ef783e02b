"""The dequantized-weight cache: a second load reads only the cache and yields identical tensors."""
from __future__ import annotations

import os

import pytest
import torch

import switchyard_tokenizer.gguf_metadata as gguf_metadata
from engine.model import weight_cache
from engine.model.loader import ModelLoadError, load_model

pytestmark = pytest.mark.model


def _forbid_gguf(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str) -> None:
        raise AssertionError("the GGUF file was parsed although a cache entry exists")

    monkeypatch.setattr(gguf_metadata, "open_gguf", refuse)


@pytest.mark.timeout(180)
def test_second_load_comes_from_cache_and_is_identical(
        smollm2_path: str, tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path))
    first = load_model(smollm2_path, dtype=torch.float32)
    entries = sorted(os.listdir(os.path.join(tmp_path, "weights")))
    assert [e.rsplit(".", 1)[1] for e in entries] == ["json", "safetensors"]

    _forbid_gguf(monkeypatch)
    second = load_model(smollm2_path, dtype=torch.float32)
    assert second.config == first.config
    assert second.tokenizer.to_json() == first.tokenizer.to_json()
    assert second.tokenizer.chat_template == first.tokenizer.chat_template
    first_weights = first.model.weight_tensors()
    second_weights = second.model.weight_tensors()
    assert first_weights.keys() == second_weights.keys()
    for name, tensor in first_weights.items():
        assert torch.equal(tensor, second_weights[name]), name

    # A damaged entry is a miss: the loader re-reads the GGUF and rewrites the entry.
    monkeypatch.undo()
    monkeypatch.setenv("SWITCHYARD_CACHE_DIR", str(tmp_path))
    weights_file = os.path.join(tmp_path, "weights", entries[1])
    with open(weights_file, "r+b") as f:
        f.write(b"garbage!")
    assert weight_cache.load_cached(smollm2_path, torch.float32) is None
    third = load_model(smollm2_path, dtype=torch.float32)
    assert torch.equal(third.model.embed, first.model.embed)
    assert weight_cache.load_cached(smollm2_path, torch.float32) is not None


def test_cache_key_depends_on_dtype_and_file(smollm2_path: str, tmp_path: os.PathLike[str]) -> None:
    fp32 = weight_cache.cache_key(smollm2_path, torch.float32)
    assert fp32 != weight_cache.cache_key(smollm2_path, torch.bfloat16)
    copy = os.path.join(tmp_path, "copy.gguf")
    with open(copy, "wb") as f:
        f.write(b"x")
    assert weight_cache.cache_key(copy, torch.float32) != fp32


def test_bad_paths_and_dtypes_are_clear_errors(smollm2_path: str,
                                               tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(ModelLoadError):
        load_model(os.path.join(tmp_path, "missing.gguf"))
    with pytest.raises(ModelLoadError):
        load_model(smollm2_path, dtype="int3")
    bogus = os.path.join(tmp_path, "bogus.gguf")
    with open(bogus, "wb") as f:
        f.write(b"not a gguf file at all" * 10)
    with pytest.raises(gguf_metadata.GGUFFormatError):
        load_model(bogus, use_cache=False)
