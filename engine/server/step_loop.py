"""The step-loop thread that drives EngineCore.step(), and the bridge to the asyncio side.

EngineCore guards its bookkeeping with one lock that step() does not hold while the model runs,
so verbs (add_request, prep_recv, abort, stats, ...) run on a small worker pool and return in
microseconds even while a long prefill computes. Only the step thread calls step(); it hands
StepOutputs to per-request asyncio queues with `call_soon_threadsafe`. Nothing here ever blocks
the event loop.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from engine.core.outputs import StepOutput
from engine.server.errors import RequestInUse

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long the idle step thread sleeps before re-checking leases (a verb wakes it at once).
_IDLE_WAIT_S = 0.05
_LEASE_CHECK_S = 0.1


class StepLoop:
    def __init__(self, core: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.core = core
        self._loop = loop
        self._verbs = ThreadPoolExecutor(max_workers=4, thread_name_prefix="engine-verb")
        self._watchers: dict[str, asyncio.Queue[StepOutput]] = {}
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="engine-step", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout_s)
        self._verbs.shutdown(wait=False, cancel_futures=True)

    # ---- asyncio side ----
    async def call(self, fn: Callable[[Any], T]) -> T:
        """Run fn(core) on a verb worker; the step thread is woken to pick up new work."""
        try:
            return await self._loop.run_in_executor(self._verbs, fn, self.core)
        finally:
            self._wake.set()

    def submit(self, fn: Callable[[Any], object]) -> None:
        """Fire and forget, for cleanup paths that cannot await (cancelled streams)."""
        def run(core: Any) -> None:
            try:
                fn(core)
            except Exception:  # noqa: BLE001 - cleanup must never raise into a worker
                log.exception("engine cleanup command failed")
            self._wake.set()

        self._verbs.submit(run, self.core)

    def watch(self, request_id: str) -> asyncio.Queue[StepOutput]:
        if request_id in self._watchers:
            raise RequestInUse(f"request id {request_id!r} already has work in flight here")
        outputs: asyncio.Queue[StepOutput] = asyncio.Queue()
        self._watchers[request_id] = outputs
        return outputs

    def unwatch(self, request_id: str) -> None:
        self._watchers.pop(request_id, None)

    def _deliver(self, outputs: list[StepOutput]) -> None:
        for out in outputs:
            watcher = self._watchers.get(out.request_id)
            if watcher is not None:
                watcher.put_nowait(out)

    def _fail_all(self, message: str) -> None:
        for request_id, watcher in list(self._watchers.items()):
            watcher.put_nowait(StepOutput(request_id, [], "error", error=message))
            self.submit(_abort_fn(request_id))

    # ---- step thread ----
    def _run(self) -> None:
        next_lease_check = 0.0
        while not self._stopping:
            now = time.monotonic()
            if now >= next_lease_check:
                self._guard(partial(self.core.expire_leases, now))
                next_lease_check = now + _LEASE_CHECK_S
            if not self._guard(self.core.has_work):
                self._wake.wait(_IDLE_WAIT_S)
                self._wake.clear()
                continue
            try:
                outputs = self.core.step()
            except Exception as exc:  # noqa: BLE001 - a failed step must not take the server down
                log.exception("engine step failed")
                self._loop.call_soon_threadsafe(self._fail_all, f"engine step failed: {exc}")
                continue
            if outputs:
                self._loop.call_soon_threadsafe(self._deliver, outputs)

    @staticmethod
    def _guard(fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception:  # noqa: BLE001
            log.exception("step-loop housekeeping failed")
            return None


def _abort_fn(request_id: str) -> Callable[[Any], object]:
    return lambda core: core.abort(request_id)
