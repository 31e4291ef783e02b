"""`switchyard bench router --engines N --churn-s S`: the router's memory under KV churn.

N mock engines from one process (switchyard_bench/mock_fleet.py; synthetic tokens, NO model),
each with a pretend prefix cache of --cache-blocks blocks that evicts the blocks it stored first
once full, and KVEvents that say so — the stores and evictions a real fleet's engines send. One
`switchyard router` over them on round_robin, so that every engine gets its share of the prompts
(cache_aware, with nothing to match, breaks its ties by engine id: the prompts would pile onto the
first engines and the rest of the fleet would never fill); the router indexes every engine's KV
events whatever its policy. wrk sends S seconds of streaming completions whose prompts are all
different (64 random numbers: about 440 tokens, 27 new blocks each), so the index fills to the
fleet's caches and then churns: every store evicts.
The router's resident memory (RSS, its process tree) is sampled every --sample-s seconds; the
table gives the idle RSS, the RSS at each sample, the peak and the last, and the fleet's bound on
what the index holds (N x --cache-blocks blocks).
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from switchyard_bench.bench_procs import started_procs
from switchyard_bench.open_loop import run_load
from switchyard_bench.proc_cpu import tree_rss_mb
from switchyard_bench.router_fleet_bench import (
    start_fleet,
    start_router,
    switch_policy,
    wait_healthy,
)
from switchyard_bench.wrk_runner import Measure, ensure_wrk, parse_wrk

# Each request's prompt: this many random numbers (1-6 digits: ~440 tokens in all), so that no
# two requests share a block.
_PROMPT_NUMBERS = 64

_CHURN_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
math.randomseed(%(seed)d)
request = function()
  local words = {}
  for i = 1, %(numbers)d do words[i] = tostring(math.random(1, 999999)) end
  local body = '{"model":"default","prompt":"' .. table.concat(words, " ") ..
    '","max_tokens":%(max_tokens)d,"stream":true,"ignore_eos":true,"temperature":0}'
  return wrk.format(nil, nil, nil, body)
end
"""


@dataclass(slots=True)
class ChurnConfig:
    engines: int
    duration_s: float = 600.0
    cache_blocks: int = 4096
    sample_s: float = 30.0
    concurrency: int = 32
    max_tokens: int = 16
    json_out: str = ""
    router_flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.engines < 1 or self.duration_s <= 0 or self.cache_blocks < 1 or self.sample_s <= 0:
            raise ValueError("engines >= 1, duration > 0, cache_blocks >= 1, sample_s > 0")


@dataclass(slots=True)
class ChurnResult:
    engines: int
    cache_blocks: int
    idle_rss_mb: float
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds in, RSS MB)
    rps: float = float("nan")
    errors: int = 0


def run_churn(cfg: ChurnConfig) -> int:
    wrk = ensure_wrk()
    if wrk is None:
        print("wrk unavailable: the Python load generator sends the prompts (slower: less churn "
              "a second)", flush=True)
    with started_procs() as started:
        ports = start_fleet(started, cfg.engines, cfg.cache_blocks)
        router = start_router(started, ports, cfg.router_flags)
        wait_healthy(router, cfg.engines)
        switch_policy(router, "round_robin")
        pids = [p.pid for p in router.proc]
        time.sleep(1.0)
        result = ChurnResult(cfg.engines, cfg.cache_blocks, tree_rss_mb(pids))
        print(f"N={cfg.engines} cache {cfg.cache_blocks} blocks/engine: idle RSS "
              f"{result.idle_rss_mb:.0f} MB; churning for {cfg.duration_s:g} s", flush=True)
        url = f"{router.url}/v1/completions"
        began = time.monotonic()

        def sample() -> None:
            at = time.monotonic() - began
            if not result.samples or at - result.samples[-1][0] >= cfg.sample_s:
                result.samples.append((round(at, 1), tree_rss_mb(pids)))
                print(f"  {at:6.0f} s  RSS {result.samples[-1][1]:.0f} MB", flush=True)

        if wrk is not None:
            measured = _wrk_churn(wrk, url, cfg, sample)
        else:
            measured = _python_churn(url, cfg, sample)
        result.rps, result.errors = measured.rps, measured.errors
        result.samples.append((round(time.monotonic() - began, 1), tree_rss_mb(pids)))
    print(churn_table(result))
    if cfg.json_out:
        with open(cfg.json_out, "w") as f:
            json.dump(asdict(result), f, indent=1)
    return 0


def _wrk_churn(wrk: str, url: str, cfg: ChurnConfig, sample: Callable[[], None]) -> Measure:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(_CHURN_SCRIPT % {"seed": 1, "numbers": _PROMPT_NUMBERS,
                                 "max_tokens": cfg.max_tokens})
        script = f.name
    try:
        load = subprocess.Popen([wrk, "-t1", f"-c{cfg.concurrency}", f"-d{cfg.duration_s:g}s",
                                 "--latency", "-s", script, url],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while load.poll() is None:
            time.sleep(min(cfg.sample_s, 1.0))
            sample()
        out = load.stdout.read() if load.stdout is not None else ""
    finally:
        os.unlink(script)
    return parse_wrk(out)


def _python_churn(url: str, cfg: ChurnConfig, sample: Callable[[], None]) -> Measure:
    rng = random.Random(1)

    def body() -> dict[str, object]:
        prompt = " ".join(str(rng.randint(1, 999_999)) for _ in range(_PROMPT_NUMBERS))
        return {"model": "default", "prompt": prompt, "max_tokens": cfg.max_tokens,
                "stream": True, "ignore_eos": True, "temperature": 0}

    done = threading.Event()

    def sampling() -> None:
        while not done.wait(min(cfg.sample_s, 1.0)):
            sample()

    sampler = threading.Thread(target=sampling, daemon=True)
    sampler.start()
    try:
        res = asyncio.run(run_load(url, {}, cfg.duration_s, concurrency=cfg.concurrency,
                                   fresh_body=body))
    finally:
        done.set()
        sampler.join()
    return Measure(res.rps, res.percentile(50), res.percentile(99), res.errors, "aiohttp",
                   res.requests)


def churn_table(r: ChurnResult) -> str:
    rss = [mb for _, mb in r.samples]
    per_engine_kb = (rss[-1] - r.idle_rss_mb) * 1000 / r.engines if rss else float("nan")
    return "\n".join([
        "| engines | cache blocks per engine (index bound) | req/s | errors | router RSS idle MB "
        "| peak MB | last MB | growth per engine, KB |",
        "|---|---|---|---|---|---|---|---|",
        f"| {r.engines} | {r.cache_blocks} ({r.engines * r.cache_blocks:,}) | {r.rps:.0f} | "
        f"{r.errors} | {r.idle_rss_mb:.0f} | {max(rss, default=float('nan')):.0f} | "
        f"{rss[-1] if rss else float('nan'):.0f} | {per_engine_kb:.0f} |",
        "RSS over the run (s: MB): " + ", ".join(f"{t:.0f}: {mb:.0f}" for t, mb in r.samples),
    ])
