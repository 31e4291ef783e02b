"""On-disk cache of latency profiles, beside the dequantized weights (engine/model/weight_cache.py),
so an engine profiles once per machine and configuration and later starts just load the samples.

A profile is valid for one model, numerics (fast mode or the exact mode's dtype), KV dtype,
device, torch thread count, CPU (or GPU) model and the instruction set torch and the fast
kernels run on (with the kernel library's build), attention backend, KV page size, profile grid
and version of the profiling code; the key hashes all of them. Engines starting together take a
file lock on the key, so one profiles and the others wait and load its result instead of
profiling on a machine the first one keeps busy.
`prepare_latency_model` is what an engine calls at start (`--latency-profile off|auto|force`).
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from engine.core.latency_model import VERSION as MODEL_VERSION
from engine.core.latency_model import StepSample
from engine.core.latency_profile import ProfileGrid, grid_for, run_profile
from engine.model.weight_cache import atomic_write, cache_root

if TYPE_CHECKING:
    from engine.core.engine_core import EngineCore

log = logging.getLogger(__name__)
# Bump when the profile's procedure (what it runs, how it measures) changes.
PROFILE_CODE_VERSION = 2
PROFILE_MODES = ("off", "auto", "force")


def profile_dir() -> str:
    return os.path.join(cache_root(), "latency")


def hardware_model(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(torch.device(device)))
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def compute_identity(device: str, mode: str) -> dict[str, str]:
    """What decides how fast the same step runs on this machine beyond the model and the CPU's
    name: the instruction set torch's CPU kernels dispatch to and, in fast mode, the compiled
    kernels' level and build. One CPU name covers machines with and without AVX-512 (the same
    "AMD EPYC" on both kinds of VM here), and a rebuilt kernel library can be 10x faster (the
    AVX2 kernels over the portable loops), so a profile from either is not this engine's."""
    out = {"torch_cpu": "" if device.startswith("cuda") else torch.backends.cpu.get_cpu_capability()}
    if mode == "fast":
        from engine.kernels import LIBRARY, isa_name

        out["kernels"] = isa_name()
        out["kernels_build"] = _file_digest(str(LIBRARY))
    return out


def _file_digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()[:16]
    except OSError:
        return ""


def profile_identity(core: EngineCore, grid: ProfileGrid) -> dict[str, Any]:
    config = core.config
    return {
        "model_id": core.model_config.model_id, "numerics": config.numerics,
        "dtype": config.dtype, "kv_dtype": config.resolved_kv_dtype, "device": config.device,
        "torch_threads": torch.get_num_threads(), "hardware": hardware_model(config.device),
        **compute_identity(config.device, config.mode),
        "attention_backend": config.resolved_backend, "page_size": config.page_size,
        "terms": list(core.latency.terms), "knee": core.latency.knee,
        "grid": dataclasses.asdict(grid), "model_version": MODEL_VERSION,
        "profile_code_version": PROFILE_CODE_VERSION,
    }


def profile_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def load_profile(key: str, terms: tuple[str, ...]) -> list[Any] | None:
    """The cached rows for `key` ([features, wall_ms, cpu_ms] each), or None (missing, damaged or
    for other terms)."""
    try:
        with open(os.path.join(profile_dir(), f"{key}.json"), encoding="utf-8") as f:
            entry = json.load(f)
        if tuple(entry["terms"]) != terms or not isinstance(entry["rows"], list):
            return None
        return list(entry["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_profile(key: str, identity: dict[str, Any], terms: tuple[str, ...],
                  rows: list[StepSample], seconds: float) -> None:
    """Failures (read-only home, full disk) only cost the next start a profile."""
    entry = {"identity": identity, "terms": list(terms), "rows": rows, "seconds": seconds}

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(entry, f)

    try:
        os.makedirs(profile_dir(), exist_ok=True)
        atomic_write(os.path.join(profile_dir(), f"{key}.json"), write)
    except OSError:
        log.warning("could not store the latency profile in %s", profile_dir())


@contextmanager
def _key_lock(key: str) -> Iterator[None]:
    try:
        os.makedirs(profile_dir(), exist_ok=True)
        handle = open(os.path.join(profile_dir(), f"{key}.lock"), "w")  # noqa: SIM115
    except OSError:
        yield  # no cache directory: nothing to share, profile alone
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def prepare_latency_model(core: EngineCore, mode: str, grid: ProfileGrid | None = None) -> str:
    """Give core.latency its profile: "off" = none (the model fits live steps only), "auto" =
    the cached one or a new one, "force" = a new one. Returns the model's source. Call before the
    engine serves: profiling runs requests through it."""
    if mode not in PROFILE_MODES:
        raise ValueError(f"latency profile mode must be one of {PROFILE_MODES}, got {mode!r}")
    if mode == "off":
        return core.latency.source
    grid = grid_for(core, grid)
    identity = profile_identity(core, grid)
    key = profile_key(identity)
    with _key_lock(key):
        rows = load_profile(key, core.latency.terms) if mode == "auto" else None
        if rows:
            try:
                core.latency.load_profile(rows, "cache")
                log.info("latency profile loaded from the cache (%d steps)", len(rows))
                return "cache"
            except (ValueError, TypeError):
                log.warning("damaged latency profile %s; profiling again", key)
        seconds = run_profile(core, grid)
        store_profile(key, identity, core.latency.terms, core.latency.profile_rows(), seconds)
    log.info("latency model fitted: %s (median error %.1f%%)", core.latency.coefficients(),
             100 * core.latency.fit_error())
    return core.latency.source
