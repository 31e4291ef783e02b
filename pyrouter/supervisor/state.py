"""What the supervisor started, on disk: `serve-state.json` in its run directory.

Per child: its name, kind, pid and start time (the two together name one process: a pid alone
may have been reused by the time a new serve reads it), its ports and its restarts; and a
fingerprint of serve's arguments, so a new serve knows whether the children were started the way
it would start them. Rewritten whole (write, then rename) each time a child starts; removed when
serve has stopped its children.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from switchyard_engine_api.auth import TOKEN_ENV, TOKEN_FILE_ENV

STATE_VERSION = 1
ENGINE, ROUTER = "engine", "router"


class StateError(RuntimeError):
    """A state file this serve cannot read: it cannot know what runs, so it starts nothing."""


@dataclass(frozen=True, slots=True)
class ChildRecord:
    name: str          # engine-0, router-0, ...
    kind: str          # ENGINE or ROUTER
    pid: int
    started_at: float  # the process's start time (psutil's create_time)
    port: int
    metrics_port: int | None = None
    restarts: int = 0  # times a supervisor started it again after it died


@dataclass(frozen=True, slots=True)
class ServeState:
    fingerprint: str
    supervisor_pid: int
    children: tuple[ChildRecord, ...]


def args_fingerprint(args: argparse.Namespace) -> str:
    """serve's arguments, and which engine token the operator set (its hash: the children of a
    serve that had another token would refuse this one's routers), as one hash."""
    token = os.environ.get(TOKEN_ENV) or os.environ.get(TOKEN_FILE_ENV) or ""
    text = json.dumps({"args": vars(args), "token": hashlib.sha256(token.encode()).hexdigest()},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def read_state(path: Path) -> ServeState | None:
    """None when there is no state file; StateError when there is one this cannot read."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StateError(f"cannot read {path} ({exc}): the processes it names may still run; "
                         "stop them, then remove the file") from None
    try:
        if data["version"] != STATE_VERSION:
            raise ValueError(f"version {data['version']}, this serve reads {STATE_VERSION}")
        return ServeState(str(data["fingerprint"]), int(data["supervisor_pid"]),
                          tuple(ChildRecord(**child) for child in data["children"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"{path} is not a state file this serve reads ({exc}): the processes "
                         "it names may still run; stop them, then remove the file") from None


def write_state(path: Path, state: ServeState) -> None:
    """Replaces the file whole: a reader (or a supervisor killed mid-write) never sees half."""
    data = {"version": STATE_VERSION, "fingerprint": state.fingerprint,
            "supervisor_pid": state.supervisor_pid,
            "children": [asdict(child) for child in state.children]}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)


def remove_state(path: Path) -> None:
    path.unlink(missing_ok=True)
