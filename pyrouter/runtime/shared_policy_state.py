"""State a stateful policy shares with the other router replicas: one decides, the others follow.

A policy whose decisions depend on state it changes itself (slo_mux's engine roles) registers
that state here under (policy, key in its `cluster.state`). When the policy notes an event
(`cluster.note_event`, e.g. a role switch), the replica publishes the state's `shared()` form to
its peers (pyrouter/replicas/admin_propagation.py), and each peer running the same policy `adopt`s it:
whichever replica switched last decided, the others follow, and all converge on the newest.
State derived from the engines' Stats alone needs none of this (every replica polls the same
engines); adaptive keeps only such estimates and its own requests' feedback, so it registers
nothing (docs/deploy.md, "One policy").
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class SharedState(Protocol):
    def shared(self) -> dict[str, Any]:
        """The state as JSON, for the peers."""

    def adopt(self, value: dict[str, Any]) -> None:
        """Take a peer's state (BadRequest when it is not this state's shape)."""


_SHARED: dict[str, dict[str, Callable[[], SharedState]]] = {}


def share_state(policy: str, key: str, factory: Callable[[], SharedState]) -> None:
    """`cluster.state[key]` of `policy` is shared with the peers; `factory` makes an empty one
    for a replica that has not built its own yet."""
    _SHARED.setdefault(policy, {})[key] = factory


def shared_keys(policy: str) -> dict[str, Callable[[], SharedState]]:
    return _SHARED.get(policy, {})
