"""engine/kvcache/page_audit.py: the audit accepts honest bookkeeping and names each way pages
can be booked twice or lost (the engine runs it with SWITCHYARD_CHECK_KV_PAGES=1)."""
from __future__ import annotations

from engine.kvcache.page_audit import PageOwner, audit_pages
from engine.kvcache.page_pool import PagePool


def _pool_with(owners: list[PageOwner], cached: list[int], num_pages: int = 8) -> PagePool:
    """A pool whose references are exactly what `owners` and `cached` hold."""
    pool = PagePool(num_pages)
    for page in [*cached, *(p for o in owners for p in o.pages)]:
        if pool.refcount(page):
            pool.incref([page])
        else:  # the pool hands out the lowest free id first: list pages from 0 up
            assert pool.alloc(1) == [page], "pages must first appear in the order 0, 1, ..."
    return pool


def test_shared_cached_prefix_and_private_tails_pass():
    # Two reservations pin the cached prefix (pages 0, 1) and each writes its own tail.
    a = PageOwner("reservation a", [0, 1, 2], writable_from=2)
    b = PageOwner("reservation b", [0, 1, 3], writable_from=2)
    assert audit_pages(_pool_with([a, b], cached=[0, 1]), [0, 1], [a, b]) == []


def test_a_page_two_owners_write_is_double_booked():
    a = PageOwner("reservation a", [0, 1], writable_from=1)
    b = PageOwner("request b", [2, 1], writable_from=1)
    pool = _pool_with([a, b], cached=[])
    problems = audit_pages(pool, [], [a, b])
    assert "page 1 is written by reservation a and request b" in problems
    assert "page 1, which request b still writes, has 2 holders" in problems


def test_a_written_page_the_cache_also_holds_is_double_booked():
    a = PageOwner("request a", [0, 1], writable_from=1)  # page 0 shared read-only: fine
    pool = _pool_with([a], cached=[0, 1])
    assert audit_pages(pool, [0, 1], [a]) == ["page 1, which request a still writes, has 2 holders"]


def test_reference_counts_must_match_the_holders():
    a = PageOwner("request a", [0, 1], writable_from=2)
    pool = _pool_with([a], cached=[])
    pool.incref([1])  # a reference nobody holds: page 1 would never be freed (a leak)
    assert audit_pages(pool, [], [a]) == ["page 1 counts 2 references for 1 holders"]
    pool.decref([1, 1])  # now a holder's page is free: the next alloc would hand it out again
    problems = audit_pages(pool, [], [a])
    assert "page 1 counts 0 references for 1 holders" in problems


def test_a_used_page_in_the_free_list_is_found():
    a = PageOwner("request a", [0], writable_from=0)
    pool = _pool_with([a], cached=[])
    pool._free.append(0)  # corrupt the free list directly: page 0 would be handed out twice
    problems = audit_pages(pool, [], [a])
    assert "page 0 has 1 references and is free" in problems
    pool._free.append(5)  # 5 is already free
    assert "1 pages are in the free list twice" in audit_pages(pool, [], [a])
