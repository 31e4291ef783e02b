"""RadixPrefixCache: full KV pages shared between requests, keyed by chained block hashes.

Because block i's hash chains over blocks 0..i (router_core.block_hashes), a flat map
hash -> node is a radix tree over pages: a node's parent is the previous block's hash. The cache
holds one pool reference per cached page; `match` adds one for the caller (pinning), and only
pages whose sole owner is the cache, with no cached children, are evictable (LRU). Every store
and evict appends a KV event so a router can mirror what this engine holds.

Eviction keeps a lazy LRU heap of (last_access, hash) over the pages without cached children
(only those are ever evictable): an access pushes a fresh entry for the leaf it reaches, an
inner page gets one when its last child is evicted, and outdated entries are skipped when
popped. So freeing a page costs O(log n) amortised instead of a scan of every cached page (an
engine whose pool is full evicts on almost every allocation). The heap is rebuilt from the
leaves when outdated entries outnumber live ones.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import router_core
from engine.kvcache.events import KVEvent, KVEventLog
from engine.kvcache.page_pool import OutOfPages, PagePool


@dataclass(slots=True)
class _Node:
    block_hash: int
    parent: int | None
    page: int
    # The block's tokens, compared on match so a 64-bit hash collision can never serve wrong KV.
    tokens: tuple[int, ...]
    last_access: int
    num_children: int = 0


class RadixPrefixCache:
    def __init__(self, pool: PagePool, page_size: int, seed: int,
                 max_events: int = 8192) -> None:
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, got {page_size}")
        self.pool = pool
        self.page_size = page_size
        self.seed = seed
        self.events = KVEventLog(max_events)
        self._nodes: dict[int, _Node] = {}
        self._clock = 0  # logical time for LRU; monotonic, unlike wall clocks
        # (last_access, block_hash) of every node's latest access, plus outdated entries.
        self._lru: list[tuple[int, int]] = []
        # Tokens looked up by requests and reservations, and how many of them hit (metrics).
        self.queried_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def num_pages(self) -> int:
        return len(self._nodes)

    def cached_pages(self) -> list[int]:
        """The page of every cached block (the cache holds one reference to each)."""
        return [node.page for node in self._nodes.values()]

    def hashes(self, tokens: Sequence[int]) -> list[int]:
        return router_core.block_hashes(tokens, self.page_size, self.seed)

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _touch_leaf(self, node: _Node) -> None:
        """Give a page without cached children its current heap entry (only such pages are
        ever evicted; an inner page gets one when its last child is evicted)."""
        if not node.num_children:
            heapq.heappush(self._lru, (node.last_access, node.block_hash))

    def _compact(self) -> None:
        """Drop outdated heap entries once they outnumber the live ones."""
        if len(self._lru) > 2 * len(self._nodes) + 64:
            self._lru = [(node.last_access, h) for h, node in self._nodes.items()
                         if not node.num_children]
            heapq.heapify(self._lru)

    def _lookup(self, tokens: Sequence[int]) -> list[_Node]:
        nodes: list[_Node] = []
        for i, block_hash in enumerate(self.hashes(tokens)):
            node = self._nodes.get(block_hash)
            block = tuple(tokens[i * self.page_size:(i + 1) * self.page_size])
            if node is None or node.tokens != block:
                break
            nodes.append(node)
        return nodes

    def match_len(self, tokens: Sequence[int]) -> int:
        """Length of the longest cached prefix of `tokens` (a multiple of page_size); pins nothing."""
        return len(self._lookup(tokens)) * self.page_size

    def match(self, tokens: Sequence[int]) -> tuple[list[int], int]:
        """(pages, matched_len) of the longest cached prefix; the caller owns one reference to each
        returned page and gives it back with `release` (or the pool's decref)."""
        nodes = self._lookup(tokens)
        now = self._tick()
        for node in nodes:
            node.last_access = now
        if nodes:
            self._touch_leaf(nodes[-1])
            self._compact()
        pages = [node.page for node in nodes]
        self.pool.incref(pages)
        self.queried_tokens += len(tokens)  # prefix-cache hit rate (engine metrics)
        self.hit_tokens += len(pages) * self.page_size
        return pages, len(pages) * self.page_size

    def release(self, pages: Sequence[int]) -> None:
        self.pool.decref(pages)

    def insert(self, tokens: Sequence[int], pages: Sequence[int]) -> int:
        """Cache the full pages of `tokens` (KV of tokens[:k*page_size] lives in pages[:k]).
        Blocks already cached keep their existing page. Returns the number of newly stored pages."""
        hashes = self.hashes(tokens)[:len(pages)]
        now = self._tick()
        stored: list[int] = []
        taken: list[int] = []  # the new nodes' pages: one reference each, taken at the end
        parent: int | None = None
        node: _Node | None = None
        for i, block_hash in enumerate(hashes):
            node = self._nodes.get(block_hash)
            if node is not None and node.page == pages[i]:
                # The caller's own page is the cached one (it matched it, or stored it before):
                # the same KV, so the same tokens; no compare. A finishing request re-offers its
                # whole prompt, already cached at its first token: this is most blocks.
                node.last_access = now
                parent = block_hash
                continue
            block = tuple(tokens[i * self.page_size:(i + 1) * self.page_size])
            if node is not None:
                if node.tokens != block:
                    node = self._nodes[parent] if parent is not None else None
                    break  # hash collision: keep the existing block, cache nothing below it
                node.last_access = now
            else:
                taken.append(pages[i])
                node = self._nodes[block_hash] = _Node(block_hash, parent, pages[i], block, now)
                if parent is not None:
                    self._nodes[parent].num_children += 1
                stored.append(block_hash)
            parent = block_hash
        self.pool.incref(taken)
        self.pool.set_cached(taken, True)
        if node is not None:
            self._touch_leaf(node)
            self._compact()
        self.events.append("stored", stored)
        return len(stored)

    def _evictable(self, node: _Node) -> bool:
        return node.num_children == 0 and self.pool.refcount(node.page) == 1

    def evict(self, n: int) -> int:
        """Free up to n pages, least recently used first, among pages no request holds.
        Returns the number of pages freed."""
        if n <= 0:
            return 0
        heap = self._lru
        evicted: list[int] = []
        held: list[tuple[int, int]] = []  # live entries of pages in use now
        while heap and len(evicted) < n:
            entry = heapq.heappop(heap)
            node = self._nodes.get(entry[1])
            if node is None or node.last_access != entry[0]:
                continue  # outdated: the page was evicted or accessed since
            if node.num_children:
                continue  # re-entered when its last child goes (below)
            if self.pool.refcount(node.page) != 1:
                held.append(entry)
                continue
            del self._nodes[node.block_hash]
            self.pool.set_cached([node.page], False)
            self.pool.decref([node.page])
            evicted.append(node.block_hash)
            if node.parent is not None:
                parent = self._nodes[node.parent]
                parent.num_children -= 1
                if not parent.num_children:  # a chain frees from its tail upwards
                    heapq.heappush(heap, (parent.last_access, parent.block_hash))
        for entry in held:
            heapq.heappush(heap, entry)
        self.events.append("evicted", evicted)
        return len(evicted)

    def alloc(self, n: int) -> list[int]:
        """n fresh pages from the pool, evicting unreferenced cached pages if the pool runs low."""
        shortfall = n - self.pool.num_free
        if shortfall > 0 and self.evict(shortfall) < shortfall:
            raise OutOfPages(f"need {n} pages; {self.pool.num_free} free and nothing left to evict")
        return self.pool.alloc(n)

    def num_evictable(self) -> int:
        """Pages that evict() could free right now (whole unreferenced chains count): kept
        by the pool as references come and go (every Stats answer asks)."""
        return self.pool.num_cache_only

    def clear(self) -> int:
        """Evict everything evictable (tests use it to check the pool's accounting)."""
        return self.evict(len(self._nodes))

    def events_since(self, seq: int) -> list[KVEvent]:
        return self.events.since(seq)

    def snapshot(self) -> tuple[int, list[int]]:
        """(last event seq, every block hash held) — a consistent view for a router to reload."""
        return self.events.last_seq, list(self._nodes)
