"""`switchyard bench` works from an installed wheel, outside the checkout.

The wheel holds exactly the packages pyproject's [tool.maturin] python-packages lists (every file
in them, data included) plus router_core; this test lays those out in a temporary site folder the
same way — with the extension already built by `make install` instead of compiling it again — and
runs `switchyard bench serve|simulate|tournament|engine --help` and the workload-data lookup
there, with the checkout off the import path. A package or data file the wheel would leave out,
or a path that climbs back into the checkout (`../loadtest/...`), fails here.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ["sonnet.txt", "azure_llm_2023_code.csv", "mooncake_conversation_trace.jsonl"]

pytestmark = pytest.mark.procs


def _wheel_packages() -> list[str]:
    maturin = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["maturin"]
    return [*maturin["python-packages"], maturin["module-name"].split(".")[0]]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("installed") / "site-packages"
    for package in _wheel_packages():
        shutil.copytree(ROOT / package, folder / package,
                        ignore=shutil.ignore_patterns("__pycache__", "src", "target", "*.rs"))
    return folder


def _run(site: Path, code: str) -> str:
    """Run `code` against the laid-out packages and check that every module of ours it loaded
    came from them, not from the checkout (the editable install keeps it on sys.path too)."""
    check = (f"\nimport sys\nours = {tuple(_wheel_packages())!r}\n"
             "stray = [m.__file__ for n, m in list(sys.modules.items()) if n.split('.')[0] in ours"
             f" and getattr(m, '__file__', None) and not m.__file__.startswith({str(site)!r})]\n"
             "assert not stray, stray\n")
    env = {**os.environ, "PYTHONPATH": str(site)}  # first on the path: shadows the checkout
    return subprocess.run([sys.executable, "-c", code + check], cwd=site.parent, env=env,
                          text=True, capture_output=True, check=True, timeout=300).stdout


def test_the_wheel_ships_switchyard_bench():
    assert "switchyard_bench" in _wheel_packages()


@pytest.mark.parametrize("what", ["serve", "simulate", "tournament", "engine"])
def test_switchyard_bench_runs_outside_the_checkout(site: Path, what: str) -> None:
    code = ("import contextlib\nfrom pyrouter.cli import main\n"
            f"with contextlib.suppress(SystemExit): main(['bench', {what!r}, '--help'])")
    assert "usage:" in _run(site, code)


def test_workload_data_is_found_inside_the_installed_package(site: Path) -> None:
    code = ("import switchyard_bench.workloads.data_files as d\n"
            f"for name in {DATA!r}: print(d.data_path(name))")
    paths = [Path(p) for p in _run(site, code).split()]
    assert len(paths) == len(DATA)
    assert all(p.is_file() and p.is_relative_to(site) for p in paths), paths
