"""ModelConfig: the hyperparameters of a Llama-family decoder, whatever file they came from."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ModelConfigError(ValueError):
    """The model's hyperparameters are missing or inconsistent."""


_SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(slots=True)
class ModelConfig:
    model_id: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ModelConfigError(f"{name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ModelConfigError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})")
        if self.head_dim % 2 != 0:
            raise ModelConfigError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if not self.rms_norm_eps > 0 or not self.rope_theta > 0:
            raise ModelConfigError("rms_norm_eps and rope_theta must be positive")
        if self.rope_scaling is not None:
            rope_type = rope_type_of(self.rope_scaling)
            if rope_type not in _SUPPORTED_ROPE_TYPES:
                raise ModelConfigError(
                    f"unsupported rope_scaling type {rope_type!r}; "
                    f"supported: {', '.join(_SUPPORTED_ROPE_TYPES)}")
            if rope_type != "default" and not float(self.rope_scaling.get("factor", 0)) > 0:
                raise ModelConfigError("rope_scaling needs a positive 'factor'")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


def rope_type_of(rope_scaling: dict[str, Any]) -> str:
    """HF configs spell it 'rope_type' (new) or 'type' (old)."""
    return str(rope_scaling.get("rope_type", rope_scaling.get("type", "default")))
