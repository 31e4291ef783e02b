"""`switchyard serve --cpu-affinity`: each engine pinned to its own cores. The engines `serve`
would start (its own specs, mock engines: the pinning happens before the model matters) are
launched and their kernel masks read back from /proc: disjoint with it on, the parent's whole
mask with it off."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from engine.server.cpu_affinity import parse_cpus, split_cores, usable_cores
from engine.server.launcher import start_engines, stop_engines
from pyrouter.serve import engine_cores, engine_specs

pytestmark = pytest.mark.procs


def _args(affinity: str) -> argparse.Namespace:
    return argparse.Namespace(cpu_affinity=affinity, mock_engines=True, model=None,
                              device="cpu", mode=None, dtype=None, kv_memory=None,
                              num_pages=None, page_size=16, chunk_size=None,
                              latency_profile=None)


def _masks(pid: int) -> list[set[int]]:
    """Every thread's Cpus_allowed_list (the process's and each of its threads')."""
    masks = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    masks.append(parse_cpus(line.split(":", 1)[1]))
    return masks


def test_cores_split_into_disjoint_contiguous_groups() -> None:
    assert split_cores([0, 1], 2) == [[0], [1]]
    assert split_cores([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert split_cores([2, 3, 6, 7], 4) == [[2], [3], [6], [7]]
    assert split_cores([0, 1], 3) is None
    assert parse_cpus("0-2,5") == {0, 1, 2, 5} and parse_cpus("3\n") == {3}


def test_auto_is_off_with_fewer_cores_than_engines_and_on_refuses() -> None:
    many = len(usable_cores()) + 1
    assert engine_cores(_args("auto"), many) is None
    assert engine_cores(_args("off"), 1) is None
    with pytest.raises(ValueError, match="each engine needs at least one"):
        engine_cores(_args("on"), many)


@pytest.mark.slow
@pytest.mark.parametrize("affinity", ["auto", "off"])
def test_engines_masks_are_disjoint_when_pinned_and_whole_when_not(affinity: str,
                                                                   tmp_path: Path) -> None:
    args = _args(affinity)
    cores = engine_cores(args, 2)
    specs = engine_specs(args, ["any", "any"], cores)
    engines = start_engines(specs, tmp_path)
    try:
        masks = [_masks(e.proc.pid) for e in engines]
    finally:
        stop_engines(engines)
    if affinity == "off" or len(usable_cores()) < 2:  # auto with one core: nothing to split
        assert cores is None and all(s.cpus is None for s in specs)
        for engine_masks in masks:
            assert all(m == set(usable_cores()) for m in engine_masks)
        return
    assert cores is not None
    first, second = set(cores[0]), set(cores[1])
    assert first and second and not first & second
    assert all(m == first for m in masks[0]) and all(m == second for m in masks[1])
    assert [s.threads for s in specs] == [len(first), len(second)] or \
        os.environ.get("SWITCHYARD_TORCH_THREADS")
