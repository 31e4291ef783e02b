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
from collections.abc import Callable

import grpc

from pyrouter.cluster import ClusterView, EngineDirectory, EventSink
from pyrouter.engines.handle import CALLER_MISTAKES, EngineHandle, GenerationStream
from pyrouter.errors import (
    BadRequest,
    EngineFailed,
    EngineUnavailable,
    NoCapacity,
    PolicyFailed,
    RouterError,
    TransferFailed,
    VerbOrderError,
)
from pyrouter.migration import LiveMigration, continue_on_target
from pyrouter.outcomes import Outcome, RecentOutcomes, slo_met
from pyrouter.planning.prediction_feedback import PredictionFeedback
from pyrouter.policy_fallback import PolicyFallback
from pyrouter.policy_registry import ActivePolicy
from pyrouter.request import RouteNote, RouterRequest
from pyrouter.retry_budget import RetryBudget
from pyrouter.session import PolicySession, SegmentEnd
from switchyard_proto.sampling_params import RESPONSE_FORMAT_REFUSED
from switchyard_rpc import engine_pb2 as pb

log = logging.getLogger("switchyard.router")
ENGINE_BACK_S = 2.0  # how long a retry that found no healthy engine waits for one


class PolicySlot:
    """The policy new requests get; replaced atomically by PUT /admin/policy. Listeners hear of
    every replacement (the Rust front's fast path follows the active policy)."""

    def __init__(self, active: ActivePolicy) -> None:
        self._current = active
        self.previous: ActivePolicy | None = None  # what a failing policy falls back to
        self._listeners: list[Callable[[ActivePolicy], None]] = []

    @property
    def current(self) -> ActivePolicy:
        return self._current

    @current.setter
    def current(self, active: ActivePolicy) -> None:
        self.previous, self._current = self._current, active
        self.previous.retire()
        for listener in self._listeners:
            listener(active)

    def fall_back(self) -> None:
        """Back to the policy before the current one (fresh state; once: no way back)."""
        if self.previous is not None:
            previous = self.previous
            self.current = ActivePolicy(previous.spec, previous.params)
            self.previous = None

    def on_change(self, listener: Callable[[ActivePolicy], None]) -> None:
        self._listeners.append(listener)


def public_detail(req: RouterRequest, text: str) -> str:
    """An engine's message as a client may see it: the engine-side id never shows."""
    return text.replace(req.engine_request_id, "<request>") if req.engine_request_id else text


def _engine_error(req: RouterRequest, policy_name: str, exc: grpc.aio.AioRpcError,
                  stage: str, attempt_verbs: list[tuple[str, str]]) -> RouterError:
    details = public_detail(req, exc.details() or "")
    detail = f"{exc.code().name}: {details}"
    if exc.code() == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(
            RESPONSE_FORMAT_REFUSED):
        # The client's own response_format (a schema the grammar library rejects), whichever
        # verbs the policy used before it: the client's 400, not the policy's failure.
        return BadRequest(details, param="response_format")
    if exc.code() in CALLER_MISTAKES:
        only_plain_generate = [v for v, _ in attempt_verbs] == ["start_generate"]
        if only_plain_generate and stage == "generate":
            return BadRequest(f"engine rejected the request: {details}")
        log.error("policy %r: engine rejected a verb for %s: %s", policy_name,
                  req.request_id, detail)
        return PolicyFailed(policy_name, f"engine rejected a verb ({detail})")
    # The verb that failed is the attempt's last one (policies await their verbs in turn).
    failed_on = attempt_verbs[-1][1] if attempt_verbs else None
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        return EngineUnavailable(f"engine unavailable during {stage}: {detail}",
                                 code="engine_unavailable").on(failed_on)
    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # The engine is well and full: no KV pages for a PrepRecv reservation. Taking it out of
        # rotation (as a failure) would move its load onto the others; the client is told to
        # come back instead, and the engine stays in rotation.
        return NoCapacity(f"engine {failed_on or '?'} is full ({stage}): {detail}",
                          code="engine_full", retry_after_s=1.0)
    # Any other status before output — UNKNOWN "transport error", CANCELLED by a dying peer, a
    # reset stream — is an engine that is unwell, not a request that is wrong: retryable too.
    return EngineFailed(f"engine error during {stage}: {detail}",
                        code="engine_error").on(failed_on)


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
            raise EngineUnavailable(f"engine {engine.id} aborted the request",
                                    code="engine_aborted").on(engine.id)
        raise EngineFailed(f"engine {engine.id} aborted the request", code="engine_aborted")


class RequestRun:
    """One admitted request: its policy session, the running segment and the first chunk."""

    def __init__(self, req: RouterRequest, session: PolicySession, stream: GenerationStream,
                 first: pb.GenerateChunk, attempt_verbs: int, first_chunk_timeout_s: float,
                 dispatcher: Dispatcher | None = None, retries: int = 0) -> None:
        self.req = req
        self.session = session
        self.stream = stream
        self.first = first
        self.segments = 1
        self.dispatcher = dispatcher  # engines and the retry budget, for a segment's retry
        self.retries = retries  # retries this request has had (admission included)
        self.resumed = False  # the router carries the request on itself; the policy is done
        self._attempt_verbs = attempt_verbs  # index into scope.verbs where this attempt began
        self.first_chunk_timeout_s = first_chunk_timeout_s
        # Control taken back from the running segment: (reason, detail) for the policy, or a
        # live migration the router carries out itself.
        self._interrupt: tuple[str, dict[str, object]] | None = None
        self._move: LiveMigration | None = None
        self._landing: LiveMigration | None = None
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
            self._landing = move  # "migrated" once the target has produced (next_started)
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
            # A segment's first read failing means nothing of it was produced: retryable.
            raise EngineFailed(
                f"engine failed mid-stream: {exc.code().name}: "
                f"{public_detail(self.req, exc.details() or '')}",
                code="engine_error").on(stream.engine.id, retryable=first) from exc
        except RouterError:
            raise
        except Exception as exc:  # never let an odd failure escape as a broken response
            log.exception("request %s: reading from engine %s failed", self.req.request_id,
                          stream.engine.id)
            raise EngineFailed(f"reading from engine {stream.engine.id} failed: "
                               f"{type(exc).__name__}", code="engine_error") from exc
        if chunk is None:
            raise EngineFailed("engine closed the stream without finishing",
                               code="engine_error").on(stream.engine.id, retryable=first)
        _check_finish(chunk, stream.engine, first=first)
        return chunk

    async def next_started(self, segment_tokens: list[int]
                           ) -> tuple[GenerationStream, pb.GenerateChunk]:
        """After a hand-off: the next segment and its first chunk. When the engine of that
        segment fails before producing anything (it died after the hand-off, or while the
        policy's verbs ran), the router continues the request on a live engine itself."""
        try:
            try:
                stream = await self.after_handoff(segment_tokens)
            except grpc.aio.AioRpcError as exc:  # a migration's verbs on a dead target
                raise _engine_error(self.req, self.policy_name, exc, "migration",
                                    self.req.scope.verbs[-1:]) from exc
            if stream is None:
                raise PolicyFailed(self.policy_name, "the policy ended after a hand-off "
                                   "without a next segment")
            started = stream, await self.read(stream, first=True)
        except EngineFailed as exc:
            if self._landing is not None:
                self._landing.settle("failed")
            if not exc.retryable:
                raise
            return await self._resume_elsewhere(exc)
        if self._landing is not None:
            self._landing.settle("migrated")
        return started

    async def _resume_elsewhere(self, failure: EngineFailed
                                ) -> tuple[GenerationStream, pb.GenerateChunk]:
        """Prefill prompt + every token so far on the best live engine and decode the rest
        there (the output offset keeps seeded sampling exact), within the retry budget. The
        policy is no longer asked: the request ends as one segment."""
        dispatcher, req = self.dispatcher, self.req
        if self._timer is not None:  # armed for the failed segment
            self._timer.cancel()
            self._timer = None
        await self.session.aclose()
        while True:
            if dispatcher is None or not dispatcher.budget.allow(self.retries):
                raise failure
            self.retries += 1
            if failure.engine_id:
                dispatcher.engines.mark_unhealthy(failure.engine_id)
            req.scope.abandon()  # the failed segment (and any reservation made for it)
            log.warning("request %s: %s; continuing on another engine", req.request_id,
                        failure.message)
            excluded = tuple(e for e in req.scope.touched if e.id == failure.engine_id)
            try:
                target = self.session.cluster.best("any", req, exclude=excluded)
            except NoCapacity:
                if not await dispatcher.engine_back():
                    raise failure from None
                try:
                    target = self.session.cluster.best("any", req, exclude=excluded)
                except NoCapacity:
                    raise failure from None
            req.engine_request_id = req.new_engine_request_id()
            req.route.params["resumed"] = f"{failure.engine_id or '?'}->{target.id}"
            stream = target.start_generate(req)
            try:
                first = await self.read(stream, first=True)
            except EngineFailed as exc:
                if not exc.retryable:
                    raise
                failure = exc
                continue
            self.stream, self.resumed = stream, True
            self.segments += 1
            return stream, first

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for move in (self._move, self._landing):
            if move is not None:
                move.settle("finished")
        await self.session.aclose()
        self.req.scope.close()


class Dispatcher:
    def __init__(self, engines: EngineDirectory, slot: PolicySlot,
                 policy_timeout_s: float = 300.0, events: EventSink | None = None,
                 budget: RetryBudget | None = None) -> None:
        self.engines = engines
        self.slot = slot
        self.budget = budget if budget is not None else RetryBudget()
        self.fallback = PolicyFallback(slot, events=events)
        # A policy that never decides must not hold its client forever (PD on a long prompt
        # on CPU can legitimately take a while, hence minutes, not seconds).
        self.policy_timeout_s = policy_timeout_s
        self.outcomes = RecentOutcomes()
        self.events = events  # policies' decisions worth counting (metrics)
        # Predictions against outcomes (the latency model's closed loop; metrics set its sink).
        self.feedback = PredictionFeedback()

    def record(self, req: RouterRequest, ok: bool, started: float, first_token: float | None,
               ended: float) -> None:
        """A request has ended: remember how it went (cluster.outcomes)."""
        ttft = None if first_token is None else first_token - started
        n = req.completion_tokens
        tpot = (ended - first_token) / (n - 1) if first_token is not None and n > 1 else None
        self.record_outcome(time.monotonic(), req.route.label(), ok, ttft, tpot,
                            req.slo.ttft_ms, req.slo.tpot_ms)
        self.feedback.ended(req.key)
        if ok and req.predicted is not None:
            # Its TTFT was learned at the first token (_attempt).
            self.feedback.observe(req.predicted, None, tpot, max(0, n - 1))

    def record_outcome(self, at: float, pattern: str, ok: bool, ttft_s: float | None,
                       tpot_s: float | None, slo_ttft_ms: float | None,
                       slo_tpot_ms: float | None) -> None:
        """One finished request into the outcome window (the Rust front's fast path records
        its requests here too)."""
        self.outcomes.record(Outcome(at, pattern, ok, ttft_s, tpot_s,
                                     slo_met(ttft_s, tpot_s, slo_ttft_ms, slo_tpot_ms)))

    async def admit(self, req: RouterRequest) -> RequestRun:
        """Run the policy to the first chunk of its first segment. If an engine failed before
        any output (whatever its status), take it out of rotation and run the policy again
        with a fresh engine-side id, within the retry budget (nothing has reached the client
        yet, so this is invisible)."""
        active = self.slot.current
        self.budget.admitted()
        retries, waited = 0, False
        while True:
            try:
                run = await self._attempt(req, active, retries)
                self.fallback.record(active, policy_failed=False)
                return run
            except NoCapacity:
                if not retries or waited or not await self.engine_back():
                    raise
                waited = True
            except (PolicyFailed, BadRequest) as exc:
                # A 400 is the policy's when nothing reached an engine (its own parameters).
                self.fallback.record(active, isinstance(exc, PolicyFailed)
                                     or not req.scope.verbs)
                raise
            except EngineFailed as exc:
                if not exc.retryable or not self.budget.allow(retries):
                    raise
                retries += 1
                # Only the engine that failed leaves rotation (a pd request's healthy prefill
                # engine must stay in it: the retry may need it to stand in for the dead one).
                failed = [exc.engine_id] if exc.engine_id else [e.id for e in req.scope.touched]
                for engine_id in failed:
                    self.engines.mark_unhealthy(engine_id)
                log.warning("request %s: %s; retrying on another engine", req.request_id,
                            exc.message)
                req.engine_request_id = req.new_engine_request_id()
                req.route, req.matched_by_engine = RouteNote(), None

    async def engine_back(self, timeout_s: float = ENGINE_BACK_S) -> bool:
        """A retry found no healthy engine. The failure before it may have taken a live engine
        out of rotation (a peer's death surfacing on its stream); its health check brings it
        back within a poll: wait that long for one, rather than fail the request now."""
        deadline = time.monotonic() + timeout_s
        while not self.engines.healthy():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _attempt(self, req: RouterRequest, active: ActivePolicy, retries: int
                       ) -> RequestRun:
        started_at = len(req.scope.verbs)
        attempt_started = time.perf_counter()  # what the policy's TTFT prediction counts from
        view = ClusterView(self.engines, active, self.outcomes, self.events, self.feedback,
                           self.policy_timeout_s)
        session = PolicySession(active, req, view, self.policy_timeout_s)
        try:
            stream = await session.first()
            if req.predicted is not None:
                self.feedback.running(req.key, req.predicted)
            if not req.route.pattern:
                req.note_route(active.name, engine=stream.engine.id)
            try:
                first = await _first_chunk(stream, self.policy_timeout_s)
            except grpc.aio.AioRpcError as exc:
                # scope.verbs already ends with this start_generate (recorded before the RPC).
                raise _engine_error(req, active.name, exc, "generate",
                                    req.scope.verbs[started_at:]) from exc
            if first is None:
                raise EngineFailed("engine closed the stream without output").on(
                    stream.engine.id)
            _check_finish(first, stream.engine, first=True)
            req.timeline.first_token = time.perf_counter()
            if req.predicted is not None:
                self.feedback.first_token(
                    req.key, (req.timeline.first_token - req.timeline.started) * 1000.0)
                # The loop learns a TTFT when it happens, not when the request ends: learned at
                # the end, a long decode's TTFT arrived seconds after later placements needed it
                # (after a phase of long prompts, its correction made every short queue look
                # late). From the attempt's start: a retried request's TTFT also holds the failed
                # attempt's time, which no placement could have foreseen.
                self.feedback.observe(
                    req.predicted, req.timeline.first_token - attempt_started, None)
            return RequestRun(req, session, stream, first, started_at, self.policy_timeout_s,
                              self, retries)
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
