"""Page-ownership audit: no KV page is booked twice, and none is lost.

Every used page is held by owners — request page tables, PrepRecv reservations, and the prefix
cache (one reference per cached block) — and the pool counts one reference per holder. Pages an
owner will still write K/V into (a request past what it has computed, a reservation past its
cached prefix until it is complete) must be that owner's alone: a second holder of such a page
is a double booking (two requests' K/V in one page). Free pages have no holder and are in the
free list exactly once.

The audit walks every page, so it is opt-in (EngineConfig.check_pages,
SWITCHYARD_CHECK_KV_PAGES=1): tests that run several routers over one engine turn it on and read
the engine's Stats; serving does not pay for it.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.kvcache.page_pool import PagePool


@dataclass(frozen=True, slots=True)
class PageOwner:
    """One holder of page references: `pages[writable_from:]` are still to be written by it."""

    name: str  # "request <id>", "reservation <id>": what a failure message names
    pages: Sequence[int]
    writable_from: int


def audit_pages(pool: PagePool, cached_pages: Iterable[int], owners: Iterable[PageOwner]
                ) -> list[str]:
    """What is wrong with the pool's bookkeeping given these holders (empty: nothing)."""
    problems: list[str] = []
    holders: Counter[int] = Counter(cached_pages)
    writer: dict[int, str] = {}
    for owner in owners:
        holders.update(owner.pages)
        for page in owner.pages[owner.writable_from:]:
            if page in writer:
                problems.append(f"page {page} is written by {writer[page]} and {owner.name}")
            writer[page] = owner.name
    for page, name in writer.items():
        if holders[page] != 1:
            problems.append(f"page {page}, which {name} still writes, has {holders[page]} holders")
    free = pool.free_pages()
    free_set = set(free)
    if len(free_set) != len(free):
        problems.append(f"{len(free) - len(free_set)} pages are in the free list twice")
    for page in range(pool.num_pages):
        refs = pool.refcount(page)
        if refs != holders[page]:
            problems.append(f"page {page} counts {refs} references for {holders[page]} holders")
        if (refs == 0) != (page in free_set):
            problems.append(f"page {page} has {refs} references and is "
                            f"{'' if page in free_set else 'not '}free")
    return problems
