"""Workloads: sonnet lengths counted with the model's tokenizer, Mooncake shared prefixes really
equal (and fresh per salt), length / output / time scaling, the Azure trace, the shifting
phases, and the schedule that joins shapes and arrivals."""
from __future__ import annotations

import json

import numpy as np
import pytest

from switchyard_bench.serve.main import build_parser
from switchyard_bench.workloads import (
    ArrivalProcess,
    RealVocabulary,
    WorkloadError,
    build_workload,
    schedule,
)
from switchyard_bench.workloads.azure import AzureCodeWorkload
from switchyard_bench.workloads.data_files import (
    AZURE_CODE,
    MOONCAKE_CONVERSATION,
    SONNET,
    data_path,
)
from switchyard_bench.workloads.mooncake import MooncakeWorkload
from switchyard_bench.workloads.shifting import ShiftingConfig, ShiftingWorkload
from switchyard_bench.workloads.sonnet import SALT_TOKENS, SonnetConfig, SonnetWorkload
from switchyard_bench.workloads.trace_replay import TraceConfig


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_vocabulary_blocks_are_deterministic_real_ids(vocab: RealVocabulary):
    block = vocab.block(4096, "k", 1)
    assert block == vocab.block(4096, "k", 1)
    assert block != vocab.block(4096, "k", 2)
    assert min(block) > 16  # SmolLM2's ids 0..16 are its special tokens
    assert max(block) < vocab.tokenizer.vocab_size


def test_sonnet_lengths_follow_the_targets(vocab: RealVocabulary):
    w = SonnetWorkload(vocab, SonnetConfig(input_mean=300, input_std=40, output_mean=50,
                                           output_std=10, seed=3))
    shapes = [w.shape(i, salt=11) for i in range(300)]
    ins = np.array([len(s.prompt) for s in shapes])
    outs = np.array([s.max_tokens for s in shapes])
    for i in range(20):  # each prompt holds exactly its drawn number of tokens
        assert len(shapes[i].prompt) == w.target_lengths(i)[0]
    assert ins.mean() == pytest.approx(300, rel=0.03) and ins.std() == pytest.approx(40, rel=0.15)
    assert outs.mean() == pytest.approx(50, rel=0.03) and outs.std() == pytest.approx(10, rel=0.15)
    text = vocab.tokenizer.decode(shapes[0].prompt[SALT_TOKENS:])
    assert text.startswith("Randomly stream lines from the following text with")
    with open(data_path(SONNET), encoding="utf-8") as f:
        sonnet_lines = {line.strip() for line in f if line.strip()}
    assert sum(line in sonnet_lines for line in text.splitlines()) >= 5


def test_sonnet_salt_shares_within_a_run_only(vocab: RealVocabulary):
    w = SonnetWorkload(vocab, SonnetConfig(input_mean=200, input_std=0, output_mean=20,
                                           output_std=0))
    a0, a1, b0 = w.shape(0, salt=1), w.shape(1, salt=1), w.shape(0, salt=2)
    assert _common_prefix(a0.prompt, a1.prompt) > SALT_TOKENS + 8  # salt + instruction
    assert _common_prefix(a0.prompt, b0.prompt) == 0  # a new run shares nothing
    assert len(a0.prompt) == len(b0.prompt) and a0.max_tokens == b0.max_tokens
    with pytest.raises(WorkloadError):
        SonnetWorkload(vocab, SonnetConfig(input_mean=10))


def _trace(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_mooncake_equal_hash_ids_are_equal_blocks(tmp_path, vocab: RealVocabulary):
    path = _trace(tmp_path, [
        {"timestamp": 1000, "input_length": 1100, "output_length": 300, "hash_ids": [7, 8, 9]},
        {"timestamp": 1500, "input_length": 1536, "output_length": 10, "hash_ids": [7, 8, 4]},
        {"timestamp": 4000, "input_length": 600, "output_length": 1, "hash_ids": [5, 8]},
    ])
    w = MooncakeWorkload(vocab, TraceConfig(path, length_scale=1 / 16, output_scale=0.1))
    assert w.block_tokens == 32 and w.size() == 3
    a, b, c = (w.shape(i, salt=5) for i in range(3))
    assert len(a.prompt) == round(1100 / 16) == 69 and len(b.prompt) == 96
    assert len(c.prompt) == round(600 / 16) == 38
    assert (a.max_tokens, b.max_tokens, c.max_tokens) == (30, 1, 1)
    assert a.prompt[:64] == b.prompt[:64]  # hash ids 7, 8 shared: two equal blocks
    assert a.prompt[64:69] != b.prompt[64:69]  # 9 vs 4
    assert c.prompt[32:38] == a.prompt[32:38]  # block 8 in second position in both
    assert c.prompt[:32] != a.prompt[:32]
    assert _common_prefix(w.shape(0, salt=6).prompt, a.prompt) == 0  # fresh per salt
    assert w.trace_offsets(3) == [0.0, 0.5, 3.0]


def test_mooncake_scaled_length_never_exceeds_its_blocks(tmp_path, vocab: RealVocabulary):
    # 14 full blocks at scale 0.01: round(7168 * 0.01) = 72 > 14 blocks * round(5.12) = 70
    path = _trace(tmp_path, [{"timestamp": 0, "input_length": 7168, "output_length": 5,
                              "hash_ids": list(range(14))}])
    w = MooncakeWorkload(vocab, TraceConfig(path, length_scale=0.01))
    assert len(w.shape(0, 0).prompt) == 70


def test_bundled_mooncake_trace_shares_real_prefixes(vocab: RealVocabulary):
    w = MooncakeWorkload(vocab, TraceConfig(MOONCAKE_CONVERSATION, length_scale=1 / 32))
    rows = [w.shape(i, salt=9) for i in range(3)]
    # the first trace rows all start with hash id 0: one equal 16-token block
    assert rows[0].prompt[:16] == rows[1].prompt[:16] == rows[2].prompt[:16]
    assert rows[0].prompt[16:32] != rows[1].prompt[16:32]
    assert w.size() == 12031


def test_azure_trace_lengths_and_timestamps(tmp_path, vocab: RealVocabulary):
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:17:03.9799600,4808,10\n"
                    "2023-11-16 18:17:04.0319600,3180,8\n"
                    "2023-11-16 18:17:06.5000000,110,27\n")
    w = AzureCodeWorkload(vocab, TraceConfig(str(path), length_scale=0.1, output_scale=2.0))
    shapes = [w.shape(i, 1) for i in range(3)]
    assert [len(s.prompt) for s in shapes] == [481, 318, 11]
    assert [s.max_tokens for s in shapes] == [20, 16, 54]
    assert w.trace_offsets(3) == pytest.approx([0.0, 0.052, 2.52004], abs=1e-6)
    assert _common_prefix(shapes[0].prompt, w.shape(0, 2).prompt) == 0
    bundled = AzureCodeWorkload(vocab, TraceConfig(AZURE_CODE))
    assert bundled.size() == 8819
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n")
    with pytest.raises(WorkloadError, match="bad.csv:2"):
        AzureCodeWorkload(vocab, TraceConfig(str(bad)))


def test_shifting_phases_alternate(vocab: RealVocabulary):
    w = ShiftingWorkload(vocab, ShiftingConfig(phase_requests=3, prefill_heavy_input=200,
                                               prefill_heavy_output=4, decode_heavy_input=16,
                                               decode_heavy_output=64))
    shapes = [w.shape(i, 1) for i in range(9)]
    assert [(len(s.prompt), s.max_tokens) for s in shapes] == \
        [(200, 4)] * 3 + [(16, 64)] * 3 + [(200, 4)] * 3
    assert [w.phase(i) for i in (0, 3, 6)] == ["prefill-heavy", "decode-heavy", "prefill-heavy"]
    assert _common_prefix(shapes[0].prompt, shapes[1].prompt) == 0


def test_schedule_joins_shapes_and_arrivals(tmp_path, vocab: RealVocabulary):
    w = ShiftingWorkload(vocab, ShiftingConfig())
    items = schedule(w, 5, salt=1, arrivals=ArrivalProcess(2.0), seed=4)
    assert [i.arrival_s for i in items] == ArrivalProcess(2.0).offsets(5, 4)
    with pytest.raises(WorkloadError, match="no timestamps"):
        schedule(w, 5, salt=1, arrivals=None)
    path = _trace(tmp_path, [{"timestamp": t, "input_length": 10, "output_length": 2,
                              "hash_ids": [0]} for t in (0, 1000, 3000)])
    trace = MooncakeWorkload(vocab, TraceConfig(path))
    replay = schedule(trace, 3, salt=1, arrivals=None, time_scale=0.5)
    assert [i.arrival_s for i in replay] == [0.0, 0.5, 1.5]
    with pytest.raises(WorkloadError, match="has 3 requests"):
        schedule(trace, 4, salt=1, arrivals=None)


def test_build_workload_from_command_line(vocab: RealVocabulary):
    parse = build_parser().parse_args
    w = build_workload(parse(["--workload", "mooncake", "--length-scale", "0.0625",
                              "--trace-start", "2"]), vocab)
    assert w.describe() == {"workload": "mooncake", "trace": "mooncake_conversation_trace.jsonl",
                            "trace_start": 2, "length_scale": 0.0625, "output_scale": 0.0625,
                            "block_tokens": 32}
    w = build_workload(parse(["--workload", "shifting", "--prefill-heavy", "100,2"]), vocab)
    assert w.describe()["prefill_heavy"] == "100in/2out"
    with pytest.raises(WorkloadError, match="length-scale"):
        build_workload(parse(["--workload", "azure-code", "--length-scale", "0"]), vocab)
    with pytest.raises(WorkloadError, match="not found"):
        build_workload(parse(["--workload", "mooncake", "--trace", "/nonexistent.jsonl"]),
                       vocab)
