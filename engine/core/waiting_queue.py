"""WaitingQueue: the scheduler's queue of requests not running yet, ordered by priority (lower
first, the request's SamplingParams.priority), then by first-token deadline (earliest first),
then by arrival.

A request's deadline is the time its first token is due on the engine's clock (the call's
`first_token_due_ms` from its receipt; the router sets it from the request's TTFT objective).
Within a priority, requests without a deadline sort after every request with one — they asked
for nothing — and first come, first served among themselves; with no deadline anywhere and
every priority 0 the queue is exactly a FIFO. New requests join behind every queued request of
the same (priority, deadline) key or a smaller one.

A preempted request rejoins ahead of the requests it was ahead of before:
- one whose client has seen tokens (produced here or by an earlier segment elsewhere: a stream
  stalled mid-way, each step it waits a gap its client sees) rejoins at the front of its priority, before any deadline: its first-token deadline is
  behind it;
- one that has not (its first token, or a send's K/V, still to come) rejoins at the front of
  its own key: it was admitted before every waiting request of that key, and an earlier
  deadline (or a lower priority number) may still pass it.
With no deadlines both rules are the one they replace: the front of its priority.

The order only decides when a request is scheduled, never its tokens (the engines are batch
invariant).
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterator

from engine.core.request import Request

# (priority, first-token deadline on the engine's clock; +inf for none). Lower sorts first.
ScheduleKey = tuple[int, float]


def schedule_key(request: Request) -> ScheduleKey:
    """The key the scheduler orders requests by (before arrival): priority, then deadline."""
    due = request.first_token_due
    return request.priority, math.inf if due is None else due


class WaitingQueue:
    def __init__(self) -> None:
        self._requests: list[Request] = []
        # The key of each entry of _requests, kept beside it for bisect.
        self._keys: list[ScheduleKey] = []

    def add(self, request: Request) -> None:
        """Behind every queued request of the same or a smaller key."""
        key = schedule_key(request)
        self._insert(bisect.bisect_right(self._keys, key), key, request)

    def requeue(self, request: Request) -> None:
        """A preempted request (the module's docstring says where it goes and why). One whose
        stream has started is kept under the key (priority, -inf), so the keys stay sorted."""
        key = (request.priority, -math.inf) if request.has_streamed else schedule_key(request)
        self._insert(bisect.bisect_left(self._keys, key), key, request)

    def _insert(self, at: int, key: ScheduleKey, request: Request) -> None:
        self._requests.insert(at, request)
        self._keys.insert(at, key)

    def head(self) -> Request:
        return self._requests[0]

    def pop_head(self) -> Request:
        del self._keys[0]
        return self._requests.pop(0)

    def remove(self, request: Request) -> None:
        at = self._requests.index(request)
        del self._requests[at]
        del self._keys[at]

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
