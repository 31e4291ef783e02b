"""`switchyard serve`'s EngineKeeper (pyrouter/serve.py) without processes: each dead engine waits
out its own backoff, and one engine's long backoff never delays another's restart (the soak saw
a prefill engine stay down for 36 s while the keeper slept through the decode engine's 60 s)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.server.launcher import EngineSpec
from pyrouter import serve


@dataclass
class _Proc:
    returncode: int | None = None


@dataclass
class _Engine:
    name: str
    port: int
    proc: _Proc = field(default_factory=_Proc)
    metrics_port: int | None = None

    def alive(self) -> bool:
        return self.proc.returncode is None


async def _stop_once_relaunched(keeper: serve.EngineKeeper, task: asyncio.Task[None],
                                launched: Sequence[object]) -> None:
    start = time.monotonic()
    while not launched:
        assert time.monotonic() - start < 10, "engine-0 was not restarted"
        await asyncio.sleep(0.01)
    keeper.stop()
    await task


def test_one_engines_backoff_does_not_hold_up_another(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    launched: list[tuple[str, float]] = []

    def fake_launch(spec: EngineSpec, log_dir: Path, die_with_parent: bool = False) -> _Engine:
        assert die_with_parent
        launched.append((spec.name, time.monotonic()))
        return _Engine(spec.name, spec.port)

    monkeypatch.setattr(serve, "launch", fake_launch)
    monkeypatch.setattr(serve, "_WATCH_S", 0.01)
    engines = [_Engine("engine-0", 1), _Engine("engine-1", 2)]
    specs = [EngineSpec(e.name, role="any", port=e.port) for e in engines]
    keeper = serve.EngineKeeper(engines, specs, tmp_path, max_restarts=10)  # type: ignore[arg-type]
    keeper.restarts["engine-1"] = 6  # engine-1 has crashed often: its next backoff is 60 s

    async def scenario() -> None:
        task = asyncio.create_task(keeper.run())
        engines[1].proc.returncode = -9
        await asyncio.sleep(0.1)
        engines[0].proc.returncode = -9  # dies while engine-1 waits out its backoff
        await _stop_once_relaunched(keeper, task, launched)

    asyncio.run(scenario())
    assert [name for name, _ in launched] == ["engine-0"]  # engine-1 still waits
    assert keeper.restarts == {"engine-0": 1, "engine-1": 7}


def test_a_restarted_engine_keeps_its_metrics_port(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 24: a restart picked a new free metrics port, unlogged: Prometheus lost the engine.
    launched: list[EngineSpec] = []

    def fake_launch(spec: EngineSpec, log_dir: Path, die_with_parent: bool = False) -> _Engine:
        launched.append(spec)
        return _Engine(spec.name, spec.port, metrics_port=spec.metrics_port or 55555)

    monkeypatch.setattr(serve, "launch", fake_launch)
    monkeypatch.setattr(serve, "_WATCH_S", 0.01)
    monkeypatch.setattr(serve, "_BACKOFF_START_S", 0.01)
    engines = [_Engine("engine-0", 7001, metrics_port=9101)]
    specs = [EngineSpec("engine-0", role="any", port=7001, metrics_port=0)]
    keeper = serve.EngineKeeper(engines, specs, tmp_path, max_restarts=3)  # type: ignore[arg-type]

    async def scenario() -> None:
        task = asyncio.create_task(keeper.run())
        engines[0].proc.returncode = -9
        await _stop_once_relaunched(keeper, task, launched)

    asyncio.run(scenario())
    assert [(s.port, s.metrics_port) for s in launched] == [(7001, 9101)]
    assert "engine engine-0 restarted on port 7001, metrics on port 9101" in capsys.readouterr().out
