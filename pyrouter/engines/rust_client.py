"""The router's one client per engine: router_core's Rust gRPC client (`EngineRpcClient`,
router_core/src/python/engine_client.rs). The front's executor reaches the engine through it
(`rpc`: RouterFront.set_engine, one connection per engine); the membership's upkeep calls
(health, Stats, ModelInfo, KV events) and Configure are its awaitables here.

The router process dials each engine once, in Rust, with the deployment's engine token and TLS
settings (switchyard_engine_api/auth.py). A failed call raises router_core's EngineCallError (the
gRPC status code's name and the details). The upkeep answers cross as the serialized response,
read here with the proto's generated class.
"""
from __future__ import annotations

from collections.abc import AsyncGenerator

from router_core import EngineRpcClient
from switchyard_engine_api.auth import client_tls, engine_token
from switchyard_rpc import engine_pb2 as pb


class RustEngineClient:
    """One engine's client. Make it on the router's asyncio loop (its answers resolve there)."""

    def __init__(self, rpc: EngineRpcClient) -> None:
        self.rpc = rpc
        self.address = rpc.address
        self.timeout_s = rpc.timeout_s

    async def configure(self, prefill_chunk_size: int | None = None,
                        timeout_s: float | None = None) -> pb.ConfigureResponse:
        data = await self.rpc.configure(prefill_chunk_size, timeout_s)
        return pb.ConfigureResponse.FromString(data)

    async def close(self) -> None:
        """Nothing to do: the connection closes once no client or front holds it."""

    # ---- the membership's upkeep ----
    async def healthy(self, timeout_s: float = 2.0) -> bool:
        """grpc.health.v1 answers SERVING; False for anything else (unreachable included)."""
        return await self.rpc.healthy(timeout_s)  # type: ignore[no-any-return]

    async def stats(self, timeout_s: float | None = None) -> pb.StatsResponse:
        return pb.StatsResponse.FromString(await self.rpc.stats(timeout_s))

    async def model_info(self, timeout_s: float | None = None) -> pb.ModelInfoResponse:
        return pb.ModelInfoResponse.FromString(await self.rpc.model_info(timeout_s))

    async def kv_events(self, snapshot: bool = False) -> AsyncGenerator[pb.KVEventBatch, None]:
        """The engine's KV event batches until it ends the stream (stopping early closes it);
        with snapshot=True the first batch is the full set it holds."""
        stream = self.rpc.kv_events(snapshot)
        try:
            while (data := await stream.next_batch()) is not None:
                yield pb.KVEventBatch.FromString(data)
        finally:
            stream.cancel()


def dial(address: str, timeout_s: float) -> RustEngineClient:
    """The client for the engine at `address` (HOST:PORT), with the deployment's engine token
    and TLS settings; unary calls time out after `timeout_s` unless they name their own."""
    tls = client_tls()
    return RustEngineClient(EngineRpcClient(
        address, timeout_s, engine_token() or "", tls_ca=tls.ca if tls else None,
        tls_cert=tls.cert if tls else None, tls_key=tls.key if tls else None,
        tls_server_name=tls.server_name if tls else None))
