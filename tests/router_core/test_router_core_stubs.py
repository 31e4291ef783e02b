"""The hand-written router_core/__init__.pyi matches the native module (mypy.stubtest)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.procs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_stub_matches_runtime(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "router_core",
         "--mypy-config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
        env={"MYPY_CACHE_DIR": str(tmp_path / "mypy_cache"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
