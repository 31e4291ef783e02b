"""`python -m tests.gpu.bench_gpu RESULTS_DIR`: GPU figures next to their floors, one run.

- Ceilings measured first (METHOD.md): device-to-device copy GB/s (bytes read + written) and a
  bf16 8192^3 matmul's TFLOP/s, both on random data.
- Llama 3.1 8B shape, bf16, random weights drawn on the device: our ModelRunner (FlashInfer,
  CUDA-graph decode) decode tokens/s at batch 1/32/128 over a 512-token context and prefill
  tokens/s at 2048, eager decode alongside; transformers' LlamaForCausalLM on the same weights
  in the same run. Floors: max(bytes / copy bandwidth, FLOPs / matmul peak).
- KV transfer: 2048 tokens of the 8B layout over cuda_ipc to another process (gathered from
  pages in 4 MiB chunks as RemoteSend does), against one device-to-device copy of those bytes.
Writes RESULTS_DIR/bench.json section by section (a failed section records its error).
"""
from __future__ import annotations

import argparse
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from tests.gpu.random_models import LLAMA31_8B, loaded_model, random_weights
from tests.gpu.results import record

CONTEXT = 512
DECODE_STEPS = 24
BATCHES = (1, 32, 128)
PREFILL_TOKENS = 2048
PAGE = 16


def _events_ms(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _copy_ms(src: torch.Tensor) -> float:
    dst = torch.empty_like(src)
    return _events_ms(lambda: dst.copy_(src), repeat=10)


def ceilings() -> dict[str, float]:
    n = 1 << 30  # 2 GiB of bf16 per buffer: far beyond L2
    copy_ms = _copy_ms(torch.randn(n, device="cuda", dtype=torch.bfloat16))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_ms = _events_ms(lambda: a @ b, repeat=10, warmup=3)
    return {"copy_GBps": 2 * n * 2 / copy_ms / 1e6, "bf16_TFLOPs": 2 * 8192**3 / mm_ms / 1e9,
            "gpu": torch.cuda.get_device_name()}


def _linear_params(raw: dict[str, Any]) -> int:
    h, i, d = raw["hidden_size"], raw["intermediate_size"], raw["head_dim"]
    q, kv = raw["num_attention_heads"] * d, raw["num_key_value_heads"] * d
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * i
    return raw["num_hidden_layers"] * per_layer + raw["vocab_size"] * h  # + lm_head


def _kv_bytes_per_token(raw: dict[str, Any]) -> int:
    return raw["num_hidden_layers"] * 2 * raw["num_key_value_heads"] * raw["head_dim"] * 2


def floors(raw: dict[str, Any], ceil: dict[str, float], batch: int, new: int,
           context: int) -> dict[str, float]:
    """Seconds for one step of `batch` sequences each adding `new` tokens on `context` tokens."""
    params = _linear_params(raw)
    layers, heads, dim = raw["num_hidden_layers"], raw["num_attention_heads"], raw["head_dim"]
    flops = 2 * params * batch * new
    # scores and values: 2 matmuls x 2 FLOP per multiply-add, causal within the new tokens
    attended = new * context + new * (new + 1) / 2
    flops += 4 * layers * heads * dim * batch * attended
    bytes_moved = 2 * params + batch * (context + new) * _kv_bytes_per_token(raw)
    t_bytes = bytes_moved / (ceil["copy_GBps"] * 1e9)
    t_flops = flops / (ceil["bf16_TFLOPs"] * 1e12)
    return {"floor_s": max(t_bytes, t_flops), "bytes_s": t_bytes, "flops_s": t_flops}


def _decode_step(runner: Any, tables: list[list[int]], tokens: list[int],
                 pos: int) -> list[int]:
    from engine.batch import ScheduledChunk

    chunks = [ScheduledChunk(f"s{s}", [tok], pos, table, True)
              for s, (tok, table) in enumerate(zip(tokens, tables, strict=True))]
    picked: list[int] = runner.run(chunks).argmax(-1).tolist()  # the host sync a sampler does
    return picked


def _ours(raw: dict[str, Any], weights: dict[str, torch.Tensor], ceil: dict[str, float],
          graphs: bool) -> dict[str, Any]:
    from engine.batch import ScheduledChunk
    from engine.kvcache.kv_storage import KVStorage
    from engine.model.runner import ModelRunner

    loaded = loaded_model(raw, weights, "cuda", torch.bfloat16)
    per_seq = -(-(CONTEXT + DECODE_STEPS + 8) // PAGE)
    pages = max(BATCHES) * per_seq
    kv = KVStorage.for_model(loaded.config, max(pages, PREFILL_TOKENS // PAGE) + 1, PAGE,
                             torch.bfloat16, "cuda")
    kv.layer(0).normal_()  # random context (attention costs the same on any values)
    for layer in range(1, kv.num_layers):
        kv.layer(layer).copy_(kv.layer(0))
    runner = ModelRunner(loaded, kv, "flashinfer")
    out: dict[str, Any] = {"graphs": graphs}
    if graphs:
        t0 = time.perf_counter()
        runner.capture_decode_graphs(list(BATCHES), scratch_page=kv.num_pages - 1,
                                     max_context=CONTEXT + DECODE_STEPS + 8)
        out["capture_s"] = time.perf_counter() - t0
    for batch in BATCHES:
        tables = [list(range(s * per_seq, (s + 1) * per_seq)) for s in range(batch)]
        tokens = [1] * batch
        for w in range(3):
            tokens = _decode_step(runner, tables, tokens, CONTEXT + w)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(DECODE_STEPS):
            tokens = _decode_step(runner, tables, tokens, CONTEXT + 3 + i)
        elapsed = time.perf_counter() - t0
        floor = floors(raw, ceil, batch, 1, CONTEXT)
        tok_s = batch * DECODE_STEPS / elapsed
        out[f"decode_b{batch}"] = {"tok_s": tok_s, "step_ms": elapsed / DECODE_STEPS * 1e3,
                                   "floor_tok_s": batch / floor["floor_s"], **floor}
    if graphs:
        assert runner.graphs is not None and runner.graphs.replays > 0
    table = list(range(PREFILL_TOKENS // PAGE))
    ids = torch.randint(0, raw["vocab_size"], (PREFILL_TOKENS,)).tolist()

    def prefill() -> None:
        runner.run([ScheduledChunk("p", ids, 0, table, True)]).argmax(-1).tolist()

    prefill_ms = _events_ms(prefill, repeat=3, warmup=1)
    floor = floors(raw, ceil, 1, PREFILL_TOKENS, 0)
    out["prefill_2048"] = {"tok_s": PREFILL_TOKENS / prefill_ms * 1e3, "ms": prefill_ms,
                           "floor_tok_s": PREFILL_TOKENS / floor["floor_s"], **floor}
    return out


def _transformers(raw: dict[str, Any], weights: dict[str, torch.Tensor]) -> dict[str, Any]:
    import transformers
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{k: v for k, v in raw.items() if not k.startswith("_")})
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.load_state_dict(weights, strict=False, assign=True)  # the very same tensors
    model.eval()
    out: dict[str, Any] = {"version": transformers.__version__,
                           "attention": str(model.config._attn_implementation)}
    with torch.inference_mode():
        for batch in BATCHES:
            ids = torch.randint(0, raw["vocab_size"], (batch, CONTEXT), device="cuda")
            cache = DynamicCache()
            logits = model(input_ids=ids, past_key_values=cache, use_cache=True,
                           logits_to_keep=1).logits
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            for _ in range(3):
                nxt = model(input_ids=nxt, past_key_values=cache, use_cache=True).logits[
                    :, -1].argmax(-1, keepdim=True)
            nxt.tolist()
            t0 = time.perf_counter()
            for _ in range(DECODE_STEPS):
                nxt = model(input_ids=nxt, past_key_values=cache, use_cache=True).logits[
                    :, -1].argmax(-1, keepdim=True)
                nxt.tolist()
            elapsed = time.perf_counter() - t0
            out[f"decode_b{batch}"] = {"tok_s": batch * DECODE_STEPS / elapsed}
            del cache
        ids = torch.randint(0, raw["vocab_size"], (1, PREFILL_TOKENS), device="cuda")
        prefill_ms = _events_ms(lambda: model(input_ids=ids, logits_to_keep=1), repeat=3)
        out["prefill_2048"] = {"tok_s": PREFILL_TOKENS / prefill_ms * 1e3, "ms": prefill_ms}
    return out


def _transfer(raw: dict[str, Any], ceil: dict[str, float]) -> dict[str, Any]:
    from engine.kvcache.kv_storage import KVStorage
    from engine.transfer import KVLayout
    from engine.transfer.cuda_ipc import CudaIpcTransport
    from engine.transfer.gather import gather_into
    from tests.gpu.ipc_peer import ReceiverProcess

    tokens = PREFILL_TOKENS
    layout = KVLayout(raw["num_hidden_layers"], raw["num_key_value_heads"], raw["head_dim"],
                      "bfloat16")
    kv = KVStorage(layout.num_layers, tokens // PAGE + 4, PAGE, layout.num_kv_heads,
                   layout.head_dim, torch.bfloat16, "cuda")
    kv.layer(0).normal_()
    table = list(range(2, 2 + tokens // PAGE))
    chunk_tokens = (4 << 20) // layout.bytes_per_token_layer  # RemoteSend's 4 MiB chunks
    receiver = ReceiverProcess(layout, tokens)
    out: dict[str, Any] = {"tokens": tokens, "bytes": layout.range_bytes(tokens)}
    try:
        link = CudaIpcTransport("127.0.0.1", receiver.port, layout, "cuda:0")
        try:
            runs = []
            for _ in range(4):  # the first run maps the ring in the receiver
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                session = link.open_session("bench")
                for layer in range(layout.num_layers):
                    for a in range(0, tokens, chunk_tokens):
                        b = min(tokens, a + chunk_tokens)
                        buf = session.buffer(layer, a, b)
                        gather_into(kv.layer(layer), table, a, b, buf.tensor)
                        session.commit(layer, a, b, buf)
                result = session.finish(timeout_s=120)
                runs.append(time.perf_counter() - t0)
                assert result.bytes_acked == out["bytes"]
        finally:
            link.close()
        stored = receiver.dump()
        expected = torch.stack([torch.stack(kv.read(layer, table, 0, tokens))
                                for layer in range(layout.num_layers)]).cpu()
        out["bit_exact"] = bool(torch.equal(stored, expected))
    finally:
        receiver.stop()
    best = min(runs[1:])
    copy_ms = _copy_ms(torch.empty(out["bytes"], dtype=torch.uint8, device="cuda").random_())
    out.update({"cuda_ipc_GBps": out["bytes"] / best / 1e9, "cuda_ipc_ms": best * 1e3,
                "d2d_copy_GBps": out["bytes"] / copy_ms / 1e6, "d2d_copy_ms": copy_ms,
                "copy_ceiling_GBps_read_plus_write": ceil["copy_GBps"]})
    return out


def _section(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    t0 = time.perf_counter()
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - one failed section must not hide the others
        traceback.print_exc()
        record("bench", {name: {"error": repr(exc)}})
        return None
    result["section_s"] = time.perf_counter() - t0
    record("bench", {name: result})
    print(f"[bench] {name} done in {result['section_s']:.1f} s", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GPU figures next to their floors")
    parser.add_argument("--skip-transformers", action="store_true")
    args = parser.parse_args(argv)
    ceil = _section("ceilings", ceilings)
    if ceil is None:
        return 1
    raw = LLAMA31_8B
    weights = random_weights(raw, seed=1, device="cuda", dtype=torch.bfloat16)
    # Most wanted first: check.sh's time limit may cut the tail.
    _section("ours_graphs", lambda: _ours(raw, weights, ceil, graphs=True))
    torch.cuda.empty_cache()
    if not args.skip_transformers:
        _section("transformers", lambda: _transformers(raw, weights))
        torch.cuda.empty_cache()
    _section("transfer", lambda: _transfer(raw, ceil))
    _section("ours_eager", lambda: _ours(raw, weights, ceil, graphs=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
