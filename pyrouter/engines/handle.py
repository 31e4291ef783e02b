"""An engine as a policy sees it: identity, role, and the three verbs as awaitables.

The verbs act on the request's current tokens (prompt + tokens generated so far) and record
everything they take in the request's scope (pyrouter/scope.py) before they take it, so
whatever way the request ends, the scope knows what to give back. They reach the engine through
`client` (pyrouter/engines/engine_api.py's EngineVerbs): in the router, its one Rust client
(rust_client.py); in tests and the simulator, an engine double.
"""
from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from pyrouter.engines.engine_api import EngineCall, EngineVerbs
from pyrouter.engines.front_call import FrontCall
from pyrouter.errors import TransferFailed, VerbOrderError
from pyrouter.request import RouterRequest
from router_core import GenerateCall, RouterCore
from switchyard_proto.sampling_proto import sampling_to_proto
from switchyard_rpc import engine_pb2 as pb

if TYPE_CHECKING:
    from pyrouter.scope import _EngineHold


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
    tail_ms: float = 0.0  # the transfer's exposed part: the sender's prefill done -> all landed


@dataclass(eq=False)
class EngineHandle:
    id: str              # "e0", "e1", ...: stable for the engine's life in this router
    num: int             # the int id router_core uses
    address: str
    role: str
    client: EngineVerbs
    core: RouterCore     # table accounting on dispatch/complete
    healthy: bool = False
    draining: bool = False
    model_id: str = ""
    # The served model whose requests it takes (pyrouter/model_groups.py); None: not known yet.
    model: str | None = None
    cached_blocks: int = 0  # from the engine's last Stats
    # The most prefill tokens one queued request has left: the engine's last Stats, or a larger
    # prefill the router has sent it since (slo_mux tells one long prompt from a long queue).
    longest_queued_prefill: int = 0
    active: set[str] = field(default_factory=set)  # engine request ids with work on this engine

    async def prep_recv(self, req: RouterRequest, end: int | None = None) -> KvReservation:
        """Reserve KV pages here for tokens[matched:end] of the request's current tokens.

        Default `end`: all but the last token (start_generate computes that one to sample)."""
        resolved = len(req.tokens) - 1 if end is None else end
        timing = req.scope.enter(self, "prep_recv", req.engine_request_id)
        hold = req.scope.hold(self, req.engine_request_id)
        hold.reservations += 1  # before the call: a cancelled call may still have reserved
        try:
            resp = await self.client.prep_recv(req.engine_request_id, req.tokens, resolved,
                                               metadata=req.timeline.verb_metadata(timing))
        finally:
            timing[3] = time.perf_counter()
        return KvReservation(self.id, req.engine_request_id, resp.kv_addr, resp.matched_len,
                             resp.end, resp.page_size, self.address)

    async def remote_send(self, req: RouterRequest, kv: KvReservation, begin: int | None = None,
                          end: int | None = None) -> SendResult:
        """Compute KV for tokens[begin:end] here and push it into `kv`'s reservation."""
        if kv.request_id != req.engine_request_id:
            raise VerbOrderError("remote_send got a reservation made for another request")
        if kv.engine_id == self.id:
            raise VerbOrderError(f"remote_send from {self.id} into its own reservation")
        begin = kv.matched if begin is None else begin
        end = kv.end if end is None else end
        if not 0 <= begin <= end <= kv.end:
            raise VerbOrderError(f"remote_send range [{begin}, {end}) outside the reservation "
                                 f"[0, {kv.end})")
        timing = req.scope.enter(self, "remote_send", req.engine_request_id)
        hold = req.scope.hold(self, req.engine_request_id)
        hold.sends += 1
        # The send's prefill is queued work on this engine until it answers (then done: the
        # K/V was computed) or its next Stats says so.
        stamp = self.core.table.on_prefill_dispatch(self.num, end - begin)
        self.longest_queued_prefill = max(self.longest_queued_prefill, end - begin)
        try:
            resp = await self.client.remote_send(req.engine_request_id, req.tokens, kv.kv_addr,
                                                 kv.dst_address, begin, end,
                                                 metadata=req.timeline.verb_metadata(timing))
        except grpc.aio.AioRpcError as exc:
            # FAILED_PRECONDITION here: the receiver's reservation expired or was aborted while
            # this send waited in the sender's queue (an overloaded prefill engine) — an outcome
            # of load, so the policy falls back as for any failed transfer.
            if exc.code() in CALLER_MISTAKES and exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise  # the policy asked for something invalid: its bug, reported as such
            raise TransferFailed(f"{self.id} -> {kv.engine_id}: {exc.code().name}: "
                                 f"{exc.details()}") from exc
        finally:
            timing[3] = time.perf_counter()
            _prefill_done(self, end - begin, stamp)
        hold.sends -= 1  # answered: the sender has finished with it
        hold.settle()
        return SendResult(resp.bytes_sent, resp.transport, resp.total_ms, resp.cached_on_sender,
                          resp.tail_ms)

    def start_generate(self, req: RouterRequest, begin: int = 0,
                       max_new_tokens_here: int | None = None,
                       control_after_s: float | None = None) -> GenerationStream:
        """Prefill tokens[begin:] on top of KV already here, then decode; returns the stream —
        one segment of the request. A segmented policy gets control back (and decides where
        the request goes next) when the segment has produced `max_new_tokens_here` tokens, or
        after `control_after_s` seconds, whichever comes first."""
        if not 0 <= begin < len(req.tokens):
            raise VerbOrderError(f"start_generate begin={begin} outside the request's "
                                 f"{len(req.tokens)} tokens")
        if max_new_tokens_here is not None and max_new_tokens_here < 1:
            raise VerbOrderError(f"max_new_tokens_here must be >= 1, got {max_new_tokens_here}")
        if control_after_s is not None and not control_after_s > 0:
            raise VerbOrderError(f"control_after_s must be > 0, got {control_after_s}")
        if req.scope.generating():
            raise VerbOrderError("start_generate while the request's previous segment is still "
                                 "running")
        if req.generated >= req.sampling.max_tokens:
            raise VerbOrderError("start_generate after the request has all its tokens")
        timing = req.scope.enter(self, "start_generate", req.engine_request_id)
        hold = req.scope.hold(self, req.engine_request_id)
        stream = GenerationStream(self, req, begin, max_new_tokens_here or 0, hold, timing)
        stream.control_after_s = control_after_s
        req.scope.add_stream(stream)
        return stream

    async def abort(self, request_id: str, handoff: bool = False) -> bool:
        """Best effort (a dead engine has nothing left to abort): False when it can't be reached.
        handoff=True ends a running generation with a hand-off instead (to continue elsewhere)."""
        try:
            return await self.client.abort(request_id, handoff=handoff)
        except grpc.aio.AioRpcError:
            return False


class GenerationStream:
    """The token chunks of one StartGenerate call (one segment); the RPC starts at once."""

    def __init__(self, engine: EngineHandle, req: RouterRequest, begin: int,
                 max_new_tokens_here: int, hold: _EngineHold, timing: list[Any]) -> None:
        self.engine = engine
        self.engine_request_id = req.engine_request_id
        self.begin = begin
        self.max_new_tokens_here = max_new_tokens_here
        self.control_after_s: float | None = None
        self._hold = hold
        self._timing = timing
        self._prefill = len(req.tokens) - begin
        left = req.sampling.max_tokens - req.generated
        self._decode = min(left, max_new_tokens_here) if max_new_tokens_here else left
        hold.generations += 1
        request = pb.StartGenerateRequest(
            request_id=req.engine_request_id, tokens=req.tokens, begin=begin,
            sampling=sampling_to_proto(req.sampling, max_tokens=left,
                                       min_tokens=max(0, req.sampling.min_tokens - req.generated)),
            max_new_tokens_here=max_new_tokens_here, output_offset=req.generated)
        metadata = req.timeline.verb_metadata(timing)  # opens the verb's span when traced
        self._call: EngineCall = engine.client.start_generate_request(request, metadata=metadata)
        # A call of the Rust client: the HTTP front can read the rest of it.
        self.front_call = self._call if isinstance(self._call, FrontCall) else None
        self.finished = False   # accounting released (the stream ended or was cancelled)
        self.delivered = False  # the engine sent its finish chunk: it holds nothing for us
        self._prefilled = True  # (nothing to release until the dispatch is counted)
        self._stamp = engine.core.table.on_dispatch(engine.num, self._prefill, self._decode)
        engine.longest_queued_prefill = max(engine.longest_queued_prefill, self._prefill)
        self._prefilled = False

    async def next_chunk(self) -> pb.GenerateChunk | None:
        """The next chunk, or None once the engine has closed the stream."""
        chunk = await self._call.read()
        if chunk is grpc.aio.EOF:
            self.finish()
            return None
        self.prefill_done()  # a first token means the prompt is computed
        if chunk.finish_reason:
            self.mark_delivered()
        return chunk  # type: ignore[no-any-return]

    @property
    def segment_call(self) -> GenerateCall | EngineCall:
        """What the front reads the rest of this stream from: the Rust client's call, or an
        in-process engine double's (router_core.SegmentStart takes either)."""
        return self.front_call.call if self.front_call is not None else self._call

    def mark_delivered(self) -> None:
        """The engine sent its finish chunk (read here, or by the Rust front)."""
        if not self.delivered:
            self.delivered = True
            # A finished generation consumed any reservation it had here and freed the rest.
            self._hold.generations = max(0, self._hold.generations - 1)
            if not self._hold.generations:
                self._hold.reservations = 0
            self._hold.settle()
            self.finish()

    def prefill_done(self) -> None:
        """Its prefill is no longer queued on the engine (the first chunk arrived, or the
        stream ended): predictions stop counting it before the engine's next Stats."""
        if not self._prefilled:
            self._prefilled = True
            _prefill_done(self.engine, self._prefill, self._stamp)

    def finish(self) -> None:
        """Account the request as complete on its engine (idempotent)."""
        self.prefill_done()
        if not self.finished:
            self.finished = True
            self._timing[3] = time.perf_counter()
            try:
                self.engine.core.table.on_complete(self.engine.num)
            except (KeyError, ValueError, LookupError):
                pass  # engine removed meanwhile

    async def __aiter__(self) -> AsyncIterator[pb.GenerateChunk]:
        while (chunk := await self.next_chunk()) is not None:
            yield chunk

    def cancel(self) -> None:
        """Stop reading; an unfinished engine-side generation is aborted by the cancel."""
        if not self.delivered:
            self._call.cancel()
        self.finish()


def _prefill_done(engine: EngineHandle, tokens: int, stamp: int) -> None:
    try:
        engine.core.table.on_prefill_done(engine.num, tokens, stamp)
    except (KeyError, ValueError, LookupError):
        pass  # engine removed meanwhile
