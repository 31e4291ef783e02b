"""`switchyard bench` works from an installed wheel, outside the checkout.

The wheel holds the packages pyproject's [tool.maturin] python-packages lists plus router_core:
their files git does not ignore (data included) and the ignored ones an `include` names (the
generated stubs, built extensions). This test lays those files out in a temporary site folder —
with the extension `make install` built instead of compiling it again — and runs `switchyard
bench serve|simulate|tournament|engine --help` and the workload-data lookup there, checking that
every module of ours they load comes from that folder. A package or data file the wheel would
leave out, or a path that climbs back into the checkout (`../loadtest/...`), fails here.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ["sonnet.txt", "azure_llm_2023_code.csv", "mooncake_conversation_trace.jsonl"]

pytestmark = pytest.mark.procs


def _maturin() -> dict[str, Any]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return pyproject["tool"]["maturin"]


def _wheel_packages() -> list[str]:
    return [*_maturin()["python-packages"], _maturin()["module-name"].split(".")[0]]


def _wheel_files() -> list[str]:
    """The files maturin takes from those packages: what git does not ignore, plus the ignored
    ones an `include` pattern names, less what an `exclude` pattern names."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "--", *_wheel_packages()], cwd=ROOT, text=True,
                            capture_output=True, check=True).stdout.split()
    included = [str(p.relative_to(ROOT)) for entry in _maturin().get("include", [])
                for p in ROOT.glob(entry["path"])]
    excluded = _maturin().get("exclude", [])
    return sorted({name for name in [*listed, *included] if (ROOT / name).is_file()
                   and not any(fnmatch.fnmatch(name, pattern) for pattern in excluded)})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("installed") / "site-packages"
    for name in _wheel_files():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)
    for built in (ROOT / "router_core").glob("_router_core*.so"):  # what maturin compiles
        shutil.copy2(built, folder / "router_core" / built.name)
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


def test_the_wheel_ships_switchyard_bench_and_its_data():
    files = _wheel_files()
    assert "switchyard_bench/workloads/data_files.py" in files
    assert all(f"switchyard_bench/data/{name}" in files for name in DATA)


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
