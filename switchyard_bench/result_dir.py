"""Where a bench run (serve, simulate, tournament) writes its results."""
from __future__ import annotations

import datetime
import os


def make_result_dir(chosen: str | None, bench: str) -> str:
    """The run's --result-dir, made if it is missing; by default bench_results/BENCH-<local time>,
    a new one per run."""
    path = chosen or os.path.join(
        "bench_results", datetime.datetime.now().strftime(f"{bench}-%Y%m%d-%H%M%S"))
    os.makedirs(path, exist_ok=True)
    return path
