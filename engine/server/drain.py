"""Graceful engine shutdown: stop taking work, let the work in flight finish, then stop.

On SIGTERM the engine's gRPC health turns NOT_SERVING at once and its KV event streams end (a
router that follows one polls the engine only for liveness until it ends), so routers (which then
poll it every --poll-s) route nothing new to it; then it waits until no request is queued or running and no KV reservation is
held — or SWITCHYARD_DRAIN_S seconds pass (default 0: no wait, the old behaviour) — before it
closes the server. A rolling upgrade on Kubernetes sets SWITCHYARD_DRAIN_S below the pod's
terminationGracePeriodSeconds (deploy/k8s/), so no request is cut off mid-stream.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any

DRAIN_ENV = "SWITCHYARD_DRAIN_S"
# A router may have chosen this engine just before it saw NOT_SERVING (it polls health every
# --poll-s, 0.5 s by default): wait this long before trusting "idle".
_SETTLE_S = 2.0


def drain_seconds(environ: dict[str, str] | None = None) -> float:
    raw = (os.environ if environ is None else environ).get(DRAIN_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{DRAIN_ENV} must be a number of seconds, got {raw!r}") from None
    if not value >= 0:
        raise SystemExit(f"{DRAIN_ENV} must be >= 0, got {raw!r}")
    return value


def is_idle(core: Any) -> bool:
    """Nothing queued, running or waiting to be delivered, and no KV reservation held."""
    return not core.has_work() and len(core.reservations) == 0


async def wait_idle(core: Any, timeout_s: float, poll_s: float = 0.1) -> bool:
    """True once the engine is idle (after the settle time), False when `timeout_s` ran out."""
    if timeout_s <= 0:
        return is_idle(core)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    await asyncio.sleep(min(_SETTLE_S, timeout_s))
    while not is_idle(core):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(poll_s)
    return True
