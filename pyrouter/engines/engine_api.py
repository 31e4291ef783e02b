"""The engine interface an EngineHandle calls: one Protocol that the router's Rust-backed client
(pyrouter/engines/rust_client.py) and the engine doubles tests and the simulator run
(switchyard_sim/fake/fake_engine.py, switchyard_sim/client.py) all satisfy.

Answers have the engine proto's messages' fields (switchyard_rpc/engine.proto): the Rust
client's verbs answer typed values made in Rust, the doubles the messages; a failed call raises
grpc.aio.AioRpcError with the engine's status code and details, whichever client made it
(the Rust client's EngineCallError is turned into one in a single place,
pyrouter/engines/front_call.py), so CALLER_MISTAKES and TransferFailed read the same code from
every double.
"""
from __future__ import annotations

from typing import Any, Protocol

from switchyard_rpc import engine_pb2 as pb

# A call's own gRPC metadata: (key, value) pairs (a traced request's `traceparent`).
Metadata = tuple[tuple[str, str], ...]


class EngineCall(Protocol):
    """One StartGenerate stream."""

    async def read(self) -> Any:
        """The next GenerateChunk (its fields, as the proto's message has them), or
        grpc.aio.EOF once the engine closed the stream."""
        ...

    def cancel(self) -> bool:
        """Ends the call (the engine aborts an unfinished generation); True if it was running."""
        ...


# Deliberately the same properties as router_core/__init__.pyi's PrepRecvResult and
# RemoteSendResult: the Protocols say what EngineHandle reads, which those classes and the
# proto's messages both provide.
class PrepRecvAnswer(Protocol):
    """PrepRecv's answer as EngineHandle reads it: router_core.PrepRecvResult from the Rust
    client, the proto's message from a double."""

    @property
    def kv_addr(self) -> bytes: ...
    @property
    def matched_len(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def page_size(self) -> int: ...


class RemoteSendAnswer(Protocol):
    """RemoteSend's answer as EngineHandle reads it (router_core.RemoteSendResult, or the
    proto's message)."""

    @property
    def bytes_sent(self) -> int: ...
    @property
    def transport(self) -> str: ...
    @property
    def total_ms(self) -> float: ...
    @property
    def cached_on_sender(self) -> int: ...
    @property
    def tail_ms(self) -> float: ...


class EngineVerbs(Protocol):
    """What a request's EngineHandle calls on its engine."""

    address: str

    async def prep_recv(self, request_id: str, tokens: list[int], end: int = -1,
                        lease_s: float = 0.0, metadata: Metadata | None = None
                        ) -> PrepRecvAnswer: ...

    async def remote_send(self, request_id: str, tokens: list[int], kv_addr: bytes, dst: str,
                          begin: int, end: int, transport: str = "",
                          metadata: Metadata | None = None) -> RemoteSendAnswer: ...

    def start_generate_request(self, request: pb.StartGenerateRequest, *,
                               metadata: Metadata | None = None) -> EngineCall:
        """Starts the generation now (no deadline: it streams as long as max_tokens needs)."""
        ...

    async def abort(self, request_id: str, handoff: bool = False) -> bool: ...

    async def configure(self, prefill_chunk_size: int | None = None,
                        timeout_s: float | None = None) -> pb.ConfigureResponse: ...

    async def close(self) -> None: ...
