"""A generation started through the router's Rust engine client, read from Python as a grpc.aio
stream is.

While the policy decides, Python reads a segment's first chunk itself (the dispatcher's retry
and error mapping stay as they are); the front then reads the rest in Rust. This gives the
Rust `GenerateCall` grpc.aio's `read()` / `cancel()` and its errors (`AioRpcError`). A chunk is
an `EngineChunk`: made once in Rust from the message the front decoded, with the fields a
policy reads (`token_ids`, `finish_reason`, `cached_tokens`, ...) — no protobuf is decoded here.

`rpc_error_of` is where every call of the router's Rust engine client (rust_client.py) has its
EngineCallError turned into the AioRpcError the engine interface raises (engine_api.py).
"""
from __future__ import annotations

import grpc

from router_core import EngineCallError, EngineChunk, GenerateCall


def rpc_error_of(exc: EngineCallError) -> grpc.aio.AioRpcError:
    """The Rust client's failure (its status code's name and details) as grpc.aio raises it."""
    code = getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN)
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), exc.details)


class FrontCall:
    def __init__(self, call: GenerateCall) -> None:
        self.call = call

    async def read(self) -> EngineChunk | object:
        """The next chunk, or grpc.aio.EOF once the engine closed the stream."""
        try:
            chunk = await self.call.next_chunk()
        except EngineCallError as exc:
            raise rpc_error_of(exc) from None
        return grpc.aio.EOF if chunk is None else chunk

    def cancel(self) -> bool:
        return self.call.cancel()
