"""The tournament's grid: profiles x workloads x engine counts x loads, each cell's policies
run on the same prompts and arrivals. A load is a multiple of the cell group's capacity
(capacity.py), found once per (profile, workload, engines).

Per built-in profile, the SLO issue 21 measures against and the workloads' sizing; any other
profile (a JSON file) needs --slo and takes the datacenter sizing unless --length-scale says.
"""
from __future__ import annotations

from dataclasses import dataclass

from switchyard_bench.serve.request_body import Slo
from switchyard_bench.tournament.workloads import Sizing

H100 = "h100-llama3.1-70b-fp8-tp4"
LOCAL = "local-smollm2-cpu"
PROFILES = (H100, LOCAL)
LOADS = (0.3, 0.6, 0.9, 1.2, 1.5, 2.0)
ENGINES = (2, 4, 8)


@dataclass(frozen=True, slots=True)
class ProfileSetting:
    slo: Slo | None
    sizing: Sizing


DEFAULT_SETTINGS = {
    H100: ProfileSetting(Slo(1000.0, 50.0), Sizing()),
    # Prompts / 10 (Mooncake's / 50), trace outputs kept; SLO as issue 21's real-engine runs.
    LOCAL: ProfileSetting(Slo(2000.0, 200.0), Sizing(0.1, 1.0, 0.02)),
}


@dataclass(frozen=True, slots=True, order=True)
class Group:
    """Cells sharing a capacity: one profile, workload and engine count."""

    profile: str
    workload: str
    engines: int

    @property
    def label(self) -> str:
        return f"{short_profile(self.profile)} {self.workload} x{self.engines}"


@dataclass(frozen=True, slots=True, order=True)
class Cell:
    group: Group
    load: float  # multiple of the group's capacity

    @property
    def label(self) -> str:
        return f"{self.group.label} @{self.load:g}"


def short_profile(name: str) -> str:
    """A profile's name as a table shows it: the built-ins by their hardware."""
    return {H100: "h100", LOCAL: "local"}.get(name, name.rsplit("/", 1)[-1].removesuffix(".json"))


def grid(profiles: list[str], workloads: list[str], engines: list[int],
         loads: list[float]) -> list[Cell]:
    """Every cell, in the order the report lists them."""
    return [Cell(Group(p, w, e), load) for p in profiles for w in workloads for e in engines
            for load in loads]
