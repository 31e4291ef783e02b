"""How well the engine's start-up latency profile predicts step shapes it never ran, on the real
SmolLM2: profile afresh (the default grid, in a temporary cache directory), then run ROUNDS rounds
of real steps of shapes none of which is a grid point, and compare each step with router_core's
prediction from the coefficients the engine reported just before it (what a router polling Stats
computes). Prints wall and CPU time against the predictions per shape, and the worst and median
error against the target (median <= 25%, worst shape <= 50%: on a shared machine another process
taking a core mid-measurement moves a single shape by tens of percent).

A benchmark, not a test: its figures are wall times (docs/benchmarks.md, "Latency model").

    python -m switchyard_bench.engine.latency_accuracy                  # fp32, exact, 1 thread
    python -m switchyard_bench.engine.latency_accuracy --mode fast --rounds 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.core.engine_core import EngineCore
    from engine.core.latency_model import StepShape
    from engine.core.latency_profile import StepDriver

# (label, prefill tokens, cached before them, decodes, decode context): none is a grid point.
UNSEEN = [
    ("decode 4 x 300", 0, 0, 4, 300),
    ("decode 24 x 700", 0, 0, 24, 700),
    ("decode 12 x 1500", 0, 0, 12, 1500),
    ("decode 24 x 1200 (past the knee)", 0, 0, 24, 1200),
    ("prefill 64", 64, 0, 0, 0),
    ("prefill 300 on 512", 300, 512, 0, 0),
    ("prefill 800 on 0", 800, 0, 0, 0),
    ("prefill 64 + decode 8 x 400", 64, 0, 8, 400),
    ("prefill 300 on 700 + decode 20 x 300", 300, 704, 20, 300),
]
MEDIAN_TARGET, WORST_TARGET = 0.25, 0.5


@dataclass
class Measured:
    """Real steps of one shape: wall and CPU ms, and the engine's coefficients just before each
    step (what its Stats told a router then)."""

    label: str
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    shapes: list[StepShape] = field(default_factory=list)
    coeffs: list[dict[str, float]] = field(default_factory=list)
    wall_per_cpu: list[float] = field(default_factory=list)  # the scale in those coefficients


def _measure_round(core: EngineCore, driver: StepDriver, case: tuple[str, int, int, int, int],
                   out: Measured) -> None:
    """Real steps of the case's shape (two decode steps, or one prefill with the decodes)."""
    _, tokens, cached, decodes, context = case
    rids = driver.start_decodes(decodes, context)
    model = core.latency
    record = model.record

    def capture(wall_ms: float, shape: StepShape, cpu_ms: float | None = None) -> None:
        if shape.prefill_tokens == tokens and (tokens or shape.decode_seqs == decodes):
            out.coeffs.append(model.coefficients())
            out.wall_per_cpu.append(model.wall_per_fit_ms())
            out.wall_ms.append(wall_ms)
            out.cpu_ms.append(cpu_ms or wall_ms)
            out.shapes.append(shape)
        record(wall_ms, shape, cpu_ms)

    model.record = capture  # type: ignore[method-assign]
    try:
        if tokens:
            driver.prefill(tokens, cached)
        else:
            core.step()
            core.step()
    finally:
        model.record = record  # type: ignore[method-assign]
    driver.stop(rids)


def measure_unseen(core: EngineCore, rounds: int) -> list[Measured]:
    """Every UNSEEN case, in rounds over all cases, so a burst from a neighbour slows one sample
    of a case, not all of them."""
    from engine.core.latency_profile import StepDriver

    driver = StepDriver(core, seed=7)
    results = [Measured(case[0]) for case in UNSEEN]
    for _ in range(rounds):
        for case, out in zip(UNSEEN, results, strict=True):
            _measure_round(core, driver, case, out)
    return results


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m switchyard_bench.engine.latency_accuracy",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="GGUF path (default: the packaged SmolLM2)")
    parser.add_argument("--mode", choices=("exact", "fast"), default="exact")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every shape")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (one is steadier on a shared machine)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        parser.error("rounds and threads must be >= 1")
    return args


def _make_core(args: argparse.Namespace) -> EngineCore:
    import torch

    from engine.config import EngineConfig
    from engine.core.engine_core import EngineCore
    from engine.model.loader import load_model
    from switchyard_tokenizer.default_model import default_model_path

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model or default_model_path(), torch.float32, "cpu", mode=args.mode)
    config = EngineConfig(mode=args.mode, num_pages=2048, chunk_size=2048, max_running=64)
    return EngineCore(config, loaded=loaded)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import router_core
    from engine.core.latency_cache import prepare_latency_model
    from engine.core.latency_profile import grid_for

    print(f"load average before: {os.getloadavg()[0]:.2f}; mode {args.mode}, "
          f"threads {args.threads}, rounds {args.rounds}")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SWITCHYARD_CACHE_DIR"] = cache  # profile afresh, leave no entry behind
        core = _make_core(args)
        source = prepare_latency_model(core, "force")
    grid = grid_for(core)
    off_grid = [case[0] for case in UNSEEN
                if (case[1] in grid.prefill_tokens and case[2] in grid.prefill_cached)
                or (case[3] in grid.decode_batches and case[4] in grid.decode_contexts)]
    if off_grid:
        print(f"note: grid points among the shapes: {off_grid}")
    stats = core.stats()
    print(f"profile ({source}): {stats.latency_model_samples} steps, fit error "
          f"{stats.latency_model_fit_error:.1%} (CPU time); coefficients {stats.latency_model}")
    table = router_core.EngineTable()
    table.upsert(0, "any")
    print("| shape | wall ms | predicted | error | CPU ms | predicted | error |")
    print("|---|---|---|---|---|---|---|")
    errors = []
    for m in measure_unseen(core, args.rounds):
        predicted = []
        for shape, coeffs in zip(m.shapes, m.coeffs, strict=True):
            table.update_stats(0, 0, 0, 0, 0, 0, 0.0, latency_model=coeffs)
            predicted.append(table.predict_step_ms(0, list(shape.prefill_chunks),
                                                   shape.decode_seqs, shape.decode_context))
        wall, want = statistics.median(m.wall_ms), statistics.median(predicted)
        # The terms alone: CPU time against the fit in CPU time (coefficients / wall-per-CPU).
        cpu = statistics.median(m.cpu_ms)
        cpu_want = statistics.median(p / r for p, r in zip(predicted, m.wall_per_cpu, strict=True))
        errors.append(want / wall - 1)
        print(f"| {m.label} | {wall:.0f} | {want:.0f} | {want / wall - 1:+.1%} | {cpu:.0f} | "
              f"{cpu_want:.0f} | {cpu_want / cpu - 1:+.1%} |")
    worst, median = max(abs(e) for e in errors), statistics.median(abs(e) for e in errors)
    met = median <= MEDIAN_TARGET and worst <= WORST_TARGET
    print(f"worst {worst:.1%}, median {median:.1%} (wall); target median <= "
          f"{MEDIAN_TARGET:.0%}, worst <= {WORST_TARGET:.0%}: {'met' if met else 'MISSED'}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
