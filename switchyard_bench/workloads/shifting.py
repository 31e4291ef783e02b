"""A workload that changes character mid-run: phases of `phase_requests` requests alternate
between prefill-heavy (long prompts, short outputs) and decode-heavy (short prompts, long
outputs), starting prefill-heavy. At an arrival rate r a phase lasts about phase_requests / r
seconds. Prompts are vocabulary tokens determined by (salt, index): no shared prefixes, so the
shift is in the work, not in cache reuse.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from switchyard_bench.workloads.base import RequestShape, Workload, check_positive
from switchyard_bench.workloads.vocabulary import RealVocabulary


@dataclass(frozen=True, slots=True)
class ShiftingConfig:
    phase_requests: int = 20
    prefill_heavy_input: int = 512
    prefill_heavy_output: int = 8
    decode_heavy_input: int = 32
    decode_heavy_output: int = 128

    def __post_init__(self) -> None:
        check_positive(phase_requests=self.phase_requests,
                       prefill_heavy_input=self.prefill_heavy_input,
                       prefill_heavy_output=self.prefill_heavy_output,
                       decode_heavy_input=self.decode_heavy_input,
                       decode_heavy_output=self.decode_heavy_output)


class ShiftingWorkload(Workload):
    name = "shifting"

    def __init__(self, vocab: RealVocabulary, config: ShiftingConfig) -> None:
        self.config = config
        self._vocab = vocab

    def phase(self, index: int) -> str:
        return "prefill-heavy" if (index // self.config.phase_requests) % 2 == 0 else \
            "decode-heavy"

    def shape(self, index: int, salt: int) -> RequestShape:
        c = self.config
        if self.phase(index) == "prefill-heavy":
            n_in, n_out = c.prefill_heavy_input, c.prefill_heavy_output
        else:
            n_in, n_out = c.decode_heavy_input, c.decode_heavy_output
        return RequestShape(self._vocab.block(n_in, "shifting", salt, index), n_out)

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {"workload": self.name, "phase_requests": c.phase_requests,
                "prefill_heavy": f"{c.prefill_heavy_input}in/{c.prefill_heavy_output}out",
                "decode_heavy": f"{c.decode_heavy_input}in/{c.decode_heavy_output}out"}
