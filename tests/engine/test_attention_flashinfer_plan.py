"""The FlashInfer backend's CPU-checkable half: its plan arithmetic and row routing.

- The CSR arrays paged_plan derives from a step (qo_indptr, kv_indptr, kv_indices,
  kv_last_page_len), read the way FlashInfer defines them, give the torch backend's attention
  on random mixed batches (float32, 1e-5).
- FlashInferBackend driven through stand-in wrappers with flashinfer 0.7's signatures
  (tests/engine/flashinfer_fake.py) matches the torch backend on the same pages, in bf16 and
  fp16, with decodes first (the slice path) and shuffled (the gather path), and leaves the same
  K/V in the pages.
- Without CUDA nothing imports flashinfer: not importing every engine module, not "auto".
The kernels themselves are compared on a GPU: tests/gpu/.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import engine.attention.flashinfer_backend as fib
from engine.attention import get_backend, resolve_backend_name
from engine.attention.context import BatchLayout, SeqLayout
from engine.attention.paged_plan import BadLayout, key_slots, paged_index, split_step
from tests.engine.flashinfer_fake import FAKE_FLASHINFER, csr_attention
from tests.engine.paged_cases import random_step

pytestmark = pytest.mark.procs


@pytest.mark.parametrize("seed", range(12))
def test_csr_arrays_give_the_torch_backends_attention(seed: int) -> None:
    step = random_step(seed, torch.float32)
    torch_backend = get_backend("torch")
    ctx = step.context(torch_backend)
    torch_backend.plan(ctx)
    expected = torch_backend.run(1, step.q, step.k, step.v, ctx)
    cache = step.kv.layer(1)  # the torch backend has written the new K/V
    decode, prefill = split_step(step.batch)
    assert decode.num_rows + prefill.num_rows == step.q.shape[0]
    for index, causal in ((decode, False), (prefill, True)):
        if index.num_seqs == 0:
            continue
        got = csr_attention(step.q[index.rows], cache, index.qo_indptr, index.kv_indptr,
                            index.kv_indices, index.kv_last_page_len, causal)
        assert (got - expected[index.rows]).abs().max().item() < 1e-5


def test_paged_index_fields_on_a_known_layout() -> None:
    seqs = [SeqLayout(q_start=0, q_len=1, ctx_len=17, page_table=[7, 3, 9]),
            SeqLayout(q_start=1, q_len=5, ctx_len=5, page_table=[2]),
            SeqLayout(q_start=6, q_len=1, ctx_len=16, page_table=[4, 5])]
    decode, prefill = split_step(BatchLayout(seqs=seqs, page_size=16))
    assert decode.kv_indptr.tolist() == [0, 2, 3]
    assert decode.kv_indices.tolist() == [7, 3, 4]  # only the pages the context uses
    assert decode.kv_last_page_len.tolist() == [1, 16]
    assert decode.qo_indptr.tolist() == [0, 1, 2]
    assert decode.rows.tolist() == [0, 6] and decode.rows_start is None
    assert prefill.qo_indptr.tolist() == [0, 5] and prefill.rows_start == 1
    assert prefill.kv_last_page_len.tolist() == [5]
    slots = key_slots(decode, 16)
    assert slots[0].tolist() == list(range(7 * 16, 8 * 16)) + [3 * 16]
    with pytest.raises(BadLayout):
        paged_index([SeqLayout(q_start=0, q_len=1, ctx_len=40, page_table=[1, 2])], 16)


@pytest.fixture()
def fake_flashinfer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fib, "_import_flashinfer", lambda: FAKE_FLASHINFER)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("decodes_first", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_backend_matches_torch_backend(fake_flashinfer: None, seed: int, decodes_first: bool,
                                       dtype: torch.dtype) -> None:
    reference_step = random_step(100 + seed, dtype, decodes_first)
    step = random_step(100 + seed, dtype, decodes_first)
    torch_backend = get_backend("torch")
    ref_ctx = reference_step.context(torch_backend)
    torch_backend.plan(ref_ctx)
    expected = torch_backend.run(1, reference_step.q, reference_step.k, reference_step.v,
                                 ref_ctx).float()

    backend = fib.FlashInferBackend()
    for _ in range(2):  # the second step plans the wrappers in plan() (head count known)
        ctx = step.context(backend)
        backend.plan(ctx)
        got = backend.run(1, step.q, step.k, step.v, ctx).float()
        assert backend.num_qo_heads == step.heads
        assert (got - expected).abs().max().item() < 2e-2
    assert torch.equal(step.kv.layer(1), reference_step.kv.layer(1))


def test_backend_refuses_float32_kv(fake_flashinfer: None) -> None:
    step = random_step(7, torch.float32)
    backend = fib.FlashInferBackend()
    with pytest.raises(fib.FlashInferUnavailable, match="float32"):
        backend.plan(step.context(backend))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_without_cuda_the_backend_refuses_and_auto_is_torch() -> None:
    with pytest.raises(fib.FlashInferUnavailable, match="CUDA"):
        get_backend("flashinfer")
    assert resolve_backend_name("auto", "cpu", "bfloat16") == "torch"
    assert resolve_backend_name("auto", "cuda:0", "float32") == "torch"
    assert resolve_backend_name("torch", "cuda:0", "bfloat16") == "torch"


def test_importing_every_engine_module_never_imports_flashinfer() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import engine\n"
        # The fast-mode kernels are a torch op library (torch.ops.load_library), not a module.
        "names = [m.name for m in pkgutil.walk_packages(engine.__path__, 'engine.')\n"
        "         if m.name != 'engine.kernels._switchyard_cpu']\n"
        "for name in names:\n"
        "    if not name.endswith('__main__'):\n"
        "        importlib.import_module(name)\n"
        "assert len(names) > 60, names\n"
        "leaked = sorted(m for m in sys.modules if m.split('.')[0] == 'flashinfer')\n"
        "assert not leaked, leaked\n"
        "print('ok', len(names))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")
