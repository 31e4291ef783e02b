"""After the soak: is anything left held? Per engine (through its Stats) requests running or
queued, KV leases and the pages they reserve, pages used beyond what the prefix cache holds
(leaked pages), and failed page-ownership audits (a page booked twice; engines started with
SWITCHYARD_CHECK_KV_PAGES=1 run them); for the router, requests it still counts in flight
(/metrics)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from switchyard_engine_api.client import EngineClient


@dataclass(frozen=True, slots=True)
class EngineAudit:
    address: str
    running: int
    queued: int
    leases: int
    pages_used: int
    cached_blocks: int
    reserved_pages: int = 0
    page_audits: int = 0  # 0 unless the engine checks its pages (SWITCHYARD_CHECK_KV_PAGES=1)
    page_audit_failures: int = 0

    @property
    def leaked_pages(self) -> int:
        return self.pages_used - self.cached_blocks

    @property
    def clean(self) -> bool:
        return not (self.running or self.queued or self.leases or self.reserved_pages
                    or self.leaked_pages or self.page_audit_failures)


async def audit_engine(address: str, settle_s: float = 60.0) -> EngineAudit:
    """Waits up to `settle_s` for the engine to be idle (leases expire, aborts land)."""
    deadline = time.monotonic() + settle_s
    async with EngineClient(address, timeout_s=10.0) as client:
        while True:
            s = await client.stats()
            result = EngineAudit(address, int(s.running_requests), int(s.queued_requests),
                                 int(s.leases), int(s.kv_pages_used), int(s.cached_blocks),
                                 int(s.kv_pages_reserved), int(s.kv_page_audits),
                                 int(s.kv_page_audit_failures))
            if result.clean or time.monotonic() > deadline:
                return result
            await asyncio.sleep(0.5)


async def router_inflight(base: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith("switchyard:router_requests_in_flight "):
            return float(line.split()[1])
    return float("nan")
