"""WaitingQueue: the scheduler's queue of requests not running yet, ordered by priority (lower
first, the request's SamplingParams.priority), then by arrival.

New requests join behind every queued request of their priority or a lower number, so among
equal priorities the queue is first come, first served — with every priority 0 it is exactly a
FIFO. A preempted request rejoins at the front of its own priority: it arrived before anything
of its priority still waiting, and a lower number may still pass it.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterator

from engine.core.request import Request


class WaitingQueue:
    def __init__(self) -> None:
        self._requests: list[Request] = []
        # The priority of each entry of _requests, kept beside it for bisect.
        self._priorities: list[int] = []

    def add(self, request: Request) -> None:
        """Behind every queued request of the same or a lower priority number."""
        self._insert(bisect.bisect_right(self._priorities, request.priority), request)

    def requeue(self, request: Request) -> None:
        """A preempted request: ahead of every queued request of its priority."""
        self._insert(bisect.bisect_left(self._priorities, request.priority), request)

    def _insert(self, at: int, request: Request) -> None:
        self._requests.insert(at, request)
        self._priorities.insert(at, request.priority)

    def head(self) -> Request:
        return self._requests[0]

    def pop_head(self) -> Request:
        del self._priorities[0]
        return self._requests.pop(0)

    def remove(self, request: Request) -> None:
        at = self._requests.index(request)
        del self._requests[at]
        del self._priorities[at]

    def __contains__(self, request: object) -> bool:
        return request in self._requests

    def __iter__(self) -> Iterator[Request]:
        return iter(self._requests)

    def __len__(self) -> int:
        return len(self._requests)

    def __bool__(self) -> bool:
        return bool(self._requests)

    def __getitem__(self, index: int) -> Request:
        return self._requests[index]
