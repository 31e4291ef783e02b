"""RadixPrefixCache: matching pins pages, LRU eviction of unreferenced leaves, KV events."""
from __future__ import annotations

import router_core
from engine.kvcache.events import KVEventLog
from engine.kvcache.page_pool import PagePool
from engine.kvcache.radix_cache import RadixPrefixCache

PS = 4
SEED = router_core.model_seed("test-model")


def _cache(num_pages: int = 8) -> RadixPrefixCache:
    return RadixPrefixCache(PagePool(num_pages), PS, SEED, max_events=64)


def _store(cache: RadixPrefixCache, tokens: list[int]) -> list[int]:
    """A request that computed `tokens` and finished: insert, then drop its own references."""
    pages = cache.alloc(-(-len(tokens) // PS))
    cache.insert(tokens, pages)
    cache.release(pages)
    return pages


def test_match_returns_cached_full_pages_and_pins_them() -> None:
    cache = _cache()
    tokens = list(range(10))  # 2 full pages + 2 tokens
    pages = _store(cache, tokens)
    assert cache.pool.num_used == 2  # the partial third page went back to the pool
    got, matched = cache.match(tokens + [99])
    assert (got, matched) == (pages[:2], 8)
    assert all(cache.pool.refcount(p) == 2 for p in got)
    assert cache.evict(8) == 0  # pinned pages are never evicted
    cache.release(got)
    assert cache.match_len([0, 1, 2, 3, 7, 7, 7, 7]) == 4
    assert cache.match_len([5, 1, 2, 3]) == 0


def test_hashes_are_router_core_block_hashes() -> None:
    cache = _cache()
    tokens = list(range(12))
    _store(cache, tokens)
    last_seq, held = cache.snapshot()
    assert last_seq == 1
    assert sorted(held) == sorted(router_core.block_hashes(tokens, PS, SEED))


def test_lru_evicts_unreferenced_leaves_first() -> None:
    cache = _cache(num_pages=6)
    _store(cache, [1] * 8)  # chain a: 2 pages
    _store(cache, [2] * 8)  # chain b: 2 pages
    cache.release(cache.match([1] * 8)[0])  # touch a: b is now least recently used
    assert cache.evict(1) == 1
    assert cache.match_len([2] * 8) == 4  # b's leaf went first, its root stays
    assert cache.match_len([1] * 8) == 8
    # Pool runs low: alloc evicts what it needs.
    pages = cache.alloc(5)
    assert len(pages) == 5 and len(cache) == 1
    cache.release(pages)
    assert cache.clear() == 1 and cache.pool.num_used == 0


def test_events_have_increasing_seq_and_report_store_and_evict() -> None:
    cache = _cache()
    _store(cache, list(range(8)))
    cache.clear()
    events = cache.events_since(0)
    assert [e.seq for e in events] == [1, 2]
    assert [e.kind for e in events] == ["stored", "evicted"]
    assert set(events[0].hashes) == set(events[1].hashes)
    assert cache.events_since(1) == events[1:]
    assert cache.events_since(2) == []


def test_bounded_event_log_shows_a_gap() -> None:
    log = KVEventLog(max_events=3)
    for i in range(5):
        log.append("stored", [i])
    assert log.last_seq == 5
    assert [e.seq for e in log.since(0)] == [3, 4, 5]  # 1, 2 are gone: first seq != since + 1
    assert [e.seq for e in log.since(3)] == [4, 5]
    assert log.append("evicted", []) is None and log.last_seq == 5


def test_duplicate_block_keeps_existing_page() -> None:
    cache = _cache()
    first = _store(cache, [3] * 4)
    second = cache.alloc(1)
    assert cache.insert([3] * 4, second) == 0  # already cached under another page
    cache.release(second)
    assert cache.match_len([3] * 4) == 4 and cache.pool.num_used == 1
    assert cache.match([3] * 4)[0] == first


def _reference_victims(cache: RadixPrefixCache, n: int) -> list[int]:
    """What a full scan picks (the definition of LRU eviction): repeatedly the least recently
    used (ties: lowest hash) page held only by the cache with no cached children."""
    nodes = {h: (node.last_access, node.parent, node.num_children, cache.pool.refcount(node.page))
             for h, node in cache._nodes.items()}
    victims: list[int] = []
    while len(victims) < n:
        free = [(access, h) for h, (access, _, children, refs) in nodes.items()
                if children == 0 and refs == 1]
        if not free:
            break
        _, h = min(free)
        _, parent, _, _ = nodes.pop(h)
        victims.append(h)
        if parent is not None:
            access, grand, children, refs = nodes[parent]
            nodes[parent] = (access, grand, children - 1, refs)
    return victims


def test_lazy_lru_heap_evicts_exactly_what_a_full_scan_would() -> None:
    import random

    rng = random.Random(7)
    cache = RadixPrefixCache(PagePool(48), PS, SEED, max_events=100_000)
    pinned: list[list[int]] = []
    prefixes = [[rng.randrange(50) for _ in range(PS * 3)] for _ in range(4)]
    for _ in range(600):
        op = rng.random()
        if op < 0.45:  # a request finished: its pages cached (shared prefixes reused)
            tokens = rng.choice(prefixes)[:PS * rng.randrange(4)] + [
                rng.randrange(50) for _ in range(PS * rng.randrange(1, 4))]
            have, matched = cache.match(tokens)
            try:
                fresh = cache.alloc(-(-len(tokens) // PS) - len(have))
            except Exception:  # noqa: BLE001 - pool exhausted by pins: skip this one
                cache.release(have)
                continue
            cache.insert(tokens, have + fresh)
            cache.release(have + fresh)
        elif op < 0.65:  # a running request pins a prefix
            pages, _ = cache.match(rng.choice(prefixes))
            pinned.append(pages)
        elif op < 0.8 and pinned:
            cache.release(pinned.pop(rng.randrange(len(pinned))))
        else:
            n = rng.randrange(1, 6)
            expected = _reference_victims(cache, n)
            before = set(cache._nodes)
            assert cache.evict(n) == len(expected)
            assert before - set(cache._nodes) == set(expected)
    assert len(cache._lru) <= 2 * len(cache) + 64 + 64  # outdated entries stay bounded


def test_num_evictable_counts_every_cached_page_only_the_cache_holds() -> None:
    """The count kept at C speed agrees with a scan of the nodes through stores, pins, releases
    and evictions (shared prefixes included)."""
    import random

    rng = random.Random(7)
    cache = _cache(num_pages=24)
    pinned: list[list[int]] = []

    def scan() -> int:
        return sum(1 for n in cache._nodes.values() if cache.pool.refcount(n.page) == 1)

    for _ in range(300):
        action = rng.random()
        tokens = [rng.randrange(3) for _ in range(rng.randrange(4, 13))]
        if action < 0.4 and cache.pool.num_free + cache.num_evictable() >= 4:
            _store(cache, tokens)
        elif action < 0.7:
            pages, _ = cache.match(tokens)
            pinned.append(pages)
        elif pinned:
            cache.release(pinned.pop(rng.randrange(len(pinned))))
        else:
            cache.evict(rng.randrange(1, 4))
        assert cache.num_evictable() == scan()
