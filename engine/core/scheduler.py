"""Scheduler: continuous batching with chunked prefill, priority admission and preemption.

Each step: (1) every running decode gets its one token — decodes go first so a long prefill never
starves them; (2) running prefills continue by (priority, first-token deadline), oldest first
among equals, under the per-step prefill token budget (chunk_size); (3) waiting requests are
admitted by (priority, first-token deadline, arrival) while budget, pages and max_running allow
(engine/core/waiting_queue.py: a request without a deadline after every one with one of its
priority; with no deadlines and every priority equal, first come first served). A deadline is
the call's `first_token_due_ms` on the engine's clock: the router sets it from the request's TTFT
objective, so a request it admitted is not left behind work that can wait. When a running
request needs a page and none is free (after evicting unreferenced cached pages), the
lowest-priority running request not yet scheduled this step — the newest of them — is preempted
by recompute: its pages are released and it goes back to the queue (at the front of its priority
once its stream has started, else at the front of its key: waiting_queue.py), keeping the tokens
it generated as part of its prompt. A waiting request never preempts a running one: priorities
and deadlines order the queue, they do not stop work already admitted. The order decides only
when a request runs, never its tokens.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.batch import ScheduledChunk
from engine.core.latency_model import StepShape
from engine.core.request import Request
from engine.core.waiting_queue import WaitingQueue, schedule_key
from engine.kvcache.page_pool import OutOfPages
from engine.kvcache.radix_cache import RadixPrefixCache


@dataclass(slots=True)
class ScheduledWork:
    request: Request
    chunk: ScheduledChunk


@dataclass(slots=True)
class SchedulerOutput:
    work: list[ScheduledWork] = field(default_factory=list)
    # Sends whose whole range was already cached: done without running the model.
    no_compute: list[Request] = field(default_factory=list)
    # Requests that alone need more pages than the pool has: they end with "length".
    too_long: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    def shape(self) -> StepShape:
        """What the latency model sees of this step (call before the step changes requests)."""
        decodes = [w.chunk for w in self.work if w.request.is_decode]
        return StepShape(
            tuple((w.chunk.start_pos, len(w.chunk.token_ids)) for w in self.work
                  if not w.request.is_decode),
            len(decodes), sum(c.start_pos + 1 for c in decodes))


class Scheduler:
    def __init__(self, cache: RadixPrefixCache, chunk_size: int, max_running: int) -> None:
        self.cache = cache
        self.pool = cache.pool
        self.page_size = cache.page_size
        # The prefill token budget per step; EngineCore.set_chunk_size changes it at run time.
        self.chunk_size = chunk_size
        self.max_running = max_running
        self.waiting = WaitingQueue()
        self.running: list[Request] = []
        self.num_preemptions = 0  # since start (engine metrics)

    def add(self, request: Request) -> None:
        self.waiting.add(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def queued_prefill_tokens(self) -> int:
        """Prefill tokens not computed yet: waiting requests and running ones still prefilling."""
        return (sum(r.pending for r in self.waiting)
                + sum(r.pending for r in self.running if not r.is_decode))

    def longest_queued_prefill_tokens(self) -> int:
        """The most prefill tokens one waiting or still-prefilling request has left."""
        return max([r.pending for r in self.waiting]
                   + [r.pending for r in self.running if not r.is_decode], default=0)

    def decode_load(self) -> tuple[int, int]:
        """(decoding requests, KV positions their next step reads in all)."""
        decodes = [r for r in self.running if r.is_decode]
        return len(decodes), sum(r.num_computed + 1 for r in decodes)

    def find(self, request_id: str) -> Request | None:
        for request in (*self.running, *self.waiting):
            if request.request_id == request_id:
                return request
        return None

    # ---- page bookkeeping -------------------------------------------------------------------

    def _pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def _grow(self, request: Request, upto: int) -> None:
        """Give `request` pages for positions [0, upto); raises OutOfPages (nothing allocated)."""
        missing = self._pages_for(upto) - len(request.page_table)
        if missing > 0:
            request.page_table.extend(self.cache.alloc(missing))

    def release(self, request: Request, cache_kv: bool = True) -> None:
        """Return the request's pages; its computed full pages stay in the prefix cache."""
        if cache_kv and request.num_computed >= self.page_size:
            full = request.num_computed // self.page_size
            self.cache.insert(request.tokens[:full * self.page_size], request.page_table[:full])
        self.pool.decref(request.page_table)
        request.page_table = []
        request.num_computed = 0
        request.needs_prefix_match = True

    def cache_computed(self, request: Request) -> None:
        """Offer the full pages computed so far to the prefix cache (others can share them now)."""
        full = request.num_computed // self.page_size
        if full:
            self.cache.insert(request.tokens[:full * self.page_size], request.page_table[:full])

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self.running.remove(victim)
        self.release(victim)
        victim.num_preemptions += 1
        self.num_preemptions += 1
        if victim.trace is not None:
            victim.trace.preempted_at.append(time.perf_counter())
        if victim.kind == "send" and victim.begin < victim.send_end:
            victim.unreported_cached = None  # everything is recomputed and reported again
        self.waiting.requeue(victim)
        out.preempted.append(victim)

    def remove(self, request: Request) -> None:
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)

    # ---- one step ---------------------------------------------------------------------------

    def _make_room(self, request: Request, upto: int, scheduled: set[str],
                   out: SchedulerOutput) -> bool:
        """Pages for a running request, preempting newer unscheduled requests if need be.
        False when `request` itself had to give way (or can never fit)."""
        while True:
            try:
                self._grow(request, upto)
                return True
            except OutOfPages:
                pass
            victims = [r for r in self.running if r is not request and r.request_id not in scheduled]
            if victims:
                # The lowest priority gives way first; among equals, the newest (max keeps the
                # first of equal keys, so it is given the list newest first).
                self._preempt(max(reversed(victims), key=lambda r: r.priority), out)
                continue
            if self._pages_for(upto) > self.pool.num_pages:
                self.running.remove(request)
                out.too_long.append(request)
            else:
                self._preempt(request, out)
            return False

    def _chunk(self, request: Request, n: int) -> ScheduledChunk:
        start = request.num_computed
        need_logits = request.kind == "generate" and start + n == len(request.tokens)
        return ScheduledChunk(request.request_id, request.tokens[start:start + n], start,
                              request.page_table, need_logits)

    def _admit_match(self, request: Request) -> None:
        pages, matched = self.cache.match(request.tokens[:request.match_limit])
        request.page_table = pages
        request.num_computed = matched
        request.needs_prefix_match = False
        if request.kind == "send" and matched > request.begin:
            request.unreported_cached = (request.begin, matched)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        scheduled: set[str] = set()

        def take(request: Request, n: int) -> None:
            out.work.append(ScheduledWork(request, self._chunk(request, n)))
            scheduled.add(request.request_id)

        for request in list(self.running):
            if request in self.running and request.is_decode:
                if self._make_room(request, request.num_computed + 1, scheduled, out):
                    take(request, 1)

        budget = self.chunk_size
        # Stable: among equal keys, the running order (oldest first).
        for request in sorted(self.running, key=schedule_key):
            if budget <= 0:
                break
            if request.request_id in scheduled or request not in self.running:
                continue
            n = min(request.pending, budget)
            if self._make_room(request, request.num_computed + n, scheduled, out):
                take(request, n)
                budget -= n

        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            request = self.waiting.head()
            matched_here = request.needs_prefix_match
            if matched_here:
                self._admit_match(request)
            if request.pending == 0:  # a send whose range is all cached
                self.waiting.pop_head()
                out.no_compute.append(request)
                continue
            n = min(request.pending, budget)
            try:
                self._grow(request, request.num_computed + n)
            except OutOfPages:
                if matched_here:  # don't hold cache pins while waiting
                    self.release(request, cache_kv=False)
                    if request.kind == "send":
                        request.unreported_cached = None
                break
            self.waiting.pop_head()
            self.running.append(request)
            take(request, n)
            budget -= n
        return out
