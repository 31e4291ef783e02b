"""WaitingQueue's order without a model: (priority, first-token deadline, arrival) — requests
without a deadline after every one with one of their priority, FIFO among themselves (so with no
deadline anywhere the queue is the FIFO it always was) — and where a preempted request rejoins.
Deadlines are plain numbers on the engine's clock here: no time passes in these tests."""
from __future__ import annotations

import math

import router_core
from engine.core.request import Request
from engine.core.scheduler import Scheduler
from engine.core.waiting_queue import WaitingQueue, schedule_key
from engine.kvcache.page_pool import PagePool
from engine.kvcache.radix_cache import RadixPrefixCache
from switchyard_engine_api.sampling_params import SamplingParams


def _req(rid: str, due: float | None = None, priority: int = 0, n: int = 4) -> Request:
    return Request(rid, "generate", [1 + i for i in range(n)], n,
                   SamplingParams(priority=priority), first_token_due=due)


def _ids(queue: WaitingQueue) -> list[str]:
    return [r.request_id for r in queue]


def _queue(*requests: Request) -> WaitingQueue:
    queue = WaitingQueue()
    for request in requests:
        queue.add(request)
    return queue


def test_earliest_deadline_first_then_arrival() -> None:
    queue = _queue(_req("late", 30.0), _req("soon", 10.0), _req("mid", 20.0),
                   _req("soon-too", 10.0))
    assert _ids(queue) == ["soon", "soon-too", "mid", "late"]
    assert queue.pop_head().request_id == "soon"


def test_no_deadline_sorts_after_every_deadline_of_its_priority_fifo_among_themselves() -> None:
    queue = _queue(_req("free-1"), _req("due", 1e9), _req("free-2"), _req("overdue", -5.0))
    assert _ids(queue) == ["overdue", "due", "free-1", "free-2"]
    assert schedule_key(_req("free")) == (0, math.inf)


def test_without_deadlines_the_queue_is_a_fifo() -> None:
    rids = [f"r{i}" for i in range(6)]
    assert _ids(_queue(*(_req(rid) for rid in rids))) == rids


def test_priority_comes_before_the_deadline() -> None:
    queue = _queue(_req("p5-soon", 1.0, priority=5), _req("p0-free"), _req("p0-late", 99.0),
                   _req("p-1-free", priority=-1))
    assert _ids(queue) == ["p-1-free", "p0-late", "p0-free", "p5-soon"]


def test_a_preempted_request_before_its_first_token_rejoins_at_the_front_of_its_key() -> None:
    queue = _queue(_req("a", 10.0), _req("b", 20.0), _req("c", 20.0), _req("free"))
    victim = _req("victim", 20.0)
    queue.requeue(victim)
    # Ahead of the requests of its own deadline, behind the earlier one.
    assert _ids(queue) == ["a", "victim", "b", "c", "free"]
    late = _req("late-free")
    queue.requeue(late)
    assert _ids(queue) == ["a", "victim", "b", "c", "late-free", "free"]


def test_a_preempted_request_whose_stream_started_rejoins_at_the_front_of_its_priority() -> None:
    queue = _queue(_req("urgent", 1.0), _req("free"), _req("p3", 1.0, priority=3))
    streaming = _req("streaming", 50.0)
    streaming.first_token_at = 123.0
    queue.requeue(streaming)
    assert _ids(queue) == ["streaming", "urgent", "free", "p3"]
    # A later segment (its first tokens came from another engine) counts as started too.
    follow = Request("follow", "generate", [1, 2, 3, 4], 2, SamplingParams(), output_offset=2)
    queue.requeue(follow)
    assert _ids(queue)[:2] == ["follow", "streaming"]
    # The keys stay ordered: a newcomer still finds its place by its deadline.
    queue.add(_req("newcomer", 0.5))
    assert _ids(queue) == ["follow", "streaming", "newcomer", "urgent", "free", "p3"]


def test_without_deadlines_requeue_is_the_front_of_the_priority_as_before() -> None:
    queue = _queue(_req("a"), _req("b"), _req("hi", priority=-1))
    victim, streamed = _req("victim"), _req("streamed")
    streamed.first_token_at = 1.0
    queue.requeue(victim)
    queue.requeue(streamed)
    assert _ids(queue) == ["hi", "streamed", "victim", "a", "b"]


def test_remove_and_membership_keep_the_order() -> None:
    a, b, c = _req("a", 3.0), _req("b", 1.0), _req("c", 2.0)
    queue = _queue(a, b, c)
    queue.remove(c)
    assert c not in queue and len(queue) == 2 and queue[0] is b
    queue.add(_req("d", 2.5))
    assert _ids(queue) == ["b", "d", "a"]


def test_running_prefills_share_the_budget_by_deadline() -> None:
    """The scheduler's running prefills go by the same key: of two requests still prefilling,
    the one admitted later with the earlier deadline gets the step's prefill budget first; with
    no deadlines the older goes first, as before."""
    def plan(slow_due: float | None, fast_due: float | None) -> list[tuple[str, int]]:
        cache = RadixPrefixCache(PagePool(64), 4, router_core.model_seed("m"))
        sched = Scheduler(cache, chunk_size=8, max_running=8)
        # Both admitted already, slow first (as an earlier step would leave them).
        sched.running.extend([_req("slow", slow_due, n=30), _req("fast", fast_due, n=30)])
        return [(w.request.request_id, len(w.chunk.token_ids)) for w in sched.schedule().work]

    assert plan(50.0, 5.0) == [("fast", 8)]
    assert plan(None, 5.0) == [("fast", 8)]
    assert plan(None, None) == [("slow", 8)]
    assert plan(5.0, 50.0) == [("slow", 8)]
