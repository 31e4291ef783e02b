"""Admission and segments: run the active policy for one request, across as many segments as
it takes, and map every failure to one typed error.

The policy instance is captured at admission, so a switch never touches in-flight requests.
A policy bug -> PolicyFailed (500, logged with the policy's name), an engine fault ->
EngineFailed (502), no engine -> NoCapacity (503). Nothing here releases resources by hand:
the request's scope (pyrouter/scope.py) owns them, and `RequestRun.close` ends it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc

from pyrouter.cluster import ClusterView, EngineDirectory, EventSink
from pyrouter.engines.handle import CALLER_MISTAKES, EngineHandle, GenerationStream
from pyrouter.errors import (
    BadRequest,
    EngineFailed,
    EngineUnavailable,
    PolicyFailed,
    RouterError,
    TransferFailed,
    VerbOrderError,
)
from pyrouter.migration import LiveMigration, continue_on_target
from pyrouter.outcomes import Outcome, RecentOutcomes, slo_met
from pyrouter.planning.prediction_feedback import PredictionFeedback
from pyrouter.policy_registry import ActivePolicy
from pyrouter.request import RouteNote, RouterRequest
from pyrouter.session import PolicySession, SegmentEnd
from switchyard_rpc import engine_pb2 as pb

log = logging.getLogger("switchyard.router")


class PolicySlot:
    """The policy new requests get; replaced atomically by PUT /admin/policy. Listeners hear of
    every replacement (the Rust front's fast path follows the active policy)."""

    def __init__(self, active: ActivePolicy) -> None:
        self._current = active
        self._listeners: list[Callable[[ActivePolicy], None]] = []

    @property
    def current(self) -> ActivePolicy:
        return self._current

    @current.setter
    def current(self, active: ActivePolicy) -> None:
        self._current = active
        for listener in self._listeners:
            listener(active)

    def on_change(self, listener: Callable[[ActivePolicy], None]) -> None:
        self._listeners.append(listener)


def _engine_error(req: RouterRequest, policy_name: str, exc: grpc.aio.AioRpcError,
                  stage: str, attempt_verbs: list[tuple[str, str]]) -> RouterError:
    detail = f"{exc.code().name}: {exc.details()}"
    if exc.code() in CALLER_MISTAKES:
        only_plain_generate = [v for v, _ in attempt_verbs] == ["start_generate"]
        if only_plain_generate and stage == "generate":
            return BadRequest(f"engine rejected the request: {exc.details()}")
        log.error("policy %r: engine rejected a verb for %s: %s", policy_name,
                  req.request_id, detail)
        return PolicyFailed(policy_name, f"engine rejected a verb ({detail})")
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        unavailable = EngineUnavailable(f"engine unavailable during {stage}: {detail}",
                                        code="engine_unavailable")
        # The verb that failed is the attempt's last one (policies await their verbs in turn).
        unavailable.engine_id = attempt_verbs[-1][1] if attempt_verbs else None
        return unavailable
    return EngineFailed(f"engine error during {stage}: {detail}", code="engine_error")


def _policy_error(req: RouterRequest, name: str, exc: BaseException,
                  attempt_verbs: list[tuple[str, str]]) -> RouterError:
    """Any exception out of a policy decision, as the error the client gets."""
    if isinstance(exc, RouterError):
        return exc
    if isinstance(exc, TransferFailed):
        return EngineFailed(f"KV transfer failed: {exc}", code="transfer_failed")
    if isinstance(exc, VerbOrderError):
        log.error("policy %r used the verbs wrongly for %s: %s", name, req.request_id, exc)
        return PolicyFailed(name, f"wrong verb order: {exc}")
    if isinstance(exc, grpc.aio.AioRpcError):
        return _engine_error(req, name, exc, "policy verbs", attempt_verbs)
    log.error("policy %r raised for request %s", name, req.request_id, exc_info=exc)
    return PolicyFailed(name, f"{type(exc).__name__}: {exc}")


async def _first_chunk(stream: GenerationStream, timeout_s: float) -> pb.GenerateChunk | None:
    """A segment's first chunk, bounded: an engine that accepted the work and then never
    answers must not hold the request (and its client) forever."""
    try:
        async with asyncio.timeout(timeout_s):
            return await stream.next_chunk()
    except TimeoutError:
        raise EngineFailed(f"engine {stream.engine.id} produced no output within "
                           f"{timeout_s:g} s", code="engine_timeout") from None


def _check_finish(chunk: pb.GenerateChunk, engine: EngineHandle, first: bool = False) -> None:
    """Engine-internal endings never reach a client: `error` is an engine failure, and `abort`
    (the engine ended the request itself, e.g. while shutting down) is one too — retryable on
    another engine when nothing has been streamed yet."""
    if chunk.finish_reason == "error":
        raise EngineFailed(f"engine error: {chunk.error or 'unknown'}", code="engine_error")
    if chunk.finish_reason == "abort":
        if first and not chunk.token_ids:
            unavailable = EngineUnavailable(f"engine {engine.id} aborted the request",
                                            code="engine_aborted")
            unavailable.engine_id = engine.id
            raise unavailable
        raise EngineFailed(f"engine {engine.id} aborted the request", code="engine_aborted")


class RequestRun:
    """One admitted request: its policy session, the running segment and the first chunk."""

    def __init__(self, req: RouterRequest, session: PolicySession, stream: GenerationStream,
                 first: pb.GenerateChunk, attempt_verbs: int, first_chunk_timeout_s: float
                 ) -> None:
        self.req = req
        self.session = session
        self.stream = stream
        self.first = first
        self.segments = 1
        self._attempt_verbs = attempt_verbs  # index into scope.verbs where this attempt began
        self.first_chunk_timeout_s = first_chunk_timeout_s
        # Control taken back from the running segment: (reason, detail) for the policy, or a
        # live migration the router carries out itself.
        self._interrupt: tuple[str, dict[str, object]] | None = None
        self._move: LiveMigration | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[bool]] = set()
        self._arm_timer()

    @property
    def policy_name(self) -> str:
        return self.session.name

    async def next_segment(self, new_tokens: list[int], reason: str = "handoff",
                           **detail: object) -> GenerationStream | None:
        """The once-per-segment call: append the ended segment's tokens to the request and ask
        the policy where to go next (None: it has nothing more)."""
        self.req.tokens.extend(new_tokens)
        end = SegmentEnd(self.stream.engine, reason, list(new_tokens), dict(detail))
        try:
            stream = await self.session.next(end)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                raise  # cancellation: the client went away
            error = _policy_error(self.req, self.policy_name, exc,
                                  self.req.scope.verbs[self._attempt_verbs:])
            if error is exc:
                raise
            raise error from exc
        if stream is not None:
            self.stream = stream
            self.segments += 1
        return stream

    # ---- taking control back from a running segment ----
    def interrupt(self, reason: str, **detail: object) -> None:
        """End the running segment at its next token boundary (the engine hands off) and give
        control to the policy with SegmentEnd(reason="interrupted", detail=...)."""
        if self._interrupt is None and not self.stream.delivered:
            self._interrupt = (reason, dict(detail))
            task = asyncio.get_running_loop().create_task(
                self.stream.engine.abort(self.stream.engine_request_id, handoff=True))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def migrate(self, target: EngineHandle) -> LiveMigration:
        """Move the running segment to `target` (the router does it; the policy is not asked).
        `done` is set when it has moved, or the request ended first."""
        if self._move is not None:
            raise BadRequest("a migration of this request is already under way")
        if target is self.stream.engine:
            raise BadRequest(f"the request already runs on {target.id}", param="to")
        self._move = LiveMigration(target, self.stream.engine)
        self.interrupt("migrate", to=target.id)
        return self._move

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        after = self.stream.control_after_s
        if after is not None and self.session.active.spec.segmented:
            self._timer = asyncio.get_running_loop().call_later(
                after, lambda: self.interrupt("control_after_s", after_s=after))

    async def after_handoff(self, segment_tokens: list[int]) -> GenerationStream | None:
        """The segment handed off: continue where the policy, or a pending migration, says."""
        stream, produced = self.stream, len(segment_tokens)
        own_limit = bool(stream.max_new_tokens_here) and produced >= stream.max_new_tokens_here
        interrupt, move = self._interrupt, self._move
        self._interrupt = self._move = None
        if move is not None and not own_limit:
            self.req.tokens.extend(segment_tokens)
            try:
                nxt = await continue_on_target(self.req, move, stream, produced)
            except BaseException:
                move.settle("failed")
                raise
            move.settle("migrated")
            self.stream = nxt
            self.segments += 1
            self._arm_timer()
            return nxt
        if move is not None:
            move.settle("finished")  # it reached its own boundary first: the policy decides
        if interrupt is not None and not own_limit:
            following = await self.next_segment(segment_tokens, "interrupted", **interrupt[1])
        else:
            following = await self.next_segment(segment_tokens)
        if following is not None:
            self._arm_timer()
        return following

    async def read(self, stream: GenerationStream, first: bool = False) -> pb.GenerateChunk:
        """The stream's next chunk; an engine that fails or closes early is an EngineFailed, and
        so is a segment that produces nothing within the first-chunk deadline."""
        try:
            if first:
                chunk = await _first_chunk(stream, self.first_chunk_timeout_s)
            else:
                chunk = await stream.next_chunk()
        except grpc.aio.AioRpcError as exc:
            raise EngineFailed(f"engine failed mid-stream: {exc.code().name}: "
                               f"{exc.details()}", code="engine_error") from exc
        except RouterError:
            raise
        except Exception as exc:  # never let an odd failure escape as a broken response
            log.exception("request %s: reading from engine %s failed", self.req.request_id,
                          stream.engine.id)
            raise EngineFailed(f"reading from engine {stream.engine.id} failed: "
                               f"{type(exc).__name__}", code="engine_error") from exc
        if chunk is None:
            raise EngineFailed("engine closed the stream without finishing",
                               code="engine_error")
        _check_finish(chunk, stream.engine)
        return chunk

    async def chunks(self) -> AsyncIterator[pb.GenerateChunk]:
        """What the client streams: every segment's chunks in order, ending with the one that
        carries the request's finish reason; hand-offs never show."""
        chunk, segment_tokens = self.first, list[int]()
        timeline = self.req.timeline  # one timestamp per chunk: the inter-token latencies
        timeline.arrived(len(chunk.token_ids), timeline.first_token)
        while True:
            segment_tokens.extend(chunk.token_ids)
            if chunk.finish_reason != "handoff":
                if chunk.finish_reason:
                    timeline.end_segment(len(segment_tokens), chunk.finish_reason)
                yield chunk
                if chunk.finish_reason:
                    return
                chunk = await self.read(self.stream)
                timeline.arrived(len(chunk.token_ids))
                continue
            timeline.end_segment(len(segment_tokens),
                                 "handoff" if self._interrupt is None else "interrupted")
            chunk.finish_reason = ""
            if chunk.token_ids:
                yield chunk  # the client sees these before the policy decides what is next
            stream = await self.after_handoff(segment_tokens)
            if stream is None:
                raise PolicyFailed(self.policy_name, "the policy ended after a hand-off without "
                                   "a next segment")
            segment_tokens = []
            chunk = await self.read(stream, first=True)
            timeline.arrived(len(chunk.token_ids))

    def stop_early(self) -> None:
        """A stop string matched in the router: end the engines' work now."""
        self.req.scope.abandon()

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._move is not None:
            self._move.settle("finished")
        await self.session.aclose()
        self.req.scope.close()


class Dispatcher:
    def __init__(self, engines: EngineDirectory, slot: PolicySlot, retries: int = 1,
                 policy_timeout_s: float = 300.0, events: EventSink | None = None) -> None:
        self.engines = engines
        self.slot = slot
        self.retries = retries
        # A policy that never decides must not hold its client forever (PD on a long prompt
        # on CPU can legitimately take a while, hence minutes, not seconds).
        self.policy_timeout_s = policy_timeout_s
        self.outcomes = RecentOutcomes()
        self.events = events  # policies' decisions worth counting (metrics)

    def record(self, req: RouterRequest, ok: bool, started: float, first_token: float | None,
               ended: float) -> None:
        """A request has ended: remember how it went (cluster.outcomes)."""
        ttft = None if first_token is None else first_token - started
        n = req.completion_tokens
        tpot = (ended - first_token) / (n - 1) if first_token is not None and n > 1 else None
        self.record_outcome(time.monotonic(), req.route.label(), ok, ttft, tpot,
                            req.slo.ttft_ms, req.slo.tpot_ms)

    def record_outcome(self, at: float, pattern: str, ok: bool, ttft_s: float | None,
                       tpot_s: float | None, slo_ttft_ms: float | None,
                       slo_tpot_ms: float | None) -> None:
        """One finished request into the outcome window (the Rust front's fast path records
        its requests here too)."""
        self.outcomes.record(Outcome(at, pattern, ok, ttft_s, tpot_s,
                                     slo_met(ttft_s, tpot_s, slo_ttft_ms, slo_tpot_ms)))

    async def admit(self, req: RouterRequest) -> RequestRun:
        """Run the policy to the first chunk of its first segment. If an engine was unreachable
        before any output, take it out of rotation and run the policy again (nothing has
        reached the client yet, so this is invisible)."""
        active = self.slot.current
        engine_request_id = req.engine_request_id  # random; a retry's id derives from it
        for attempt in range(self.retries + 1):
            try:
                return await self._attempt(req, active)
            except EngineUnavailable as exc:
                if attempt == self.retries:
                    raise
                # Only the engine that failed leaves rotation (a pd request's healthy prefill
                # engine must stay in it: the retry may need it to stand in for the dead one).
                failed = [exc.engine_id] if exc.engine_id else [e.id for e in req.scope.touched]
                for engine_id in failed:
                    self.engines.mark_unhealthy(engine_id)
                log.warning("request %s: %s; retrying on another engine", req.request_id,
                            exc.message)
                req.engine_request_id = f"{engine_request_id}-r{attempt + 1}"
                req.route, req.matched_by_engine = RouteNote(), None
        raise AssertionError("unreachable")

    async def _attempt(self, req: RouterRequest, active: ActivePolicy) -> RequestRun:
        started_at = len(req.scope.verbs)
        view = ClusterView(self.engines, active, self.outcomes, self.events, self.feedback)
        session = PolicySession(active, req, view, self.policy_timeout_s)
        try:
            stream = await session.first()
            if not req.route.pattern:
                req.note_route(active.name, engine=stream.engine.id)
            try:
                first = await _first_chunk(stream, self.policy_timeout_s)
            except grpc.aio.AioRpcError as exc:
                # scope.verbs already ends with this start_generate (recorded before the RPC).
                raise _engine_error(req, active.name, exc, "generate",
                                    req.scope.verbs[started_at:]) from exc
            if first is None:
                raise EngineFailed("engine closed the stream without output")
            _check_finish(first, stream.engine, first=True)
            req.timeline.first_token = time.perf_counter()
            return RequestRun(req, session, stream, first, started_at, self.policy_timeout_s)
        except BaseException as exc:
            req.timeline.end_segment(0, "failed")
            await session.aclose()
            req.scope.abandon()
            if not isinstance(exc, Exception):
                raise  # cancellation: the client went away
            error = _policy_error(req, active.name, exc, req.scope.verbs[started_at:])
            if error is exc:
                raise
            raise error from exc
        # Predictions against outcomes (the latency model's closed loop; metrics set its sink).
        self.feedback = PredictionFeedback()
        if ok and req.predicted is not None:
            self.feedback.observe(req.predicted, ttft, tpot)
