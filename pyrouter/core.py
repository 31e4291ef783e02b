"""The router's handle on router_core: the Rust RouterCore when built, else the Python stand-in."""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("switchyard.router")


def make_router_core(block_size: int, seed: int) -> Any:
    try:
        from router_core import RouterCore  # type: ignore[attr-defined]
    except ImportError:
        from pyrouter.core_fallback import FallbackRouterCore

        log.warning("router_core.RouterCore not built; using the load-only Python fallback")
        return FallbackRouterCore(block_size, seed)
    return RouterCore(block_size, seed)


def native_core_available() -> bool:
    try:
        from router_core import RouterCore  # type: ignore[attr-defined]  # noqa: F401
    except ImportError:
        return False
    return True
