"""FaultyClient: a real engine's client with faults injected at chosen calls (fault tests only).

Wraps a grpc.aio client of a real engine (switchyard_engine_api/client.py's EngineClient) as the
engine double router_core's executor calls in-process (switchyard_sim/fake/engine_double.py):
the `nth` prep_recv / remote_send / start_generate fails before or after the real call went
through (switchyard_sim/fake/fake_engine.py's Fault), so tests can check that whatever a real
engine was left holding is given back.
"""
from __future__ import annotations

from typing import Any

import grpc

from switchyard_engine_api.client import EngineClient
from switchyard_rpc import engine_pb2 as pb
from switchyard_sim.fake.engine_double import Metadata
from switchyard_sim.fake.fake_engine import Fault


class FaultyClient:
    def __init__(self, inner: EngineClient, faults: list[Fault]) -> None:
        self.inner = inner
        self.faults = faults
        self._counts: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:  # stats, healthy, kv_events, ...: untouched
        return getattr(self.inner, name)

    def _nth(self, verb: str) -> int:
        nth = self._counts.get(verb, 0)
        self._counts[verb] = nth + 1
        return nth

    async def fire(self, verb: str, nth: int, after: bool) -> None:
        for fault in self.faults:
            if (fault.verb, fault.nth, fault.after) == (verb, nth, after):
                await fault.fire(f"{verb}#{nth} on {self.inner.address}")

    async def prep_recv(self, *args: Any, **kwargs: Any) -> pb.PrepRecvResponse:
        nth = self._nth("prep_recv")
        await self.fire("prep_recv", nth, after=False)
        resp = await self.inner.prep_recv(*args, **kwargs)
        await self.fire("prep_recv", nth, after=True)
        return resp

    async def remote_send(self, *args: Any, **kwargs: Any) -> pb.RemoteSendResponse:
        nth = self._nth("remote_send")
        await self.fire("remote_send", nth, after=False)
        resp = await self.inner.remote_send(*args, **kwargs)
        await self.fire("remote_send", nth, after=True)
        return resp

    def start_generate_request(self, request: pb.StartGenerateRequest, *,
                               metadata: Metadata | None = None) -> _FaultyCall:
        nth = self._nth("start_generate")
        call = self.inner.start_generate_request(
            request, metadata=tuple(metadata) if metadata else None)
        return _FaultyCall(self, nth, call)


class _FaultyCall:
    """The real StartGenerate call; faults surface on its first read, as gRPC errors do."""

    def __init__(self, client: FaultyClient, nth: int, call: Any) -> None:
        self._client, self._nth, self._call = client, nth, call
        self._first = True

    async def read(self) -> pb.GenerateChunk | None:
        if not self._first:
            return _chunk(await self._call.read())
        self._first = False
        await self._client.fire("start_generate", self._nth, after=False)
        chunk = await self._call.read()
        await self._client.fire("start_generate", self._nth, after=True)
        return _chunk(chunk)

    def cancel(self) -> bool:
        return bool(self._call.cancel())


def _chunk(read: Any) -> pb.GenerateChunk | None:
    """grpc.aio's end of stream as an engine double's (None)."""
    return None if read is grpc.aio.EOF else read  # type: ignore[no-any-return]


