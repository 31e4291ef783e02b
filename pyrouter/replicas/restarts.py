"""A router replica's own restart count on its /metrics, when `switchyard serve` started it.

The supervisor (pyrouter/supervisor/) serves no port of its own, so it cannot publish how often
it restarted each replica; it tells each replica as it starts it instead (RESTARTS_ENV,
"INDEX=COUNT"), and the replica reports that constant as its counter. A restarted replica's
counter thus continues from where the dead one's stopped, as a Prometheus counter should.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

RESTARTS_ENV = "SWITCHYARD_REPLICA_RESTARTS"


class ReplicaRestarts(Collector):  # type: ignore[misc]
    """`switchyard:router_replica_restarts_total{replica}`: times serve restarted this replica."""

    def __init__(self, replica: str, restarts: int) -> None:
        self.replica = replica
        self.restarts = restarts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("switchyard:router_replica_restarts", "Times switchyard "
                                     "serve restarted this router replica after it died",
                                     labels=["replica"])
        family.add_metric([self.replica], self.restarts)
        yield family


def restarts_env(index: int, restarts: int) -> dict[str, str]:
    """The variable the supervisor sets for replica `index`, started after `restarts` deaths."""
    return {RESTARTS_ENV: f"{index}={restarts}"}


def replica_restarts_from_env() -> ReplicaRestarts | None:
    """The collector when serve started this router (None otherwise). ValueError for a value
    that is not INDEX=COUNT: serve sets it, so a bad one is a bug worth stopping on."""
    value = os.environ.pop(RESTARTS_ENV, "")  # popped: not inherited by anything it starts
    if not value:
        return None
    replica, sep, count = value.partition("=")
    if not sep or not replica or not count.isdigit():
        raise ValueError(f"{RESTARTS_ENV}={value!r}: expected INDEX=COUNT")
    return ReplicaRestarts(replica, int(count))
