"""Drive one request through a Dispatcher the way the HTTP front does, and record the outcome.

Shared by FakeCluster (fake engines) and the real-engine fault tests: admit, stream every chunk
across segments, optionally make the client go away or a stop string end it, and always close
the request's run and scope — the path whose clean-up the tests check.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pyrouter.dispatch import Dispatcher, RequestRun
from pyrouter.errors import RouterError
from pyrouter.request import RouterRequest
from pyrouter.scope import RouterCounters


@dataclass(slots=True)
class FakeRun:
    """One request's outcome: what the client got and what the engines were asked to do."""

    request: RouterRequest
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = ""
    route: str = ""
    segments: int = 0
    error: RouterError | None = None

    @property
    def verbs(self) -> list[tuple[str, str]]:
        return list(self.request.scope.verbs)


class ClientGone(Exception):
    """Raised in place of the client disconnecting (drive(disconnect_after=))."""


OnTokens = Callable[[RequestRun, int], Awaitable[None]]


async def drive(dispatcher: Dispatcher, req: RouterRequest, counters: RouterCounters,
                disconnect_after: int | None = None, stop_after: int | None = None,
                on_tokens: OnTokens | None = None) -> FakeRun:
    """`disconnect_after=k`: the client goes away after k tokens; `stop_after=k`: a stop
    string the router matched ends the request there; `on_tokens(run, n)` runs after each chunk
    (n tokens so far), e.g. to migrate the request mid-stream."""
    out = FakeRun(req)
    req.scope.open(counters)
    run = None
    started, first = time.perf_counter(), None
    try:
        run = await dispatcher.admit(req)
        first = time.perf_counter()
        out.route = req.route.header()
        async for chunk in run.chunks():
            out.tokens.extend(chunk.token_ids)
            out.finish_reason = chunk.finish_reason or out.finish_reason
            if on_tokens is not None:
                await on_tokens(run, len(out.tokens))
            if disconnect_after is not None and len(out.tokens) >= disconnect_after:
                raise ClientGone
            if stop_after is not None and len(out.tokens) >= stop_after:
                if not chunk.finish_reason:
                    run.stop_early()
                out.finish_reason = "stop"
                break
        out.segments = run.segments
    except (RouterError, ClientGone, asyncio.CancelledError) as exc:
        out.error = exc if isinstance(exc, RouterError) else None
    finally:
        req.completion_tokens = len(out.tokens)
        dispatcher.record(req, out.error is None, started, first, time.perf_counter())
        if run is not None:
            await run.close()
        req.scope.close()
        for _ in range(3):  # let background aborts reach (fake) engines
            await asyncio.sleep(0)
    return out
