"""Context migration, both kinds carried out by router_core's executor.

Copy (`copy_context`): `prep_recv` on the target for the whole context + `remote_send` from the
source, no generation; once every layer has landed the target's pages enter its prefix cache,
the lease is dropped, and cache-aware routing sends matching requests to either holder.

Live (`move_request`): the running segment's engine is told to hand off (Abort with handoff: it
ends after the tokens it has produced, its KV in its prefix cache); the KV of prompt + generated
tokens crosses with prep_recv + remote_send; the segment continues on the target with what was
left of its limit. The client's stream does not notice. If the transfer fails the target
recomputes what it lacks, so a migration never costs correctness.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pyrouter.engines.handle import EngineHandle
from pyrouter.errors import BadRequest, NotFound
from pyrouter.runtime.pollable import Pollable, settled


class MigratingFront(Protocol):
    """RouterFront or InProcessFront."""

    def copy_context(self, tokens: list[int], source: int, target: int) -> Pollable: ...

    def migrate(self, request_id: str, target: int) -> Pollable: ...


@dataclass(slots=True)
class CopyResult:
    matched: int        # tokens the target already held
    copied: int         # tokens whose KV crossed
    bytes_sent: int
    transport: str


async def copy_context(front: MigratingFront, tokens: list[int], source: EngineHandle,
                       target: EngineHandle) -> CopyResult:
    """Copy the KV of `tokens` from `source` (which computes what it lacks) into `target`'s
    prefix cache."""
    if source is target:
        raise BadRequest("'from' and 'to' are the same engine", param="to")
    if not tokens:
        raise BadRequest("the context to migrate is empty", param="prefix")
    copied = await settled(front.copy_context(list(tokens), source.num, target.num))
    return CopyResult(int(copied["matched"]), int(copied["copied"]),
                      int(copied["bytes_sent"]), str(copied["transport"]))


async def move_request(front: MigratingFront, request_id: str, target: EngineHandle
                       ) -> dict[str, Any]:
    """Move the running request the client calls `request_id` to `target`; once it has moved
    (or failed, or ended first): {from, to, outcome, moved_tokens}. A 400 for a request that
    cannot move (already moving, already there), a 404 for none running."""
    try:
        moved: dict[str, Any] = await settled(front.migrate(request_id, target.num))
    except ValueError as exc:
        raise (BadRequest(str(exc), param="request_id") if "share the id" in str(exc)
               else NotFound(str(exc), param="request_id")) from None
    if moved["outcome"] == "refused":
        raise BadRequest(str(moved["error"]), param="to")
    return moved
