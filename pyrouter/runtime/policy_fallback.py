"""PolicyFallback: a policy whose requests keep failing is replaced by the one it replaced.

A policy switched in with PUT /admin/policy can be wrong in ways its parameters do not show (a
bug in a policy file, a parameter that only fails at run time). When `limit` requests in a row
fail because of the policy itself (a PolicyFailed, or a 400 the policy raised — never an engine
failure or no capacity), the slot goes back to the previous policy, once: the fallback is logged
and counted (`switchyard:policy_switches{kind="policy_fallback"}`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyrouter.cluster import EventSink
    from pyrouter.runtime.dispatch import PolicySlot
    from pyrouter.runtime.policy_registry import ActivePolicy

log = logging.getLogger("switchyard.router")


class PolicyFallback:
    def __init__(self, slot: PolicySlot, limit: int = 20, events: EventSink | None = None
                 ) -> None:
        self.slot = slot
        self.limit = limit
        self.events = events
        self.fallbacks = 0
        self._failing: ActivePolicy | None = None
        self._streak = 0

    def record(self, active: ActivePolicy, policy_failed: bool) -> None:
        """A request admitted under `active` got its first chunk, or failed (`policy_failed`:
        because of the policy)."""
        if active is not self.slot.current:
            return  # a request of a policy already replaced
        if not policy_failed:
            if self._failing is active:
                self._streak = 0
            return
        if self._failing is not active:
            self._failing, self._streak = active, 0
        self._streak += 1
        previous = self.slot.previous
        if self._streak < self.limit or previous is None:
            return
        detail = f"{active.name}->{previous.name} ({self.limit} failed in a row)"
        log.error("policy %r: %d requests in a row failed because of the policy; switching "
                  "back to %r %s", active.name, self._streak, previous.name, previous.params)
        self.slot.fall_back()
        self.fallbacks += 1
        self._failing, self._streak = None, 0
        if self.events is not None:
            self.events("policy_fallback", detail)
