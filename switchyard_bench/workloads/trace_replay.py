"""What the trace replays (Mooncake, Azure) share: a file of rows replayed from a start row,
length and output scales, and arrival offsets from the rows' timestamps."""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from switchyard_bench.workloads.base import Workload, WorkloadError, check_positive

Row = TypeVar("Row")
Raw = TypeVar("Raw")


def parse_rows(path: str, what: str, numbered: Iterable[tuple[int, Raw]],
               parse: Callable[[Raw], Row]) -> list[Row]:
    """Each (line number, raw row) of the trace file `path` parsed; the first row `parse` cannot
    read is a WorkloadError naming its line and `what` it should have been."""
    out = []
    for number, raw in numbered:
        try:
            out.append(parse(raw))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise WorkloadError(f"{path}:{number}: not {what} ({exc})") from exc
    return out


@dataclass(frozen=True, slots=True)
class TraceConfig:
    path: str
    length_scale: float = 1.0
    output_scale: float = 1.0
    start: int = 0  # first row replayed

    def __post_init__(self) -> None:
        check_positive(length_scale=self.length_scale, output_scale=self.output_scale)
        if self.start < 0:
            raise WorkloadError(f"trace start must be >= 0, got {self.start}")


class TraceWorkload(Workload, Generic[Row]):
    def __init__(self, config: TraceConfig, rows: Sequence[Row]) -> None:
        self.config = config
        self._rows = list(rows[config.start:])
        if not self._rows:
            raise WorkloadError(f"{config.path} has no requests from row {config.start}")

    @staticmethod
    @abstractmethod
    def timestamp_s(row: Row) -> float:
        """The row's arrival time in seconds (any origin)."""

    def size(self) -> int:
        return len(self._rows)

    def trace_offsets(self, count: int) -> list[float]:
        rows = self._rows[:count]
        first = self.timestamp_s(rows[0])
        return [self.timestamp_s(r) - first for r in rows]

    def describe(self) -> dict[str, Any]:
        c = self.config
        return {"workload": self.name, "trace": c.path, "trace_start": c.start,
                "length_scale": c.length_scale, "output_scale": c.output_scale}
