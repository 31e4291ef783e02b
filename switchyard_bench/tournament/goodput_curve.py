"""The tournament's goodput curve: per cell group and policy, the requests within SLO per second
at each offered load, with the router's admission by predicted outcome off and on
(`--admission both`: a policy `P` runs as `P` and as `P+admit`).

Goodput here is the offered rate x the share of requests within SLO — an open system's
goodput in steady state. The runs' own `goodput` (within SLO / the run's duration) divides by
the arrivals' span plus the last requests' tail, which a short run at a high rate is mostly
tail of: it understates goodput the more, the higher the load.

Past capacity a router that lets every request through grows the engines' queues without bound
and goodput falls while the engines stay busy; admission by predicted outcome should hold it at
its peak. The table sets each policy's goodput at every load beside its peak over the loads and
the share of it kept at 2x and 3x capacity, and how many requests failed (for `+admit`: the
ones refused, 503 `slo_unattainable` or `queue_timeout`) at each load.
"""
from __future__ import annotations

from collections.abc import Sequence

from switchyard_bench.tournament.cells import Group
from switchyard_bench.tournament.report import CellVerdict, fmt

HELD_LOADS = (2.0, 3.0)  # the loads whose goodput is set against the peak


def curve_lines(rows: Sequence[CellVerdict], policies: Sequence[str], requests: int) -> list[str]:
    """One table per cell group: goodput (req/s) per load, peak, kept at 2x/3x, failed %."""
    groups: dict[Group, list[CellVerdict]] = {}
    for row in rows:
        groups.setdefault(row.cell.group, []).append(row)
    lines = ["goodput (offered req/s x share within SLO) by offered load (x capacity); "
             "kept = goodput / the policy's peak over the loads; failed % per load"]
    for group, cells in groups.items():
        cells.sort(key=lambda r: r.cell.load)
        loads = [r.cell.load for r in cells]
        head = " ".join(f"{load:>7g}x" for load in loads)
        held = " ".join(f"kept@{x:g}x" for x in HELD_LOADS)
        lines += ["", f"{group.label}", f"  {'policy':<22} {head}    peak {held}   failed %"]
        for policy in policies:
            goodput = [None if (a := r.attainment.get(policy)) is None else r.rate * a / 100
                       for r in cells]
            present = [g for g in goodput if g is not None]
            peak = max(present) if present else None
            kept = []
            for x in HELD_LOADS:
                at = [g for r, g in zip(cells, goodput, strict=True) if r.cell.load == x]
                share = (at[0] / peak if at and at[0] is not None and peak else None)
                kept.append(fmt(None if share is None else 100 * share, "8.0f") + "%")
            seeds = [max(1, len(r.seeds)) for r in cells]
            failed = [100 * r.failed.get(policy, (0, ""))[0] / (requests * n)
                      for r, n in zip(cells, seeds, strict=True)]
            lines.append(f"  {policy:<22} "
                         + " ".join(fmt(g, "8.2f") for g in goodput)
                         + f" {fmt(peak, '7.2f')} " + " ".join(kept) + "   "
                         + ",".join(f"{f:.0f}" for f in failed))
    return lines
