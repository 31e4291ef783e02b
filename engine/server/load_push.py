"""The KVEvents stream: the engine's KV events and, with them, its load (issue 48).

A router that follows this stream needs no Stats poll to know the engine's load: the first batch
of every stream carries the Stats (so the router knows this engine pushes and polls it only for
liveness), and afterwards a batch carries them whenever the load a router routes by
(engine/core/stats.py LoadKey) differs from the last pushed — with the tick's KV events, or in a
batch of its own (no events; first_seq = last_seq = the last sequence number sent). An idle engine
sends nothing. A draining engine ends its streams (`ended`): its routers, no longer pushed to, poll
it at --poll-s again and find it NOT_SERVING within one poll.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from engine.core.stats import EngineStats, LoadKey
from engine.kvcache.events import KVEvent
from engine.server.convert import event_batches
from switchyard_rpc import engine_pb2 as pb

T = TypeVar("T")

# One tick of the stream: new KV events, and the load if it changed since the last push, so at
# most one push per stream per tick. 50 ms (the stream's event tick before pushes): the router's
# view of a busy engine is then at most ~50 ms old where its poll gave 0.5 s, and a busy engine
# sends each router at most 20 small messages a second rather than one per step. The mock engine
# uses the same interval (router_core/src/mock_engine/load_push.rs PUSH_INTERVAL).
PUSH_INTERVAL_S = 0.05

CoreCall = Callable[[Callable[[Any], T]], Awaitable[T]]
ToProto = Callable[[EngineStats], pb.StatsResponse]
Tick = tuple[list[KVEvent], EngineStats | None]


def _changes_since(seq: int, pushed: LoadKey) -> Callable[[Any], Tick]:
    """On a verb worker: the events after `seq`, and the Stats when the load is not `pushed`
    (the cheap key first: an idle engine never builds its Stats here)."""
    def take(core: Any) -> Tick:
        events = list(core.kv_events_since(seq))
        changed = core.load_key() != pushed
        return events, core.stats() if changed else None
    return take


def _with_stats(batch: pb.KVEventBatch, stats: pb.StatsResponse) -> pb.KVEventBatch:
    batch.stats.CopyFrom(stats)
    return batch


async def kv_event_stream(call: CoreCall[Any], to_proto: ToProto, snapshot: bool,
                          ended: asyncio.Event) -> AsyncIterator[pb.KVEventBatch]:
    """The batches of one KVEvents call, until `ended` is set; `call` runs a function of the core
    on a verb worker."""
    if snapshot:
        (last_seq, hashes), stats = await call(lambda c: (c.kv_snapshot(), c.stats()))
        first = pb.KVEventBatch(first_seq=last_seq, last_seq=last_seq, snapshot=True,
                                stored=hashes)
    else:
        stats = await call(lambda c: c.stats())
        last_seq = stats.kv_event_seq
        first = pb.KVEventBatch(first_seq=last_seq, last_seq=last_seq)
    yield _with_stats(first, to_proto(stats))
    pushed = LoadKey.of(stats)
    while not ended.is_set():
        await asyncio.sleep(PUSH_INTERVAL_S)
        events, changed = await call(_changes_since(last_seq, pushed))
        batches = event_batches(events)
        if changed is not None:
            pushed = LoadKey.of(changed)
            if not batches:
                batches = [pb.KVEventBatch(first_seq=last_seq, last_seq=last_seq)]
            # On the tick's last batch: the load as of after its events.
            _with_stats(batches[-1], to_proto(changed))
        for batch in batches:
            yield batch
            last_seq = batch.last_seq
