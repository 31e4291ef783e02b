"""`switchyard serve`'s Keeper (pyrouter/supervisor/keeper.py) without processes: each dead child
waits out its own backoff (the soak saw a prefill engine stay down for 36 s while the keeper
slept through the decode engine's 60 s), a restarted engine keeps its ports, a child past
--max-restarts is left down, and one that ran stably starts its count afresh."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from engine.server.launcher import EngineSpec
from pyrouter.supervisor import engine_child
from pyrouter.supervisor.engine_child import EngineChild
from pyrouter.supervisor.keeper import Keeper


class _Process:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started_at = float(pid)
        self.returncode: int | None = None

    def running(self) -> bool:
        return self.returncode is None

    def exit_text(self) -> str:
        return f"exited with code {self.returncode}"

    def send(self, sig: signal.Signals) -> None:
        self.returncode = -sig


class _Engine:
    """What engine_child.launch returns, as far as EngineChild reads it."""

    def __init__(self, spec: EngineSpec, pid: int) -> None:
        self.port = spec.port or 7000 + pid
        self.metrics_port = spec.metrics_port or 9000 + pid
        self.proc = _Process(pid)


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[EngineSpec]:
    """Every spec EngineChild launched; each launch gives a new fake process."""
    specs: list[EngineSpec] = []

    def fake_launch(spec: EngineSpec, log_dir: Path, new_session: bool = False) -> _Engine:
        assert new_session  # serve's children get sessions of their own
        specs.append(spec)
        return _Engine(spec, len(specs))

    monkeypatch.setattr(engine_child, "launch", fake_launch)
    monkeypatch.setattr(engine_child, "Spawned", lambda proc: proc)
    return specs


def _engines(tmp_path: Path, *specs: EngineSpec) -> list[EngineChild]:
    children = [EngineChild.of(spec, tmp_path) for spec in specs]
    for child in children:
        child.start()
    return children


def _die(child: EngineChild) -> None:
    assert child.process is not None
    child.process.send(signal.SIGKILL)


def test_one_engines_backoff_does_not_hold_up_another(launched: list[EngineSpec],
                                                       tmp_path: Path) -> None:
    first, second = _engines(tmp_path, EngineSpec("engine-0"), EngineSpec("engine-1"))
    keeper = Keeper([first, second], max_restarts=10, on_start=lambda: None)
    second.restarts = 6  # engine-1 has crashed often: its next backoff is the 60 s maximum
    _die(second)
    keeper.check(now=100.0)
    assert second.restart_due == 160.0
    _die(first)  # dies while engine-1 waits out its backoff
    keeper.check(now=101.0)
    keeper.check(now=102.0)  # engine-0's 1 s is over; engine-1's 60 s is not
    assert [s.name for s in launched[2:]] == ["engine-0"]
    assert first.alive() and not second.alive()
    assert (first.restarts, second.restarts) == (1, 7)


def test_a_restarted_engine_keeps_its_ports(launched: list[EngineSpec], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 24: a restart picked a new free metrics port, unlogged: Prometheus lost the engine.
    (engine,) = _engines(tmp_path, EngineSpec("engine-0", metrics_port=0))
    ports = (engine.port, engine.metrics_port)
    recorded: list[int] = []
    keeper = Keeper([engine], max_restarts=3, on_start=lambda: recorded.append(1))
    _die(engine)
    keeper.check(now=engine.since + 1.0)
    keeper.check(now=engine.since + 3.0)
    assert [(s.port, s.metrics_port) for s in launched] == [(0, 0), ports]
    assert (engine.port, engine.metrics_port) == ports and recorded == [1]
    out = capsys.readouterr().out
    assert (f"engine engine-0 on port {ports[0]} exited with code -9; restarting in 1 s (1/3"
            in out)
    assert (f"engine engine-0 restarted on port {ports[0]}, metrics on port {ports[1]} "
            "(restart 1)") in out


def test_past_max_restarts_a_child_is_left_down_and_a_stable_one_starts_afresh(
        launched: list[EngineSpec], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flaky, stable = _engines(tmp_path, EngineSpec("engine-0"), EngineSpec("engine-1"))
    keeper = Keeper([flaky, stable], max_restarts=2, on_start=lambda: None)
    flaky.restarts = stable.restarts = 2
    now = stable.since + EngineChild.stable_s + 1  # engine-1 ran long enough before it died
    flaky.since = now - 1.0  # engine-0 did not
    _die(flaky)
    _die(stable)
    keeper.check(now)
    assert flaky.given_up and "left down" in capsys.readouterr().out
    assert stable.restarts == 1 and stable.restart_due is not None
    keeper.check(now=stable.restart_due)
    assert stable.alive() and not flaky.alive()
    assert [s.name for s in launched[2:]] == ["engine-1"]
