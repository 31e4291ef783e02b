"""Herding across router replicas (issue 25, deliver 3): the same workload through ONE router,
through 4 replicas that do not talk to each other, and through 4 replicas joined by the
dispatch-delta stream (--peer), each over the same 2 mock engines; requests go round-robin
across the replicas' ports (what a TCP balancer does). Per policy (least_load, cache_aware) it
prints the prompt-cache hit rate (cached prompt tokens / prompt tokens, from each response's
usage) and how evenly the engines were loaded: requests and tokens per engine (max/min), and the
mean imbalance of the tokens outstanding on the two engines at each dispatch, |a - b| / (a + b),
counted from the requests' own starts and ends (herding shows as every replica piling onto the
engine that looked lighter). Counts only: nothing here is a latency.

  .venv/bin/python loadtest/experiments/router_herding.py [--requests 400] [--clients 16]

Mock engines (synthetic tokens, a real prefix cache of block hashes, real KV events and Stats):
the router's decisions are what is measured, not the engines.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from router_core import MockEngineServer
from switchyard_bench.bench_procs import free_port, start_router_replicas, started_procs

WORDS = ("amber basalt cedar delta ember fjord granite harbor iris juniper kestrel lagoon "
         "meadow nectar orchid prairie quartz raven sierra tundra umber valley willow").split()


@dataclass(frozen=True)
class Job:
    prompt: str
    max_tokens: int


def workload(n: int, groups: int, seed: int, max_tokens: int) -> list[Job]:
    """`groups` shared prefixes (~200 words each), each request one of them plus its own tail,
    and an output length between 16 and `max_tokens`."""
    rng = random.Random(seed)
    prefixes = [" ".join(rng.choice(WORDS) for _ in range(200)) for _ in range(groups)]
    return [Job(f"{rng.choice(prefixes)} request {i} " + " ".join(
        rng.choice(WORDS) for _ in range(rng.randint(5, 40))), rng.randint(16, max_tokens))
        for i in range(n)]


@dataclass
class Tally:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    outstanding: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    imbalance: list[float] = field(default_factory=list)
    # Dispatches to the engine with strictly more tokens outstanding than the other: herding.
    to_busier: int = 0
    failed: int = 0


def engine_of(route: str) -> str:
    for part in route.split():
        if part.startswith("engine="):
            return part.split("=", 1)[1]
    return "?"


async def run_jobs(ports: list[int], jobs: list[Job], clients: int) -> Tally:
    tally = Tally()
    queue: asyncio.Queue[tuple[int, Job]] = asyncio.Queue()
    for i, job in enumerate(jobs):
        queue.put_nowait((i, job))

    async def client(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            i, job = queue.get_nowait()
            port = ports[i % len(ports)]  # round-robin across the replicas
            body = {"prompt": job.prompt, "max_tokens": job.max_tokens, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            async with session.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as r:
                if r.status != 200:
                    tally.failed += 1
                    continue
                engine = engine_of(r.headers.get("X-Switchyard-Route", ""))
                # Outstanding work as this request is dispatched (a stream's headers come
                # once it runs on its engine).
                load = [tally.outstanding[e] for e in ("e0", "e1")]
                if sum(load):
                    tally.imbalance.append(abs(load[0] - load[1]) / sum(load))
                other = "e1" if engine == "e0" else "e0"
                tally.to_busier += tally.outstanding[engine] > tally.outstanding[other]
                tally.outstanding[engine] += job.max_tokens
                usage = None
                async for line in r.content:
                    text = line.decode().strip()
                    if text.startswith("data: {"):
                        usage = json.loads(text[6:]).get("usage") or usage
                tally.outstanding[engine] -= job.max_tokens
            if usage is None:
                tally.failed += 1
                continue
            tally.requests[engine] += 1
            tally.tokens[engine] += usage["prompt_tokens"] + usage["completion_tokens"]
            tally.prompt_tokens += usage["prompt_tokens"]
            tally.cached_tokens += (usage.get("prompt_tokens_details") or {}).get(
                "cached_tokens", 0)

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return tally


def spread(counts: Counter[str]) -> str:
    values = [counts.get("e0", 0), counts.get("e1", 0)]
    low = min(values)
    return f"{values[0]}/{values[1]} ({max(values) / low:.2f})" if low else f"{values} (inf)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--groups", type=int, default=8, help="shared prompt prefixes")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--chunk-delay-ms", type=float, default=10.0,
                        help="the mock engines' time per decode step")
    parser.add_argument("--max-tokens", type=int, default=160,
                        help="each request's output length is drawn from 16..this")
    parser.add_argument("--poll-s", type=float, default=0.5,
                        help="the routers' Stats interval (longer: staler Stats, as with many "
                        "engines or a busy engine loop)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", default="least_load,cache_aware")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="router-herding-"))
    setups = [("1 router", 1, False), (f"{args.replicas} replicas, no stream", args.replicas,
                                         False),
              (f"{args.replicas} replicas, peer stream", args.replicas, True)]
    print("| policy | routers | cache hit rate | requests e0/e1 (max/min) | tokens e0/e1 "
          "(max/min) | mean outstanding imbalance at dispatch | sent to the busier engine | "
          "failed |")
    print("|---|---|---|---|---|---|---|---|")
    for policy in args.policies.split(","):
        for name, count, peers in setups:
            # Fresh engines per run: every setup starts from an empty prefix cache.
            engines = [MockEngineServer(free_port(), chunk_delay_ms=args.chunk_delay_ms,
                                        threads=2) for _ in range(2)]
            addresses = [f"127.0.0.1:{e.port}" for e in engines]
            try:
                with started_procs() as started:
                    ports, _ = start_router_replicas(
                        started, count, addresses, peers,
                        ["--policy", policy, "--poll-s", str(args.poll_s)], log_dir)
                    jobs = workload(args.requests, args.groups, args.seed, args.max_tokens)
                    tally = asyncio.run(run_jobs(ports, jobs, args.clients))
            finally:
                for e in engines:
                    e.shutdown(1.0)
            hit = tally.cached_tokens / max(1, tally.prompt_tokens)
            imbalance = sum(tally.imbalance) / max(1, len(tally.imbalance))
            print(f"| {policy} | {name} | {hit:.3f} | {spread(tally.requests)} | "
                  f"{spread(tally.tokens)} | {imbalance:.3f} | "
                  f"{tally.to_busier / max(1, sum(tally.requests.values())):.3f} | "
                  f"{tally.failed} |", flush=True)
    print(f"(logs in {log_dir}; load: {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
