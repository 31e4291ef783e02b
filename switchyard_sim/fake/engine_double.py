"""The engine interface an in-process engine double gives router_core's executor
(router_core/src/python/engine_double.rs): the verbs in the engine's own messages, so the doubles
tests and the simulator run — FakeEngineClient (switchyard_sim/fake/fake_engine.py),
SimEngineVerbs (switchyard_sim/engine_verbs.py), a real engine's grpc.aio client behind FaultyClient —
stand where the router's gRPC client stands, and the executor does the rest exactly as for a
real engine.

A failed call raises an exception with `code()` (a grpc.StatusCode) and `details()`, as the
engine's gRPC server reports it; a stream's `read()` answers None once the engine closed it.
`attach` registers a membership's engines on a front: a double as a double, a real engine
through the router's own client.
"""
from __future__ import annotations

from typing import Any, Protocol

from switchyard_rpc import engine_pb2 as pb

# A call's own gRPC metadata: (key, value) pairs (a traced request's `traceparent`).
Metadata = tuple[tuple[str, str], ...] | list[tuple[str, str]]


class EngineCall(Protocol):
    """One StartGenerate stream."""

    async def read(self) -> pb.GenerateChunk | None:
        """The next chunk, or None once the engine closed the stream."""
        ...

    def cancel(self) -> bool:
        """Ends the call (the engine aborts an unfinished generation); True if it was running."""
        ...


class EngineDouble(Protocol):
    """What the executor calls on an in-process engine."""

    address: str

    async def prep_recv(self, request_id: str, tokens: list[int], end: int = -1,
                        lease_s: float = 0.0, metadata: Metadata | None = None
                        ) -> pb.PrepRecvResponse: ...

    async def remote_send(self, request_id: str, tokens: list[int], kv_addr: bytes, dst: str,
                          begin: int, end: int, transport: str = "",
                          metadata: Metadata | None = None, first_token_due_ms: float = 0.0
                          ) -> pb.RemoteSendResponse: ...

    def start_generate_request(self, request: pb.StartGenerateRequest, *,
                               metadata: Metadata | None = None) -> EngineCall:
        """Starts the generation now (no deadline: it streams as long as max_tokens needs)."""
        ...

    async def abort(self, request_id: str, handoff: bool = False) -> bool: ...


class DoubleFront(Protocol):
    """InProcessFront's side of `attach`."""

    def set_engine_double(self, num: int, double: Any, address: str) -> None: ...

    def set_engine(self, num: int, client: Any) -> None: ...


def attach(front: DoubleFront, num: int, client: Any, address: str) -> None:
    """Engine `num` of `front` is `client`: the router's gRPC client of a real engine (its
    `rpc`), or a double."""
    rpc = getattr(client, "rpc", None)
    if rpc is not None:
        front.set_engine(num, rpc)
    else:
        front.set_engine_double(num, client, address)
