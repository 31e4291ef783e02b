"""loadtest/experiments/sim_capacity.py, the capacity validate_grid.sh runs its loads against: a
search that reaches its limit (the requests are a burst the engines absorb) is an error, not a
capacity — a grid run at a multiple of such a bound sent every request at once (2026-12-05)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "loadtest/experiments/sim_capacity.py"
ARGS = ["--profile", "local-smollm2-cpu", "--engines", "2", "--slo-ttft-ms", "2000",
        "--slo-tpot-ms", "200", "--workload", "sonnet", "--input-mean", "55", "--input-std", "15",
        "--output-mean", "15", "--output-std", "8"]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sim_capacity", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(monkeypatch: pytest.MonkeyPatch, prompts: int) -> int:
    monkeypatch.setattr(sys, "argv", ["sim_capacity.py", *ARGS, "--num-prompts", str(prompts)])
    return int(_script().main())


def test_a_burst_has_no_capacity(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(monkeypatch, 4) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no capacity" in err and "raise --num-prompts" in err


def test_a_steady_load_has_one(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(monkeypatch, 200) == 0
    rate = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 < rate < 1000
