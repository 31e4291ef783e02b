"""`switchyard bench engine`: this engine vs transformers, same model, precision and threads.

Each side runs in its own spawned process (so peak RSS is its own), one after the other:
prefill tokens/s at each prompt length, decode tokens/s at each batch size, peak RSS. The floor
(weights bytes per decode step over measured memcpy bandwidth; FLOPs over measured matmul
throughput) is probed in the same run. Figures are printed side by side with ratios.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_DEFAULTS = {"prefill": "512,2048", "batches": "1,8,32", "decode_tokens": 24}


def _parse(rest: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="switchyard bench engine",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default=None, help="GGUF file or HF dir (default SmolLM2)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--prefill", default=_DEFAULTS["prefill"],
                        help="comma-separated prompt lengths")
    parser.add_argument("--batches", default=_DEFAULTS["batches"],
                        help="comma-separated decode batch sizes")
    parser.add_argument("--decode-tokens", type=int, default=_DEFAULTS["decode_tokens"],
                        help="decode steps timed per batch size")
    parser.add_argument("--chunk-size", type=int, default=2048,
                        help="engine prefill budget per step")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(rest)
    args.prefill_lens = [int(x) for x in args.prefill.split(",") if x]
    args.batch_sizes = [int(x) for x in args.batches.split(",") if x]
    if args.threads <= 0 or args.decode_tokens <= 1 or not args.prefill_lens or not all(
            n > 0 for n in args.prefill_lens + args.batch_sizes):
        parser.error("threads, lengths and batch sizes must be positive; decode-tokens > 1")
    return args


def _prompt(length: int, salt: int, vocab: int) -> list[int]:
    """Deterministic varied token ids (no two prompts share a prefix page)."""
    return [(1000 + salt * 7919 + i * 104729) % (vocab - 1000) + 500 for i in range(length)]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _engine_side(opts: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(opts["threads"])
    from engine.bench.engine_floor import weight_stats
    from engine.config import EngineConfig
    from engine.core.engine_core import EngineCore
    from engine.core.sampling_params import SamplingParams
    from engine.model.loader import load_model

    dtype = getattr(torch, opts["dtype"])
    loaded = load_model(opts["model"], dtype, "cpu")
    vocab = loaded.config.vocab_size
    batches, steps = opts["batch_sizes"], opts["decode_tokens"]
    tokens_needed = max(max(opts["prefill_lens"]) + 16,
                        max(batches) * (16 + steps + 2 + 16))
    core = EngineCore(EngineConfig(dtype=opts["dtype"], num_pages=tokens_needed // 16 + 64,
                                   chunk_size=opts["chunk_size"], max_running=max(batches)),
                      loaded=loaded)
    salt = iter(range(1, 1_000_000))

    def run_until_idle() -> None:
        while core.has_work():
            core.step()

    core.add_request("warmup", _prompt(64, 0, vocab), SamplingParams(max_tokens=4))
    run_until_idle()
    result: dict[str, Any] = {"prefill": {}, "decode": {}}
    for length in opts["prefill_lens"]:
        start = time.perf_counter()
        core.add_request(f"p{length}", _prompt(length, next(salt), vocab),
                         SamplingParams(max_tokens=1))
        run_until_idle()
        result["prefill"][length] = length / (time.perf_counter() - start)
    for batch in batches:
        params = SamplingParams(max_tokens=steps + 1, ignore_eos=True)
        for i in range(batch):
            core.add_request(f"d{batch}-{i}", _prompt(16, next(salt), vocab), params)
        started: set[str] = set()
        while len(started) < batch:  # prefills (and first tokens) are not decode throughput
            started.update(o.request_id for o in core.step() if o.new_token_ids)
        produced = 0
        start = time.perf_counter()
        while core.has_work():
            produced += sum(len(o.new_token_ids) for o in core.step())
        result["decode"][batch] = produced / (time.perf_counter() - start)
    result["weight_bytes"], result["params"] = weight_stats(loaded.model)
    result["peak_rss_mb"] = _peak_rss_mb()
    return result


def _transformers_side(opts: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(opts["threads"])
    warnings.filterwarnings("ignore", category=FutureWarning)  # past_key_values naming churn
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()

    from engine.model.default_model import default_model_path

    path = opts["model"] or default_model_path()
    dtype = getattr(torch, opts["dtype"])
    if os.path.isdir(path):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path),
                                                     gguf_file=os.path.basename(path),
                                                     dtype=dtype)
    model.eval()
    vocab = model.config.vocab_size
    result: dict[str, Any] = {"prefill": {}, "decode": {}}
    salt = iter(range(1, 1_000_000))
    with torch.inference_mode():
        model(torch.tensor([_prompt(64, 0, vocab)]))  # warm up
        for length in opts["prefill_lens"]:
            ids = torch.tensor([_prompt(length, next(salt), vocab)])
            start = time.perf_counter()
            model(ids, use_cache=False, logits_to_keep=1)
            result["prefill"][length] = length / (time.perf_counter() - start)
        for batch in opts["batch_sizes"]:
            ids = torch.tensor([_prompt(16, next(salt), vocab) for _ in range(batch)])
            out = model(ids, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            next_ids = out.logits[:, -1].argmax(-1, keepdim=True)
            start = time.perf_counter()
            for _ in range(opts["decode_tokens"]):
                out = model(next_ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                next_ids = out.logits[:, -1].argmax(-1, keepdim=True)
            result["decode"][batch] = batch * opts["decode_tokens"] / (
                time.perf_counter() - start)
    result["peak_rss_mb"] = _peak_rss_mb()
    return result


def _floor_side(opts: dict[str, Any]) -> dict[str, float]:
    import torch

    torch.set_num_threads(opts["threads"])
    from engine.bench.engine_floor import measure_matmul_gflop_s, measure_memcpy_gb_s

    return {"memcpy_gb_s": measure_memcpy_gb_s(),
            "matmul_gflop_s": measure_matmul_gflop_s(dtype=getattr(torch, opts["dtype"]))}


def _in_child(fn: Any, opts: dict[str, Any]) -> Any:
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, opts).result()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _row(name: str, ours: float, theirs: float | None, floor: float | None, unit: str) -> str:
    ratio = f"{ours / theirs:6.2f}x" if theirs else "     - "
    theirs_s = f"{theirs:14.1f}" if theirs is not None else f"{'-':>14}"
    floor_s = f"{floor:10.1f}" if floor is not None else f"{'-':>10}"
    return f"{name:<24}{ours:12.1f}{theirs_s}  {ratio}{floor_s}  {unit}"


def run(args: argparse.Namespace) -> int:
    opts = vars(_parse(list(getattr(args, "rest", []) or [])))
    from engine.bench.engine_floor import Floor

    started = time.perf_counter()
    floor_probe = _in_child(_floor_side, opts)
    ours = _in_child(_engine_side, opts)
    theirs = None if opts["skip_transformers"] else _in_child(_transformers_side, opts)
    floor = Floor(floor_probe["memcpy_gb_s"], floor_probe["matmul_gflop_s"],
                  ours["weight_bytes"], ours["params"])
    print(f"machine: {_cpu_name()}, {os.cpu_count()} cores, torch threads {opts['threads']}, "
          f"dtype {opts['dtype']}")
    print(f"floor probes: memcpy {floor.memcpy_gb_s:.1f} GB/s, matmul "
          f"{floor.matmul_gflop_s:.1f} GFLOP/s; weights {floor.weight_bytes / 1e6:.0f} MB, "
          f"{floor.params / 1e6:.0f} M params")
    print(f"{'metric':<24}{'switchyard':>12}{'transformers':>14}  {'ratio':>7}{'floor':>10}")
    for length in opts["prefill_lens"]:
        print(_row(f"prefill tok/s @{length}", ours["prefill"][length],
                   theirs["prefill"][length] if theirs else None, floor.prefill_tok_s(), "tok/s"))
    for batch in opts["batch_sizes"]:
        print(_row(f"decode tok/s @batch {batch}", ours["decode"][batch],
                   theirs["decode"][batch] if theirs else None, floor.decode_tok_s(batch),
                   "tok/s"))
    print(_row("peak RSS MB", ours["peak_rss_mb"], theirs["peak_rss_mb"] if theirs else None,
               None, "MB"))
    print(f"total bench time {time.perf_counter() - started:.0f} s")
    if opts["json"]:
        with open(opts["json"], "w") as f:
            json.dump({"engine": ours, "transformers": theirs, "floor": floor_probe,
                       "options": {k: v for k, v in opts.items() if k != "json"}}, f, indent=1)
    return 0
