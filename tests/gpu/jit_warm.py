"""`python -m tests.gpu.jit_warm`: build FlashInfer's JIT kernels once, in parallel, and time it.

FlashInfer compiles its attention kernels with nvcc on first use. check.sh starts this first, in
the background, so the checks that need no FlashInfer (fp32 identity, CUDA IPC) run while nvcc
works; the kernels land in FlashInfer's cache directory and later processes load them from there.
Each (dtype, head_dim) the checks use is built by planning and running the backend on a tiny
step, one thread per configuration (the builds are separate nvcc/ninja processes).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from engine.attention.context import BatchLayout, ForwardContext, SeqLayout
from engine.attention.flashinfer_backend import FlashInferBackend
from engine.kvcache.kv_storage import KVStorage
from tests.gpu.results import record

# (dtype, query heads, kv heads, head_dim): SmolLM2 in bf16 and fp16, Llama 3.1 8B in bf16.
CONFIGS = ((torch.bfloat16, 9, 3, 64), (torch.float16, 9, 3, 64), (torch.bfloat16, 32, 8, 128))


def build(dtype: torch.dtype, heads: int, kv_heads: int, dim: int) -> float:
    t0 = time.perf_counter()
    kv = KVStorage(1, 4, 16, kv_heads, dim, dtype=dtype, device="cuda")
    # One decode and one prefill chunk: both wrappers plan and run, so both kernels build.
    seqs = [SeqLayout(q_start=0, q_len=1, ctx_len=5, page_table=[0]),
            SeqLayout(q_start=1, q_len=3, ctx_len=3, page_table=[1])]
    slots = torch.tensor([4, 16, 17, 18], device="cuda")
    backend = FlashInferBackend()
    ctx = ForwardContext(batch=BatchLayout(seqs=seqs, page_size=16), slot_mapping=slots,
                         sample_indices=slots[:0], kv=kv, backend=backend)
    backend.plan(ctx)
    q = torch.randn(4, heads, dim, device="cuda", dtype=dtype)
    k = torch.randn(4, kv_heads, dim, device="cuda", dtype=dtype)
    backend.run(0, q, k, k, ctx)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> int:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(CONFIGS)) as pool:
        futures = {f"{str(c[0]).removeprefix('torch.')}_hd{c[3]}": pool.submit(build, *c)
                   for c in CONFIGS}
    timings: dict[str, object] = {}
    failed = False
    for name, future in futures.items():
        try:
            timings[name] = round(future.result(), 1)
        except Exception as exc:  # noqa: BLE001 - recorded; the checks needing it will fail
            timings[name] = f"failed: {exc!r}"
            failed = True
    total = time.perf_counter() - t0
    record("jit", {"flashinfer_build_s": timings, "total_s": round(total, 1)})
    print(f"[jit] flashinfer kernels built in {total:.0f} s: {timings}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
