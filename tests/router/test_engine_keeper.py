"""`switchyard serve`'s EngineKeeper (pyrouter/serve.py) without processes: each dead engine waits
out its own backoff, and one engine's long backoff never delays another's restart (the soak saw
a prefill engine stay down for 36 s while the keeper slept through the decode engine's 60 s)."""
from __future__ import annotations

import asyncio
import time
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

    def alive(self) -> bool:
        return self.proc.returncode is None


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
        start = time.monotonic()
        while not launched:
            assert time.monotonic() - start < 10, "engine-0 was not restarted"
            await asyncio.sleep(0.01)
        keeper.stop()
        await task

    asyncio.run(scenario())
    assert [name for name, _ in launched] == ["engine-0"]  # engine-1 still waits
    assert keeper.restarts == {"engine-0": 1, "engine-1": 7}
