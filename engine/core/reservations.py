"""Reservations made by prep_recv: pages held under a lease until a transfer fills them.

Writes are tracked per layer and position, so the engine knows how much of a reservation really
arrived: a complete one is offered to the prefix cache (migration = prep_recv + send with no
generation), and a generation only trusts the fully written prefix (anything else is recomputed).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.core.outputs import Reservation
from engine.core.step_trace import ReceiveStats
from engine.kvcache.page_pool import OutOfPages
from engine.kvcache.radix_cache import RadixPrefixCache
from switchyard_engine_api.errors import LeaseExpired, NoCapacity, UnknownRequest

_EXPIRED_MEMORY = 4096  # expired ids remembered so a late write says LeaseExpired, not Unknown


@dataclass(slots=True)
class HeldReservation:
    reservation: Reservation
    tokens: list[int]  # tokens[:end]
    written: torch.Tensor  # bool [num_layers, end - matched_len]
    lease_s: float
    committed: bool = False
    received: ReceiveStats = field(default_factory=ReceiveStats)
    trace: Any = None  # the caller's trace context for the receive (opaque here)
    reported: bool = False  # on_received has seen it

    def written_upto(self) -> int:
        """End of the prefix [0, p) whose K/V is present for every layer."""
        missing = (~self.written.all(dim=0)).nonzero()
        res = self.reservation
        return res.matched_len + (int(missing[0]) if missing.numel() else res.end - res.matched_len)


class ReservationTable:
    def __init__(self, cache: RadixPrefixCache, num_layers: int) -> None:
        self.cache = cache
        self.num_layers = num_layers
        self._held: dict[str, HeldReservation] = {}
        self._expired: OrderedDict[str, None] = OrderedDict()
        # Told once per reservation that received KV: when complete, or when taken / released
        # with part of it (the server's metrics and spans; called under the engine lock).
        self.on_received: Callable[[HeldReservation], None] | None = None

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._held

    @property
    def num_pages(self) -> int:
        return sum(len(h.reservation.page_table) for h in self._held.values())

    def held(self) -> list[HeldReservation]:
        return list(self._held.values())

    def create(self, request_id: str, tokens: list[int], end: int,
               lease_s: float, trace: Any = None) -> Reservation:
        pages, matched = self.cache.match(tokens[:end])
        try:
            pages += self.cache.alloc(-(-end // self.cache.page_size) - len(pages))
        except OutOfPages as exc:
            self.cache.release(pages)
            raise NoCapacity(f"no KV pages for a reservation of {end} tokens: {exc}") from exc
        reservation = Reservation(request_id, matched, end, pages, time.monotonic() + lease_s)
        written = torch.zeros(self.num_layers, end - matched, dtype=torch.bool)
        self._held[request_id] = HeldReservation(reservation, list(tokens[:end]), written, lease_s,
                                                 trace=trace)
        self._expired.pop(request_id, None)
        return reservation

    def get(self, request_id: str) -> HeldReservation:
        held = self._held.get(request_id)
        if held is not None:
            return held
        if request_id in self._expired:
            raise LeaseExpired(f"reservation {request_id!r} expired or was aborted")
        raise UnknownRequest(f"no reservation {request_id!r}")

    def take(self, request_id: str) -> HeldReservation | None:
        """Hand the reservation (and its page references) to a request."""
        held = self._held.pop(request_id, None)
        if held is not None:
            self._report(held)
        return held

    def release(self, request_id: str) -> bool:
        held = self._held.pop(request_id, None)
        if held is None:
            return False
        self._report(held)
        self.cache.release(held.reservation.page_table)
        self._expired[request_id] = None
        while len(self._expired) > _EXPIRED_MEMORY:
            self._expired.popitem(last=False)
        return True

    def expire(self, now: float) -> list[str]:
        expired = [rid for rid, h in self._held.items() if h.reservation.expires_at <= now]
        for request_id in expired:
            self.release(request_id)
        return expired

    def _report(self, held: HeldReservation) -> None:
        if not held.reported and held.received.writes and self.on_received is not None:
            held.reported = True
            self.on_received(held)

    def mark_written(self, held: HeldReservation, layer: int, start: int, stop: int,
                     nbytes: int = 0) -> None:
        received = held.received
        now = time.perf_counter()
        received.first_at = received.first_at or now
        received.last_at = now
        received.bytes += nbytes
        received.writes += 1
        received.layers.add(layer)
        matched = held.reservation.matched_len
        held.written[layer, start - matched:stop - matched] = True
        # A transfer still writing is alive: the lease only reclaims reservations nobody fills, so
        # a long sender-side prefill (minutes on a CPU) never loses its receiver mid-way.
        held.reservation.expires_at = max(held.reservation.expires_at,
                                          time.monotonic() + held.lease_s)
        if not held.committed and bool(held.written.all()):
            # Complete: the received prefix is now as good as locally computed KV.
            held.committed = True
            self.cache.insert(held.tokens, held.reservation.page_table)
            self._report(held)
