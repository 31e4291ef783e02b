"""`switchyard serve --routers 2`: two router processes over the same engines, on --port and
--port+1, each answering and with its own /metrics; SIGTERM stops every process; a policy file
reaches every replica; a replica that dies is reported and the other keeps serving. (What a
killed supervisor leaves: test_serve_supervisor.py.)"""
from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest
import requests
from router_procs import ServeProc, start_serve, wait_ready, wait_until

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]


def _routers(children: list[psutil.Process]) -> dict[int, psutil.Process]:
    """serve's router replicas, by the port each listens on."""
    found = {}
    for child in children:
        argv = child.cmdline()
        if "router" in argv and "pyrouter.cli" in argv:
            found[int(argv[argv.index("--port") + 1])] = child
    return found


def _serve_two_routers(*flags: str) -> tuple[ServeProc, int]:
    """`serve --mock-engines --engines 2 --routers 2 FLAGS`, once both replicas are ready:
    serve's process and replica 0's port."""
    proc, base = start_serve("--mock-engines", "--engines", "2", "--routers", "2", *flags)
    port = int(base.rsplit(":", 1)[1])
    try:
        for p in (port, port + 1):
            wait_ready(f"http://127.0.0.1:{p}", proc, want_engines=2, timeout_s=120)
        proc.wait_serving()
    except BaseException:
        proc.stop()
        raise
    return proc, port


def _complete(url: str, max_tokens: int) -> requests.Response:
    r = requests.post(f"{url}/v1/completions",
                      json={"prompt": "hi", "max_tokens": max_tokens}, timeout=30)
    assert r.status_code == 200, r.text
    return r


def test_serve_two_routers_over_the_same_engines_then_sigterm_stops_all() -> None:
    proc, port = _serve_two_routers("--policy", "least_load")
    base, second = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    try:
        for url in (base, second):
            assert _complete(url, 3).json()["usage"]["completion_tokens"] == 3
            engines = requests.get(f"{url}/admin/engines", timeout=10).json()["engines"]
            assert sorted(e["address"] for e in engines) == sorted(
                e["address"] for e in requests.get(f"{base}/admin/engines",
                                                   timeout=10).json()["engines"])
            metrics = requests.get(f"{url}/metrics", timeout=10)
            assert metrics.status_code == 200 and "switchyard:" in metrics.text
        children = psutil.Process(proc.popen.pid).children(recursive=True)
        replicas = _routers(children)
        # Every replica is a process of its own, replica 0 too: serve serves nothing itself.
        assert sorted(replicas) == [port, port + 1], [c.cmdline() for c in children]
        for mine, other in ((port, port + 1), (port + 1, port)):
            argv = replicas[mine].cmdline()
            assert argv[argv.index("--peer") + 1] == f"127.0.0.1:{other}"
        assert not [c for c in psutil.Process(proc.popen.pid).net_connections(kind="tcp")
                    if c.status == psutil.CONN_LISTEN]
        assert f"router replica 1 starting on http://127.0.0.1:{port + 1}/v1" in proc.output()
    except BaseException:
        proc.stop()
        raise
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.popen.wait(timeout=90) == 0
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"orphans left: {alive}"
    proc.stop()


FIRST_ENGINE_PY = """from pyrouter import policy


@policy("first_engine_only")
async def route(req, cluster):
    e = cluster.engines()[0]
    req.note_route("mine", engine=e.id)
    return e.start_generate(req)
"""


def test_every_replica_runs_the_policy_file_and_one_dying_leaves_the_other(
        tmp_path: Path) -> None:
    policy_file = tmp_path / "first_engine.py"
    policy_file.write_text(FIRST_ENGINE_PY)
    proc, port = _serve_two_routers("--policy-file", str(policy_file),
                                    "--policy", "first_engine_only")
    try:
        for p in (port, port + 1):
            route = _complete(f"http://127.0.0.1:{p}", 2).headers["X-Switchyard-Route"]
            assert route == "mine engine=e0"
        replica = _routers(psutil.Process(proc.popen.pid).children(recursive=True))[port + 1]
        replica.kill()
        wait_until(lambda: f"router replica 1 on port {port + 1} exited with code -9"
                   in proc.output(), 30, "serve to report the replica's exit")
        _complete(f"http://127.0.0.1:{port}", 2)
        assert proc.popen.poll() is None
    finally:
        proc.stop()
