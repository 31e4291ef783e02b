"""The figures and table of `switchyard bench router --replicas`, from measured runs (pure: the
unit tests feed it made-up runs).

A run is one setup (N replicas, peered or not) measured once: one load generator per replica, all
at once. Its throughput is the sum of the generators' req/s (each its requests over its own
duration; they run alike long), its CPU per request the process trees' CPU over every request
served. Over rounds a setup reports its median and its min-max spread; "scaling" and the peer
stream's cost are the medians of each round's own ratio or difference (the setups of a round ran
back to back, so a neighbour's load hits them alike).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from switchyard_bench.wrk_runner import Measure


@dataclass(slots=True)
class ReplicaRun:
    replicas: int
    peered: bool
    measures: list[Measure] = field(default_factory=list)  # one per replica's load generator
    router_cpu_s: float = 0.0   # every replica's process tree, over the run
    backend_cpu_s: float = 0.0  # the mock engines' process trees, over the run
    round: int = 0

    @property
    def requests(self) -> int:
        return sum(m.requests for m in self.measures)

    @property
    def rps(self) -> float:
        return sum(m.rps for m in self.measures)

    @property
    def errors(self) -> int:
        return sum(m.errors for m in self.measures)

    def per_request_ms(self, cpu_s: float) -> float | None:
        return cpu_s * 1000 / self.requests if self.requests else None


def split_concurrency(total: int, parts: int) -> list[int]:
    """`total` connections over `parts` load generators, as evenly as whole numbers allow."""
    if parts < 1 or total < parts:
        raise ValueError(f"cannot split concurrency {total} over {parts} replicas")
    return [total // parts + (i < total % parts) for i in range(parts)]


def setups(replica_counts: list[int]) -> list[tuple[int, bool]]:
    """(replicas, peered) to measure: every count alone, and every count above 1 peered too."""
    return [(n, peered) for n in replica_counts for peered in ([False, True] if n > 1 else [False])]


Key = tuple[int, bool]


@dataclass(slots=True)
class ReplicaSummary:
    replicas: int
    peered: bool
    rounds: int
    rps: float  # median over rounds
    rps_min: float
    rps_max: float
    requests: int  # all rounds
    errors: int    # all rounds
    router_ms: float | None = None   # median over rounds
    backend_ms: float | None = None  # median over rounds
    scaling: float | None = None     # median over rounds of rps / the baseline's in that round
    peer_ms: float | None = None     # median over rounds of router ms/req peered - unpeered


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _by_round(runs: list[ReplicaRun]) -> dict[int, dict[Key, ReplicaRun]]:
    out: dict[int, dict[Key, ReplicaRun]] = {}
    for r in runs:
        out.setdefault(r.round, {})[(r.replicas, r.peered)] = r
    return out


def baseline(runs: list[ReplicaRun]) -> int | None:
    """The replica count scaling is relative to: the smallest one measured (1 when it is)."""
    return min((r.replicas for r in runs), default=None)


def summarize(runs: list[ReplicaRun]) -> list[ReplicaSummary]:
    """One summary per setup, in the order first measured."""
    groups: dict[Key, list[ReplicaRun]] = {}
    for r in runs:
        groups.setdefault((r.replicas, r.peered), []).append(r)
    rounds = _by_round(runs)
    base = baseline(runs)
    out = []
    for (n, peered), rs in groups.items():
        ratios, peer_costs = [], []
        for setups_of_round in rounds.values():
            mine, ref = setups_of_round.get((n, peered)), setups_of_round.get((base or 0, False))
            if mine and ref and ref.rps:
                ratios.append(mine.rps / ref.rps)
            plain = setups_of_round.get((n, False))
            if mine and peered and plain:
                cost = [mine.per_request_ms(mine.router_cpu_s),
                        plain.per_request_ms(plain.router_cpu_s)]
                if cost[0] is not None and cost[1] is not None:
                    peer_costs.append(cost[0] - cost[1])
        rps = [r.rps for r in rs]
        out.append(ReplicaSummary(
            n, peered, len(rs), statistics.median(rps), min(rps), max(rps),
            sum(r.requests for r in rs), sum(r.errors for r in rs),
            _median([r.per_request_ms(r.router_cpu_s) for r in rs]),
            _median([r.per_request_ms(r.backend_cpu_s) for r in rs]),
            statistics.median(ratios) if ratios else None,
            statistics.median(peer_costs) if peer_costs else None))
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def replicas_table(summaries: list[ReplicaSummary], base: int | None) -> str:
    lines = [f"| replicas | peered | aggregate req/s (median, min-max) | scaling vs {base or '-'} "
             f"(ideal) | router CPU ms/req | backend CPU ms/req | peer stream ms/req | requests "
             f"| errors |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        spread = f" ({s.rps_min:.0f}-{s.rps_max:.0f})" if s.rounds > 1 else ""
        scaling = (f"{s.scaling:.2f}x ({s.replicas / base:g}x)" if s.scaling is not None
                   and base else "-")
        peer = f"{s.peer_ms:+.3f}" if s.peer_ms is not None else "-"
        lines.append(f"| {s.replicas} | {'yes' if s.peered else 'no'} | {s.rps:.0f}{spread} | "
                     f"{scaling} | {_ms(s.router_ms)} | {_ms(s.backend_ms)} | {peer} | "
                     f"{s.requests} | {s.errors} |")
    return "\n".join(lines)


def cores_note(cpu_count: int | None, replica_counts: list[int]) -> str:
    """Why throughput need not scale here: N replicas, N load generators and the 2 mock engines
    all want a core."""
    most = max(replica_counts)
    wanted = 2 * most + 2
    return (f"{cpu_count or '?'} CPUs; {most} replicas with their {most} load generators and the 2 "
            f"mock engines want {wanted} cores. On a machine with fewer cores than replicas + load "
            f"generators + engines the throughput cannot scale linearly (they share the cores): "
            f"there, CPU per request (router and backend) is the figure that carries.")
