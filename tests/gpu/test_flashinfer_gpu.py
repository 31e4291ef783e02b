"""FlashInfer on a GPU: the kernels against the PyTorch backend, and CUDA-graph decode.

- On the same random pages (mixed decodes and prefill chunks with cached prefixes, SmolLM2 and
  Llama 3.1 8B head shapes), FlashInfer's output is within a per-dtype relative error of a
  float64 reference (‖out − ref‖/‖ref‖: bf16 1e-2, fp16 2e-3), as the torch backend is.
- An engine replaying CUDA graphs for its decode steps picks the same greedy tokens as the same
  engine run eagerly (bf16, random SmolLM2-shaped weights; near-ties compared by logits).
Skipped without CUDA; needs the flashinfer package (check.sh carries a pruned copy).
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.attention import get_backend
from engine.attention.context import BatchLayout, ForwardContext, SeqLayout
from engine.attention.paged_plan import split_step
from engine.kvcache.kv_storage import KVStorage
from engine.model.runner import ModelRunner
from tests.engine.flashinfer_fake import csr_attention
from tests.gpu.lockstep import greedy_lockstep, random_prompts
from tests.gpu.random_models import SMOLLM2_135M, loaded_model, random_weights
from tests.gpu.results import record

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(600)]

THRESHOLDS = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
HEAD_SHAPES = {"smollm2": (9, 3, 64), "llama8b": (32, 8, 128)}


def _random_gpu_step(seed: int, dtype: torch.dtype, heads: int, kv_heads: int, dim: int
                     ) -> tuple[KVStorage, BatchLayout, torch.Tensor, torch.Tensor, torch.Tensor,
                                torch.Tensor]:
    rng = random.Random(seed)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    page_size = 16
    shapes = [(rng.randint(1, 2000), 1) for _ in range(24)]  # decodes
    shapes += [(0, rng.randint(2, 700)) for _ in range(3)]  # fresh prefills
    shapes += [(rng.randint(1, 900), rng.randint(2, 300)) for _ in range(3)]  # chunks on a prefix
    rng.shuffle(shapes)
    needed = [-(-(p + n) // page_size) for p, n in shapes]
    pages = list(range(sum(needed) + 8))
    rng.shuffle(pages)
    kv = KVStorage(1, len(pages), page_size, kv_heads, dim, dtype=dtype, device="cuda")
    kv.layer(0).normal_(generator=gen)  # every page random: stale bytes must not leak in
    seqs, slots = [], []
    q_start = 0
    for (prefix, new), need in zip(shapes, needed, strict=True):
        table, pages = pages[:need], pages[need:]
        seqs.append(SeqLayout(q_start=q_start, q_len=new, ctx_len=prefix + new, page_table=table))
        slots.append(kv.slots(table, prefix, prefix + new))
        q_start += new

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device="cuda").to(dtype)

    return (kv, BatchLayout(seqs=seqs, page_size=page_size), torch.cat(slots),
            randn(q_start, heads, dim), randn(q_start, kv_heads, dim), randn(q_start, kv_heads, dim))


def _relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


# bf16 at every head shape; fp16 only at SmolLM2's (one JIT build less), so no case is skipped.
_CASES = [*[(torch.bfloat16, shape) for shape in sorted(HEAD_SHAPES)], (torch.float16, "smollm2")]


@pytest.mark.parametrize("dtype, shape", _CASES)
def test_flashinfer_matches_the_torch_backend_on_random_pages(dtype: torch.dtype,
                                                              shape: str) -> None:
    heads, kv_heads, dim = HEAD_SHAPES[shape]
    errors: dict[str, list[float]] = {"flashinfer": [], "torch": []}
    for seed in range(3):
        kv, batch, slots, q, k, v = _random_gpu_step(seed, dtype, heads, kv_heads, dim)
        outputs = {}
        for name in ("torch", "flashinfer"):
            backend = get_backend(name)
            pages = kv.layer(0).clone()
            ctx = ForwardContext(batch=batch, slot_mapping=slots, sample_indices=slots[:0],
                                 kv=kv, backend=backend)
            backend.plan(ctx)
            outputs[name] = backend.run(0, q, k, v, ctx)
            torch.cuda.synchronize()
            written = kv.layer(0).clone()
            kv.layer(0).copy_(pages)  # the next backend starts from the same pages
        cache = written.double()
        decode, prefill = split_step(batch)
        reference = torch.empty(q.shape, dtype=torch.float64, device="cuda")
        for index, causal in ((decode, False), (prefill, True)):
            if index.num_seqs:
                rows = index.rows.cuda()
                reference[rows] = csr_attention(
                    q.double()[rows], cache, index.qo_indptr, index.kv_indptr,
                    index.kv_indices.cuda(), index.kv_last_page_len, causal)
        for name, out in outputs.items():
            assert not out.isnan().any(), name
            errors[name].append(_relative_error(out, reference))
    record("attention", {f"{shape}_{str(dtype).removeprefix('torch.')}": {
        "relative_error": errors, "threshold": THRESHOLDS[dtype]}})
    assert max(errors["flashinfer"]) <= THRESHOLDS[dtype], errors
    assert max(errors["torch"]) <= THRESHOLDS[dtype], errors


def test_decode_graphs_pick_the_eager_engines_tokens() -> None:
    weights = random_weights(SMOLLM2_135M, seed=11, device="cuda", dtype=torch.bfloat16)
    runners = []
    for graphs in (False, True):
        loaded = loaded_model(SMOLLM2_135M, weights, "cuda", torch.bfloat16)
        kv = KVStorage.for_model(loaded.config, 257, 16, torch.bfloat16, "cuda")
        runner = ModelRunner(loaded, kv, "flashinfer")
        if graphs:
            runner.capture_decode_graphs([1, 2, 4, 8], scratch_page=256, max_context=4096)
        runners.append(runner)
    prompts = random_prompts([7, 130, 33, 300, 64, 5], SMOLLM2_135M["vocab_size"], seed=3)
    report = greedy_lockstep(runners[0], runners[1], prompts, new_tokens=24, chunk=96,
                             tie_tol=5e-2)
    graphs = runners[1].graphs
    assert graphs is not None
    record("graphs", {"bf16_graph_vs_eager": {**report.as_dict(), "replays": graphs.replays}})
    assert graphs.replays > 0
    assert not report.mismatches, report.mismatches
