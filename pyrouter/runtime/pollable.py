"""Awaiting a Rust future on the asyncio loop: router_core's PendingCall (a policy's verb) is
polled here, on the loop's thread, until it answers; its wake-ups come back to this loop. A verb
therefore runs where the policy runs, in order with everything else on the loop (the simulator's
virtual clock never moves while one is under way), and costs one call into Rust per poll."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
Wake = Callable[[], None]


class Pollable(Protocol):
    def poll(self, wake: Wake) -> tuple[bool, Any]: ...


def _settle(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


async def until_ready(poll: Callable[[Wake], tuple[bool, T]]) -> T:
    """Polls until ready; between polls the loop runs, and the waker schedules the next poll."""
    loop = asyncio.get_running_loop()
    while True:
        woken: asyncio.Future[None] = loop.create_future()

        def wake(woken: asyncio.Future[None] = woken) -> None:
            try:
                loop.call_soon_threadsafe(_settle, woken)
            except RuntimeError:
                pass  # the loop has closed: nobody waits any more

        ready, value = poll(wake)
        if ready:
            return value
        await woken


async def settled(call: Pollable) -> Any:
    """The answer of `call` (its exception raised here)."""
    return await until_ready(call.poll)
