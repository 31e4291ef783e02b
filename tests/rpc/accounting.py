"""Page-pool accounting as seen through Stats: once an engine is idle, every used page is a page
its prefix cache holds (nothing leaked to a dead request, an expired lease or a failed transfer)."""
from __future__ import annotations

import asyncio
import time

from switchyard_engine_api.client import EngineClient
from switchyard_rpc import engine_pb2 as pb


async def wait_idle(engine: EngineClient, timeout_s: float = 60.0) -> pb.StatsResponse:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = await engine.stats()
        idle = not (stats.running_requests or stats.queued_requests or stats.leases)
        if idle or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.2)


async def assert_accounted(engine: EngineClient) -> pb.StatsResponse:
    stats = await wait_idle(engine)
    assert (stats.running_requests, stats.queued_requests, stats.leases) == (0, 0, 0), stats
    assert stats.kv_pages_used == stats.cached_blocks, (
        f"{engine.address}: {stats.kv_pages_used} pages used but the prefix cache holds "
        f"{stats.cached_blocks}")
    return stats


def kv_bytes_per_token(info: pb.ModelInfoResponse) -> int:
    element = {"float32": 4, "bfloat16": 2, "float16": 2}[info.dtype]
    return info.num_layers * 2 * info.num_kv_heads * info.head_dim * element
