"""Context migration: copy a cached context to another engine, or move a running request there.

Copy (`copy_context`): `prep_recv` on the target for the whole context + `remote_send` from the
source, no generation; once every layer has landed the target's pages enter its prefix cache,
the lease is dropped, and cache-aware routing sends matching requests to either holder.

Live (`LiveMigration`, driven by RequestRun): the running segment's engine is told to hand off
(Abort with handoff: it ends after the tokens it has produced, its KV in its prefix cache); the
KV of prompt + generated tokens crosses with prep_recv + remote_send; the segment continues on
the target with what was left of its limit. The client's stream does not notice. If the
transfer fails the target recomputes what it lacks, so a migration never costs correctness.
"""
from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

from pyrouter.engines.handle import EngineHandle, GenerationStream
from pyrouter.errors import BadRequest, TransferFailed
from pyrouter.request import RouterRequest
from switchyard_proto.sampling_params import SamplingParams


@dataclass(slots=True)
class CopyResult:
    matched: int        # tokens the target already held
    copied: int         # tokens whose KV crossed
    bytes_sent: int
    transport: str


async def copy_context(tokens: list[int], source: EngineHandle, target: EngineHandle
                       ) -> CopyResult:
    """Copy the KV of `tokens` from `source` (which computes what it lacks) into `target`'s
    prefix cache."""
    if source is target:
        raise BadRequest("'from' and 'to' are the same engine", param="to")
    if not tokens:
        raise BadRequest("the context to migrate is empty", param="prefix")
    req = RouterRequest(f"migrate-{secrets.token_hex(16)}", list(tokens),
                        SamplingParams(max_tokens=1))
    try:
        kv = await target.prep_recv(req, end=len(tokens))
        if kv.matched >= kv.end:
            return CopyResult(kv.matched, 0, 0, "")
        sent = await source.remote_send(req, kv, begin=kv.matched, end=kv.end)
        return CopyResult(kv.matched, kv.end - kv.matched, sent.bytes_sent, sent.transport)
    finally:
        req.scope.close()  # drops the lease; the landed pages stay in the target's cache


@dataclass(slots=True)
class LiveMigration:
    """A pending move of a running request's current segment to `target`."""

    target: EngineHandle
    source: EngineHandle
    done: asyncio.Event = field(default_factory=asyncio.Event)
    moved_tokens: int = 0       # context whose KV crossed (prompt + generated so far)
    outcome: str = "pending"    # "migrated" | "finished" (the request ended first) | "failed"

    def settle(self, outcome: str) -> None:
        if not self.done.is_set():
            self.outcome = outcome
            self.done.set()


async def continue_on_target(req: RouterRequest, move: LiveMigration,
                             interrupted: GenerationStream, produced_here: int
                             ) -> GenerationStream:
    """The segment's continuation on the target; `req.tokens` already holds what was produced."""
    target, source = move.target, move.source
    segment = req.timeline.begin_segment("migration")
    kv = await target.prep_recv(req)
    begin = kv.end
    if kv.matched < kv.end:
        try:
            await source.remote_send(req, kv, begin=kv.matched, end=kv.end)
        except TransferFailed:
            begin = kv.matched  # the target recomputes the rest: slower, still exact
    move.moved_tokens = kv.end
    limit = interrupted.max_new_tokens_here
    left = limit - produced_here if limit else None
    note = req.route.params
    note["migrated"] = f"{source.id}->{target.id}"
    stream = target.start_generate(req, begin=begin, max_new_tokens_here=left or None)
    req.timeline.decided(segment, target, req)
    return stream
