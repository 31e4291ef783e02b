"""Azure LLM inference trace (code, 2023) replay: `TIMESTAMP`, `ContextTokens`,
`GeneratedTokens` per request.

The trace says nothing about prompt content or shared prefixes, so each prompt is
round(ContextTokens * length_scale) vocabulary tokens determined by (salt, index): no two
requests share a prefix. Outputs are round(GeneratedTokens * output_scale), at least 1.
"""
from __future__ import annotations

import csv
from datetime import datetime
from typing import NamedTuple

from switchyard_bench.workloads.base import RequestShape, scaled_length
from switchyard_bench.workloads.data_files import data_path
from switchyard_bench.workloads.trace_replay import TraceConfig, TraceWorkload, parse_rows
from switchyard_bench.workloads.vocabulary import RealVocabulary


class AzureRequest(NamedTuple):
    timestamp_s: float
    context_tokens: int
    generated_tokens: int


def _seconds(stamp: str) -> float:
    """'2023-11-16 18:17:03.9799600' -> POSIX seconds (the trace has 7 fractional digits, more
    than datetime parses)."""
    whole, _, fraction = stamp.strip().partition(".")
    base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float(f"0.{fraction}") if fraction else 0.0)


def _row(row: dict[str, str]) -> AzureRequest:
    return AzureRequest(_seconds(row["TIMESTAMP"]), int(row["ContextTokens"]),
                        int(row["GeneratedTokens"]))


def read_azure(path: str) -> list[AzureRequest]:
    with open(data_path(path), encoding="utf-8", newline="") as f:
        # Line 1 is the CSV header.
        return parse_rows(path, "an Azure trace row", enumerate(csv.DictReader(f), 2), _row)


class AzureCodeWorkload(TraceWorkload[AzureRequest]):
    name = "azure-code"

    def __init__(self, vocab: RealVocabulary, config: TraceConfig) -> None:
        super().__init__(config, read_azure(config.path))
        self._vocab = vocab

    @staticmethod
    def timestamp_s(row: AzureRequest) -> float:
        return row.timestamp_s

    def shape(self, index: int, salt: int) -> RequestShape:
        row = self._rows[index]
        length = scaled_length(row.context_tokens, self.config.length_scale)
        return RequestShape(self._vocab.block(length, "azure", salt, index),
                            scaled_length(row.generated_tokens, self.config.output_scale))
