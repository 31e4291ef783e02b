"""The tournament's workloads, sized for a profile: sonnet short and long (LLMPerf's default
mix and MicroServing's long-prompt one), the Mooncake conversation trace (shared prefixes),
the Azure code trace, and shifting (sonnet short, then long, then short: the mix changes twice
mid-run). Every one takes Poisson arrivals from the tournament; the traces contribute lengths
and prefix sharing, not timestamps, so "load" means the same thing for every workload.

Lengths are the seeds' on a datacenter profile. On this machine's CPU profile prompts are a
tenth of them (as the real-engine runs in docs/experiments.md) and Mooncake's a fiftieth (its
mean of 12k tokens becomes 240, its longest 126k becomes 2.5k: SmolLM2's 8k context holds it,
and ~90% of its prompts prefill within the 2 s TTFT SLO when alone); outputs of the traces are
kept (decoding is cheap next to prefill there: Azure's average 28 tokens, Mooncake's 343).

Generated workloads (`gen-N`, switchyard_bench/workloads/synthetic.py) are sized as the traces
are: prompts times the profile's scale, outputs times its trace output scale, clipped to the
model's context. They bring their own arrival process (burstiness, on/off phases) at the rate
the tournament asks for; every other workload takes Poisson arrivals.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from switchyard_bench.tournament.workload_sets import generator_seed
from switchyard_bench.workloads import (
    ArrivalProcess,
    RealVocabulary,
    RequestShape,
    Workload,
    WorkloadError,
)
from switchyard_bench.workloads.arrivals import Arrivals
from switchyard_bench.workloads.azure import AzureCodeWorkload
from switchyard_bench.workloads.data_files import AZURE_CODE, MOONCAKE_CONVERSATION
from switchyard_bench.workloads.mooncake import MooncakeWorkload
from switchyard_bench.workloads.sonnet import SonnetConfig, SonnetWorkload
from switchyard_bench.workloads.synthetic import SyntheticWorkload
from switchyard_bench.workloads.trace_replay import TraceConfig

TOURNAMENT_WORKLOADS = ("sonnet-short", "sonnet-long", "mooncake", "azure-code", "shifting")

# (input mean, input std, output mean, output std) at scale 1.
SONNET_SHORT = (550.0, 150.0, 150.0, 80.0)  # LLMPerf's defaults
SONNET_LONG = (3000.0, 300.0, 100.0, 10.0)  # MicroServing's PD-vs-DP setting


@dataclass(frozen=True, slots=True)
class Sizing:
    """How a profile's workloads are sized: sonnet lengths and trace prompt lengths times
    `scale`, trace outputs times `trace_output_scale`, Mooncake prompts times `mooncake_scale`."""

    scale: float = 1.0
    trace_output_scale: float = 1.0
    mooncake_scale: float = 1.0

    def times(self, factor: float) -> Sizing:
        return Sizing(self.scale * factor, self.trace_output_scale * factor,
                      self.mooncake_scale * factor)


class PhasedWorkload(Workload):
    """Requests 0..n1-1 from the first workload, the next n2 from the second, and so on (each
    phase's requests keep their global index, so their lengths do not repeat)."""

    name = "shifting"

    def __init__(self, phases: Sequence[tuple[str, Workload, int]]) -> None:
        if not phases or any(count < 1 for _, _, count in phases):
            raise WorkloadError("a phased workload needs phases of >= 1 request")
        self._phases = list(phases)

    def phase_of(self, index: int) -> tuple[str, Workload]:
        for label, workload, count in self._phases:
            if index < count:
                return label, workload
            index -= count
        label, workload, _ = self._phases[-1]  # past the plan: the last phase continues
        return label, workload

    def shape(self, index: int, salt: int) -> RequestShape:
        return self.phase_of(index)[1].shape(index, salt)

    def describe(self) -> dict[str, Any]:
        return {"workload": self.name,
                "phases": ", ".join(f"{label} x{count}" for label, _, count in self._phases)}


def _sonnet(vocab: RealVocabulary, lengths: tuple[float, ...], scale: float,
            seed: int) -> SonnetWorkload:
    in_mean, in_std, out_mean, out_std = (x * scale for x in lengths)
    return SonnetWorkload(vocab, SonnetConfig(in_mean, in_std, max(out_mean, 2.0), out_std,
                                              seed))


def build_tournament_workload(name: str, vocab: RealVocabulary, sizing: Sizing,
                              num_prompts: int, seed: int, max_context: int | None = None
                              ) -> Workload:
    """The named or generated workload at a profile's sizing (`num_prompts` sets shifting's
    phases; `max_context` clips a generated workload's lengths)."""
    s = sizing.scale
    generated = generator_seed(name)
    if generated is not None:
        return SyntheticWorkload.from_seed(vocab, generated, seed, s, sizing.trace_output_scale,
                                           max_context)
    if name == "sonnet-short":
        return _sonnet(vocab, SONNET_SHORT, s, seed)
    if name == "sonnet-long":
        return _sonnet(vocab, SONNET_LONG, s, seed)
    if name == "mooncake":
        return MooncakeWorkload(vocab, TraceConfig(MOONCAKE_CONVERSATION, sizing.mooncake_scale,
                                                   sizing.trace_output_scale))
    if name == "azure-code":
        return AzureCodeWorkload(vocab, TraceConfig(AZURE_CODE, s, sizing.trace_output_scale))
    if name == "shifting":
        short, long = _sonnet(vocab, SONNET_SHORT, s, seed), _sonnet(vocab, SONNET_LONG, s, seed)
        third = max(1, num_prompts // 3)
        return PhasedWorkload([("sonnet-short", short, third), ("sonnet-long", long, third),
                               ("sonnet-short", short, max(1, num_prompts - 2 * third))])
    raise WorkloadError(f"unknown tournament workload {name!r}; choose from "
                        f"{', '.join(TOURNAMENT_WORKLOADS)} or gen-N")


def arrivals_for(workload: Workload, rate: float) -> Arrivals:
    """A generated workload's own arrival process at `rate`, else Poisson arrivals."""
    if isinstance(workload, SyntheticWorkload):
        return workload.arrivals(rate)
    return ArrivalProcess(rate)
