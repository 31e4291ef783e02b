"""The test tiers hold together: the Makefile's fast tier leaves out every tier marker, pyproject
registers them, and the guard refuses a process or the model's weights to a test without the marker."""
from __future__ import annotations

import contextlib
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.tiers import TIER_MARKERS, TierMarkerMissing, check_fixtures, guard_unmarked

ROOT = Path(__file__).resolve().parents[2]


class _Item:
    """What guard_unmarked reads of a pytest item: its id and markers."""

    def __init__(self, *markers: str) -> None:
        self.nodeid = "tests/example.py::test_example"
        self._markers = set(markers)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self._markers else None


def test_make_test_fast_leaves_out_every_tier_marker():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    expression = re.search(r"^FAST_TIER := (.*)$", makefile, re.M)
    assert expression is not None
    assert set(expression.group(1).split(" and ")) == {f"not {name}" for name in TIER_MARKERS}
    assert '-m "$(FAST_TIER)"' in makefile


def test_pyproject_registers_every_tier_marker():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    registered = {line.split(":")[0] for line in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(TIER_MARKERS) <= registered


def test_unmarked_test_may_not_start_a_process():
    with guard_unmarked(_Item()), pytest.raises(TierMarkerMissing, match="`procs`"):
        subprocess.run(["true"], check=True)


def test_matplotlib_may_ask_fontconfig_for_fonts():
    # matplotlib's first import on a machine runs `fc-list` to build its font cache; a test that
    # plots must pass on a fresh machine without the `procs` marker (absent fontconfig is fine too)
    with guard_unmarked(_Item()), contextlib.suppress(FileNotFoundError):
        subprocess.run(["fc-list", "--help"], capture_output=True, check=False)
    with guard_unmarked(_Item()), pytest.raises(TierMarkerMissing, match="`procs`"):
        subprocess.run(["/bin/fc-list-not-this", "--help"], check=False)


def test_unmarked_test_may_not_load_the_weights(tmp_path: Path):
    from engine.model.loader import load_model

    missing = tmp_path / "not-a-model.gguf"
    missing.write_bytes(b"")
    with guard_unmarked(_Item()), pytest.raises(TierMarkerMissing, match="`model`"):
        load_model(missing)
    with guard_unmarked(_Item()), pytest.raises(TierMarkerMissing, match="`model`"):
        load_model(missing, mode="fast")


def test_a_nested_guard_gives_back_the_outer_one():
    # the outer guard (this test is unmarked) is still in place; a marked inner one lifts nothing
    with guard_unmarked(_Item("procs", "model")):
        with pytest.raises(TierMarkerMissing):
            subprocess.run(["true"], check=True)
    with pytest.raises(TierMarkerMissing, match="test_a_nested_guard_gives_back_the_outer_one"):
        subprocess.run(["true"], check=True)


def test_a_model_fixture_needs_the_marker():
    item = _Item()
    item.fixturenames = ["tmp_path", "hf_smollm2_fp32"]  # type: ignore[attr-defined]
    with pytest.raises(TierMarkerMissing, match="hf_smollm2_fp32"):
        check_fixtures(item)
    marked = _Item("model")
    marked.fixturenames = ["hf_smollm2_fp32"]  # type: ignore[attr-defined]
    check_fixtures(marked)
