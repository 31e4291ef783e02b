"""The fast-mode CPU kernels (csrc/): block-quantised matmul, paged attention, row-wise
activations, all batch-invariant (see the sources). Built by `make install`
(`python -m engine.kernels.build`) into `_switchyard_cpu.so`, loaded here once.
"""
from __future__ import annotations

import ctypes
import os
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
                pin_isa_from_env(torch.ops.switchyard_cpu)
                _loaded = True
    return torch.ops.switchyard_cpu


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_BYTES = 64 << 20


def keep_freed_memory() -> bool:
    """Ask glibc to serve blocks up to 64 MiB from its heap and keep freed memory mapped.

    Every step allocates its logits and activations afresh; by default glibc maps blocks over
    its (dynamic) threshold straight from the kernel and unmaps them on free, so each step
    pays a page fault per 4 KiB of them (~5 ms per step for batch-32 logits in a VM). The cost
    is that the engine's resident memory stays at its peak. False where this is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, 4 * _KEEP_BYTES))
    except (OSError, AttributeError):
        return False


ISA_NAMES = {1: "portable", 2: "avx2", 3: "avx512"}  # csrc/common.h IsaLevel
# Pins the kernels to one level (capped at what the CPU has), e.g. to time the vector code
# against the portable loops; unset: the best the CPU has.
ISA_ENV = "SWITCHYARD_KERNEL_ISA"


def pin_isa_from_env(kernels: Any) -> None:
    name = os.environ.get(ISA_ENV, "")
    if not name:
        return
    levels = {v: k for k, v in ISA_NAMES.items()}
    if name not in levels:
        raise ValueError(f"{ISA_ENV}={name!r}: expected one of {', '.join(levels)}")
    kernels.set_isa(levels[name])


def isa_name() -> str:
    """The instruction set the kernels run on this CPU: avx512 (F/BW/VNNI), avx2 (with FMA and
    F16C) or portable loops (10-35x slower; every level gives the same bits)."""
    return ISA_NAMES[int(ops().isa())]


def available() -> bool:
    return LIBRARY.exists()


__all__ = ["KernelsUnavailable", "available", "keep_freed_memory", "ops"]
