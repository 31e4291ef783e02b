"""A generation started through the Rust front, read from Python as a grpc.aio stream is.

While the policy decides, Python reads a segment's first chunk itself (the dispatcher's retry
and error mapping stay as they are); the front then reads the rest in Rust. This gives the
Rust `GenerateCall` grpc.aio's `read()` / `cancel()` and its errors (`AioRpcError`).
"""
from __future__ import annotations

import grpc

from router_core import EngineCallError, GenerateCall
from switchyard_rpc import engine_pb2 as pb


class FrontCall:
    def __init__(self, call: GenerateCall) -> None:
        self.call = call

    async def read(self) -> pb.GenerateChunk | object:
        """The next chunk, or grpc.aio.EOF once the engine closed the stream."""
        try:
            data = await self.call.next_chunk()
        except EngineCallError as exc:
            code_name, details = exc.args
            code = getattr(grpc.StatusCode, str(code_name), grpc.StatusCode.UNKNOWN)
            raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       str(details)) from None
        if data is None:
            return grpc.aio.EOF
        return pb.GenerateChunk.FromString(data)

    def cancel(self) -> bool:
        return self.call.cancel()
