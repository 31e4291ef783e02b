"""An engine as a policy sees it: identity, role, and the three verbs as awaitables.

The verbs record themselves on the request (`req.verbs`, `req.touched`) so the dispatcher can
abort every engine involved when the client goes away or the policy fails, and so the route
header can say what actually ran.
"""
from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from pyrouter.errors import TransferFailed, VerbOrderError
from pyrouter.request import RouterRequest
from router_core import RouterCore
from switchyard_rpc import engine_pb2 as pb

if TYPE_CHECKING:
    from engine.server.client import EngineClient


# Status codes meaning "you asked for something invalid" rather than "the engine is unwell".
CALLER_MISTAKES = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                              grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND})


@dataclass(slots=True)
class KvReservation:
    """Result of `prep_recv`: pages reserved on `engine_id` for tokens[matched:end]."""

    engine_id: str
    request_id: str
    kv_addr: bytes
    matched: int
    end: int
    page_size: int
    dst_address: str


@dataclass(slots=True)
class SendResult:
    bytes_sent: int
    transport: str
    total_ms: float
    cached_on_sender: int


@dataclass(eq=False)
class EngineHandle:
    id: str              # "e0", "e1", ...: stable for the engine's life in this router
    num: int             # the int id router_core uses
    address: str
    role: str
    client: EngineClient
    core: RouterCore     # table accounting on dispatch/complete
    healthy: bool = False
    draining: bool = False
    model_id: str = ""
    cached_blocks: int = 0  # from the engine's last Stats
    active: set[str] = field(default_factory=set)  # request ids with work on this engine

    def _enter(self, req: RouterRequest, verb: str) -> list[Any]:
        req.verbs.append((verb, self.id))
        req.touched[self.id] = self
        self.active.add(req.request_id)
        timing: list[Any] = [verb, self.id, time.perf_counter(), 0.0]
        req.verb_times.append(timing)
        return timing

    async def prep_recv(self, req: RouterRequest, end: int | None = None) -> KvReservation:
        """Reserve KV pages here for tokens[matched:end] (default end: the whole prompt)."""
        timing = self._enter(req, "prep_recv")
        resolved = req.prompt_len if end is None else end
        resp = await self.client.prep_recv(req.request_id, req.tokens, resolved)
        timing[3] = time.perf_counter()
        return KvReservation(self.id, req.request_id, resp.kv_addr, resp.matched_len, resp.end,
                             resp.page_size, self.address)

    async def remote_send(self, req: RouterRequest, kv: KvReservation, begin: int | None = None,
                          end: int | None = None) -> SendResult:
        """Compute KV for tokens[begin:end] here and push it into `kv`'s reservation."""
        if kv.request_id != req.request_id:
            raise VerbOrderError("remote_send got a reservation made for another request")
        if kv.engine_id == self.id:
            raise VerbOrderError(f"remote_send from {self.id} into its own reservation")
        begin = kv.matched if begin is None else begin
        end = kv.end if end is None else end
        if not 0 <= begin <= end <= kv.end:
            raise VerbOrderError(f"remote_send range [{begin}, {end}) outside the reservation "
                                 f"[0, {kv.end})")
        timing = self._enter(req, "remote_send")
        try:
            resp = await self.client.remote_send(req.request_id, req.tokens, kv.kv_addr,
                                                 kv.dst_address, begin, end)
            timing[3] = time.perf_counter()
        except grpc.aio.AioRpcError as exc:
            if exc.code() in CALLER_MISTAKES:
                raise  # the policy asked for something invalid: its bug, reported as such
            raise TransferFailed(f"{self.id} -> {kv.engine_id}: {exc.code().name}: "
                                 f"{exc.details()}") from exc
        return SendResult(resp.bytes_sent, resp.transport, resp.total_ms, resp.cached_on_sender)

    def start_generate(self, req: RouterRequest, begin: int = 0,
                       max_new_tokens_here: int = 0) -> GenerationStream:
        """Prefill tokens[begin:] on top of KV already here, then decode; returns the stream."""
        if not 0 <= begin < max(1, req.prompt_len):
            raise VerbOrderError(f"start_generate begin={begin} outside the prompt "
                                 f"(length {req.prompt_len})")
        if any(verb == "start_generate" for verb, _ in req.verbs):
            raise VerbOrderError("start_generate called twice for one request")
        timing = self._enter(req, "start_generate")
        return GenerationStream(self, req, begin, max_new_tokens_here, timing)

    async def abort(self, request_id: str) -> bool:
        """Best effort (a dead engine has nothing left to abort): False when it can't be reached."""
        try:
            return await self.client.abort(request_id)
        except grpc.aio.AioRpcError:
            return False


class GenerationStream:
    """The token chunks of one StartGenerate call; the RPC starts at once (no extra hop later)."""

    def __init__(self, engine: EngineHandle, req: RouterRequest, begin: int,
                 max_new_tokens_here: int, timing: list[Any] | None = None) -> None:
        self.engine = engine
        self._timing = timing
        self.begin = begin
        self._prefill = req.prompt_len - begin
        self._decode = req.sampling.max_tokens
        self._call = engine.client.start_generate_request(pb.StartGenerateRequest(
            request_id=req.request_id, tokens=req.tokens, begin=begin,
            sampling=req.sampling.to_proto(), max_new_tokens_here=max_new_tokens_here))
        self._done = False
        engine.core.table.on_dispatch(engine.num, self._prefill, self._decode)

    async def next_chunk(self) -> pb.GenerateChunk | None:
        """The next chunk, or None once the engine has closed the stream."""
        chunk = await self._call.read()
        if chunk is grpc.aio.EOF:
            self.finish()
            return None
        return chunk  # type: ignore[no-any-return]

    def finish(self) -> None:
        """Account the request as complete on its engine (idempotent)."""
        if not self._done:
            self._done = True
            if self._timing is not None:
                self._timing[3] = time.perf_counter()
            try:
                self.engine.core.table.on_complete(self.engine.num, self._prefill, self._decode)
            except (KeyError, ValueError, LookupError):
                pass  # engine removed meanwhile

    async def __aiter__(self) -> AsyncIterator[pb.GenerateChunk]:
        try:
            async for chunk in self._call:
                yield chunk
        finally:
            self.finish()

    def cancel(self) -> None:
        self._call.cancel()
        self.finish()
