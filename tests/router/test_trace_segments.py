"""Multi-segment requests under one trace (FakeCluster: the router's front, its request task and
executor in-process, the real dispatcher, router_core's tracer): a tandem hand-off and a live
migration (what POST /admin/migrate runs) each give every segment its own decision span — the
policy's, the placement's second half, the migration's — with the verbs run for it under the
decision and the segment's generation under the segment; every span nests in its parent."""
from __future__ import annotations

import asyncio
from typing import Any

from trace_front import CLIENT, spans_by_id

from router_core import RouterTracer
from switchyard_bench.policies import round_robin_py
from switchyard_sim.fake import FakeCluster, FakeEngine

PROMPT = list(range(5000, 5200))
# ms per unit, as tests/policy/test_seed_policies.py: tandem's planner needs a latency model.
MODEL = {"const": 5.0, "prefill_tokens": 0.5, "decode_seqs": 2.0, "decode_context": 0.001}
Span = dict[str, Any]


def _traced(cluster: FakeCluster, path: str) -> RouterTracer:
    """Every request of `cluster` traced into `path`, under a sampled client trace."""
    tracer = RouterTracer.to_file(path)
    cluster.trace(tracer, CLIENT)
    return tracer


def _tree(spans: dict[str, Span]) -> Span:
    (root,) = [s for s in spans.values() if s["name"] == "router.request"]
    assert {s["trace_id"] for s in spans.values()} == {root["trace_id"]}
    for s in spans.values():  # every span nests in its parent's time
        if s is not root:
            p = spans[s["parent_id"]]
            assert p["start_ms"] <= s["start_ms"] <= s["end_ms"] <= p["end_ms"], (
                s["name"], p["name"])
    return root


def _children(spans: dict[str, Span], parent: Span) -> list[Span]:
    return sorted((s for s in spans.values() if s["parent_id"] == parent["span_id"]),
                  key=lambda s: s["start_ms"])


def _verbs(spans: dict[str, Span], segment: Span
           ) -> tuple[Span, list[tuple[str, str]], list[tuple[str, str]]]:
    """(the segment's decision, verbs under it, verbs under the segment) as (name, engine)."""
    children = _children(spans, segment)
    (decision,) = [s for s in children if s["name"] == "router.decision"]

    def named(found: list[Span]) -> list[tuple[str, str]]:
        return [(s["name"], s["attrs"]["switchyard.engine"]) for s in found
                if s["name"].startswith("verb.")]

    return decision, named(_children(spans, decision)), named(children)


def _finish(tracer: RouterTracer, path: str) -> tuple[Span, list[Span], dict[str, Span]]:
    spans = spans_by_id(tracer, path)
    root = _tree(spans)
    segments = _children(spans, root)
    assert [s["name"] for s in segments] == ["router.segment"] * len(segments)
    return root, segments, spans


async def test_tandem_handoff_gives_each_segment_its_decision(tmp_path) -> None:
    path = str(tmp_path / "spans.jsonl")
    cluster = FakeCluster([FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256),
                           FakeEngine(latency_model=dict(MODEL), prefill_chunk_size=256)])
    tracer = _traced(cluster, path)
    run = await cluster.run("tandem", PROMPT, max_tokens=8)
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 8)
    params = dict(kv.split("=", 1) for kv in run.route.split()[1:])
    lead, follow = params["lead"], params["follow"]
    _, (first, second), spans = _finish(tracer, path)
    decision, under_decision, under_segment = _verbs(spans, first)
    assert (under_decision, under_segment) == ([], [("verb.start_generate", lead)])
    assert decision["attrs"]["switchyard.engine"] == lead
    assert decision["attrs"]["switchyard.segment.index"] == 0
    # The hand-off's decision moved the KV; the follow's generation is the segment's own.
    decision, under_decision, under_segment = _verbs(spans, second)
    assert under_decision == [("verb.prep_recv", follow), ("verb.remote_send", lead)]
    assert under_segment == [("verb.start_generate", follow)]
    assert decision["attrs"]["switchyard.engine"] == follow
    assert decision["attrs"]["switchyard.decided_by"] == "placement"
    cluster.assert_clean()


async def test_live_migration_is_a_decision_by_migration(tmp_path) -> None:
    path = str(tmp_path / "spans.jsonl")
    cluster = FakeCluster([FakeEngine(), FakeEngine(), FakeEngine()])
    tracer = _traced(cluster, path)
    moves: list[asyncio.Task[dict[str, Any]]] = []

    async def move_at_5(harness: Any, n: int) -> None:
        if n == 5 and not moves:  # round_robin_py's first pick is e0
            moves.append(asyncio.ensure_future(harness.migrate("fake-req",
                                                               cluster.engines["e1"])))

    # A Python policy: its first segment has a decision (a Rust built-in's has none).
    run = await cluster.run(round_robin_py.NAME, PROMPT, max_tokens=12, on_tokens=move_at_5)
    assert run.error is None and run.tokens == cluster.reference(PROMPT, 12)
    moved = await moves[0]
    assert moved["outcome"] == "migrated"
    source, target = moved["from"], moved["to"]
    _, segments, spans = _finish(tracer, path)
    decisions = [_verbs(spans, segment) for segment in segments]
    assert [(d["attrs"]["switchyard.decided_by"], d["attrs"]["switchyard.engine"])
            for d, _, _ in decisions] == [("policy", source), ("migration", target)]
    _, under_decision, under_segment = decisions[1]
    assert under_decision[0] == ("verb.prep_recv", target)
    assert under_segment == [("verb.start_generate", target)]
    cluster.assert_clean()
