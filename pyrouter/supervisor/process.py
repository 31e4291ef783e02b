"""The processes a supervisor watches: those it started (Spawned: it reaps them and knows their
exit codes) and those an earlier serve started (Adopted: known by pid and start time only; their
parent is init now, which reaps them, so their exit codes are not known here)."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Protocol

import psutil

# Start times read twice from /proc agree to the clock tick; anything further apart is another
# process that was given the same pid.
_SAME_START_S = 0.05
_POLL_S = 0.1


class ChildProcess(Protocol):
    @property
    def pid(self) -> int: ...

    @property
    def started_at(self) -> float: ...

    def running(self) -> bool: ...

    def exit_text(self) -> str: ...

    def failed_by_itself(self) -> bool:
        """Whether it ended on its own (an exit code, not a signal someone sent it)."""
        ...

    def send(self, sig: signal.Signals) -> None: ...


def start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


class Spawned:
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        # 0.0 when it is already gone: a record no later serve will mistake for a live process.
        self._started_at = start_time(popen.pid) or 0.0

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def started_at(self) -> float:
        return self._started_at

    def running(self) -> bool:
        return self.popen.poll() is None  # poll() also reaps an exited child: no zombie

    def exit_text(self) -> str:
        return f"exited with code {self.popen.returncode}"

    def failed_by_itself(self) -> bool:
        return self.popen.returncode is not None and self.popen.returncode >= 0

    def send(self, sig: signal.Signals) -> None:
        if self.running():
            self.popen.send_signal(sig)


class Adopted:
    def __init__(self, pid: int, started_at: float) -> None:
        self._pid = pid
        self._started_at = started_at

    @classmethod
    def find(cls, pid: int, started_at: float) -> Adopted | None:
        """The process `pid` if it still runs and is the one that started at `started_at`."""
        process = cls(pid, started_at)
        return process if process.running() else None

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def started_at(self) -> float:
        return self._started_at

    def running(self) -> bool:
        try:
            process = psutil.Process(self._pid)
            return (abs(process.create_time() - self._started_at) < _SAME_START_S
                    and process.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def exit_text(self) -> str:
        return "exited (an earlier serve started it: its exit code is not known here)"

    def failed_by_itself(self) -> bool:
        return False  # not known: it had served before, so it did not fail to start

    def send(self, sig: signal.Signals) -> None:
        if self.running():
            try:
                os.kill(self._pid, sig)
            except ProcessLookupError:
                pass  # it ended between the check and the signal


async def wait_gone(processes: Sequence[ChildProcess], timeout_s: float) -> list[ChildProcess]:
    """Waits up to `timeout_s` for every process to end; returns those still running."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in processes if p.running()]
    while left and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_S)
        left = [p for p in left if p.running()]
    return left
