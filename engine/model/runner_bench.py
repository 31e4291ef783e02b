"""Model-runner micro-benchmark: decode and prefill throughput of ModelRunner alone (no scheduler,
no sampling), plus the bytes-per-step floor. `switchyard bench engine` is the end-to-end figure
with transformers side by side; this isolates the model half.

    python -m engine.model.runner_bench [--dtype bfloat16] [--threads 2] [--int4 auto|on|off]
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from engine.batch import ScheduledChunk
from engine.kvcache.kv_storage import KVStorage
from engine.model.llama import LlamaLayer, LlamaModel
from engine.model.loader import LoadedModel, load_model
from engine.model.runner import ModelRunner

PAGE_SIZE = 16


def weight_bytes_per_decode_step(loaded: LoadedModel) -> int:
    """Bytes of weights a batch-1 decode step streams (the int4 form where it is used)."""
    model = loaded.model
    assert isinstance(model, LlamaModel), "exact-mode models only (the fast mode: bench engine)"
    total = model.lm_head.numel() * model.lm_head.element_size() + model.final_norm.nbytes
    for layer in model.layers:
        assert isinstance(layer, LlamaLayer)
        for linear in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj):
            if linear.int4 is not None:
                total += linear.int4.packed.nbytes + linear.int4.scales_zeros.nbytes
            else:
                total += linear.weight.nbytes
        total += layer.input_norm.nbytes + layer.post_norm.nbytes
    return total


def _runner(loaded: LoadedModel, pages: int) -> ModelRunner:
    return ModelRunner(loaded, KVStorage.for_model(loaded.config, pages, PAGE_SIZE,
                                                   dtype=loaded.model.dtype))


def decode_tokens_per_s(loaded: LoadedModel, batch: int, context: int = 128,
                        steps: int = 16) -> float:
    per_seq = -(-(context + steps) // PAGE_SIZE)
    runner = _runner(loaded, batch * per_seq)
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(batch)]
    prompt = list(range(100, 100 + context))
    runner.run([ScheduledChunk(f"s{i}", prompt, 0, tables[i], True) for i in range(batch)])
    start = time.perf_counter()
    for step in range(steps):
        runner.run([ScheduledChunk(f"s{i}", [7], context + step, tables[i], True)
                    for i in range(batch)])
    return batch * steps / (time.perf_counter() - start)


def prefill_tokens_per_s(loaded: LoadedModel, tokens: int) -> float:
    pages = -(-tokens // PAGE_SIZE)
    runner = _runner(loaded, pages)
    table = list(range(pages))
    runner.run([ScheduledChunk("warm", [5] * 16, 0, table, True)])
    start = time.perf_counter()
    runner.run([ScheduledChunk("p", [(i * 7) % 1000 for i in range(tokens)], 0, table, True)])
    return tokens / (time.perf_counter() - start)


def _load_transformers(path: str, dtype: torch.dtype) -> Any:
    import os

    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), dtype=dtype).eval()


def interleaved_decode_ms(loaded: LoadedModel, reference: Any, rounds: int = 12,
                          steps: int = 4) -> tuple[float, float]:
    """Median batch-1 decode step time (ms) of ours and of transformers (forward with its
    DynamicCache), alternating rounds so load changes on a shared machine hit both alike."""
    from transformers import DynamicCache

    context = 128
    per_seq = -(-(context + rounds * steps + 1) // PAGE_SIZE)
    runner = _runner(loaded, per_seq)
    table = list(range(per_seq))
    prompt = list(range(100, 100 + context))
    runner.run([ScheduledChunk("a", prompt, 0, table, True)])
    cache = DynamicCache()
    ours: list[float] = []
    theirs: list[float] = []
    with torch.no_grad():
        reference(torch.tensor([prompt]), past_key_values=cache, use_cache=True)
        position = context
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(steps):
                runner.run([ScheduledChunk("a", [7], position, table, True)])
                position += 1
            ours.append((time.perf_counter() - start) / steps * 1e3)
            start = time.perf_counter()
            for _ in range(steps):
                reference(torch.tensor([[7]]), past_key_values=cache, use_cache=True)
            theirs.append((time.perf_counter() - start) / steps * 1e3)
    return statistics.median(ours), statistics.median(theirs)


def reference_prefill_tokens_per_s(reference: Any, tokens: int) -> float:
    ids = torch.tensor([[(i * 7) % 1000 for i in range(tokens)]])
    with torch.no_grad():
        reference(ids[:, :16])
        start = time.perf_counter()
        reference(ids)
    return tokens / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--int4", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--baseline", action="store_true",
                        help="also run transformers on the same file, precision and threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    int4 = {"auto": None, "on": True, "off": False}[args.int4]
    loaded = load_model(args.model, dtype=args.dtype, int4=int4)
    floor = weight_bytes_per_decode_step(loaded)
    print(f"model {loaded.config.model_id} dtype {args.dtype} int4 {loaded.model.uses_int4} "
          f"threads {args.threads}")
    print(f"weights read per batch-1 decode step: {floor / 1e6:.0f} MB "
          f"(floor at 20 GB/s: {floor / 20e9 * 1e3:.1f} ms/step, "
          f"{20e9 / floor:.0f} tok/s)")
    ours = {f"decode {b}": decode_tokens_per_s(loaded, b) for b in (1, 8, 32)}
    ours.update({f"prefill {n}": prefill_tokens_per_s(loaded, n) for n in (512, 2048)})
    for name, value in ours.items():
        print(f"{name:<16}{value:10.1f} tok/s")
    if args.baseline:
        reference = _load_transformers(loaded.source, loaded.model.dtype)
        ours_ms, theirs_ms = interleaved_decode_ms(loaded, reference)
        print(f"batch-1 decode step, interleaved A/B (median): ours {ours_ms:.1f} ms, "
              f"transformers {theirs_ms:.1f} ms, ratio {theirs_ms / ours_ms:.2f}x")
        theirs_prefill = reference_prefill_tokens_per_s(reference, 512)
        print(f"prefill 512: ours {ours['prefill 512']:.1f} tok/s, transformers "
              f"{theirs_prefill:.1f} tok/s, ratio {ours['prefill 512'] / theirs_prefill:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
