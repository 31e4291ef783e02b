"""loadtest/experiments/validate.sh, small: two real engines behind `switchyard serve` (which
require its engine token), a calibration sweep, the profile built from the running engines, the
same sweep real and simulated, and the comparison table. It must run end to end and print its
table; how close the simulator comes is the benchmark's business (docs/experiments.md), not this
test's."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from engine.server.launcher import free_port

pytestmark = pytest.mark.procs

REPO = Path(__file__).resolve().parents[2]
POLICIES = ["round_robin", "pd"]
# A table cell: "real / sim (error)", e.g. "812 / 790 (-3%)".
CELL = r"\d+ / \d+ \([+-]\d+%\)"


@pytest.mark.slow
def test_validate_runs_end_to_end_and_prints_its_table(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PORT": str(free_port()),
           "POLICIES": ",".join(POLICIES), "NUM_PROMPTS": "4", "RATES": "2"}
    for name in ("SWITCHYARD_ENGINE_TOKEN", "SWITCHYARD_ENGINE_TOKEN_FILE"):
        env.pop(name, None)  # serve makes its own, as for a user
    # A guard against a hang, not a timing: the run takes about 4 minutes on a 2-core VM.
    done = subprocess.run(["bash", str(REPO / "loadtest/experiments/validate.sh")], env=env,
                          capture_output=True, text=True, timeout=600)
    val = tmp_path / "validate"
    serve_log = (val / "serve.log").read_text() if (val / "serve.log").exists() else ""
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{serve_log}"
    assert "logs in" in serve_log  # where build_local found the token
    assert (val / "profile.json").exists()
    for policy in POLICIES:
        row = re.search(rf"^\| {policy}@2 \| (.*) \| (yes|no) \|$", done.stdout, re.M)
        assert row is not None, done.stdout
        cells = row.group(1).split(" | ")
        assert len(cells) == 4 and all(re.fullmatch(CELL, c) for c in cells), cells
    assert re.search(r"^\d of 2 policies within 25% on mean JCT and P90 TTFT$", done.stdout,
                     re.M), done.stdout
