"""`switchyard serve` without a single point of failure (issue 49), over mock engines (what is
killed here is a process; the engines' own bookkeeping across a kill is
test_serve_replica_kill_real.py's). serve's supervisor serves nothing itself, so:

- replica 0 (the process on --port, which used to be serve itself) SIGKILLed costs only its own
  work: a stream on replica 1 runs on across the kill, the engines are untouched, and replica 0
  comes back on its port with the policy set on replica 1 while it was down;
- the supervisor SIGKILLed costs nothing until it is started again: every child keeps serving;
  a new serve with the same arguments adopts them (the same pids, one engine per port), watches
  them (an adopted engine killed is restarted on its port) and stops them all on SIGTERM;
- a new serve with other arguments stops what the killed one left before it starts its own;
- a second serve on an address a live one holds is refused and disturbs nothing, and a replica
  that cannot start (its port taken) stops serve with its log's reason, leaving nothing running;
- SIGTERM: the routers drain (a stream in flight finishes whole) while every engine still
  serves, then the engines stop, then serve exits 0.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections import Counter

import psutil
import pytest
import requests
from router_procs import ServeProc, free_port, start_serve, wait_ready, wait_until
from streams import Stream

from pyrouter.supervisor.process import Adopted
from pyrouter.supervisor.state import ENGINE, ChildRecord
from switchyard_engine_api.auth import TOKEN_FILE_ENV
from switchyard_engine_api.client import EngineClient

pytestmark = [pytest.mark.procs, pytest.mark.timeout(300)]
SLOW = {"SWITCHYARD_MOCK_CHUNK_DELAY_MS": "40"}  # a token per 40 ms: a stream outlives a kill
LONG = 150  # tokens: about 6 s


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def _serve(engines: int, routers: int, *flags: str,
           port: int | None = None) -> tuple[ServeProc, int]:
    """serve over mock engines, once it says it serves and every replica is ready."""
    proc, base = start_serve("--mock-engines", "--engines", str(engines), "--routers",
                             str(routers), *flags, env=SLOW, port=port)
    port = int(base.rsplit(":", 1)[1])
    try:
        proc.wait_serving()
        for index in range(routers):
            wait_ready(_url(port + index), proc, want_engines=engines, timeout_s=120)
    except BaseException:
        proc.stop()
        raise
    return proc, port


def _records(proc: ServeProc) -> tuple[ChildRecord, ...]:
    state = proc.state()
    assert state is not None, proc.output()
    return state.children


def _complete(port: int) -> requests.Response:
    r = requests.post(f"{_url(port)}/v1/completions", timeout=60,
                      json={"prompt": "hi", "max_tokens": 2})
    assert r.status_code == 200, r.text
    return r


def _engines_per_port() -> Counter[int]:
    """How many engine processes listen on each port (by their command lines)."""
    ports: Counter[int] = Counter()
    for process in psutil.process_iter(["cmdline"]):
        argv = process.info["cmdline"] or []
        if "engine.server.main" in argv and "--port" in argv:
            ports[int(argv[argv.index("--port") + 1])] += 1
    return ports


def _one_engine_each(records: tuple[ChildRecord, ...]) -> None:
    counts = _engines_per_port()
    assert all(counts[r.port] == 1 for r in records if r.kind == ENGINE), counts


def _all_gone(records: tuple[ChildRecord, ...]) -> None:
    wait_until(lambda: all(Adopted.find(r.pid, r.started_at) is None for r in records), 60,
               "every child to exit")


def _wait_output(proc: ServeProc, text: str) -> None:
    wait_until(lambda: text in proc.output(), 60, f"serve to say {text!r}")


def test_replica_0_sigkilled_costs_only_its_own_work() -> None:
    proc, port = _serve(2, 2)
    try:
        before = proc.pids()
        stream = Stream(_url(port + 1), LONG).start()
        assert stream.started.wait(60)
        assert not stream.ended.is_set()  # in flight on replica 1 when replica 0 dies
        os.kill(before["router-0"], signal.SIGKILL)
        _wait_output(proc, f"router replica 0 on port {port} exited with code -9; restarting")
        # Set while replica 0 is down (or starting): it must take it from its peer.
        r = requests.put(f"{_url(port + 1)}/admin/policy", json={"policy": "least_load"},
                         timeout=10)
        assert r.status_code == 200, r.text
        assert stream.ended.wait(60) and stream.whole, (stream.tokens, stream.error)
        _wait_output(proc, f"router replica 0 restarted on port {port}")
        wait_ready(_url(port), proc, want_engines=2)
        policy = requests.get(f"{_url(port)}/admin/policy", timeout=10).json()["policy"]
        assert policy == "least_load"
        assert "via=least_load" in _complete(port).headers["X-Switchyard-Route"]
        after = proc.pids()
        assert after["router-0"] != before["router-0"]
        assert {k: v for k, v in after.items() if k != "router-0"} == \
            {k: v for k, v in before.items() if k != "router-0"}  # nothing else restarted
        assert proc.popen.poll() is None
    finally:
        proc.stop()


def test_a_sigkilled_supervisor_leaves_its_children_serving_and_a_new_one_adopts_them() -> None:
    first, port = _serve(2, 2)
    second: ServeProc | None = None
    try:
        records = _records(first)
        stream = Stream(_url(port), LONG).start()
        assert stream.started.wait(60) and not stream.ended.is_set()
        first.popen.kill()
        first.popen.wait()
        assert stream.ended.wait(60) and stream.whole, (stream.tokens, stream.error)
        assert all(Adopted.find(r.pid, r.started_at) for r in records)  # none died with it
        for replica_port in (port, port + 1):
            _complete(replica_port)

        second, _ = _serve(2, 2, port=port)  # the same arguments
        for record in records:
            assert f"adopted: pid {record.pid} on port {record.port}" in second.output()
        assert second.pids() == first.pids() == {r.name: r.pid for r in records}
        _one_engine_each(records)
        # The new supervisor watches what it adopted.
        victim = next(r for r in records if r.name == "engine-1")
        os.kill(victim.pid, signal.SIGKILL)
        _wait_output(second, f"engine engine-1 restarted on port {victim.port}")
        for replica_port in (port, port + 1):
            wait_ready(_url(replica_port), second, want_engines=2)
            _complete(replica_port)
        _one_engine_each(records)

        restarted = _records(second)
        second.popen.send_signal(signal.SIGTERM)
        assert second.popen.wait(timeout=90) == 0
        _all_gone(records + restarted)
        assert second.state() is None  # nothing left for a later serve to adopt
    finally:
        for proc in (second, first):
            if proc is not None:
                proc.stop()


def test_a_new_serve_with_other_arguments_stops_what_the_killed_one_left_first() -> None:
    first, port = _serve(2, 1)
    second: ServeProc | None = None
    try:
        old = _records(first)
        first.popen.kill()
        first.popen.wait()
        second, _ = _serve(1, 1, "--policy", "least_load", port=port)
        out = second.output()
        said = (f"stopping {len(old)} process(es) that an earlier serve (pid {first.popen.pid}) "
                "started with other arguments")
        assert said in out
        assert out.index(said) < out.index("engine engine-0 (any) ready")
        assert all(Adopted.find(r.pid, r.started_at) is None for r in old)
        new = _records(second)
        assert {r.pid for r in new}.isdisjoint({r.pid for r in old})
        _one_engine_each(new)
        policy = requests.get(f"{_url(port)}/admin/policy", timeout=10).json()["policy"]
        assert policy == "least_load"
    finally:
        for proc in (second, first):
            if proc is not None:
                proc.stop()


def test_a_second_serve_on_a_held_address_is_refused_and_disturbs_nothing() -> None:
    first, port = _serve(1, 1)
    try:
        before = first.pids()
        second, _ = start_serve("--mock-engines", "--engines", "1", env=SLOW, port=port)
        try:
            assert second.popen.wait(timeout=60) == 2
            assert (f"another switchyard serve (pid {first.popen.pid}) supervises this address"
                    in second.output())
        finally:
            second.stop()
        assert first.pids() == before
        _complete(port)
        assert first.popen.poll() is None
    finally:
        first.stop()


async def _serving(port: int) -> bool:
    async with EngineClient(f"127.0.0.1:{port}") as client:
        return await client.healthy(timeout_s=5.0)


def test_sigterm_drains_the_routers_while_the_engines_serve_then_stops_the_engines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    proc, port = _serve(2, 1)
    try:
        monkeypatch.setenv(TOKEN_FILE_ENV, str(proc.run_dir.token_path))
        records = _records(proc)
        stream = Stream(_url(port), LONG).start()
        assert stream.started.wait(60)
        proc.popen.send_signal(signal.SIGTERM)
        wait_until(lambda: requests.get(f"{_url(port)}/ready", timeout=5).status_code == 503,
                   30, "the router to drain")
        assert not stream.ended.is_set()  # still draining...
        # ...while no engine has been told to stop (SIGTERM turns an engine's health off).
        assert all(asyncio.run(_serving(r.port)) for r in records if r.kind == ENGINE)
        assert stream.ended.wait(60) and stream.whole, (stream.tokens, stream.error)
        assert proc.popen.wait(timeout=90) == 0
        out = proc.output()
        assert out.index("stopping router replicas") < out.index("stopping engines")
        _all_gone(records)
        assert proc.state() is None
    finally:
        proc.stop()


def test_a_replica_that_cannot_start_stops_serve_with_its_reason_and_leaves_nothing() -> None:
    port = free_port(count=2)
    with socket.socket() as taken:  # replica 1's port, held by someone else
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        proc, _ = start_serve("--mock-engines", "--engines", "1", "--routers", "2", port=port)
        try:
            assert proc.popen.wait(timeout=120) == 1
            out = proc.output()
            assert "switchyard serve: router replica 1 exited with code 1" in out
            assert f"cannot bind 127.0.0.1:{port + 1}" in out  # its log's tail says why
            assert out.index("stopping router replicas") < out.index("all engines stopped")
            assert proc.state() is None  # every child it had started was stopped
        finally:
            proc.stop()
