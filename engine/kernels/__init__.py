"""The fast-mode CPU kernels (csrc/): block-quantised matmul, paged attention, row-wise
activations, all batch-invariant (see the sources). Built by `make install`
(`python -m engine.kernels.build`) into `_switchyard_cpu.so`, loaded here once.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch

LIBRARY = Path(__file__).resolve().parent / "_switchyard_cpu.so"
_lock = threading.Lock()
_loaded = False


class KernelsUnavailable(RuntimeError):
    """The compiled kernel library is missing (run `make install`)."""


def ops() -> Any:
    """`torch.ops.switchyard_cpu`, loading the library on first use."""
    global _loaded
    if not _loaded:
        with _lock:
            if not _loaded:
                if not LIBRARY.exists():
                    raise KernelsUnavailable(
                        f"{LIBRARY} is missing: the fast CPU mode needs its kernels; run "
                        "`make install` (or `python -m engine.kernels.build`), or start the "
                        "engine with --mode exact")
                torch.ops.load_library(str(LIBRARY))
                _loaded = True
    return torch.ops.switchyard_cpu


def available() -> bool:
    return LIBRARY.exists()


__all__ = ["KernelsUnavailable", "available", "ops"]
