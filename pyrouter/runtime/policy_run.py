"""PolicyRun: one request's policy, one decision per segment.

A policy is either a coroutine that returns one placement, or an async generator that yields one
per segment. router_core carries each placement out and streams its segment without running
Python; when a segment ends with a hand-off (a Segment's `max_tokens`) or is interrupted, the
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
from pyrouter.engines.handle import EngineHandle
from pyrouter.errors import PolicyFailed, RouterError
from pyrouter.request import RouterRequest
from pyrouter.runtime.policy_registry import ActivePolicy
from router_core import Dp, Pd, Segment, Split

log = logging.getLogger("switchyard.router")
_CLOSE_TIMEOUT_S = 5.0
PLACEMENTS = (Dp, Pd, Split, Segment)
Placement = Dp | Pd | Split | Segment


class EngineTimeout(RouterError):
    """The policy's deadline passed while it waited on an engine's verb: the engine's slowness
    under load (502 `engine_timeout`), not a policy bug."""

    status = 502
    error_type = "engine_error"
    default_code = "engine_timeout"


@dataclass(frozen=True, slots=True)
class SegmentEnd:
    """What a segmented policy's `yield` returns when its segment has ended.

    reason: "handoff" — the segment produced its `max_tokens`;
            "interrupted" — the router took control back (e.g. `control_after_s`), `detail`
            says why. `new_tokens` are the segment's tokens, already appended to `req.tokens`."""

    engine: EngineHandle | None
    reason: str
    new_tokens: list[int]
    detail: dict[str, Any] = field(default_factory=dict)


class PolicyRun:
    def __init__(self, active: ActivePolicy, req: RouterRequest, cluster: ClusterView,
                 timeout_s: float) -> None:
        self.active = active
        self.req = req
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._segments: AsyncGenerator[Placement, SegmentEnd] | None = None

    @property
    def name(self) -> str:
        return self.active.name

    @property
    def segmented(self) -> bool:
        return self._segments is not None

    async def first(self) -> Placement:
        route = self.active.spec.route(self.req, self.cluster)
        if self.active.spec.segmented:
            self._segments = cast(AsyncGenerator[Placement, SegmentEnd], route)
            placement = await self._decide(self._segments.__anext__())
            if placement is None:
                raise PolicyFailed(self.name, "the policy yielded no segment")
            return placement
        placement = await self._decide(cast(Awaitable[Placement], route))
        if placement is None:  # a coroutine cannot raise StopAsyncIteration; keeps mypy exact
            raise PolicyFailed(self.name, "the policy returned no placement")
        return placement

    async def next(self, end: SegmentEnd) -> Placement | None:
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

    async def _decide(self, decision: Awaitable[Any]) -> Placement | None:
        loop = asyncio.get_running_loop()
        waiting: tuple[str, str] | None = None  # the verb outstanding at the deadline
        try:
            # asyncio.timeout, not wait_for: no extra task (and loop turn) per decision. The
            # deadline is our own timer, so that it can see, before the policy is cancelled,
            # whether the policy was waiting on an engine's verb then.
            async with asyncio.timeout(None) as deadline:
                def expire() -> None:
                    nonlocal waiting
                    verbs = self.req.verbs
                    waiting = verbs.waiting_on() if verbs is not None else None
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
                raise EngineTimeout(f"engine {engine_id} did not answer {verb} within "
                                    f"{self.timeout_s:g} s (policy {self.name!r} waited on "
                                    "it)") from None
            raise PolicyFailed(self.name, f"did not decide within {self.timeout_s:g} s") from None
        except StopAsyncIteration:
            self._segments = None
            return None
        if not isinstance(result, PLACEMENTS):
            raise PolicyFailed(self.name, "a policy returns a placement (Dp, Pd, Split, Segment, "
                               "or what start_generate returns; one per segment from an async "
                               f"generator), got {type(result).__name__}")
        if not self.active.spec.segmented and isinstance(result, Segment) and (
                result.max_tokens or result.control_after_s is not None):
            raise PolicyFailed(self.name, "only a policy written as an async generator (one "
                               "yield per segment) can take control back mid-request")
        return result
