"""Engine drain on SIGTERM (engine/server/drain.py): wait for the work in flight, bounded."""
from __future__ import annotations

import asyncio

import pytest

from engine.server import drain
from engine.server.drain import drain_seconds, wait_idle

pytestmark = pytest.mark.procs


class FakeCore:
    """has_work() / reservations as EngineCore exposes them; work ends after `busy_for` polls."""

    def __init__(self, busy_for: int, reservations: int = 0) -> None:
        self.busy_for = busy_for
        self.reservations = [object()] * reservations

    def has_work(self) -> bool:
        self.busy_for -= 1
        return self.busy_for >= 0


@pytest.fixture(autouse=True)
def short_settle(monkeypatch):
    monkeypatch.setattr(drain, "_SETTLE_S", 0.01)


async def test_waits_until_idle():
    core = FakeCore(busy_for=5)
    assert await wait_idle(core, timeout_s=5, poll_s=0.001)
    assert core.busy_for < 0


async def test_gives_up_at_the_deadline():
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert not await wait_idle(FakeCore(busy_for=10**9), timeout_s=0.2, poll_s=0.01)
    assert 0.2 <= loop.time() - start < 5


async def test_a_held_reservation_is_work():
    assert not await wait_idle(FakeCore(busy_for=0, reservations=1), timeout_s=0.1, poll_s=0.01)


async def test_zero_means_no_wait():
    assert not await wait_idle(FakeCore(busy_for=10**9), timeout_s=0)


@pytest.mark.parametrize("raw, expected", [("", 0.0), ("60", 60.0), (" 2.5 ", 2.5)])
def test_env_values(raw, expected):
    assert drain_seconds({"SWITCHYARD_DRAIN_S": raw}) == expected


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_bad_env_values_are_clear(raw):
    with pytest.raises(SystemExit, match="SWITCHYARD_DRAIN_S"):
        drain_seconds({"SWITCHYARD_DRAIN_S": raw})


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_sigterm_lets_the_stream_in_flight_finish(tmp_path):
    """A real engine (SmolLM2) with SWITCHYARD_DRAIN_S: SIGTERM mid-stream turns health
    NOT_SERVING at once, the generation still streams to its last token, then the process
    exits cleanly."""
    import os
    import signal
    import socket
    import subprocess
    import sys

    from switchyard_engine_api.client import EngineClient, sampling

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "engine.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyrouter.cli", "engine", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "SWITCHYARD_DRAIN_S": "120", "SWITCHYARD_TORCH_THREADS": "1"})
    try:
        async with EngineClient(f"127.0.0.1:{port}") as client:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 240
            while not await client.healthy():
                assert proc.poll() is None and loop.time() < deadline, (
                    tmp_path / "engine.log").read_text()
                await asyncio.sleep(0.5)
            call = client.start_generate("drain-1", list(range(100, 140)),
                                         params=sampling(max_tokens=96, ignore_eos=True))
            tokens: list[int] = []
            finish = ""
            async for chunk in call:
                if not tokens:
                    proc.send_signal(signal.SIGTERM)  # mid-stream: the first chunk has arrived
                tokens.extend(chunk.token_ids)
                finish = chunk.finish_reason or finish
                if len(tokens) > 8:
                    assert not await client.healthy(), "a draining engine must be NOT_SERVING"
        assert (len(tokens), finish) == (96, "length")
        assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
