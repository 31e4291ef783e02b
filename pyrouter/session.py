"""PolicySession: runs one request's policy, one decision per segment.

A policy is either a coroutine that returns one GenerationStream, or an async generator that
yields one per segment. The router streams a segment's tokens without running Python; when the
segment ends with a hand-off (the `max_new_tokens_here` the policy gave `start_generate`), the
router resumes the generator with a `SegmentEnd` — the value of the `yield` expression — after
appending the segment's tokens to `req.tokens`. The generator returning ends the policy's part.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass, field
from typing import Any, cast

from pyrouter.cluster import ClusterView
from pyrouter.engines.handle import EngineHandle, GenerationStream
from pyrouter.errors import EngineFailed, PolicyFailed
from pyrouter.policy_registry import ActivePolicy
from pyrouter.request import RouterRequest

log = logging.getLogger("switchyard.router")
_CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """What a segmented policy's `yield` returns when its segment has ended.

    reason: "handoff" — the segment produced its `max_new_tokens_here`;
            "interrupted" — the router took control back (e.g. a live migration), `detail` says
            why. `new_tokens` are the segment's tokens, already appended to `req.tokens`."""

    engine: EngineHandle
    reason: str
    new_tokens: list[int]
    detail: dict[str, Any] = field(default_factory=dict)


class PolicySession:
    def __init__(self, active: ActivePolicy, req: RouterRequest, cluster: ClusterView,
                 timeout_s: float) -> None:
        self.active = active
        self.req = req
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._segments: AsyncGenerator[GenerationStream, SegmentEnd] | None = None

    @property
    def name(self) -> str:
        return self.active.name

    async def first(self) -> GenerationStream:
        route = self.active.spec.route(self.req, self.cluster)
        if self.active.spec.segmented:
            self._segments = cast(AsyncGenerator[GenerationStream, SegmentEnd], route)
            stream = await self._decide(self._segments.__anext__())
            if stream is None:
                raise PolicyFailed(self.name, "the policy yielded no segment")
            return stream
        stream = await self._decide(cast(Awaitable[GenerationStream], route))
        if stream is None:  # a coroutine cannot raise StopAsyncIteration; keeps mypy exact
            raise PolicyFailed(self.name, "the policy returned no stream")
        return stream

    async def next(self, end: SegmentEnd) -> GenerationStream | None:
        """The next segment after `end`, or None when the policy has finished."""
        if self._segments is None:
            return None
        return await self._decide(self._segments.asend(end))

    async def aclose(self) -> None:
        """Let a segmented policy run its `finally` blocks (the request is over)."""
        segments, self._segments = self._segments, None
        if segments is None:
            return
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await segments.aclose()
        except Exception:  # a policy bug at clean-up: the request's outcome stands
            log.exception("policy %r failed while closing request %s", self.name,
                          self.req.request_id)

    async def _decide(self, decision: Awaitable[GenerationStream]) -> GenerationStream | None:
        timeline = self.req.timeline
        segment = timeline.begin_segment("policy")
        loop = asyncio.get_running_loop()
        waiting: tuple[str, str] | None = None  # the verb outstanding at the deadline
        try:
            # asyncio.timeout, not wait_for: no extra task (and loop turn) per decision. The
            # deadline is our own timer, so that it can see, before the policy is cancelled,
            # whether the policy was waiting on an engine's verb then (cancelling ends the
            # verb's timing).
            async with asyncio.timeout(None) as deadline:
                def expire() -> None:
                    nonlocal waiting
                    waiting = self.req.scope.waiting_on()
                    deadline.reschedule(loop.time())

                timer = loop.call_later(self.timeout_s, expire)
                try:
                    result = await decision
                finally:
                    timer.cancel()
        except TimeoutError:
            if waiting is not None:
                # The policy was waiting on an engine (a RemoteSend behind a long prefill
                # queue): the engine's slowness under load, reported as the first-output
                # timeout is, not as a policy bug (which counts towards falling back to the
                # previous policy).
                verb, engine_id = waiting
                raise EngineFailed(f"engine {engine_id} did not answer {verb} within "
                                   f"{self.timeout_s:g} s (policy {self.name!r} waited on it)",
                                   code="engine_timeout") from None
            raise PolicyFailed(self.name, f"did not return a stream within "
                               f"{self.timeout_s:g} s") from None
        except StopAsyncIteration:
            self._segments = None
            timeline.drop_segment(segment)  # the policy had nothing more: not a segment
            return None
        if not isinstance(result, GenerationStream):
            raise PolicyFailed(self.name, "a policy must return the stream from start_generate "
                               f"(or yield one per segment), got {type(result).__name__}")
        if not self.active.spec.segmented and (result.max_new_tokens_here
                                               or result.control_after_s is not None):
            raise PolicyFailed(self.name, "only a policy written as an async generator (one "
                               "yield per segment) can take control back mid-request")
        if result.finished or result.engine_request_id != self.req.engine_request_id:
            raise PolicyFailed(self.name, "the stream handed back is not this request's "
                               "running segment")
        timeline.decided(segment, result.engine, self.req)
        return result
