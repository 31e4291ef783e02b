"""CUDA IPC KV transfer on one GPU, two processes.

- The link alone: random K/V chunks sent from this process land bit-exact in a receiver
  process's device memory; the ring wraps (more bytes than its size) under acknowledgements.
- Engines: three real engine processes on the GPU (fp32, random SmolLM2-shaped weights): pd and
  balanced_pd through a prefill and a decode engine produce exactly the tokens the reference
  engine produces alone; every RemoteSend went over cuda_ipc and moved the bytes its range weighs.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from engine.server.launcher import EngineSpec, start_engines, stop_engines
from engine.transfer import KVLayout
from engine.transfer.cuda_ipc import CudaIpcTransport
from tests.gpu.ipc_peer import ReceiverProcess
from tests.gpu.lockstep import random_prompts
from tests.gpu.random_models import (
    SMOLLM2_135M,
    random_weights,
    smollm2_tokenizer_json,
    write_hf_dir,
)
from tests.gpu.results import record
from tests.rpc import patterns

pytestmark = [pytest.mark.cuda, pytest.mark.procs, pytest.mark.model, pytest.mark.timeout(600)]


def test_link_moves_bytes_between_processes_bit_exact() -> None:
    layout = KVLayout(num_layers=4, num_kv_heads=8, head_dim=128, dtype="bfloat16")
    tokens = 3000
    receiver = ReceiverProcess(layout, tokens)
    try:
        expected = torch.randn(layout.num_layers, 2, tokens, 8, 128, device="cuda").bfloat16()
        # A 4 MiB ring for ~24 MiB of K/V: it wraps many times.
        link = CudaIpcTransport("127.0.0.1", receiver.port, layout, "cuda:0",
                                staging_bytes=4 << 20)
        try:
            session = link.open_session("r1")
            for start in range(0, tokens, 700):
                stop = min(tokens, start + 700)
                for layer in range(layout.num_layers):
                    buf = session.buffer(layer, start, stop)
                    buf.tensor.copy_(expected[layer, :, start:stop])
                    session.commit(layer, start, stop, buf)
            result = session.finish(timeout_s=60)
        finally:
            link.close()
        assert link.name == "cuda_ipc"
        assert result.bytes_acked == layout.range_bytes(tokens)
        assert torch.equal(receiver.dump(), expected.cpu())
    finally:
        receiver.stop()


async def _patterns(addresses: list[str], prompts: list[list[int]]) -> dict[str, object]:
    from switchyard_engine_api.client import EngineClient

    ref, prefill, decode = (EngineClient(a, timeout_s=300.0) for a in addresses)
    report: dict[str, object] = {}
    try:
        for i, prompt in enumerate(prompts):
            expected = await patterns.reference(ref, f"ref{i}", prompt)
            pd = await patterns.pd(prefill, decode, f"pd{i}", prompt)
            balanced = await patterns.balanced_pd(prefill, decode, f"bpd{i}", prompt, 0.5)
            for name, run in (("pd", pd), ("balanced_pd", balanced)):
                assert run.tokens == expected, (name, i, run.tokens, expected)
                for send in run.sends:
                    assert send.transport == "cuda_ipc", send
                    assert send.bytes_sent == send.bytes_expected > 0, send
                report[f"{name}_{len(prompt)}"] = {
                    "identical": True, "transfer_ms": [s.transfer_ms for s in run.sends],
                    "bytes": [s.bytes_sent for s in run.sends]}
    finally:
        for client in (ref, prefill, decode):
            await client.close()
    return report


def test_pd_and_balanced_pd_over_cuda_ipc_match_one_engine(tmp_path: Path) -> None:
    weights = random_weights(SMOLLM2_135M, seed=21, device="cuda", dtype=torch.float32)
    model_dir = write_hf_dir(SMOLLM2_135M, weights, tmp_path / "model", smollm2_tokenizer_json())
    del weights
    engines = start_engines([EngineSpec(name, device="cuda:0", model=str(model_dir),
                                        dtype="float32", num_pages=512, threads=1)
                             for name in ("ref", "prefill", "decode")], tmp_path)
    try:
        prompts = random_prompts([12, 90, 257, 600], SMOLLM2_135M["vocab_size"], seed=13)
        report = asyncio.run(_patterns([e.address for e in engines], prompts))
    finally:
        stop_engines(engines)
    record("ipc", {"patterns_fp32": report})
