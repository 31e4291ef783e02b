"""The router's tokenizer: the engine's EngineTokenizer, loaded without importing torch.

GGUF metadata parsing lives in engine/model (which imports torch), so for a GGUF file a short
helper process extracts the tokenizer state once and caches it as JSON; the router process then
builds EngineTokenizer from that state. HF directories load directly (tokenizer.json).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from engine.model.default_model import default_model_path
from engine.tokenizer import EngineTokenizer, TokenizerError

_EXTRACT = (
    "import json, sys\n"
    "from engine.tokenizer import EngineTokenizer\n"
    "json.dump(EngineTokenizer.from_gguf(sys.argv[1]).to_state(), sys.stdout)\n"
)


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
    proc = subprocess.run([sys.executable, "-c", _EXTRACT, path], capture_output=True, text=True,
                          timeout=300, check=False)
    if proc.returncode != 0:
        raise TokenizerError(f"cannot read the tokenizer from {path}: {proc.stderr.strip()[-500:]}")
    state = json.loads(proc.stdout)
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
