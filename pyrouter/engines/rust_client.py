"""The router's one client per engine: router_core's Rust gRPC client (`EngineRpcClient`,
router_core/src/python/engine_client.rs) behind the engine interface EngineHandle calls
(pyrouter/engines/engine_api.py), plus the upkeep calls the membership makes (health, Stats,
ModelInfo, KV events).

The router process dials each engine once, in Rust, with the deployment's engine token and TLS
settings (switchyard_proto/auth.py); the HTTP front streams from that same connection
(`attach_to`). Each call here crosses into Rust once and back once: a verb's answer is a typed
value made in Rust (PrepRecvResult, RemoteSendResult: no protobuf decoded here), an upkeep
call's the serialized response, read here with the proto's generated class; a failure is the
AioRpcError every engine double raises (front_call.rpc_error_of).
"""
from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable
from typing import TypeVar

from pyrouter.engines.engine_api import Metadata
from pyrouter.engines.front_call import FrontCall, rpc_error_of
from router_core import (
    EngineCallError,
    EngineRpcClient,
    PrepRecvResult,
    RemoteSendResult,
    RouterFront,
)
from switchyard_proto.auth import client_tls, engine_token
from switchyard_rpc import engine_pb2 as pb

T = TypeVar("T")


async def _answer(call: Awaitable[T]) -> T:
    try:
        return await call
    except EngineCallError as exc:
        raise rpc_error_of(exc) from None


class RustEngineClient:
    """One engine's client. Make it on the router's asyncio loop (its answers resolve there)."""

    def __init__(self, rpc: EngineRpcClient) -> None:
        self.rpc = rpc
        self.address = rpc.address
        self.timeout_s = rpc.timeout_s

    # ---- the verbs (engine_api.EngineVerbs) ----
    async def prep_recv(self, request_id: str, tokens: list[int], end: int = -1,
                        lease_s: float = 0.0, metadata: Metadata | None = None
                        ) -> PrepRecvResult:
        return await _answer(self.rpc.prep_recv(request_id, tokens, end, lease_s,
                                                list(metadata or ())))

    async def remote_send(self, request_id: str, tokens: list[int], kv_addr: bytes, dst: str,
                          begin: int, end: int, transport: str = "",
                          metadata: Metadata | None = None, timeout_s: float | None = None
                          ) -> RemoteSendResult:
        return await _answer(self.rpc.remote_send(request_id, tokens, kv_addr, dst, begin, end,
                                                  transport, list(metadata or ()), timeout_s))

    def start_generate_request(self, request: pb.StartGenerateRequest, *,
                               metadata: Metadata | None = None) -> FrontCall:
        return FrontCall(self.rpc.start_generate(request.SerializeToString(),
                                                 list(metadata or ())))

    async def abort(self, request_id: str, handoff: bool = False) -> bool:
        return await _answer(self.rpc.abort(request_id, handoff))

    async def configure(self, prefill_chunk_size: int | None = None,
                        timeout_s: float | None = None) -> pb.ConfigureResponse:
        data = await _answer(self.rpc.configure(prefill_chunk_size, timeout_s))
        return pb.ConfigureResponse.FromString(data)

    async def close(self) -> None:
        """Nothing to do: the connection closes once no client or front holds it."""

    # ---- the membership's upkeep ----
    async def healthy(self, timeout_s: float = 2.0) -> bool:
        """grpc.health.v1 answers SERVING; False for anything else (unreachable included)."""
        return await self.rpc.healthy(timeout_s)

    async def stats(self, timeout_s: float | None = None) -> pb.StatsResponse:
        return pb.StatsResponse.FromString(await _answer(self.rpc.stats(timeout_s)))

    async def model_info(self, timeout_s: float | None = None) -> pb.ModelInfoResponse:
        return pb.ModelInfoResponse.FromString(await _answer(self.rpc.model_info(timeout_s)))

    async def kv_events(self, snapshot: bool = False) -> AsyncGenerator[pb.KVEventBatch, None]:
        """The engine's KV event batches until it ends the stream (stopping early closes it);
        with snapshot=True the first batch is the full set it holds."""
        stream = self.rpc.kv_events(snapshot)
        try:
            while (data := await _answer(stream.next_batch())) is not None:
                yield pb.KVEventBatch.FromString(data)
        finally:
            stream.cancel()

    def attach_to(self, front: RouterFront, num: int) -> None:
        """Engine `num` of the HTTP front streams over this client's connection."""
        self.rpc.attach_to(front, num)


def dial(address: str, timeout_s: float) -> RustEngineClient:
    """The client for the engine at `address` (HOST:PORT), with the deployment's engine token
    and TLS settings; unary calls time out after `timeout_s` unless they name their own."""
    tls = client_tls()
    return RustEngineClient(EngineRpcClient(
        address, timeout_s, engine_token() or "", tls_ca=tls.ca if tls else None,
        tls_cert=tls.cert if tls else None, tls_key=tls.key if tls else None,
        tls_server_name=tls.server_name if tls else None))
