"""A router replica as serve's supervisor keeps it: a `switchyard router` process in a session of
its own on --port + index, told how often it was restarted (pyrouter/replicas/restarts.py), and
`wait_listening`, which waits until every replica answers on its port."""
from __future__ import annotations

import asyncio
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.server.launcher import REPO
from pyrouter.replicas.restarts import restarts_env
from pyrouter.supervisor.child import Child
from pyrouter.supervisor.process import ChildProcess, Spawned
from pyrouter.supervisor.state import ROUTER

_ANY_ADDRESS = ("0.0.0.0", "::", "")
_POLL_S = 0.2
# No proxy: the replica is on this machine, whatever HTTP_PROXY says.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(eq=False)
class RouterChild(Child):
    index: int = field(kw_only=True)
    argv: list[str] = field(kw_only=True)

    kind = ROUTER
    backoff_max_s = 30.0
    stable_s = 60.0

    @property
    def label(self) -> str:
        return f"router replica {self.index}"

    def spawn(self) -> ChildProcess:
        # Appended: a log that says why an earlier run died is kept.
        with open(self.log_path, "ab") as log:
            popen = subprocess.Popen(self.argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ,
                                          **restarts_env(self.index, self.restarts_total)},
                                     start_new_session=True)
        return Spawned(popen)


def _answers(url: str) -> bool:
    """Whether an HTTP server answers at `url` (any status: with API keys on, /health may say
    401, which still means the router is up)."""
    try:
        with _DIRECT.open(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


async def wait_listening(routers: Sequence[RouterChild], host: str, stop: asyncio.Event,
                         timeout_s: float) -> bool:
    """True once every replica answers on its port (or was killed: the keeper restarts it);
    False if `stop` is set first. RuntimeError (with the replica's log) when one exits by itself
    first, or the timeout passes: a replica that cannot start (a port in use, a bad flag) fails
    serve rather than being restarted over and over."""
    address = "127.0.0.1" if host in _ANY_ADDRESS else host
    if ":" in address:
        address = f"[{address}]"  # an IPv6 literal in a URL
    deadline = time.monotonic() + timeout_s
    pending = list(routers)
    while pending:
        if stop.is_set():
            return False
        for router in list(pending):
            if not router.alive():
                if router.process is not None and router.process.failed_by_itself():
                    raise RuntimeError(f"{router.label} {router.exit_text()}:\n"
                                       f"{router.log_tail()}")
                pending.remove(router)  # a signal killed it: the keeper restarts it
            elif await asyncio.to_thread(_answers, f"http://{address}:{router.port}/health"):
                pending.remove(router)
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"{pending[0].label} not answering on port {pending[0].port} "
                               f"after {timeout_s:.0f} s:\n{pending[0].log_tail()}")
        if pending:
            await asyncio.sleep(_POLL_S)
    return True
