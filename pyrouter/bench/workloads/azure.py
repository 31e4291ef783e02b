"""Azure LLM inference trace (code, 2023) replay: `TIMESTAMP`, `ContextTokens`,
`GeneratedTokens` per request.

The trace says nothing about prompt content or shared prefixes, so each prompt is
round(ContextTokens * length_scale) vocabulary tokens determined by (salt, index): no two
requests share a prefix. Outputs are round(GeneratedTokens * output_scale), at least 1.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from pyrouter.bench.workloads.base import (
    RequestShape,
    Workload,
    WorkloadError,
    check_positive,
    scaled_length,
)
from pyrouter.bench.workloads.data_files import AZURE_CODE, data_path
from pyrouter.bench.workloads.vocabulary import RealVocabulary


class AzureRequest(NamedTuple):
    timestamp_s: float
    context_tokens: int
    generated_tokens: int


@dataclass(frozen=True, slots=True)
class AzureConfig:
    path: str = AZURE_CODE
    length_scale: float = 1.0
    output_scale: float = 1.0
    start: int = 0

    def __post_init__(self) -> None:
        check_positive(length_scale=self.length_scale, output_scale=self.output_scale)
        if self.start < 0:
            raise WorkloadError(f"trace start must be >= 0, got {self.start}")


def _seconds(stamp: str) -> float:
    """'2023-11-16 18:17:03.9799600' -> POSIX seconds (the trace has 7 fractional digits, more
    than datetime parses)."""
    whole, _, fraction = stamp.strip().partition(".")
    base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float(f"0.{fraction}") if fraction else 0.0)


def read_azure(path: str) -> list[AzureRequest]:
    out = []
    with open(data_path(path), encoding="utf-8", newline="") as f:
        for number, row in enumerate(csv.DictReader(f), 2):
            try:
                out.append(AzureRequest(_seconds(row["TIMESTAMP"]), int(row["ContextTokens"]),
                                        int(row["GeneratedTokens"])))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise WorkloadError(f"{path}:{number}: not an Azure trace row ({exc})") from exc
    return out


class AzureCodeWorkload(Workload):
    name = "azure-code"

    def __init__(self, vocab: RealVocabulary, config: AzureConfig) -> None:
        self.config = config
        self._vocab = vocab
        self._rows = read_azure(config.path)[config.start:]
        if not self._rows:
            raise WorkloadError(f"{config.path} has no requests from row {config.start}")

    def size(self) -> int:
        return len(self._rows)

    def shape(self, index: int, salt: int) -> RequestShape:
        row = self._rows[index]
        length = scaled_length(row.context_tokens, self.config.length_scale)
        return RequestShape(self._vocab.block(length, "azure", salt, index),
                            scaled_length(row.generated_tokens, self.config.output_scale))

    def trace_offsets(self, count: int) -> list[float]:
        rows = self._rows[:count]
        return [r.timestamp_s - rows[0].timestamp_s for r in rows]

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {"workload": self.name, "trace": c.path, "trace_start": c.start,
                "length_scale": c.length_scale, "output_scale": c.output_scale}
