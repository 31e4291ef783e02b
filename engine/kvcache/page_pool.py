"""PagePool: which KV pages are free, and how many owners each used page has.

A page is owned by requests (their page tables), reservations and the prefix cache, each holding
one reference. A page returns to the free list when its last reference is dropped. Dropping a
reference that does not exist is a bookkeeping bug, so it is an AssertionError, not user error.

The pool also knows which pages the prefix cache holds, and keeps count of those whose only
owner is the cache (`num_cache_only`: what eviction could free, reported in every Stats) as
references come and go, so the count costs nothing to read however large the cache.
"""
from __future__ import annotations

from collections.abc import Iterable


class OutOfPages(Exception):
    """Not enough free pages for an allocation (after whatever eviction the caller tried)."""


class PagePool:
    def __init__(self, num_pages: int) -> None:
        if num_pages <= 0:
            raise ValueError(f"num_pages must be positive, got {num_pages}")
        self.num_pages = num_pages
        self._refcount = [0] * num_pages
        # Pop from the end; low page ids are handed out first, which keeps tests readable.
        self._free = list(range(num_pages - 1, -1, -1))
        self._cached = bytearray(num_pages)  # 1: the prefix cache holds one of its references
        self.num_cache_only = 0  # cached pages with no other owner

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_pages - len(self._free)

    def refcount(self, page: int) -> int:
        return self._refcount[page]

    def free_pages(self) -> list[int]:
        """A copy of the free list (engine/kvcache/page_audit.py checks it)."""
        return list(self._free)

    def set_cached(self, pages: Iterable[int], cached: bool) -> None:
        """The prefix cache took (True) or is about to drop (False) its reference to `pages`."""
        flag = int(cached)
        for page in pages:
            if self._cached[page] != flag:
                self._cached[page] = flag
                if self._refcount[page] == 1:
                    self.num_cache_only += 1 if cached else -1

    def alloc(self, n: int) -> list[int]:
        """n fresh pages, each with one reference. All-or-nothing."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} pages")
        if n > len(self._free):
            raise OutOfPages(f"need {n} pages, {len(self._free)} of {self.num_pages} free")
        pages = [self._free.pop() for _ in range(n)]
        for page in pages:
            self._refcount[page] = 1
        return pages

    def incref(self, pages: Iterable[int]) -> None:
        refcount, cached = self._refcount, self._cached
        for page in pages:
            refs = refcount[page]
            assert refs > 0, f"incref of free page {page}"
            refcount[page] = refs + 1
            if refs == 1 and cached[page]:
                self.num_cache_only -= 1

    def decref(self, pages: Iterable[int]) -> None:
        refcount, cached = self._refcount, self._cached
        for page in pages:
            refs = refcount[page] - 1
            assert refs >= 0, f"double free of page {page}"
            refcount[page] = refs
            if refs == 1:
                if cached[page]:
                    self.num_cache_only += 1
            elif refs == 0:
                self._free.append(page)
