"""One policy across router replicas (issue 25, deliver 4 and the rejoin of deliver 6).

Real processes: two `switchyard router` replicas over the same two mock engines, each the
other's --peer, as `serve --routers 2` starts them. An admin change on one reaches the other
(a policy switch, a session-affinity setting, an engine drained and added back); a replica
started later catches up from its peers before it serves, and by its periodic reads after; and `serve --routers 2` restarts a replica
SIGKILLed, which then serves with the policy set while it was down.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests
from router_procs import (
    Proc,
    ServeProc,
    free_port,
    mock_engines,
    start_router,
    start_serve,
    wait_ready,
    wait_until,
)

from engine.server.launcher import EngineProcess

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]
DEADLINE_S = 20.0  # generous: the change is pushed at once; this only bounds a broken test


def _get(base: str, path: str) -> dict:
    r = requests.get(f"{base}{path}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _addresses(base: str) -> list[str]:
    return sorted(e["address"] for e in _get(base, "/admin/engines")["engines"])


@pytest.fixture
def engines() -> Iterator[list[EngineProcess]]:
    with mock_engines(2) as procs:
        yield procs


def _peered_routers(engines: list[EngineProcess], count: int,
                    *flags: str) -> tuple[list[Proc], list[str]]:
    ports = [free_port() for _ in range(count)]
    procs: list[Proc] = []
    try:
        for port in ports:
            peers = [a for p in ports if p != port for a in ("--peer", f"127.0.0.1:{p}")]
            procs.append(start_router(port, [e.port for e in engines], *peers, *flags))
        bases = [f"http://127.0.0.1:{p}" for p in ports]
        for base, proc in zip(bases, procs, strict=True):
            wait_ready(base, proc, want_engines=2)
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    return procs, bases


def test_an_admin_change_on_one_replica_reaches_the_other(
        engines: list[EngineProcess]) -> None:
    procs, (a, b) = _peered_routers(engines, 2, "--policy", "round_robin")
    late: Proc | None = None
    try:
        r = requests.put(f"{b}/admin/policy", timeout=10,
                         json={"policy": "cache_aware", "params": {"queue_weight": 2.0}})
        assert r.status_code == 200, r.text
        assert r.headers["X-Switchyard-Propagated"] == "1/1"
        wait_until(lambda: _get(a, "/admin/policy")["policy"] == "cache_aware", DEADLINE_S,
                   "replica A to take B's policy")
        assert _get(a, "/admin/policy")["params"] == _get(b, "/admin/policy")["params"]
        route = requests.post(f"{a}/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                              timeout=30).headers["X-Switchyard-Route"]
        assert "cache_aware" in route, route  # "cache_aware ..." or "dp ... via=cache_aware"

        r = requests.put(f"{a}/admin/session-affinity", json={"load_bound": 3.0}, timeout=10)
        assert r.status_code == 200 and r.headers["X-Switchyard-Propagated"] == "1/1"
        wait_until(lambda: _get(b, "/admin/session-affinity")["load_bound"] == 3.0, DEADLINE_S,
                   "replica B to take A's session-affinity setting")

        # An engine drained and removed through B leaves A too (named by address, not id).
        gone = engines[1].address
        engine_id = next(e["id"] for e in _get(b, "/admin/engines")["engines"]
                         if e["address"] == gone)
        r = requests.delete(f"{b}/admin/engines/{engine_id}", timeout=30)
        assert r.status_code == 200 and r.headers["X-Switchyard-Propagated"] == "1/1", r.text
        wait_until(lambda: gone not in _addresses(a), DEADLINE_S, "replica A to drop the engine")
        assert _addresses(a) == _addresses(b) == [engines[0].address]

        # A replica that starts later (or again) catches up from its peers before it serves.
        port = free_port()
        late = start_router(port, [e.port for e in engines], "--peer", a.removeprefix("http://"),
                            "--peer", b.removeprefix("http://"))
        wait_ready(f"http://127.0.0.1:{port}", late, want_engines=1)
        joined = _get(f"http://127.0.0.1:{port}", "/admin/policy")
        assert (joined["policy"], joined["params"]["queue_weight"]) == ("cache_aware", 2.0)
        assert _addresses(f"http://127.0.0.1:{port}") == [engines[0].address]
        assert _get(f"http://127.0.0.1:{port}", "/admin/session-affinity")["load_bound"] == 3.0
        # Added back through A: B takes it from A's push; the late replica, which A does not
        # know as a peer, from its next read of A's or B's changes (--peer-sync-s).
        r = requests.post(f"{a}/admin/engines", json={"address": gone}, timeout=60)
        assert r.status_code == 201 and r.headers["X-Switchyard-Propagated"] == "1/1", r.text
        for base in (b, f"http://127.0.0.1:{port}"):
            wait_until(lambda base=base: gone in _addresses(base), DEADLINE_S,
                       f"{base} to take the engine A added")
        # The newest change wins everywhere, whichever replica makes it.
        requests.put(f"{a}/admin/policy", json={"policy": "least_load"}, timeout=10)
        for base in (b, f"http://127.0.0.1:{port}"):
            wait_until(lambda base=base: _get(base, "/admin/policy")["policy"] == "least_load",
                       DEADLINE_S, f"{base} to take A's newer policy")
    finally:
        for proc in [*procs, *([late] if late else [])]:
            proc.stop()


def _replica_log(serve: ServeProc) -> str:
    """Replica 1's log in serve's log directory (what a failure shows)."""
    found = re.search(r"logs in (\S+)", serve.output())
    path = Path(found.group(1)) / "router-1.log" if found else None
    return path.read_text(errors="replace")[-4000:] if path and path.exists() else "(no log)"


def test_serve_restarts_a_killed_replica_which_rejoins_with_the_current_policy() -> None:
    proc, base = start_serve("--mock-engines", "--engines", "2", "--routers", "2")
    port = int(base.rsplit(":", 1)[1])
    second = f"http://127.0.0.1:{port + 1}"
    try:
        for url in (base, second):
            wait_ready(url, proc, want_engines=2, timeout_s=120)
        proc.wait_serving()
        replica = next(c for c in psutil.Process(proc.popen.pid).children(recursive=True)
                       if "pyrouter.cli" in c.cmdline() and str(port + 1) in c.cmdline())
        replica.kill()
        wait_until(lambda: f"router replica 1 on port {port + 1} exited with code -9; "
                   "restarting in 1 s" in proc.output(), 30, "serve to schedule the restart")
        # Set while the replica is down (or starting): it must learn it from replica 0.
        r = requests.put(f"{base}/admin/policy", json={"policy": "least_load"}, timeout=10)
        assert r.status_code == 200, r.text
        try:
            wait_until(lambda: f"router replica 1 restarted on port {port + 1}"
                       in proc.output(), 60, "serve to restart the replica")
            wait_ready(second, proc, want_engines=2, timeout_s=120)
        except (AssertionError, TimeoutError) as exc:
            raise AssertionError(f"{exc}\nserve:\n{proc.output()[-3000:]}\nreplica 1:\n"
                                 f"{_replica_log(proc)}") from None
        assert _get(second, "/admin/policy")["policy"] == "least_load"
        r = requests.post(f"{second}/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                          timeout=30)
        assert r.status_code == 200 and "via=least_load" in r.headers["X-Switchyard-Route"]
        assert replica.pid not in {c.pid for c in psutil.Process(proc.popen.pid).children(True)}
        # Each replica counts its own restarts (serve's supervisor has no port to say them on).
        metrics = requests.get(f"{second}/metrics", timeout=10).text
        assert 'switchyard:router_replica_restarts_total{replica="1"} 1.0' in metrics
        assert 'switchyard:router_replica_restarts_total{replica="0"} 0.0' in requests.get(
            f"{base}/metrics", timeout=10).text
    finally:
        proc.stop()
