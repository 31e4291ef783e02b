"""The router's one client per engine: router_core's Rust gRPC client (`EngineRpcClient`,
router_core/src/python/engine_client.rs). The front's executor reaches the engine through it
(`rpc`: RouterFront.set_engine, one connection per engine), and so does the engine's upkeep
(router_core.EngineUpkeep: health, Stats and KV events, applied in Rust); health, ModelInfo and
Configure are its awaitables here.

The router process dials each engine once, in Rust, with the deployment's engine token and TLS
settings (switchyard_engine_api/auth.py). A failed call raises router_core's EngineCallError (the
gRPC status code's name and the details); the answers are router_core's typed values.
"""
from __future__ import annotations

from router_core import Configured, EngineRpcClient, ModelInfo
from switchyard_engine_api.auth import client_tls, engine_token


class RustEngineClient:
    """One engine's client. Make it on the router's asyncio loop (its answers resolve there)."""

    def __init__(self, rpc: EngineRpcClient) -> None:
        self.rpc = rpc
        self.address = rpc.address
        self.timeout_s = rpc.timeout_s

    async def configure(self, prefill_chunk_size: int | None = None,
                        timeout_s: float | None = None) -> Configured:
        return await self.rpc.configure(prefill_chunk_size, timeout_s)  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Nothing to do: the connection closes once no client, front or upkeep holds it."""

    async def healthy(self, timeout_s: float = 2.0) -> bool:
        """grpc.health.v1 answers SERVING; False for anything else (unreachable included)."""
        return await self.rpc.healthy(timeout_s)  # type: ignore[no-any-return]

    async def model_info(self, timeout_s: float | None = None) -> ModelInfo:
        return await self.rpc.model_info(timeout_s)  # type: ignore[no-any-return]


def dial(address: str, timeout_s: float) -> RustEngineClient:
    """The client for the engine at `address` (HOST:PORT), with the deployment's engine token
    and TLS settings; unary calls time out after `timeout_s` unless they name their own."""
    tls = client_tls()
    return RustEngineClient(EngineRpcClient(
        address, timeout_s, engine_token() or "", tls_ca=tls.ca if tls else None,
        tls_cert=tls.cert if tls else None, tls_key=tls.key if tls else None,
        tls_server_name=tls.server_name if tls else None))
