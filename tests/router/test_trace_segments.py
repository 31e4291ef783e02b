"""Multi-segment requests under one trace (FakeCluster, the router's real dispatcher): a tandem
hand-off and a live migration (what POST /admin/migrate runs) each give one `router.segment` per
segment, with its own decision and verbs, all children of the one `router.request`; segments
follow each other in time and every span nests in its parent."""
from __future__ import annotations

import time

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pyrouter.dispatch import RequestRun
from pyrouter.request import RouterRequest
from pyrouter.request_trace import RequestTrace, start_request_trace
from pyrouter.testing import FakeCluster, FakeEngine

PROMPT = list(range(5000, 5200))
# ms per unit, as tests/policy/test_seed_policies.py: tandem's planner needs a latency model.
MODEL = {"const": 5.0, "prefill_tokens": 0.5, "decode_seqs": 2.0, "decode_context": 0.001}


def _traced(cluster: FakeCluster, max_tokens: int
            ) -> tuple[RouterRequest, RequestTrace, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    req = cluster.request(PROMPT, max_tokens=max_tokens)
    trace = start_request_trace(provider.get_tracer("t"), req, {})
    assert trace is not None
    req.timeline.trace = trace
    return req, trace, memory


def _finish(req: RouterRequest, trace: RequestTrace, policy: str) -> None:
    req.timeline.ended = time.perf_counter()
    trace.finish(req, policy, "ok", "")


def _tree(memory: InMemorySpanExporter) -> tuple[ReadableSpan, dict[int, ReadableSpan]]:
    spans = {s.context.span_id: s for s in memory.get_finished_spans()}
    (root,) = [s for s in spans.values() if s.name == "router.request"]
    assert {s.context.trace_id for s in spans.values()} == {root.context.trace_id}
    for s in spans.values():  # every span nests in its parent's time
        if s is not root:
            p = spans[s.parent.span_id]
            assert p.start_time <= s.start_time <= s.end_time <= p.end_time, (s.name, p.name)
    return root, spans


def _children(spans: dict[int, ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return sorted((s for s in spans.values() if s.parent is not None
                   and s.parent.span_id == parent.context.span_id), key=lambda s: s.start_time)


def _segments(spans: dict[int, ReadableSpan], root: ReadableSpan) -> list[ReadableSpan]:
    segments = [s for s in _children(spans, root) if s.name == "router.segment"]
    assert segments == _children(spans, root)  # nothing else hangs off the request
    for earlier, later in zip(segments, segments[1:], strict=False):
        assert earlier.end_time <= later.start_time
    return segments


def _verbs(spans: dict[int, ReadableSpan], segment: ReadableSpan
           ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(verbs under the segment's decision, verbs under the segment itself) as (name, engine)."""
    children = _children(spans, segment)
    (decision,) = [s for s in children if s.name == "router.decision"]

    def named(found: list[ReadableSpan]) -> list[tuple[str, str]]:
        return [(s.name, str((s.attributes or {})["switchyard.engine"])) for s in found
                if s.name.startswith("verb.")]

    return named(_children(spans, decision)), named(children)


async def test_tandem_handoff_gives_one_segment_span_per_segment() -> None:
    cluster = FakeCluster([FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256),
                           FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256)])
    req, trace, memory = _traced(cluster, 8)
    run = await cluster.run("tandem", req)
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 8)
    params = dict(kv.split("=", 1) for kv in run.route.split()[1:])
    lead, follow = params["lead"], params["follow"]
    _finish(req, trace, "tandem")
    root, spans = _tree(memory)
    first, second = _segments(spans, root)
    assert [dict(s.attributes or {}) for s in (first, second)] == [
        {"switchyard.segment.index": 0, "switchyard.engine": lead,
         "switchyard.engine.role": "any", "switchyard.segment.tokens": int(params["k"]),
         "switchyard.segment.end_reason": "handoff"},
        {"switchyard.segment.index": 1, "switchyard.engine": follow,
         "switchyard.engine.role": "any", "switchyard.segment.tokens": 8 - int(params["k"]),
         "switchyard.segment.end_reason": "length"}]
    assert _verbs(spans, first) == ([], [("verb.start_generate", lead)])
    # The hand-off's decision moved the KV; the follow's generation is the segment's own.
    assert _verbs(spans, second) == ([("verb.prep_recv", follow), ("verb.remote_send", lead)],
                                     [("verb.start_generate", follow)])
    assert (root.attributes or {})["switchyard.engines"] == ",".join(sorted({lead, follow}))
    cluster.assert_clean()


async def test_live_migration_is_a_segment_decided_by_migration() -> None:
    cluster = FakeCluster([FakeEngine(), FakeEngine(), FakeEngine()])
    req, trace, memory = _traced(cluster, 12)
    moves = []

    async def move_at_5(run: RequestRun, n: int) -> None:
        if n == 5 and not moves:
            target = next(e for e in cluster.engines.values() if e is not run.stream.engine)
            moves.append(run.migrate(target))

    run = await cluster.run("round_robin", req, on_tokens=move_at_5)
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 12)
    assert moves[0].outcome == "migrated"
    source, target = moves[0].source.id, moves[0].target.id
    _finish(req, trace, "round_robin")
    root, spans = _tree(memory)
    first, second = _segments(spans, root)
    assert (first.attributes or {})["switchyard.engine"] == source
    assert (first.attributes or {})["switchyard.segment.end_reason"] == "interrupted"
    assert (second.attributes or {})["switchyard.engine"] == target
    assert (second.attributes or {})["switchyard.segment.end_reason"] == "length"
    decisions = [next(s for s in _children(spans, seg) if s.name == "router.decision")
                 for seg in (first, second)]
    assert [(d.attributes or {})["switchyard.decided_by"] for d in decisions] == [
        "policy", "migration"]
    under_decision, under_segment = _verbs(spans, second)
    assert under_decision[0] == ("verb.prep_recv", target)
    assert under_segment == [("verb.start_generate", target)]
    cluster.assert_clean()
