"""SimEngineVerbs: a simulated engine's verbs (prep_recv, remote_send, StartGenerate, abort, ...)
as router_core's executor calls them on an in-process engine (switchyard_sim/fake/
engine_double.py's EngineDouble), answered in virtual time: what the gRPC servicer and its KV
sender do (engine/server/servicer.py, kv_sender.py), without processes or sockets.

Errors are the servicer's: engine exceptions become grpc.aio.AioRpcError with the same status
codes (engine/server/errors.py). A stream's tokens may be coalesced per read as the servicer
coalesces for a slow reader (`coalesce` outputs per wake-up, the first and the last at once):
the router sees the same chunks, fewer times, and each token's time is kept in the TokenLog.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc

from engine.core.outputs import StepOutput
from engine.core.validation import resolve_end
from engine.server.convert import chunk_from_outputs
from engine.server.errors import RequestInUse, status_code
from switchyard_engine_api.errors import EngineError, InvalidRequest
from switchyard_engine_api.sampling_proto import sampling_from_proto
from switchyard_rpc import engine_pb2 as pb
from switchyard_sim.engine import SimEngine
from switchyard_sim.fake.engine_double import Metadata
from switchyard_sim.fake.fake_engine import rpc_error
from switchyard_sim.transfer import KvLink, KvTransfer


class TokenLog:
    """When each generated token left its engine, per engine request id (virtual seconds)."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}

    def add(self, request_id: str, at: float, count: int) -> None:
        self.times.setdefault(request_id, []).extend([at] * count)

    def pop(self, request_id: str) -> list[float]:
        return self.times.pop(request_id, [])


class _Inbox:
    """One request's outputs waiting for its reader; the reader wakes for the first output, a
    finish, or every `coalesce` outputs."""

    __slots__ = ("coalesce", "outputs", "ready", "waiter")

    def __init__(self, coalesce: int) -> None:
        self.coalesce = coalesce
        self.outputs: list[StepOutput] = []
        self.ready = False
        self.waiter: asyncio.Future[None] | None = None

    def put(self, out: StepOutput) -> None:
        self.outputs.append(out)
        if out.finish_reason or out.first or len(self.outputs) >= self.coalesce:
            self.ready = True
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)

    async def take(self) -> list[StepOutput]:
        while not self.ready:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        batch, self.outputs, self.ready = self.outputs, [], False
        return batch


def _rpc(exc: Exception) -> grpc.aio.AioRpcError:
    return rpc_error(status_code(exc), str(exc) or type(exc).__name__)


def encode_kv_addr(engine_id: str, request_id: str, matched: int, end: int) -> bytes:
    return json.dumps([engine_id, request_id, matched, end]).encode()


def decode_kv_addr(kv_addr: bytes) -> tuple[str, str, int, int]:
    try:
        engine_id, request_id, matched, end = json.loads(kv_addr)
        return str(engine_id), str(request_id), int(matched), int(end)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(f"not a simulated engine's kv_addr: {kv_addr[:60]!r}") from exc


class SimEngineVerbs:
    """What EngineHandle calls on `client`; `peers` finds a kv_addr's engine by id."""

    def __init__(self, engine: SimEngine, peers: dict[str, SimEngine], tokens: TokenLog,
                 coalesce: int = 16) -> None:
        self.engine = engine
        self.address = f"sim:{engine.id}"
        self._peers = peers
        self._tokens = tokens
        self._coalesce = max(1, coalesce)
        self._inboxes: dict[str, _Inbox] = {}
        # Each verb and stream start: the router's own time before it sends, then the wire.
        self._rpc_s = (engine.profile.router_ms + engine.profile.rpc_ms) / 1e3
        self.link = KvLink()

    # ---- plumbing ----
    def deliver(self, out: StepOutput, now: float) -> None:
        """The engine's outputs, to the stream or send waiting for them."""
        inbox = self._inboxes.get(out.request_id)
        if inbox is None:
            return  # nobody reads it any more (a cancelled stream)
        if out.new_token_ids:
            self._tokens.add(out.request_id, now, len(out.new_token_ids))
        inbox.put(out)

    def _watch(self, request_id: str, coalesce: int) -> _Inbox:
        if request_id in self._inboxes:
            raise RequestInUse(f"request id {request_id!r} already has work in flight here")
        inbox = self._inboxes[request_id] = _Inbox(coalesce)
        return inbox

    def unwatch(self, request_id: str) -> None:
        self._inboxes.pop(request_id, None)

    async def _latency(self) -> None:
        if self._rpc_s:
            await asyncio.sleep(self._rpc_s)

    def _stamp_arrival(self, request_id: str) -> None:
        """Request.arrival defaults to the real clock (bound at import): use the virtual one."""
        self.engine.core.request(request_id).arrival = asyncio.get_running_loop().time()

    # ---- the verbs ----
    # `metadata` (a traced request's context) and `timeout_s` are EngineClient's: accepted so
    # EngineHandle calls unchanged, unused — nothing crosses a wire in a simulation.
    async def prep_recv(self, request_id: str, tokens: list[int], end: int = -1,
                        lease_s: float = 0.0, metadata: Metadata | None = None
                        ) -> pb.PrepRecvResponse:
        await self._latency()
        core = self.engine.core
        try:
            res = core.prep_recv(request_id, tokens, resolve_end(end, len(tokens)),
                                 lease_s or None)
        except EngineError as exc:
            raise _rpc(exc) from exc
        self.engine.wake()
        return pb.PrepRecvResponse(
            kv_addr=encode_kv_addr(self.engine.id, request_id, res.matched_len, res.end),
            matched_len=res.matched_len, end=res.end, page_size=core.config.page_size)

    async def remote_send(self, request_id: str, tokens: list[int], kv_addr: bytes, dst: str,
                          begin: int, end: int, transport: str = "",
                          metadata: Metadata | None = None, timeout_s: float | None = None,
                          first_token_due_ms: float = 0.0) -> pb.RemoteSendResponse:
        await self._latency()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        core = self.engine.core
        send_id = f"{request_id}#send"
        try:
            target_id, target_rid, matched, res_end = decode_kv_addr(kv_addr)
            end = resolve_end(end, len(tokens))
            if not 0 <= begin <= end:
                raise InvalidRequest(f"begin={begin} must be in [0, end={end}]")
            if end > res_end:
                raise InvalidRequest(f"end={end} is past the receiver's reservation "
                                     f"(end={res_end})")
            receiver = self._peers.get(target_id)
            if receiver is None:
                raise InvalidRequest(f"no simulated engine {target_id!r}")
            begin = max(begin, matched)  # what the receiver holds never crosses the wire
            response = pb.RemoteSendResponse(begin=begin, end=end, transport="sim",
                                             bytes_expected=(end - begin) * self.engine.profile
                                             .model.kv_bytes_per_token)
            if begin >= end:
                return response
            receiver.core.reservations.get(target_rid)  # LeaseExpired / UnknownRequest
            inbox = self._watch(send_id, 1)
            transfer = KvTransfer(self.engine, self.link, receiver, target_rid, begin, end)
            cached = core.match_prefix(tokens[:end])
            core.add_send(send_id, tokens, begin, end, transfer.on_layer,
                          first_token_due_ms=first_token_due_ms)
            self._stamp_arrival(send_id)
        except EngineError as exc:
            raise _rpc(exc) from exc
        self.engine.wake()
        finished = False
        try:
            out = (await inbox.take())[-1]
            finished = True
        finally:
            self.unwatch(send_id)
            if not finished:  # the caller went away: stop computing it
                core.abort(send_id)
                self.engine.wake()
        transfer.sender_finished()
        computed_at = loop.time()
        if out.finish_reason != "sent":
            raise rpc_error(grpc.StatusCode.ABORTED,
                            out.error or f"send ended with {out.finish_reason}")
        await transfer.landed()
        if transfer.error is not None:
            raise rpc_error(grpc.StatusCode.DATA_LOSS, transfer.error)
        response.bytes_sent = transfer.bytes
        response.cached_on_sender = max(0, min(cached, end) - begin)
        response.transfer_ms = (loop.time() - transfer.started) * 1e3
        response.tail_ms = (loop.time() - computed_at) * 1e3  # exposed: after the sender's prefill
        response.total_ms = (loop.time() - t0) * 1e3
        return response

    def start_generate_request(self, request: pb.StartGenerateRequest,
                               timeout_s: float | None = None, metadata: Metadata | None = None
                               ) -> SimCall:
        return SimCall(self, request)

    def begin_generation(self, request: pb.StartGenerateRequest) -> _Inbox:
        """StartGenerate's start on the engine (what the servicer does before streaming)."""
        rid = request.request_id
        try:
            sampling = sampling_from_proto(request.sampling)
            inbox = self._watch(rid, self._coalesce)
            try:
                self.engine.core.add_request(rid, list(request.tokens), sampling,
                                             request.begin, request.max_new_tokens_here,
                                             request.output_offset,
                                             first_token_due_ms=request.first_token_due_ms)
            except BaseException:
                self.unwatch(rid)
                raise
        except EngineError as exc:
            raise _rpc(exc) from exc
        self._stamp_arrival(rid)
        self.engine.wake()
        return inbox

    def end_generation(self, request_id: str) -> None:
        """The stream went away before its finish: abort the request, freeing its pages."""
        self.unwatch(request_id)
        self.engine.core.abort(request_id)
        self.engine.wake()

    async def abort(self, request_id: str, handoff: bool = False) -> bool:
        await self._latency()
        core = self.engine.core
        found_send = bool(core.abort(f"{request_id}#send"))
        found = bool(core.abort(request_id, handoff=handoff)) or found_send
        self.engine.wake()
        return found

    async def configure(self, prefill_chunk_size: int | None = None,
                        timeout_s: float | None = None) -> pb.ConfigureResponse:
        await self._latency()
        core = self.engine.core
        previous = current = core.scheduler.chunk_size
        if prefill_chunk_size is not None:
            try:
                previous = core.set_chunk_size(prefill_chunk_size)
            except EngineError as exc:
                raise _rpc(exc) from exc
            current = prefill_chunk_size
            self.engine.wake()
        return pb.ConfigureResponse(prefill_chunk_size=current,
                                    previous_prefill_chunk_size=previous)

    async def close(self) -> None:
        return None


class SimCall:
    """A StartGenerate stream: the request reaches the engine when the call is made (after the
    profile's router_ms + rpc_ms), its errors surface on the first read, as with gRPC."""

    def __init__(self, client: SimEngineVerbs, request: pb.StartGenerateRequest) -> None:
        self._client = client
        self._request = request
        self._inbox: _Inbox | None = None
        self._error: grpc.aio.AioRpcError | None = None
        self._done = False
        self._cancelled = False
        loop = asyncio.get_running_loop()
        self._started: asyncio.Future[None] = loop.create_future()
        if client._rpc_s:
            loop.call_later(client._rpc_s, self._start)
        else:
            self._start()

    def _start(self) -> None:
        if not self._cancelled:
            try:
                self._inbox = self._client.begin_generation(self._request)
            except grpc.aio.AioRpcError as exc:
                self._error = exc
        if not self._started.done():
            self._started.set_result(None)

    async def read(self) -> Any:
        if not self._started.done():
            await self._started
        if self._error is not None:
            raise self._error
        if self._inbox is None:
            raise rpc_error(grpc.StatusCode.CANCELLED, "cancelled")
        if self._done:
            return None
        chunk = chunk_from_outputs(await self._inbox.take())
        if chunk.finish_reason:
            self._done = True
            self._client.unwatch(self._request.request_id)
        return chunk

    def cancel(self) -> bool:
        self._cancelled = True
        if self._inbox is not None and not self._done:
            self._done = True
            self._client.end_generation(self._request.request_id)
            return True
        return False
