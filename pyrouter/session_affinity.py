"""Session affinity's settings: the bound `c` and whether the body's `user` names a session.

A request's session (the `X-Session-Id` header, or `user` when allowed) keeps it on one engine
under the data-parallel built-ins while that engine's in-flight load stays within
ceil(c × (total + 1) / n) (router_core/src/session_affinity.rs; docs/policies.md). The router
starts with its flags (`--session-load-bound`, `--session-from-user`); `PUT
/admin/session-affinity` changes them while it runs (pyrouter/http/session_admin.py). The Rust
front reads the header and `user` and applies both settings; this side keeps the values the
admin route reports.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from pyrouter.errors import BadRequest
from router_core import RouterFront

DEFAULT_LOAD_BOUND = 1.25  # router_core's DEFAULT_LOAD_BOUND
# The flags `serve` passes on to its router.
SESSION_FLAGS = ("session_load_bound", "session_from_user")


@dataclass(slots=True)
class SessionAffinityConfig:
    load_bound: float = DEFAULT_LOAD_BOUND
    from_user: bool = False

    def __post_init__(self) -> None:
        # bool is an int: `true` is no bound.
        if (isinstance(self.load_bound, bool) or not isinstance(self.load_bound, int | float)
                or not math.isfinite(self.load_bound) or self.load_bound < 1):
            raise BadRequest(f"session load bound must be a number >= 1, got {self.load_bound!r}",
                             param="load_bound")
        if not isinstance(self.from_user, bool):
            raise BadRequest(f"'from_user' must be a boolean, got {self.from_user!r}",
                             param="from_user")

    def body(self) -> dict[str, Any]:
        return {"load_bound": self.load_bound, "from_user": self.from_user}

    def apply(self, front: RouterFront | None) -> None:
        """The front takes these for its requests from now on."""
        if front is not None:
            front.set_session_affinity(float(self.load_bound), self.from_user)


def session_config(args: argparse.Namespace) -> SessionAffinityConfig:
    """From the flags (pyrouter/cli.py's add_session_arguments; BadRequest for a bound
    below 1)."""
    bound = getattr(args, "session_load_bound", None)
    return SessionAffinityConfig(DEFAULT_LOAD_BOUND if bound is None else float(bound),
                                 bool(getattr(args, "session_from_user", False)))
