"""The Engine gRPC service: each verb validates, hands work to the step loop and maps errors.

Receiver-side verbs (PrepRecv) hand out a kv_addr naming this engine's transfer listener; sender-
side RemoteSend lives in kv_sender.py. Every engine error becomes a gRPC status with a clear
message (errors.py); a cancelled StartGenerate aborts the request so its pages are freed.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from engine.core.outputs import StepOutput
from engine.core.stats import EngineStats
from engine.core.step_trace import StepTrace
from engine.server.convert import chunk_from_outputs, stats_to_proto
from engine.server.errors import status_code
from engine.server.kv_sender import KVSender, resolve_end
from engine.server.load_push import kv_event_stream
from engine.server.spans import EngineSpans
from engine.server.step_loop import StepLoop
from engine.server.telemetry import EngineTelemetry, reported
from engine.transfer import KVAddr, KVLayout, TransferListener
from switchyard_engine_api.sampling_proto import sampling_from_proto
from switchyard_rpc import engine_pb2 as pb
from switchyard_rpc import engine_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")


class EngineServicer(pb_grpc.EngineServicer):  # type: ignore[misc]
    def __init__(self, steps: StepLoop, listener: TransferListener, layout: KVLayout,
                 model_info: pb.ModelInfoResponse, telemetry: EngineTelemetry | None = None
                 ) -> None:
        self._steps = steps
        self._listener = listener
        self._layout = layout
        self._info = model_info
        self.sender = KVSender(steps, steps.core.kv, layout)
        # Set when the engine drains: its KV event streams end, and with them the load pushes.
        self.event_streams_ended = asyncio.Event()
        self.telemetry = telemetry or EngineTelemetry(
            EngineSpans(None, model_info.engine_id, steps.core.config.role), None)

    async def _guarded(self, context: grpc.aio.ServicerContext, work: Awaitable[T],
                       verb: str = "") -> T:
        try:
            return await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status, never a crash
            code = status_code(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("verb failed")
            self.telemetry.error(verb or "other", code.name)
            await context.abort(code, str(exc) or type(exc).__name__)
            raise  # unreachable: abort raises

    async def PrepRecv(self, request: pb.PrepRecvRequest, context: Any) -> pb.PrepRecvResponse:
        tokens = list(request.tokens)
        started, spans = time.perf_counter(), self.telemetry.spans
        parent = spans.parent(context)
        kv_parent = spans.kv_parent(context) if parent is not None else None

        async def prep() -> pb.PrepRecvResponse:
            end = resolve_end(request.end, len(tokens))
            res = await self._steps.call(
                lambda core: core.prep_recv(request.request_id, tokens, end,
                                            request.lease_s or None, trace=kv_parent))
            addr = KVAddr(request.request_id, self._info.host_id, self._listener.host,
                          self._listener.port, res.matched_len, res.end, self._layout,
                          self._info.engine_id, kv_device=str(self._steps.core.kv.device),
                          pid=os.getpid())
            return pb.PrepRecvResponse(kv_addr=addr.encode(), matched_len=res.matched_len,
                                       end=res.end, page_size=self._info.page_size)

        return await reported(
            self._guarded(context, prep(), "PrepRecv"),
            lambda resp, error: self.telemetry.prep_recv(parent, started, request.request_id,
                                                         resp, error))

    async def RemoteSend(self, request: pb.RemoteSendRequest, context: Any) -> pb.RemoteSendResponse:
        started = time.perf_counter()
        parent = self.telemetry.spans.parent(context)
        steps = StepTrace() if parent is not None else None
        return await reported(
            self._guarded(context, self.sender.remote_send(request, steps), "RemoteSend"),
            lambda resp, error: self.telemetry.remote_send(parent, started, request.request_id,
                                                           steps, resp, error,
                                                           self._layout.num_layers))

    async def StartGenerate(self, request: pb.StartGenerateRequest,
                            context: Any) -> AsyncIterator[pb.GenerateChunk]:
        rid = request.request_id
        tokens = list(request.tokens)
        watch = self.telemetry.generation(context, rid)

        async def start() -> asyncio.Queue[StepOutput]:
            sampling = sampling_from_proto(request.sampling)
            if sampling.response_format is not None:
                # A new schema's grammar is compiled here, off the step loop (add_request then
                # finds it cached); one the library rejects is INVALID_ARGUMENT before any work.
                await asyncio.to_thread(self._steps.core.grammars.compile,
                                        sampling.response_format)
            outputs = self._steps.watch(rid)
            try:
                await self._steps.call(lambda core: core.add_request(
                    rid, tokens, sampling, request.begin, request.max_new_tokens_here,
                    request.output_offset, trace=watch.steps,
                    first_token_due_ms=request.first_token_due_ms))
            except BaseException:
                self._steps.unwatch(rid)
                raise
            return outputs

        outputs = await self._guarded(context, start(), "StartGenerate")
        finished = False
        try:
            while not finished:
                batch = [await outputs.get()]
                while not outputs.empty() and batch[-1].finish_reason is None:
                    batch.append(outputs.get_nowait())
                watch.outputs(batch)
                chunk = chunk_from_outputs(batch)
                finished = bool(chunk.finish_reason)
                if finished:
                    watch.done()  # before the last chunk leaves: the caller's span ends after
                yield chunk
        finally:
            self._steps.unwatch(rid)
            if not finished:
                # The client went away (or the stream was cancelled): free the request's pages.
                self._steps.submit(lambda core: core.abort(rid))
                watch.done()

    async def Abort(self, request: pb.AbortRequest, context: Any) -> pb.AbortResponse:
        rid = request.request_id

        def abort(core: Any) -> bool:
            found_send = bool(core.abort(f"{rid}#send"))
            return bool(core.abort(rid, handoff=request.handoff)) or found_send

        return pb.AbortResponse(found=await self._guarded(context, self._steps.call(abort)))

    async def MatchPrefix(self, request: pb.MatchPrefixRequest,
                          context: Any) -> pb.MatchPrefixResponse:
        tokens = list(request.tokens)
        matched = await self._guarded(context, self._steps.call(lambda c: c.match_prefix(tokens)))
        return pb.MatchPrefixResponse(matched_len=matched)

    async def Stats(self, request: pb.StatsRequest, context: Any) -> pb.StatsResponse:
        stats = await self._guarded(context, self._steps.call(lambda core: core.stats()))
        return stats_to_proto(stats, self._listener.bytes_received, self.sender.bytes_sent)

    async def KVEvents(self, request: pb.KVEventsRequest,
                       context: Any) -> AsyncIterator[pb.KVEventBatch]:
        """The KV events, and the load pushed with them (load_push.py)."""
        def call(fn: Callable[[Any], T]) -> Awaitable[T]:
            return self._guarded(context, self._steps.call(fn))

        def to_proto(stats: EngineStats) -> pb.StatsResponse:
            return stats_to_proto(stats, self._listener.bytes_received, self.sender.bytes_sent)

        ended = self.event_streams_ended
        async for batch in kv_event_stream(call, to_proto, request.snapshot, ended):
            yield batch

    async def ModelInfo(self, request: pb.ModelInfoRequest, context: Any) -> pb.ModelInfoResponse:
        return self._info

    async def Configure(self, request: pb.ConfigureRequest, context: Any) -> pb.ConfigureResponse:
        def configure(core: Any) -> pb.ConfigureResponse:
            previous = current = core.scheduler.chunk_size
            if request.HasField("prefill_chunk_size"):
                previous = core.set_chunk_size(request.prefill_chunk_size)
                current = request.prefill_chunk_size
            return pb.ConfigureResponse(prefill_chunk_size=current,
                                        previous_prefill_chunk_size=previous)

        return await self._guarded(context, self._steps.call(configure))

