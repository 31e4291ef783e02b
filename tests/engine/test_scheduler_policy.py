"""Scheduler policy without a model: the runner's effect is simulated (KV computed, one token
appended per logits row), which is all the scheduler observes."""
from __future__ import annotations

import router_core
from engine.core.latency_model import StepShape
from engine.core.request import Request
from engine.core.scheduler import Scheduler, SchedulerOutput
from engine.kvcache.page_pool import PagePool
from engine.kvcache.radix_cache import RadixPrefixCache
from switchyard_engine_api.sampling_params import SamplingParams

PS = 4


def _scheduler(num_pages: int = 64, chunk_size: int = 8, max_running: int = 8) -> Scheduler:
    cache = RadixPrefixCache(PagePool(num_pages), PS, router_core.model_seed("m"))
    return Scheduler(cache, chunk_size, max_running)


def _req(rid: str, n: int, first: int = 0, priority: int = 0) -> Request:
    tokens = [(first + i) % 97 for i in range(n)]
    return Request(rid, "generate", tokens, n, SamplingParams(priority=priority))


def _advance(out: SchedulerOutput) -> None:
    """What the engine does after the model ran: KV computed, sampled tokens appended."""
    for work in out.work:
        work.request.num_computed += len(work.chunk.token_ids)
        if work.chunk.need_logits:
            work.request.tokens.append(5)
            work.request.output_ids.append(5)


def _plan(out: SchedulerOutput) -> list[tuple[str, int]]:
    return [(w.request.request_id, len(w.chunk.token_ids)) for w in out.work]


def test_chunked_prefill_under_the_token_budget_and_decodes_first() -> None:
    sched = _scheduler(chunk_size=8)
    sched.add(_req("short", 3))
    out = sched.schedule()
    assert _plan(out) == [("short", 3)] and out.work[0].chunk.need_logits
    _advance(out)
    sched.add(_req("long", 30, first=50))
    plans = []
    for _ in range(5):
        out = sched.schedule()
        plans.append(_plan(out))
        _advance(out)
    # The decode runs every step, ahead of the long prompt's 8-token chunks.
    assert plans[:4] == [[("short", 1), ("long", 8)]] * 3 + [[("short", 1), ("long", 6)]]
    assert plans[4] == [("short", 1), ("long", 1)]
    assert [w.chunk.need_logits for w in out.work] == [True, True]


def test_fcfs_admission_and_max_running() -> None:
    sched = _scheduler(chunk_size=100, max_running=2)
    for rid in ("a", "b", "c"):
        sched.add(_req(rid, 5, first=ord(rid)))
    out = sched.schedule()
    assert _plan(out) == [("a", 5), ("b", 5)] and [r.request_id for r in sched.waiting] == ["c"]
    _advance(out)
    sched.remove(sched.running[0])
    assert _plan(sched.schedule()) == [("b", 1), ("c", 5)]


def test_head_of_queue_that_does_not_fit_blocks_later_arrivals() -> None:
    sched = _scheduler(num_pages=4, chunk_size=100)
    sched.add(_req("big", 14))  # 4 pages
    _advance(sched.schedule())
    sched.add(_req("next", 20, first=40))  # 5 pages: can't fit while big runs
    sched.add(_req("tiny", 1, first=60))
    out = sched.schedule()
    assert _plan(out) == [("big", 1)] and [r.request_id for r in sched.waiting] == ["next", "tiny"]
    assert sched.pool.num_used == 4


def test_preemption_by_recompute_requeues_newest_at_the_front() -> None:
    sched = _scheduler(num_pages=4, chunk_size=100)
    sched.add(_req("old", 8))
    sched.add(_req("new", 8, first=30))
    _advance(sched.schedule())  # 2 pages each; both now decode at position 8 (a 3rd page)
    out = sched.schedule()
    assert [r.request_id for r in out.preempted] == ["new"]
    assert _plan(out) == [("old", 1)]
    victim = sched.waiting[0]
    assert victim.request_id == "new" and victim.num_computed == 0 and victim.page_table == []
    assert victim.tokens[-1] == 5 and len(victim.tokens) == 9  # generated token kept as prompt
    assert victim.num_preemptions == 1


def test_a_request_larger_than_the_pool_ends_instead_of_looping() -> None:
    sched = _scheduler(num_pages=2, chunk_size=100)
    sched.add(_req("r", 8))
    _advance(sched.schedule())
    out = sched.schedule()  # position 8 needs a third page that can never exist
    assert [r.request_id for r in out.too_long] == ["r"] and not out.work


def test_send_with_everything_cached_needs_no_compute() -> None:
    sched = _scheduler()
    tokens = list(range(8))
    pages = sched.cache.alloc(2)
    sched.cache.insert(tokens, pages)
    sched.cache.release(pages)
    send = Request("s", "send", tokens, 8, begin=2, send_end=8)
    sched.add(send)
    out = sched.schedule()
    assert out.no_compute == [send] and not out.work
    assert send.unreported_cached == (2, 8) and send.page_table == pages


def test_step_shape_and_load_for_the_latency_model() -> None:
    sched = _scheduler(chunk_size=8)
    sched.add(_req("short", 3))
    _advance(sched.schedule())  # "short" now decodes: 3 positions computed, 1 token to go
    sched.add(_req("long", 30, first=50))
    sched.add(_req("next", 12, first=90))
    assert sched.queued_prefill_tokens() == 42
    assert sched.longest_queued_prefill_tokens() == 30, "one request's prefill, not the sum"
    assert sched.decode_load() == (1, 4)
    out = sched.schedule()
    assert out.shape() == StepShape(prefill_chunks=((0, 8),), decode_seqs=1, decode_context=4)
    _advance(out)
    assert sched.queued_prefill_tokens() == 34, "a running prefill's rest still counts"
    assert sched.longest_queued_prefill_tokens() == 22
    assert sched.decode_load() == (1, 5)
    out = sched.schedule()
    assert out.shape() == StepShape(((8, 8),), 1, 5)


def test_waiting_requests_are_admitted_by_priority_then_arrival() -> None:
    sched = _scheduler(chunk_size=100, max_running=1)
    for rid, priority in (("a10", 10), ("b10", 10), ("c0", 0), ("d10", 10), ("e-5", -5),
                          ("f0", 0)):
        sched.add(_req(rid, 3, first=len(rid) + priority + 40, priority=priority))
    assert [r.request_id for r in sched.waiting] == ["e-5", "c0", "f0", "a10", "b10", "d10"]
    admitted = []
    while sched.has_work():
        out = sched.schedule()
        admitted += [w.request.request_id for w in out.work if w.chunk.start_pos == 0]
        _advance(out)
        sched.remove(sched.running[0])  # one step each: the next is admitted
    assert admitted == ["e-5", "c0", "f0", "a10", "b10", "d10"]


def test_running_prefills_share_the_budget_by_priority() -> None:
    sched = _scheduler(chunk_size=8, max_running=4)
    low, high = _req("low", 20, priority=10), _req("high", 20, first=40, priority=0)
    for request in (low, high):
        sched.add(request)
    _advance(sched.schedule())  # "high" is admitted first and takes the whole budget
    # Admission order is priority order, so a lower-priority prefill runs ahead of a higher one
    # only once it was admitted earlier (a preempted one readmitted, a chunk size changed):
    # as if so, the budget still goes to the higher priority first.
    sched.waiting.remove(low)
    sched.running = [low, high]
    low.needs_prefix_match = False
    assert _plan(sched.schedule()) == [("high", 8)]


def test_preemption_takes_the_lowest_priority_and_requeues_it_ahead_of_its_equals() -> None:
    sched = _scheduler(num_pages=6, chunk_size=100)
    sched.add(_req("low", 8, priority=5))
    sched.add(_req("high", 8, first=30, priority=-1))
    sched.add(_req("mid", 8, first=60, priority=0))
    _advance(sched.schedule())  # 2 pages each; each now decodes at position 8 (a 3rd page)
    sched.add(_req("later-low", 3, first=80, priority=5))
    sched.add(_req("later-mid", 3, first=85, priority=0))
    out = sched.schedule()
    # "low" is the oldest but the lowest priority: it gives way, not the newest ("mid").
    assert [r.request_id for r in out.preempted] == ["low"]
    assert [r.request_id for r in sched.waiting] == ["later-mid", "low", "later-low"]
