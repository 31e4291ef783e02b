"""PageCheck: run the page-ownership audit (engine/kvcache/page_audit.py) over an engine's state.

Called under the engine lock after every verb that takes or gives back pages and after every
step, when EngineConfig.check_pages is on. A problem is logged and counted, and Stats reports the
counts (kv_page_audits, kv_page_audit_failures): a test drives the engine through its gRPC
verbs — several routers, concurrent requests — and asserts that audits ran and none failed.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

from engine.core.request import Request
from engine.core.reservations import HeldReservation
from engine.kvcache.page_audit import PageOwner, audit_pages
from engine.kvcache.radix_cache import RadixPrefixCache

log = logging.getLogger("switchyard.engine")

_LOGGED_PROBLEMS = 20  # per failed audit: enough to see the pattern, not a flood


class PageCheck:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.audits = 0
        self.failures = 0

    def run(self, where: str, cache: RadixPrefixCache, requests: Iterable[Request],
            reservations: Iterable[HeldReservation]) -> None:
        if not self.enabled:
            return
        page_size = cache.page_size
        owners = [PageOwner(f"request {r.request_id}", r.page_table, r.num_computed // page_size)
                  for r in requests]
        # A reservation receives K/V past its cached prefix until every layer has arrived.
        owners += [PageOwner(f"reservation {h.reservation.request_id}", h.reservation.page_table,
                             len(h.reservation.page_table) if h.committed
                             else h.reservation.matched_len // page_size)
                   for h in reservations]
        problems = audit_pages(cache.pool, cache.cached_pages(), owners)
        self.audits += 1
        if problems:
            self.failures += 1
            log.error("KV page audit after %s found %d problems: %s", where, len(problems),
                      "; ".join(problems[:_LOGGED_PROBLEMS]))
