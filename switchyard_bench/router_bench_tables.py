"""The tables `switchyard bench router` prints: every measured row, and the issue-11 summary
(c=1 streaming p50, c=32 streaming req/s, router and backend CPU per streamed request, c=32
non-streaming req/s) with ratios to the better anchor."""
from __future__ import annotations

from dataclasses import dataclass

from switchyard_bench.wrk_runner import Measure

ANCHOR_NAMES = ("vllm-router", "smg")


@dataclass(slots=True)
class Row:
    target: str
    stream: bool
    concurrency: int
    measure: Measure
    router_cpu_ms: float | None = None   # router process tree, per completed request
    backend_cpu_ms: float | None = None  # the backends behind it, per completed request


def engine_twin(target: str) -> str:
    """The direct-gRPC row of a Switchyard row: the one measuring the engines its router stands
    in front of (the Python-policy and traced routers' engines are alike: the plain router's
    row stands for them)."""
    twin = target.replace("switchyard", "direct-grpc").removesuffix("-py")
    return "direct-grpc" if "-trace" in twin else twin


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def summarize(results: list[Row], shape: dict[str, str]) -> str:
    lines = ["| stream | c | target | per streamed response | req/s | p50 ms | p99 ms | added p50 "
             "vs direct HTTP worker (ms) | added p50 vs direct gRPC engine (ms) | req/s vs best "
             "anchor | router CPU ms/req | backend CPU ms/req |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = sorted({(r.stream, r.concurrency) for r in results}, key=lambda g: (not g[0], g[1]))
    for stream, c in groups:
        rows = {r.target: r for r in results if (r.stream, r.concurrency) == (stream, c)}
        direct = rows.get("direct")
        best_anchor = max((rows[a].measure.rps for a in ANCHOR_NAMES if a in rows), default=0.0)
        for name, row in rows.items():
            m = row.measure
            is_direct = name.startswith("direct")
            added = f"{m.p50_ms - direct.measure.p50_ms:+.2f}" if direct and not is_direct else "-"
            direct_grpc = rows.get(engine_twin(name))
            added_grpc = (f"{m.p50_ms - direct_grpc.measure.p50_ms:+.2f}"
                          if direct_grpc and name.startswith("switchyard") else "-")
            ratio = f"{m.rps / best_anchor:.2f}x" if best_anchor and not is_direct else "-"
            per = shape.get(name, "-") if stream else "-"
            lines.append(f"| {'yes' if stream else 'no'} | {c} | {name} | {per} | {m.rps:.0f} | "
                         f"{m.p50_ms:.2f} | {m.p99_ms:.2f} | {added} | {added_grpc} | {ratio} | "
                         f"{_ms(row.router_cpu_ms)} | {_ms(row.backend_cpu_ms)} |")
    return "\n".join(lines)


def issue_table(results: list[Row]) -> str:
    """One line per target: lowest-concurrency streaming p50, highest-concurrency streaming req/s
    with the CPU figures of that run, highest-concurrency non-streaming req/s."""
    if not results:
        return "(no results)"
    lo = min(r.concurrency for r in results)
    hi = max(r.concurrency for r in results)
    by = {(r.target, r.stream, r.concurrency): r for r in results}
    names = list(dict.fromkeys(r.target for r in results))

    def best(stream: bool) -> float:
        return max((by[(a, stream, hi)].measure.rps for a in ANCHOR_NAMES
                    if (a, stream, hi) in by), default=0.0)

    def vs(value: float, anchor: float) -> str:
        return f" ({value / anchor:.2f}x)" if anchor else ""

    best_stream, best_plain = best(True), best(False)
    lines = [f"| target | c={lo} streaming p50 ms | c={hi} streaming req/s (vs better anchor) | "
             f"router CPU ms per streamed request | backend CPU ms per streamed request | "
             f"c={hi} non-streaming req/s (vs better anchor) |", "|---|---|---|---|---|---|"]
    for name in names:
        c1, cs, cn = by.get((name, True, lo)), by.get((name, True, hi)), by.get((name, False, hi))
        anchor_or_router = not name.startswith("direct")
        lines.append(
            f"| {name} | {f'{c1.measure.p50_ms:.2f}' if c1 else '-'} | "
            + (f"{cs.measure.rps:.0f}{vs(cs.measure.rps, best_stream) if anchor_or_router else ''}"
               if cs else "-")
            + f" | {_ms(cs.router_cpu_ms) if cs else '-'} | {_ms(cs.backend_cpu_ms) if cs else '-'} | "
            + (f"{cn.measure.rps:.0f}{vs(cn.measure.rps, best_plain) if anchor_or_router else ''}"
               if cn else "-") + " |")
    return "\n".join(lines)


def load_line(before: tuple[float, float, float], after: tuple[float, float, float],
              cpus: int | None) -> str:
    """The load averages around a run and the machine's CPU count (docs/benchmarking.md, "Quiet runs")."""
    return (f"load average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, "
            f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}; {cpus} CPUs")
