"""Graceful router shutdown (SIGTERM): stop admitting, let work in flight finish, end the rest.

Order: `state.draining` turns on, so /ready answers 503 at once (load balancers stop sending)
and new generation requests get 503 `shutting_down` with Retry-After, while the listening
socket stays open (a client gets an answer, not a refused connection). Requests in flight get
`grace_s` to finish. Any still running then is cancelled with a mark the handler recognises
(pyrouter/http/generation.py; on the Rust front, RouterFront.end_requests): a stream ends with
an error event, `[DONE]` and the chunked terminator, a plain request with a 503 — never a cut
connection.
"""
from __future__ import annotations

import asyncio
import logging

from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")
_END_WAIT_S = 10.0  # for the cancelled requests to write their last bytes
SHUTDOWN_KEY = "switchyard_shutdown"  # set on a request the drain cancels at the grace's end
DRAIN_RETRY_AFTER_S = 5.0  # what a 503 during the drain tells the client


async def drain(state: RouterState, grace_s: float, poll_s: float = 0.05) -> int:
    """Returns how many requests were still running at the end of the grace period."""
    state.draining = True
    front = state.engines.front
    if front is not None:
        front.set_draining(True)  # no fast path for new requests: they reach the 503 below

    def inflight() -> int:
        # The Rust front counts every request, its fast path's (no Python) included.
        return front.inflight if front is not None else state.counters.inflight

    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    if inflight():
        log.info("draining: %d request(s) in flight get up to %.0f s", inflight(), grace_s)
    while inflight() and loop.time() < deadline:
        await asyncio.sleep(poll_s)
    ended_by_front = front.inflight if front is not None else 0
    if front is not None and ended_by_front:
        # The Rust front's requests (fast path and policy-run alike) end there.
        log.warning("draining: %d request(s) still running after %.0f s; ending them with an "
                    "error", ended_by_front, grace_s)
        front.end_requests()
        end_deadline = loop.time() + _END_WAIT_S
        while front.inflight and loop.time() < end_deadline:
            await asyncio.sleep(poll_s)
    left = list(state.handlers.items())
    for task, request in left:
        request[SHUTDOWN_KEY] = True
        task.cancel()
    if left:
        log.warning("draining: %d request(s) still running after %.0f s; ending them with an "
                    "error", len(left), grace_s)
        await asyncio.wait([task for task, _ in left], timeout=_END_WAIT_S)
    return ended_by_front + len(left)
