"""A labelled Prometheus histogram that takes n equal observations in one call.

Inter-token latency has one observation per token, but the router learns tokens a chunk at a
time (and, once the token loop leaves Python, as a list at the end of a request):
prometheus_client's Histogram would need one locked call per token. This collector keeps the
bucket counts itself and is read through prometheus_client's collector interface at scrape time.
Used from the router's event loop only (no lock).
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector


class _Series:
    __slots__ = ("counts", "sum")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets  # per bucket (not cumulative); the last is +Inf
        self.sum = 0.0


class BatchedHistogram(Collector):  # type: ignore[misc]
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self.bounds = list(buckets)
        self._series: dict[tuple[str, ...], _Series] = {}

    def observe_many(self, labels: tuple[str, ...], value: float, n: int = 1) -> None:
        """Observe `value` n times (n >= 1)."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = _Series(len(self.bounds) + 1)
        series.counts[bisect_left(self.bounds, value)] += n
        series.sum += value * n

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in self._series.items():
            cumulative, running = [], 0
            for bound, count in zip([*map(_le, self.bounds), "+Inf"], series.counts,
                                    strict=True):
                running += count
                cumulative.append((bound, running))
            family.add_metric(list(labels), cumulative, series.sum)
        yield family

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)


def _le(bound: float) -> str:
    return repr(float(bound))
