"""`switchyard bench router --tracing`: what tracing costs the router.

The same router in front of the same kind of mock engines, four times: tracing off
("switchyard"), the JSONL span exporter on with every request traced ("switchyard-trace100",
OTEL_TRACES_SAMPLER=always_on), one in ten ("switchyard-trace10", parentbased_traceidratio 0.1)
and one in a hundred ("switchyard-trace1") — round_robin, so the front's fast path, whose spans
are all made in Rust. Then the Python-policy router (round_robin loaded as a policy file, as the
plain bench's "-py" row) untraced and at 100 % ("switchyard-py", "switchyard-py-trace100"): its
requests add the policy's decision and verb spans, made from Python. With --repeat N every
target is measured N times, interleaved (a round measures all targets back to back), and the
cost is the median over rounds of each round's ratio to the same router untraced, so a
neighbour's load on a shared machine hits all targets alike.
"""
from __future__ import annotations

import os
import statistics

from switchyard_bench.router_bench_tables import Row
from switchyard_bench.wrk_runner import Measure

# Environment of an untraced router: no exporter of any kind, whatever the caller's shell has.
NO_TRACING = {"SWITCHYARD_TRACE_FILE": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "",
              "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_TRACES_EXPORTER": ""}


def tracing_variants(span_dir: str) -> list[tuple[str, dict[str, str], bool]]:
    """(row suffix, router environment, Python policy) for the untraced routers and the traced
    ones."""
    def traced(name: str, sampler: str, arg: str) -> dict[str, str]:
        return {**NO_TRACING, "SWITCHYARD_TRACE_FILE": os.path.join(span_dir, f"{name}.jsonl"),
                "OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": arg}

    return [("", NO_TRACING, False),
            ("-trace100", traced("trace100", "always_on", ""), False),
            ("-trace10", traced("trace10", "parentbased_traceidratio", "0.1"), False),
            ("-trace1", traced("trace1", "parentbased_traceidratio", "0.01"), False),
            ("-py", NO_TRACING, True),
            ("-py-trace100", traced("py-trace100", "always_on", ""), True)]


def untraced_twin(name: str) -> str | None:
    """The untraced router a traced row is compared with ("switchyard-py-trace100" ->
    "switchyard-py"), None for an untraced row."""
    base, traced, _ = name.partition("-trace")
    return base if traced else None


def median_rows(results: list[Row]) -> list[Row]:
    """Repeated measurements of one (target, stream, concurrency) collapsed into one row of
    medians (errors summed), in first-seen order."""
    groups: dict[tuple[str, bool, int], list[Row]] = {}
    for r in results:
        groups.setdefault((r.target, r.stream, r.concurrency), []).append(r)

    def mid(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    out = []
    for (target, stream, c), rows in groups.items():
        ms = [r.measure for r in rows]
        m = Measure(statistics.median(x.rps for x in ms), statistics.median(x.p50_ms for x in ms),
                    statistics.median(x.p99_ms for x in ms), sum(x.errors for x in ms),
                    ms[0].tool, sum(x.requests for x in ms))
        out.append(Row(target, stream, c, m, mid([r.router_cpu_ms for r in rows]),
                       mid([r.backend_cpu_ms for r in rows])))
    return out


def tracing_cost(results: list[Row]) -> list[str]:
    """One line per traced router and (stream, concurrency): throughput, p50 and router CPU per
    request against the same router untraced, each the median over rounds of that round's
    figure."""
    out = []
    groups = sorted({(r.stream, r.concurrency) for r in results}, key=lambda g: (not g[0], g[1]))
    for stream, c in groups:
        by: dict[str, list[Row]] = {}
        for r in results:
            if (r.stream, r.concurrency) == (stream, c):
                by.setdefault(r.target, []).append(r)
        for name, rows in by.items():
            twin = untraced_twin(name)
            base = by.get(twin, []) if twin else []
            if not base or len(rows) != len(base):
                continue
            pairs = list(zip(rows, base, strict=True))
            ratios = [t.measure.rps / b.measure.rps - 1 for t, b in pairs if b.measure.rps]
            p50s = [t.measure.p50_ms - b.measure.p50_ms for t, b in pairs]
            cpu = [t.router_cpu_ms / b.router_cpu_ms - 1 for t, b in pairs
                   if t.router_cpu_ms and b.router_cpu_ms]
            if not ratios:
                continue
            cpu_text = (f", router CPU per request {statistics.median(cpu) * 100:+.1f}%"
                        if cpu else "")
            out.append(f"tracing cost ({'streaming' if stream else 'non-streaming'}, c={c}): "
                       f"{name} {statistics.median(ratios) * 100:+.1f}% throughput vs {twin} "
                       f"(median of {len(ratios)} rounds; rounds "
                       f"{', '.join(f'{r * 100:+.0f}%' for r in ratios)}), p50 "
                       f"{statistics.median(p50s):+.2f} ms{cpu_text}")
    return out
