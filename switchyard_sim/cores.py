"""Engines that share CPU cores slow each other down while they step at once.

On a machine whose engines share cores (the profile's `cores` > 0), a step's duration is work at
a rate that depends on how many engines are stepping: with n of them a step progresses at
1 / slowdown(n), slowdown(n) = 1 + (c - 1)(n - 1), where c is the step-time factor measured with
two engines stepping at once (switchyard_sim/profiles/measure_local.py): `contention` for a step
that prefills (the kernels use every core they get), `decode_contention` for a decode-only
step (on this machine it hardly slows).
When an engine starts or ends a step, every step in progress is re-timed (processor sharing),
so a step that overlaps another for half its length is slowed for that half only.
GPU engines own their devices: such profiles leave `cores` at 0 and steps take what the latency
model says.
"""
from __future__ import annotations

import asyncio

_DONE_EPS = 1e-9  # seconds of work left that count as none (float rounding of virtual times)


class _Step:
    __slots__ = ("contention", "done", "left")

    def __init__(self, work_s: float, contention: float, done: asyncio.Future[None]) -> None:
        self.left = work_s  # seconds of solo work still to do
        self.contention = contention
        self.done = done

    def slowdown(self, stepping: int) -> float:
        return 1.0 + (self.contention - 1.0) * max(0, stepping - 1)


class SharedCores:
    """The steps in progress on engines sharing cores; `step(work_s, contention)` returns when
    its work is done at the shared rate."""

    def __init__(self) -> None:
        self._steps: list[_Step] = []
        self._since = 0.0  # when the steps' `left` were last brought up to date
        self._timer: asyncio.TimerHandle | None = None

    async def step(self, work_s: float, contention: float) -> None:
        loop = asyncio.get_running_loop()
        self._advance(loop.time())
        step = _Step(work_s, contention, loop.create_future())
        self._steps.append(step)
        self._retime(loop)
        try:
            await step.done
        finally:
            if step in self._steps:  # cancelled mid-step: the others speed up again
                self._advance(loop.time())
                self._steps.remove(step)
                self._retime(loop)

    def _advance(self, now: float) -> None:
        stepping = len(self._steps)
        for step in self._steps:
            step.left -= (now - self._since) / step.slowdown(stepping)
        self._since = now

    def _retime(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._steps:
            stepping = len(self._steps)
            at = self._since + min(max(0.0, s.left) * s.slowdown(stepping) for s in self._steps)
            self._timer = loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        self._advance(loop.time())
        finished = [s for s in self._steps if s.left <= _DONE_EPS]
        self._steps = [s for s in self._steps if s.left > _DONE_EPS]
        for step in finished:
            if not step.done.done():
                step.done.set_result(None)
        self._retime(loop)
