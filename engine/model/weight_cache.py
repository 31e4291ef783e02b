"""On-disk cache of dequantized weights, so the second start of an engine skips the GGUF parse
and dequantization (seconds) and just maps a safetensors file.

An entry is keyed by the source file's absolute path, size and mtime plus the dtype, so editing
or replacing the model file invalidates it. Each entry is `<key>.safetensors` (weights) and
`<key>.json` (config and tokenizer); the JSON is written last, so its presence marks a complete
entry, and both are written to a temporary name and renamed, so a crash never leaves a torn one.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

# Bump when the cached layout or naming changes.
_FORMAT_VERSION = 2


def cache_root() -> str:
    """Switchyard's on-disk cache: $SWITCHYARD_CACHE_DIR or ~/.cache/switchyard."""
    return os.environ.get("SWITCHYARD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "switchyard")


def cache_dir() -> str:
    return os.path.join(cache_root(), "weights")


def cache_key(source: str, dtype: torch.dtype, variant: str = "") -> str:
    """`variant` names anything else that changes what is stored (e.g. 4-bit parts kept)."""
    stat = os.stat(source)
    ident = (f"{os.path.abspath(source)}|{stat.st_size}|{stat.st_mtime_ns}|{dtype}|{variant}|"
             f"{_FORMAT_VERSION}")
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def _paths(source: str, dtype: torch.dtype, variant: str) -> tuple[str, str]:
    base = os.path.join(cache_dir(), cache_key(source, dtype, variant))
    return base + ".safetensors", base + ".json"


def load_cached(source: str, dtype: torch.dtype,
                variant: str = "") -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """(weights, extra) for a complete entry, else None. A damaged entry counts as a miss."""
    weights_path, meta_path = _paths(source, dtype, variant)
    if not os.path.isfile(meta_path) or not os.path.isfile(weights_path):
        return None
    try:
        with open(meta_path, encoding="utf-8") as f:
            extra = json.load(f)
        return load_file(weights_path), extra
    except (OSError, ValueError, RuntimeError, SafetensorError):
        return None


def atomic_write(path: str, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache is as readable as the model
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def store(source: str, dtype: torch.dtype, weights: dict[str, torch.Tensor],
          extra: dict[str, Any], variant: str = "") -> None:
    """Write an entry; failures (read-only home, full disk) only cost the next start time."""
    weights_path, meta_path = _paths(source, dtype, variant)
    try:
        os.makedirs(os.path.dirname(weights_path), exist_ok=True)
        contiguous = {k: v.contiguous() for k, v in weights.items()}
        atomic_write(weights_path, lambda tmp: save_file(contiguous, tmp))

        def write_meta(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(extra, f)

        atomic_write(meta_path, write_meta)
    except OSError:
        return
