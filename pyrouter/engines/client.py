"""Async gRPC client for one engine: the verbs, plumbing and the standard health check."""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from switchyard_rpc import engine_pb2 as pb
from switchyard_rpc import engine_pb2_grpc as pb_grpc

# Large prompts travel as repeated int32; lift the 4 MiB default so long contexts fit.
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 256 << 20),
    ("grpc.max_receive_message_length", 256 << 20),
    ("grpc.keepalive_time_ms", 20_000),
]


class EngineClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.aio.insecure_channel(address, options=_CHANNEL_OPTIONS)
        self.stub = pb_grpc.EngineStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    async def close(self) -> None:
        await self.channel.close(grace=None)

    async def is_serving(self, timeout_s: float = 2.0) -> bool:
        try:
            resp = await self.health.Check(health_pb2.HealthCheckRequest(service=""),
                                           timeout=timeout_s)
        except grpc.aio.AioRpcError:
            return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)

    async def model_info(self, timeout_s: float = 5.0) -> pb.ModelInfoResponse:
        return await self.stub.ModelInfo(pb.ModelInfoRequest(), timeout=timeout_s)

    async def stats(self, timeout_s: float = 2.0) -> pb.StatsResponse:
        return await self.stub.Stats(pb.StatsRequest(), timeout=timeout_s)

    async def prep_recv(self, request_id: str, tokens: list[int], end: int) -> pb.PrepRecvResponse:
        return await self.stub.PrepRecv(
            pb.PrepRecvRequest(request_id=request_id, tokens=tokens, end=end))

    async def remote_send(self, request_id: str, tokens: list[int], kv_addr: bytes, dst: str,
                          begin: int, end: int) -> pb.RemoteSendResponse:
        return await self.stub.RemoteSend(pb.RemoteSendRequest(
            request_id=request_id, tokens=tokens, kv_addr=kv_addr, dst=dst, begin=begin, end=end))

    def start_generate(self, request: pb.StartGenerateRequest
                       ) -> grpc.aio.UnaryStreamCall[pb.StartGenerateRequest, pb.GenerateChunk]:
        return self.stub.StartGenerate(request)

    async def abort(self, request_id: str) -> bool:
        try:
            resp = await self.stub.Abort(pb.AbortRequest(request_id=request_id), timeout=2.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(resp.found)

    def kv_events(self, snapshot: bool) -> AsyncIterator[pb.KVEventBatch]:
        call = self.stub.KVEvents(pb.KVEventsRequest(snapshot=snapshot))
        return call.__aiter__()
