"""A simulated engine's hardware and model: step-time coefficients, KV shape and capacity,
batching limits and the link between engines, read from a JSON file (switchyard_sim/profiles/).

The step-time coefficients are the engines' own latency model (engine/core/latency_model.py:
the terms router_core evaluates from Stats), so a simulated step costs what the real engine's
fitted model says, and the router predicts with the very model the simulated engines report.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.core.latency_model import HINGE, TERMS, LatencyModel

PROFILE_DIR = os.path.join(os.path.dirname(__file__), "profiles")


class ProfileError(ValueError):
    """A profile file is missing, unreadable or inconsistent (said plainly)."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    model_id: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_dtype_bytes: int  # bytes per K or V element
    max_context: int

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one position, every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    name: str
    model: ModelShape
    # term -> ms per unit of its feature, named as router_core reads them (the hinge with its
    # knee: "decode_context_over:K").
    latency_model: dict[str, float]
    page_size: int
    kv_pages: int
    chunk_size: int  # the engines' prefill token budget per step at start
    max_running: int
    link_gbps: float  # inter-engine KV bandwidth, GB/s (1e9 bytes)
    link_latency_ms: float = 0.0  # per transfer, before its first byte moves
    rpc_ms: float = 0.0  # one way, router <-> engine, for each verb and stream start
    # The KV link's per-chunk costs (one chunk per layer and step, switchyard_sim/transfer.py):
    link_chunk_ms: float = 0.0  # receiver: taking one chunk in (frame, lock, page writes)
    send_chunk_ms: float = 0.0  # sender's step thread: staging one chunk (alloc, commit)
    gather_gbps: float = 0.0  # sender's step thread: gathering K/V out of pages (0: free)
    recv_step_share: float = 0.0  # share of the receiver's link work its step loop loses
    # Engines sharing CPU cores (0: each engine owns its hardware) and the step-time factors
    # when two of them step at once: a step that prefills, a decode-only step
    # (switchyard_sim/cores.py; decode_contention absent: contention's).
    cores: int = 0
    contention: float = 1.0
    decode_contention: float = 1.0
    router_ms: float = 0.0  # the router's own time before each verb it sends (policy, books)
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # sources, arithmetic, anything else

    @property
    def knee(self) -> int | None:
        for term in self.latency_model:
            if term.startswith(HINGE + ":"):
                return int(term.split(":", 1)[1])
        return None

    def latency(self, window: int = 64) -> ProfiledLatency:
        return ProfiledLatency(self.latency_model, self.knee, window)

    @property
    def shares_cores(self) -> bool:
        """Engines slow each other when they step at once (switchyard_sim/cores.py)."""
        return self.cores > 0 and max(self.contention, self.decode_contention) > 1

    def transfer_s(self, num_bytes: int) -> float:
        """Seconds `num_bytes` take on the link (bandwidth only)."""
        return num_bytes / (self.link_gbps * 1e9)


class ProfiledLatency(LatencyModel):
    """The engine's LatencyModel with its coefficients fixed to a profile's: it predicts steps
    (the simulated step's duration) and reports the model in Stats, exactly as a fitted engine
    does, without refitting."""

    def __init__(self, coeffs: dict[str, float], knee: int | None, window: int) -> None:
        super().__init__(window, clock="wall", knee=knee)
        self.source = "profile"
        base = {k.split(":", 1)[0]: v for k, v in coeffs.items()}
        self._fixed = np.asarray([float(base.get(t, 0.0)) for t in self.terms])

    def _fit(self) -> np.ndarray | None:
        return self._fixed

    def fit_error(self) -> float:
        return 0.0


# Optional numbers >= 0 (absent: no such cost), read by name into HardwareProfile.
_DEFAULTS = {"contention": 1.0}
_OPTIONAL_NUMBERS = ("link_latency_ms", "rpc_ms", "link_chunk_ms", "send_chunk_ms",
                     "gather_gbps", "recv_step_share", "contention", "decode_contention",
                     "router_ms")


def _require(body: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = body.get(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProfileError(f"{where}: '{key}' must be a {kind.__name__}, got {value!r}")
    return value


def _positive(value: float, key: str, where: str) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ProfileError(f"{where}: '{key}' must be > 0, got {value!r}")


def _coefficients(raw: Any, where: str) -> dict[str, float]:
    if not isinstance(raw, dict) or not raw:
        raise ProfileError(f"{where}: 'latency_model' must be a non-empty object term -> ms")
    out: dict[str, float] = {}
    for term, value in raw.items():
        base, _, knee = str(term).partition(":")
        if base not in TERMS or (base == HINGE) != bool(knee) or (knee and not knee.isdigit()):
            raise ProfileError(f"{where}: unknown latency term {term!r} (terms: {TERMS}; the "
                               f"hinge is written {HINGE}:K)")
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                math.isfinite(value) and value >= 0):
            raise ProfileError(f"{where}: latency term {term!r} must be a number >= 0")
        out[str(term)] = float(value)
    return out


def profile_from_dict(body: dict[str, Any], where: str = "profile") -> HardwareProfile:
    model_raw = body.get("model")
    if not isinstance(model_raw, dict):
        raise ProfileError(f"{where}: 'model' must be an object")
    ints = {k: _require(model_raw, k, int, where + ".model")
            for k in ("num_layers", "num_kv_heads", "head_dim", "kv_dtype_bytes", "max_context")}
    for key, value in ints.items():
        _positive(value, key, where + ".model")
    model = ModelShape(str(model_raw.get("model_id", "")), **ints)
    fields = {k: _require(body, k, int, where) for k in ("page_size", "kv_pages", "chunk_size",
                                                         "max_running")}
    for key, value in fields.items():
        _positive(value, key, where)
    link = _require(body, "link_gbps", float, where)
    _positive(link, "link_gbps", where)
    extras: dict[str, float] = {}
    for key in _OPTIONAL_NUMBERS:
        default = (extras["contention"] if key == "decode_contention"
                   else _DEFAULTS.get(key, 0.0))
        value = body.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                value >= 0 and math.isfinite(value)):
            raise ProfileError(f"{where}: '{key}' must be a number >= 0, got {value!r}")
        extras[key] = float(value)
    if extras["recv_step_share"] > 1:
        raise ProfileError(f"{where}: 'recv_step_share' is a share in [0, 1]")
    for key in ("contention", "decode_contention"):
        if extras[key] < 1:
            raise ProfileError(f"{where}: '{key}' is a step-time factor >= 1")
    cores = body.get("cores", 0)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 0:
        raise ProfileError(f"{where}: 'cores' must be an integer >= 0, got {cores!r}")
    stated = body.get("kv_bytes_per_token")
    if stated is not None and stated != model.kv_bytes_per_token:
        raise ProfileError(f"{where}: kv_bytes_per_token {stated} does not match the model "
                           f"shape ({model.kv_bytes_per_token})")
    known = {"name", "model", "latency_model", "page_size", "kv_pages", "chunk_size",
             "max_running", "link_gbps", "description", "kv_bytes_per_token", "cores",
             *_OPTIONAL_NUMBERS}
    return HardwareProfile(
        str(body.get("name", where)), model, _coefficients(body.get("latency_model"), where),
        page_size=fields["page_size"], kv_pages=fields["kv_pages"],
        chunk_size=fields["chunk_size"], max_running=fields["max_running"], link_gbps=link,
        link_latency_ms=extras["link_latency_ms"], rpc_ms=extras["rpc_ms"],
        link_chunk_ms=extras["link_chunk_ms"], send_chunk_ms=extras["send_chunk_ms"],
        gather_gbps=extras["gather_gbps"], recv_step_share=extras["recv_step_share"],
        cores=cores, contention=extras["contention"],
        decode_contention=extras["decode_contention"], router_ms=extras["router_ms"],
        description=str(body.get("description", "")),
        meta={k: v for k, v in body.items() if k not in known})


def builtin_profiles() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".json"))


def load_profile(name_or_path: str) -> HardwareProfile:
    """A profile by built-in name (switchyard_sim/profiles/NAME.json) or file path."""
    path = name_or_path
    if not os.path.exists(path):
        path = os.path.join(PROFILE_DIR, f"{name_or_path}.json")
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except FileNotFoundError:
        raise ProfileError(f"no profile {name_or_path!r}: not a file and not one of "
                           f"{builtin_profiles()}") from None
    except (OSError, ValueError) as exc:
        raise ProfileError(f"cannot read profile {path}: {exc}") from exc
    if not isinstance(body, dict):
        raise ProfileError(f"{path}: a profile is a JSON object")
    return profile_from_dict(body, path)
