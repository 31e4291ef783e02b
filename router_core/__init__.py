"""router_core: Switchyard's Rust hot path, re-exported from the native module."""
from __future__ import annotations

from router_core._router_core import *  # noqa: F403
from router_core._router_core import __version__ as __version__
