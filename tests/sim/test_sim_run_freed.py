"""A simulated run leaves nothing alive: its cluster (engines, caches, router core) and its
front are freed once it returns, so a tournament's hundreds of runs in one process do not grow
it by a cluster each (two cycles did: the front's, through Rust, which the collector cannot
see into, and a per-directory engine listing whose weak key its own value kept alive)."""
from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

import switchyard_bench.simulate.run as sim_run
from pyrouter.engines.usable_engines import engines_by_num, usable_of_role
from switchyard_bench.simulate.run import SimConfig, simulate
from switchyard_bench.workloads import WorkItem
from switchyard_sim.cluster import SimCluster
from switchyard_sim.fake.front_run import FrontHarness
from switchyard_sim.profile import HardwareProfile


def _collect() -> None:
    # Twice: what the first collection frees (a Rust object's references) can let more go.
    gc.collect()
    gc.collect()


@pytest.mark.parametrize("policy", ["round_robin", "pd", "adaptive"])
def test_a_run_frees_its_cluster_and_front(tiny: HardwareProfile, policy: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[weakref.ref[Any]] = []

    class Cluster(SimCluster):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    class Harness(FrontHarness):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    monkeypatch.setattr(sim_run, "SimCluster", Cluster)
    monkeypatch.setattr(sim_run, "FrontHarness", Harness)
    items = [WorkItem(0.01 * i, [(7 * i + k) % 500 + 1 for k in range(80)], 6)
             for i in range(12)]
    run = simulate(SimConfig(tiny, engines=2, roles=["any", "any"]), policy, items)
    assert len(run.records) == 12 and all(r.ok for r in run.records)
    _collect()
    assert len(made) == 2
    assert [ref() for ref in made] == [None, None]


def test_an_engine_listing_dies_with_its_directory(tiny: HardwareProfile) -> None:
    # A simulated engine's client calls back into its cluster: the listing's handles reach it.
    cluster = SimCluster(tiny, ["any", "prefill"])
    assert usable_of_role(cluster, "any")
    assert sorted(engines_by_num(cluster)) == [0, 1]
    gone = weakref.ref(cluster)
    del cluster
    _collect()
    assert gone() is None
