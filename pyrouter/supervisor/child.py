"""One process the supervisor keeps running — an engine or a router replica — on a port it keeps
across restarts, with its own log and its own restart bookkeeping (keeper.py reads and moves
it)."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pyrouter.supervisor.process import ChildProcess
from pyrouter.supervisor.state import ChildRecord


@dataclass(eq=False)
class Child(ABC):
    name: str
    port: int
    log_path: Path
    process: ChildProcess | None = None
    restarts: int = 0               # in a row: since it last ran for `stable_s`
    restarts_total: int = 0         # since the deployment first started it (across supervisors)
    since: float = 0.0              # monotonic time it was last started or adopted
    restart_due: float | None = None  # when the backoff of a dead child ends
    given_up: bool = False          # dead past --max-restarts: left down

    kind: ClassVar[str]
    backoff_max_s: ClassVar[float]
    stable_s: ClassVar[float]       # a child that ran this long starts its count afresh

    @property
    @abstractmethod
    def label(self) -> str:
        """How serve's output names it."""

    @abstractmethod
    def spawn(self) -> ChildProcess:
        """Starts the process on `port` (a port of 0 is chosen now and kept)."""

    def start(self) -> None:
        self.process = self.spawn()
        self.since = time.monotonic()

    def adopt(self, process: ChildProcess) -> None:
        self.process = process
        self.since = time.monotonic()

    def alive(self) -> bool:
        return self.process is not None and self.process.running()

    def exit_text(self) -> str:
        return self.process.exit_text() if self.process is not None else "never started"

    def ports_text(self) -> str:
        return f"port {self.port}"

    def started_text(self) -> str:
        """What serve says once it started this child again."""
        return f"{self.label} restarted on {self.ports_text()} (restart {self.restarts_total})"

    def record(self) -> ChildRecord | None:
        if self.process is None:
            return None
        return ChildRecord(self.name, self.kind, self.process.pid, self.process.started_at,
                           self.port, restarts=self.restarts_total)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""
