"""`switchyard bench engine`: this engine vs transformers (float32) and llama.cpp, same model
file and threads.

Each side runs in its own spawned process (so peak RSS is its own); the sides alternate for
`--rounds` rounds and each figure is the best of its rounds, so load swings on a shared machine
hit every side alike. Prefill tokens/s at each prompt length, decode tokens/s at each batch
size, peak RSS; llama.cpp (llama-cpp-python, `make bench-deps`) at batch 1 and prefill. The
floor (weight bytes per decode step over measured memcpy bandwidth; FLOPs over the measured
matmul peak) is probed in the same run. Figures are printed side by side with ratios.
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
    parser.add_argument("--mode", default="fast", choices=["fast", "exact"],
                        help="this engine's mode (default fast, as `switchyard serve`)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="dtype of the exact mode and of transformers (default float32)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per side")
    parser.add_argument("--skip-llama-cpp", action="store_true")
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
    if args.rounds <= 0 or args.threads <= 0 or args.decode_tokens <= 1 or not args.prefill_lens or not all(
            n > 0 for n in args.prefill_lens + args.batch_sizes):
        parser.error("threads, lengths and batch sizes must be positive; decode-tokens > 1")
    return args


def _prompt(length: int, salt: int, vocab: int) -> list[int]:
    """Deterministic varied token ids (no two prompts share a prefix page)."""
    return [(1000 + salt * 7919 + i * 104729) % (vocab - 1000) + 500 for i in range(length)]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _llama_cpp_side(opts: dict[str, Any]) -> dict[str, Any] | None:
    """llama.cpp on the same GGUF file: prefill tok/s per length, batch-1 decode tok/s."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    from switchyard_tokenizer.default_model import default_model_path

    path = opts["model"] or default_model_path()
    if os.path.isdir(path):
        return None
    n_ctx = max(max(opts["prefill_lens"]), 16 + opts["decode_tokens"]) + 64
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_threads=opts["threads"],
                n_threads_batch=opts["threads"], verbose=False)
    vocab = llm.n_vocab()
    llm.eval(_prompt(64, 0, vocab))  # warm up
    result: dict[str, Any] = {"prefill": {}, "decode": {}}
    salt = iter(range(1, 1_000_000))
    for length in opts["prefill_lens"]:
        llm.reset()
        start = time.perf_counter()
        llm.eval(_prompt(length, next(salt), vocab))
        result["prefill"][length] = length / (time.perf_counter() - start)
    llm.reset()
    llm.eval(_prompt(16, next(salt), vocab))
    fed = _prompt(opts["decode_tokens"], next(salt), vocab)
    start = time.perf_counter()
    for token in fed:  # one token per step, as greedy decoding does
        llm.eval([token])
    result["decode"][1] = len(fed) / (time.perf_counter() - start)
    result["peak_rss_mb"] = _peak_rss_mb()
    return result


def _engine_side(opts: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(opts["threads"])
    from engine.config import EngineConfig
    from engine.core.engine_core import EngineCore
    from engine.model.loader import load_model
    from switchyard_bench.engine.engine_floor import weight_stats
    from switchyard_engine_api.sampling_params import SamplingParams

    dtype = getattr(torch, opts["dtype"])
    loaded = load_model(opts["model"], dtype, "cpu", mode=opts["mode"])
    vocab = loaded.config.vocab_size
    batches, steps = opts["batch_sizes"], opts["decode_tokens"]
    core = EngineCore(EngineConfig(mode=opts["mode"], dtype=opts["dtype"],
                                   chunk_size=opts["chunk_size"], max_running=max(batches)),
                      loaded=loaded)
    result_rss_loaded = _rss_mb()
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
    result["rss_after_load_mb"] = result_rss_loaded
    result["kv_pool_mb"] = core.kv.bytes_per_page() * core.pool.num_pages / 2**20
    return result


def _transformers_side(opts: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(opts["threads"])
    warnings.filterwarnings("ignore", category=FutureWarning)  # past_key_values naming churn
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()

    from switchyard_tokenizer.default_model import default_model_path

    path = opts["model"] or default_model_path()
    dtype = getattr(torch, opts["transformers_dtype"])
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
    from switchyard_bench.engine.engine_floor import measure_matmul_gflop_s, measure_memcpy_gb_s

    # The fast mode's int8 kernels are bounded by neither figure exactly; the better of the
    # float32 and bfloat16 peaks is the FLOP floor used for it.
    dtypes = ["float32", "bfloat16"] if opts["mode"] == "fast" else [opts["dtype"]]
    return {"memcpy_gb_s": measure_memcpy_gb_s(),
            "matmul_gflop_s": max(measure_matmul_gflop_s(dtype=getattr(torch, d))
                                  for d in dtypes)}


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


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric, the best of the rounds (throughput: max; RSS: max as well, it is a peak)."""
    out = dict(runs[0])
    for key in ("prefill", "decode"):
        out[key] = {k: max(r[key][k] for r in runs) for k in runs[0][key]}
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return out


def _cell(value: float | None, width: int) -> str:
    return f"{value:{width}.1f}" if value is not None else f"{'-':>{width}}"


def _ratio(ours: float, theirs: float | None) -> str:
    return f"{ours / theirs:6.2f}x" if theirs else "     - "


def _row(name: str, ours: float, hf: float | None, llama: float | None,
         floor: float | None) -> str:
    return (f"{name:<24}{ours:12.1f}{_cell(hf, 14)}  {_ratio(ours, hf)}{_cell(llama, 11)}  "
            f"{_ratio(ours, llama)}{_cell(floor, 10)}")


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def run(args: argparse.Namespace) -> int:
    opts = vars(_parse(list(getattr(args, "rest", []) or [])))
    opts["transformers_dtype"] = "float32" if opts["mode"] == "fast" else opts["dtype"]
    from switchyard_bench.engine.engine_floor import Floor

    started = time.perf_counter()
    load_before = _load_average()
    floor_probe = _in_child(_floor_side, opts)
    ours_runs, hf_runs, llama_runs = [], [], []
    for _ in range(opts["rounds"]):  # alternate sides so load swings hit all of them
        ours_runs.append(_in_child(_engine_side, opts))
        if not opts["skip_transformers"]:
            hf_runs.append(_in_child(_transformers_side, opts))
        if not opts["skip_llama_cpp"]:
            llama_result = _in_child(_llama_cpp_side, opts)
            if llama_result is not None:
                llama_runs.append(llama_result)
    ours = _best(ours_runs)
    theirs = _best(hf_runs) if hf_runs else None
    llama = _best(llama_runs) if llama_runs else None
    floor = Floor(floor_probe["memcpy_gb_s"], floor_probe["matmul_gflop_s"],
                  ours["weight_bytes"], ours["params"])
    what = "fast" if opts["mode"] == "fast" else f"exact {opts['dtype']}"
    print(f"machine: {_cpu_name()}, {os.cpu_count()} cores, torch threads {opts['threads']}, "
          f"switchyard mode {what}, transformers {opts['transformers_dtype']}, "
          f"best of {opts['rounds']} alternating rounds; load average before "
          f"{load_before}, after {_load_average()}")
    print(f"floor probes: memcpy {floor.memcpy_gb_s:.1f} GB/s, matmul "
          f"{floor.matmul_gflop_s:.1f} GFLOP/s; weights read per step "
          f"{floor.weight_bytes / 1e6:.0f} MB, {floor.params / 1e6:.0f} M params")
    if llama is None and not opts["skip_llama_cpp"]:
        print("llama.cpp: not measured (install llama-cpp-python: `make bench-deps`)")
    print(f"{'metric (tok/s)':<24}{'switchyard':>12}{'transformers':>14}  {'ratio':>7}"
          f"{'llama.cpp':>11}  {'ratio':>7}{'floor':>10}")
    for length in opts["prefill_lens"]:
        print(_row(f"prefill @{length}", ours["prefill"][length],
                   theirs["prefill"][length] if theirs else None,
                   llama["prefill"].get(length) if llama else None, floor.prefill_tok_s()))
    for batch in opts["batch_sizes"]:
        print(_row(f"decode @batch {batch}", ours["decode"][batch],
                   theirs["decode"][batch] if theirs else None,
                   llama["decode"].get(batch) if llama else None, floor.decode_tok_s(batch)))
    print(_row("peak RSS MB", ours["peak_rss_mb"], theirs["peak_rss_mb"] if theirs else None,
               llama["peak_rss_mb"] if llama else None, None))
    print(f"switchyard RSS after load {ours['rss_after_load_mb']:.0f} MB (KV pool budget "
          f"{ours['kv_pool_mb']:.0f} MB, touched only as used)")
    print(f"total bench time {time.perf_counter() - started:.0f} s")
    if opts["json"]:
        with open(opts["json"], "w") as f:
            json.dump({"engine": ours, "transformers": theirs, "llama_cpp": llama,
                       "floor": floor_probe, "load_average": [load_before, _load_average()],
                       "options": {k: v for k, v in opts.items() if k != "json"}}, f, indent=1)
    return 0
