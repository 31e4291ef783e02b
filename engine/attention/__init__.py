"""Attention backends behind one plan/run interface, created by name.

Backends are imported lazily so that nothing imports flashinfer on a machine without CUDA.
"auto" resolves to flashinfer for fp16/bf16 on CUDA when the package is installed, else torch.
"""
from __future__ import annotations

import importlib
import importlib.util

from engine.attention.base import AttentionBackend

# name -> "module:class"
_BACKENDS: dict[str, str] = {
    "torch": "engine.attention.torch_backend:TorchPagedBackend",
    "cpu": "engine.attention.cpu_backend:CpuPagedBackend",
    "flashinfer": "engine.attention.flashinfer_backend:FlashInferBackend",
}


class UnknownBackend(ValueError):
    """No attention backend is registered under that name."""


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def resolve_backend_name(name: str, device: str, dtype: str) -> str:
    """The backend an engine on `device` holding `dtype` KV uses for `name` ("auto" or one of
    available_backends()). Finding the flashinfer package does not import it."""
    if name != "auto":
        return name
    on_cuda = device == "cuda" or device.startswith("cuda:")
    if on_cuda and dtype in ("bfloat16", "float16") and importlib.util.find_spec("flashinfer"):
        return "flashinfer"
    return "torch"


def get_backend(name: str) -> AttentionBackend:
    target = _BACKENDS.get(name)
    if target is None:
        raise UnknownBackend(f"unknown attention backend {name!r}; known: {available_backends()}")
    module_name, class_name = target.split(":")
    backend_cls = getattr(importlib.import_module(module_name), class_name)
    backend: AttentionBackend = backend_cls()
    return backend


__all__ = ["AttentionBackend", "UnknownBackend", "available_backends", "get_backend",
           "resolve_backend_name"]
