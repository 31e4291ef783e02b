"""Mooncake trace replay: equal `hash_ids` become equal token blocks, so shared prefixes in the
trace are real prefix-cache hits on the engines.

The trace gives each request one hash id per 512-token block of its prompt. Here a block is
round(512 * length_scale) tokens (at least 1), its ids a deterministic function of (salt,
hash_id) over the model's real vocabulary; a prompt is its blocks concatenated and cut to
round(input_length * length_scale), never more than its blocks hold. Output lengths are
round(output_length * output_scale), at least 1. Timestamps are milliseconds from the trace's
start; `trace_offsets` returns them in seconds from the first request replayed.
"""
from __future__ import annotations

import json
from typing import Any, NamedTuple

from switchyard_bench.workloads.base import RequestShape, scaled_length
from switchyard_bench.workloads.data_files import data_path
from switchyard_bench.workloads.trace_replay import TraceConfig, TraceWorkload, parse_rows
from switchyard_bench.workloads.vocabulary import RealVocabulary

TRACE_BLOCK_TOKENS = 512


class MooncakeRequest(NamedTuple):
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: list[int]


def _row(line: str) -> MooncakeRequest:
    row = json.loads(line)
    return MooncakeRequest(float(row["timestamp"]), int(row["input_length"]),
                           int(row["output_length"]), [int(h) for h in row["hash_ids"]])


def read_mooncake(path: str) -> list[MooncakeRequest]:
    with open(data_path(path), encoding="utf-8") as f:
        lines = ((number, line) for number, line in enumerate(f, 1) if line.strip())
        return parse_rows(path, "a Mooncake trace row", lines, _row)


class MooncakeWorkload(TraceWorkload[MooncakeRequest]):
    name = "mooncake"

    def __init__(self, vocab: RealVocabulary, config: TraceConfig) -> None:
        super().__init__(config, read_mooncake(config.path))
        self._vocab = vocab
        self.block_tokens = scaled_length(TRACE_BLOCK_TOKENS, config.length_scale)
        self._blocks: dict[int, list[int]] = {}
        self._blocks_salt: int | None = None

    @staticmethod
    def timestamp_s(row: MooncakeRequest) -> float:
        return row.timestamp_ms / 1000.0

    def _block(self, hash_id: int, salt: int) -> list[int]:
        if salt != self._blocks_salt:  # a new run: the old run's blocks are never needed again
            self._blocks, self._blocks_salt = {}, salt
        block = self._blocks.get(hash_id)
        if block is None:
            block = self._blocks[hash_id] = self._vocab.block(self.block_tokens, "mooncake",
                                                              salt, hash_id)
        return block

    def shape(self, index: int, salt: int) -> RequestShape:
        row = self._rows[index]
        length = min(scaled_length(row.input_length, self.config.length_scale),
                     len(row.hash_ids) * self.block_tokens)
        prompt: list[int] = []
        for hash_id in row.hash_ids:
            if len(prompt) >= length:
                break
            prompt.extend(self._block(hash_id, salt))
        return RequestShape(prompt[:length],
                            scaled_length(row.output_length, self.config.output_scale))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "block_tokens": self.block_tokens}
