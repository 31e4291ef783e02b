"""KV events: the stored/evicted block hashes a router's prefix index is fed with.

Each store or evict gets the next sequence number. The log is bounded; a consumer that asks for
events older than the log holds sees a gap (the first returned seq is not `since + 1`) and must
ask for a snapshot instead, exactly as the proto's KVEvents stream describes.
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Literal

KVEventKind = Literal["stored", "evicted"]


@dataclass(frozen=True, slots=True)
class KVEvent:
    seq: int
    kind: KVEventKind
    hashes: tuple[int, ...]


class KVEventLog:
    def __init__(self, max_events: int = 8192) -> None:
        if max_events <= 0:
            raise ValueError(f"max_events must be positive, got {max_events}")
        self._events: deque[KVEvent] = deque(maxlen=max_events)
        self._last_seq = 0

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest event (0 before the first)."""
        return self._last_seq

    def append(self, kind: KVEventKind, hashes: list[int]) -> KVEvent | None:
        if not hashes:
            return None
        self._last_seq += 1
        event = KVEvent(self._last_seq, kind, tuple(hashes))
        self._events.append(event)
        return event

    def since(self, seq: int) -> list[KVEvent]:
        """Events with sequence number > seq that are still in the log, oldest first."""
        if seq >= self._last_seq:
            return []
        # Walk back from the newest: a poller that keeps up pays for the new events only.
        wanted = min(self._last_seq - seq, len(self._events))
        return list(itertools.islice(reversed(self._events), wanted))[::-1]
