"""Graceful router shutdown (SIGTERM): stop admitting, let work in flight finish, end the rest.

Order: `state.draining` turns on, so /ready answers 503 at once (load balancers stop sending)
and new generation requests get 503 `shutting_down` with Retry-After, while the listening
socket stays open (a client gets an answer, not a refused connection). Requests in flight get
`grace_s` to finish. The front then ends any still running (RouterFront.end_requests): a stream
with an error event, `[DONE]` and the chunked terminator, a plain request with a 503 — never a
cut connection.
"""
from __future__ import annotations

import asyncio
import logging

from pyrouter.errors import ShuttingDown
from pyrouter.state import RouterState

log = logging.getLogger("switchyard.router")
END_WAIT_S = 10.0  # for the ended requests to write their last bytes
DRAIN_RETRY_AFTER_S = 5.0  # what a 503 during the drain tells the client


def shutting_down() -> ShuttingDown:
    return ShuttingDown("the router is shutting down; retry on another replica",
                        retry_after_s=DRAIN_RETRY_AFTER_S)


async def drain(state: RouterState, grace_s: float, poll_s: float = 0.05) -> int:
    """Returns how many requests were still running at the end of the grace period."""
    state.draining = True
    front = state.engines.front
    if front is None:
        return 0
    front.set_draining(True)  # no fast path for new requests: they reach the 503 above
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    # The front counts every request, its fast path's (no Python) included.
    if front.inflight:
        log.info("draining: %d request(s) in flight get up to %.0f s", front.inflight, grace_s)
    while front.inflight and loop.time() < deadline:
        await asyncio.sleep(poll_s)
    left = front.inflight
    if left:
        log.warning("draining: %d request(s) still running after %.0f s; ending them with an "
                    "error", left, grace_s)
        front.end_requests()
        end_deadline = loop.time() + END_WAIT_S
        while front.inflight and loop.time() < end_deadline:
            await asyncio.sleep(poll_s)
    return left
