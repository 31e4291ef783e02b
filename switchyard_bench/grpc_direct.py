"""The 'direct' baseline for Switchyard's router: StartGenerate streams straight to one mock
engine over gRPC (closed loop, C concurrent callers), the path the router itself uses."""
from __future__ import annotations

import asyncio
import itertools
import time

import grpc

from switchyard_bench.wrk_runner import Measure
from switchyard_engine_api.auth import call_metadata, engine_token, open_channel
from switchyard_rpc import engine_pb2 as pb
from switchyard_rpc import engine_pb2_grpc as pb_grpc


async def _run(address: str, concurrency: int, duration_s: float, max_tokens: int) -> Measure:
    latencies: list[float] = []
    errors = 0
    ids = itertools.count()
    metadata = call_metadata(engine_token())
    async with open_channel(address, []) as channel:
        stub = pb_grpc.EngineStub(channel)
        sampling = pb.SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        start = time.perf_counter()
        deadline = start + duration_s

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                req = pb.StartGenerateRequest(request_id=f"direct-{next(ids)}",
                                              tokens=[19556, 28, 957, 1462, 314],
                                              sampling=sampling)
                try:
                    async for _ in stub.StartGenerate(req, metadata=metadata):
                        pass
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - t0) * 1000)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    if not latencies:
        return Measure(0.0, float("nan"), float("nan"), errors, "grpc.aio")
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    return Measure(len(latencies) / elapsed, pick(0.50), pick(0.99), errors, "grpc.aio",
                   len(latencies))


async def _count(address: str, max_tokens: int) -> int:
    async with open_channel(address, []) as channel:
        req = pb.StartGenerateRequest(request_id="direct-count", tokens=[19556, 28, 957, 1462, 314],
                                      sampling=pb.SamplingParams(max_tokens=max_tokens,
                                                                 ignore_eos=True))
        stream = pb_grpc.EngineStub(channel).StartGenerate(
            req, metadata=call_metadata(engine_token()))
        return len([chunk async for chunk in stream])


def count_messages(address: str, max_tokens: int) -> int:
    """GenerateChunk messages one StartGenerate of `max_tokens` tokens streams back."""
    return asyncio.run(_count(address, max_tokens))


def measure_grpc(address: str, concurrency: int, duration_s: float, max_tokens: int) -> Measure:
    try:
        import uvloop

        return uvloop.run(_run(address, concurrency, duration_s, max_tokens))
    except ImportError:
        return asyncio.run(_run(address, concurrency, duration_s, max_tokens))
