"""PagePool: reference counts, all-or-nothing allocation, double free is an invariant error."""
from __future__ import annotations

import pytest

from engine.kvcache.page_pool import OutOfPages, PagePool


def test_alloc_free_roundtrip() -> None:
    pool = PagePool(4)
    pages = pool.alloc(3)
    assert len(set(pages)) == 3 and pool.num_used == 3 and pool.num_free == 1
    pool.incref(pages[:1])
    pool.decref(pages)
    assert pool.num_used == 1 and pool.refcount(pages[0]) == 1
    pool.decref(pages[:1])
    assert pool.num_used == 0 and pool.num_free == 4


def test_out_of_pages_allocates_nothing() -> None:
    pool = PagePool(2)
    pool.alloc(1)
    with pytest.raises(OutOfPages):
        pool.alloc(2)
    assert pool.num_free == 1


def test_double_free_is_an_invariant_error() -> None:
    pool = PagePool(2)
    (page,) = pool.alloc(1)
    pool.decref([page])
    with pytest.raises(AssertionError):
        pool.decref([page])
    with pytest.raises(AssertionError):
        pool.incref([page])


def test_bad_sizes() -> None:
    with pytest.raises(ValueError):
        PagePool(0)
    with pytest.raises(ValueError):
        PagePool(2).alloc(-1)


def test_cache_only_count_follows_references() -> None:
    pool = PagePool(4)
    a, b = pool.alloc(2)
    pool.incref([a, b])  # the cache's reference
    pool.set_cached([a, b], True)
    assert pool.num_cache_only == 0  # the request still holds both
    pool.decref([a])  # the request lets a go
    assert pool.num_cache_only == 1
    pool.incref([a])  # another request matches it
    assert pool.num_cache_only == 0
    pool.decref([a, b])
    assert pool.num_cache_only == 2
    pool.set_cached([a], False)  # evicted: the cache drops its reference
    pool.decref([a])
    assert pool.num_cache_only == 1 and pool.num_free == 3
