"""The data-parallel built-ins (round_robin, least_load, cache_aware) exist once, in Rust
(router_core/src/front/fast_path.rs): a request under one of them runs no Python at all, in the
router, the tests and the simulator alike. This module keeps the front's Rust built-in in step
with each served model's active policy."""
from __future__ import annotations

from typing import Protocol

from pyrouter.cluster import SCORE_WEIGHTS
from pyrouter.runtime.policy_registry import ActivePolicy
from pyrouter.state import RouterState

RUST_BUILTINS = ("round_robin", "least_load", "cache_aware")
Weights = tuple[float, float, float, float]


class BuiltinFront(Protocol):
    """RouterFront or InProcessFront."""

    def set_fast_policy(self, name: str | None, weights: Weights | None = None,
                        model: str | None = None) -> None: ...


def rust_builtin(active: ActivePolicy) -> tuple[str, Weights | None] | None:
    """The Rust built-in `active` is (with cache_aware's weights), or None when its requests are
    decided in Python (any other policy, or a policy file's own under a built-in's name)."""
    name = active.name
    if name not in RUST_BUILTINS or not active.spec.in_rust:
        return None
    if name != "cache_aware":
        return name, None
    w = {**active.spec.defaults, **active.params}
    return name, (float(w[SCORE_WEIGHTS[0]]), float(w[SCORE_WEIGHTS[1]]), float(w[SCORE_WEIGHTS[2]]),
                  float(w[SCORE_WEIGHTS[3]]))


def sync_builtins(state: RouterState, front: BuiltinFront) -> None:
    """Give the front the Rust built-in of each served model's active policy (or none)."""
    groups = list(state.models.values()) or [state.group()]
    for group in groups:
        choice = rust_builtin(group.slot.current)
        if choice is None:
            front.set_fast_policy(None, model=group.name)
        else:
            front.set_fast_policy(*choice, model=group.name)
