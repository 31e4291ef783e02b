"""Attention backends behind one plan/run interface, created by name.

Backends are imported lazily so that nothing imports flashinfer on a machine without CUDA.
"""
from __future__ import annotations

import importlib

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


def get_backend(name: str) -> AttentionBackend:
    target = _BACKENDS.get(name)
    if target is None:
        raise UnknownBackend(f"unknown attention backend {name!r}; known: {available_backends()}")
    module_name, class_name = target.split(":")
    backend_cls = getattr(importlib.import_module(module_name), class_name)
    backend: AttentionBackend = backend_cls()
    return backend


__all__ = ["AttentionBackend", "UnknownBackend", "available_backends", "get_backend"]
