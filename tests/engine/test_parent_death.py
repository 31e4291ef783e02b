"""An engine launched with die_with_parent ends when its parent is SIGKILLed
(switchyard_proto/parent_death.py), which arranges it itself: the launcher runs no Python between
fork and exec any more."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from switchyard_proto.parent_death import PARENT_PID_ENV

pytestmark = pytest.mark.procs

_CHILD = textwrap.dedent("""
    import os, sys, time
    from switchyard_proto.parent_death import die_with_parent_if_asked
    die_with_parent_if_asked()
    assert "PARENT_ENV" not in os.environ  # the engine's own children do not inherit it
    print("ready", flush=True)
    time.sleep(120)
""").replace("PARENT_ENV", PARENT_PID_ENV)

_PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    env = {**os.environ, "PARENT_ENV": str(os.getpid())}
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env, stdout=sys.stdout)
    print(child.pid, flush=True)
    time.sleep(120)
""").replace("PARENT_ENV", PARENT_PID_ENV)


def test_engine_dies_with_a_sigkilled_parent() -> None:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _CHILD], cwd=repo,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": repo})
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "ready"
    child = psutil.Process(child_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the child outlived its parent"
        time.sleep(0.05)

