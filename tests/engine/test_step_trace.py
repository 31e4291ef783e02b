"""What the core records for traced requests (engine/core/step_trace.py), for received KV, and
for the prefix-cache counters the engine metrics read — with the real model."""
from __future__ import annotations

import pytest
import torch
from test_core_support import drain, greedy, make_engine

from engine.core.step_trace import StepTrace
from engine.model.loader import LoadedModel

pytestmark = pytest.mark.model


def test_traced_request_records_its_chunks_decodes_and_batch(loaded_model_fp32: LoadedModel):
    core = make_engine(loaded_model_fp32, chunk_size=16)
    traced = StepTrace()
    core.add_request("a", list(range(100, 140)), greedy(4), trace=traced)
    core.add_request("b", list(range(200, 220)), greedy(3))  # untraced: nothing recorded
    run = drain(core)
    assert run.finish == {"a": "length", "b": "length"}
    prefill = [s for s in traced.steps if not s.decode]
    decode = [s for s in traced.steps if s.decode]
    # 40 prompt positions in chunks of the step budget, in order, then one decode per token
    # after the first (which the last prefill chunk samples).
    assert [s.start_pos for s in prefill] == [0, 16, 32]
    assert [s.tokens for s in prefill] == [16, 16, 8]
    assert len(decode) == 3 and all(s.tokens == 1 for s in decode)
    assert traced.queued <= traced.steps[0].started
    for a, b in zip(traced.steps, traced.steps[1:], strict=False):
        assert a.started <= a.ended <= b.started
    # b ran alongside a at some point: the batch composition says so.
    assert max(s.batch_seqs for s in traced.steps) == 2
    assert all(s.batch_prefill_tokens <= 16 for s in traced.steps)
    assert any(s.batch_decode_seqs >= 1 for s in prefill + decode)
    assert not traced.preempted_at


def test_received_kv_is_reported_once_when_complete(loaded_model_fp32: LoadedModel):
    core = make_engine(loaded_model_fp32)
    reports = []
    core.reservations.on_received = reports.append
    marker = object()
    tokens = list(range(300, 333))
    res = core.prep_recv("r", tokens, 32, trace=marker)
    mc = core.model_config
    for layer in range(mc.num_layers):
        k = torch.zeros(32, mc.num_kv_heads, mc.head_dim, dtype=core.kv.dtype)
        core.write_kv("r", layer, res.matched_len, k, k.clone())
        assert not reports or layer == mc.num_layers - 1
    (held,) = reports
    assert held.trace is marker and held.committed
    per_layer = 2 * 32 * mc.num_kv_heads * mc.head_dim * core.kv.dtype.itemsize
    assert held.received.bytes == per_layer * mc.num_layers
    assert held.received.layers == set(range(mc.num_layers))
    assert held.received.first_at <= held.received.last_at
    core.abort("r")
    assert len(reports) == 1  # released after it was reported: not again


def test_prefix_cache_counters(loaded_model_fp32: LoadedModel):
    core = make_engine(loaded_model_fp32)
    prompt = list(range(400, 440))
    core.add_request("first", prompt, greedy(2))
    drain(core)
    queried, hits = core.cache.queried_tokens, core.cache.hit_tokens
    assert queried == 39 and hits == 0  # the last token is always computed
    core.add_request("again", prompt, greedy(2))
    drain(core)
    assert core.cache.queried_tokens == queried + 39
    assert core.cache.hit_tokens == 32  # two full 16-token pages
