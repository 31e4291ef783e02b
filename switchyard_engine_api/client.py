"""The typed async client for one engine's gRPC service (the router, tests, benchmarks).

    async with EngineClient("127.0.0.1:50051") as e:
        kv = await e.prep_recv("r1", tokens, end=-1)
        await other.remote_send("r1", tokens, kv.kv_addr, dst=e.address, begin=kv.matched_len,
                                end=kv.end)
        result = await e.generate("r1", tokens, begin=kv.end, max_tokens=32)

Errors surface as grpc.aio.AioRpcError with the engine's status code and message.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from switchyard_engine_api.auth import call_metadata, engine_token, open_channel
from switchyard_rpc import engine_pb2 as pb
from switchyard_rpc import engine_pb2_grpc as pb_grpc

# Long prompts travel as repeated int32, so lift the 4 MiB default; keepalive notices a dead
# engine on an idle channel (the router keeps one channel per engine for its lifetime), and a
# short reconnect backoff finds a restarted engine within seconds (gRPC's default grows to 2 min).
Metadata = tuple[tuple[str, str], ...]
_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 << 20),
                    ("grpc.max_send_message_length", 256 << 20),
                    ("grpc.keepalive_time_ms", 20_000),
                    ("grpc.initial_reconnect_backoff_ms", 250),
                    ("grpc.max_reconnect_backoff_ms", 3_000)]


@dataclass(slots=True)
class Generation:
    """A whole StartGenerate stream, collected."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = ""
    error: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    chunks: int = 0


def sampling(max_tokens: int = 16, temperature: float = 0.0, **kwargs: Any) -> pb.SamplingParams:
    """Greedy by default; keyword names are SamplingParams' proto fields."""
    return pb.SamplingParams(max_tokens=max_tokens, temperature=temperature, **kwargs)


class EngineClient:
    """`token`: the engine token to present (default: the deployment's, switchyard_engine_api/auth.py)."""

    def __init__(self, address: str, timeout_s: float = 120.0, token: str | None = None) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self._md = call_metadata(token if token is not None else engine_token())
        self._channel = open_channel(address, _CHANNEL_OPTIONS)
        self._stub = pb_grpc.EngineStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def __aenter__(self) -> EngineClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def _call_md(self, extra: Metadata | None) -> Metadata:
        """The engine token plus a call's own metadata (a traced request's context)."""
        return self._md + extra if extra else self._md

    async def prep_recv(self, request_id: str, tokens: list[int], end: int = -1,
                        lease_s: float = 0.0, metadata: Metadata | None = None
                        ) -> pb.PrepRecvResponse:
        req = pb.PrepRecvRequest(request_id=request_id, tokens=tokens, end=end, lease_s=lease_s)
        resp: pb.PrepRecvResponse = await self._stub.PrepRecv(req, timeout=self.timeout_s,
                                                              metadata=self._call_md(metadata))
        return resp

    async def remote_send(self, request_id: str, tokens: list[int], kv_addr: bytes, dst: str,
                          begin: int, end: int, transport: str = "",
                          metadata: Metadata | None = None, timeout_s: float | None = None,
                          first_token_due_ms: float = 0.0) -> pb.RemoteSendResponse:
        req = pb.RemoteSendRequest(request_id=request_id, tokens=tokens, kv_addr=kv_addr, dst=dst,
                                   begin=begin, end=end, transport=transport,
                                   first_token_due_ms=first_token_due_ms)
        resp: pb.RemoteSendResponse = await self._stub.RemoteSend(
            req, timeout=timeout_s or self.timeout_s, metadata=self._call_md(metadata))
        return resp

    def start_generate(self, request_id: str, tokens: list[int], begin: int = 0,
                       params: pb.SamplingParams | None = None,
                       max_new_tokens_here: int = 0) -> grpc.aio.UnaryStreamCall:
        """The raw call: iterate it with `async for` (or `await call.read()` chunk by chunk, not
        both); `call.cancel()` (or dropping it) aborts the request on the engine."""
        req = pb.StartGenerateRequest(request_id=request_id, tokens=tokens, begin=begin,
                                      sampling=params or sampling(),
                                      max_new_tokens_here=max_new_tokens_here)
        return self.start_generate_request(req, self.timeout_s)

    def start_generate_request(self, request: pb.StartGenerateRequest,
                               timeout_s: float | None = None, metadata: Metadata | None = None
                               ) -> grpc.aio.UnaryStreamCall:
        """start_generate for a request the caller built (the router's hot path); no deadline by
        default, since a generation may stream for as long as max_tokens needs. `metadata`:
        e.g. the W3C trace context of a traced request (switchyard_telemetry.propagation)."""
        call: grpc.aio.UnaryStreamCall = self._stub.StartGenerate(
            request, timeout=timeout_s, metadata=self._call_md(metadata))
        return call

    async def generate(self, request_id: str, tokens: list[int], begin: int = 0,
                       params: pb.SamplingParams | None = None,
                       max_new_tokens_here: int = 0) -> Generation:
        out = Generation()
        async for chunk in self.start_generate(request_id, tokens, begin, params,
                                               max_new_tokens_here):
            out.chunks += 1
            out.token_ids.extend(chunk.token_ids)
            out.text += chunk.text
            if chunk.prompt_tokens:
                out.prompt_tokens, out.cached_tokens = chunk.prompt_tokens, chunk.cached_tokens
            if chunk.finish_reason:
                out.finish_reason, out.error = chunk.finish_reason, chunk.error
        return out

    async def abort(self, request_id: str, handoff: bool = False) -> bool:
        """handoff=True: a running generation ends with "handoff" (to continue elsewhere)."""
        resp = await self._stub.Abort(pb.AbortRequest(request_id=request_id, handoff=handoff),
                                      timeout=self.timeout_s, metadata=self._md)
        return bool(resp.found)

    async def match_prefix(self, tokens: list[int]) -> int:
        resp = await self._stub.MatchPrefix(pb.MatchPrefixRequest(tokens=tokens),
                                            timeout=self.timeout_s, metadata=self._md)
        return int(resp.matched_len)

    async def stats(self, timeout_s: float | None = None) -> pb.StatsResponse:
        resp: pb.StatsResponse = await self._stub.Stats(
            pb.StatsRequest(), timeout=timeout_s or self.timeout_s, metadata=self._md)
        return resp

    async def configure(self, prefill_chunk_size: int | None = None,
                        timeout_s: float | None = None) -> pb.ConfigureResponse:
        """Change run-time settings (None = leave as is); the response says what is in force.
        grpc.aio.AioRpcError with INVALID_ARGUMENT for a value out of range."""
        request = pb.ConfigureRequest()
        if prefill_chunk_size is not None:
            request.prefill_chunk_size = prefill_chunk_size
        resp: pb.ConfigureResponse = await self._stub.Configure(
            request, timeout=timeout_s or self.timeout_s, metadata=self._md)
        return resp

    async def model_info(self, timeout_s: float | None = None) -> pb.ModelInfoResponse:
        resp: pb.ModelInfoResponse = await self._stub.ModelInfo(
            pb.ModelInfoRequest(), timeout=timeout_s or self.timeout_s, metadata=self._md)
        return resp

    def kv_events(self, snapshot: bool = False) -> AsyncIterator[pb.KVEventBatch]:
        """Endless stream (cancel it to stop); with snapshot=True the first batch is the full set."""
        stream: AsyncIterator[pb.KVEventBatch] = self._stub.KVEvents(
            pb.KVEventsRequest(snapshot=snapshot), metadata=self._md)
        return stream

    async def healthy(self, timeout_s: float = 2.0) -> bool:
        try:
            resp = await self._health.Check(health_pb2.HealthCheckRequest(service=""),
                                            timeout=timeout_s)
        except grpc.aio.AioRpcError:
            return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)
