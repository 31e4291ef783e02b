"""Running with engines missing: which roles the active policy lacks, what /ready says, and how a
degraded choice is written into the route header.

A policy asks the cluster view for an engine of a role (`cluster.best("decode", req)`). When no
healthy engine can take that role, the view falls back to the best healthy engine of any role
(pd with its decode engine dead becomes prefill-and-decode on the engine that is left) and the
request's route header says so: `degraded=decode->e0`. /ready answers 200 while the policy can
serve at all — degraded or not — and 503 when no engine is healthy or the router is draining;
its body lists the roles without an engine (`?strict=1` turns those into 503 as well).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class _Engine(Protocol):
    role: str


def serves(engine_role: str, wanted: str) -> bool:
    """An engine of `engine_role` can take `wanted` work (router_core's Role::serves)."""
    return wanted == "any" or engine_role in (wanted, "any")


def degraded_note(role: str, engine_id: str) -> str:
    """One entry of the route header's `degraded=` list: the role, and who stood in for it."""
    return f"{role}->{engine_id}"


@dataclass(frozen=True, slots=True)
class Readiness:
    draining: bool
    healthy_engines: int
    roles: dict[str, int] = field(default_factory=dict)  # role -> healthy engines taking it

    @property
    def missing_roles(self) -> list[str]:
        return [role for role, n in self.roles.items() if n == 0]

    @property
    def serving(self) -> bool:
        return not self.draining and self.healthy_engines > 0

    def body(self) -> dict[str, object]:
        return {"ready": self.serving, "healthy_engines": self.healthy_engines,
                "roles": dict(self.roles), "missing_roles": self.missing_roles,
                "degraded": self.serving and bool(self.missing_roles),
                "draining": self.draining}


def readiness(policy_roles: Sequence[str], healthy: Iterable[_Engine],
              draining: bool) -> Readiness:
    engines = list(healthy)
    roles = {role: sum(serves(e.role, role) for e in engines)
             for role in dict.fromkeys(policy_roles)}
    return Readiness(draining, len(engines), roles)
