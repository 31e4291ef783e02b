"""The router's tokenizer: the engine's EngineTokenizer, loaded without importing torch.

Reading a GGUF's metadata (switchyard_tokenizer/gguf_metadata.py, torch-free) takes seconds, so the
tokenizer state is cached as JSON beside the weight cache; HF directories load directly.
"""
from __future__ import annotations

import hashlib
import json
import os

from switchyard_tokenizer.default_model import default_model_path
from switchyard_tokenizer.tokenizer import EngineTokenizer, TokenizerError


def _cache_dir() -> str:
    root = os.environ.get("SWITCHYARD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "switchyard")
    os.makedirs(root, exist_ok=True)
    return root


def _gguf_state(path: str) -> dict[str, object]:
    st = os.stat(path)
    key = hashlib.sha256(f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}".encode())
    cached = os.path.join(_cache_dir(), f"router-tokenizer-{key.hexdigest()[:16]}.json")
    if os.path.isfile(cached):
        with open(cached, encoding="utf-8") as f:
            state: dict[str, object] = json.load(f)
            return state
    state = EngineTokenizer.from_gguf(path).to_state()
    tmp = f"{cached}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, cached)  # atomic: concurrent routers never read half a file
    return state


def model_display_id(model: str | None) -> str:
    """The id /v1/models lists: the file or directory name without extension."""
    path = model or default_model_path()
    base = os.path.basename(os.path.normpath(path))
    return base[:-5] if base.endswith(".gguf") else base


def load_router_tokenizer(model: str | None) -> EngineTokenizer:
    path = model or default_model_path()
    if os.path.isdir(path):
        return EngineTokenizer.from_hf_dir(path)
    if not os.path.isfile(path):
        raise TokenizerError(f"model {path!r} is neither a GGUF file nor a directory")
    return EngineTokenizer.from_state(_gguf_state(path))
