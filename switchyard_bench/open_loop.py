"""HTTP load generator for OpenAI endpoints: open loop (Poisson arrivals at --rate) or closed
loop (--concurrency workers back to back). Reports req/s and latency percentiles.

Used by `switchyard bench router` when `wrk` is not installed, and on its own:
  python switchyard_bench/open_loop.py --url http://127.0.0.1:8000/v1/completions --rate 200 --duration 10
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp


@dataclass(slots=True)
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, out: LoadResult) -> None:
    start = time.perf_counter()
    try:
        async with session.post(url, data=body,
                                headers={"Content-Type": "application/json"}) as r:
            await r.read()  # a streamed response counts when its last byte arrives
            ok = r.status == 200
    except aiohttp.ClientError:
        ok = False
    if ok:
        out.requests += 1
        out.latencies_ms.append((time.perf_counter() - start) * 1000)
    else:
        out.errors += 1


async def run_load(url: str, body: dict[str, object], duration_s: float,
                   concurrency: int = 0, rate: float = 0.0, seed: int = 0,
                   fresh_body: Callable[[], dict[str, object]] | None = None) -> LoadResult:
    """Closed loop with `concurrency` workers, or open loop at `rate` requests/s. With
    `fresh_body`, closed-loop workers send a new body from it each request (not `body`)."""
    if (concurrency > 0) == (rate > 0):
        raise ValueError("give exactly one of concurrency > 0 or rate > 0")
    payload = json.dumps(body).encode()
    out = LoadResult(0, 0, 0.0, [])
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        deadline = start + duration_s
        if concurrency:
            async def worker() -> None:
                while time.perf_counter() < deadline:
                    sent = payload if fresh_body is None else json.dumps(fresh_body()).encode()
                    await _one(session, url, sent, out)
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        else:
            rng = random.Random(seed)
            tasks: set[asyncio.Task[None]] = set()
            next_at = start
            while next_at < deadline:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                task = asyncio.create_task(_one(session, url, payload, out))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                next_at += rng.expovariate(rate)
            await asyncio.gather(*tasks)
        out.seconds = time.perf_counter() - start
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=0.0, help="open loop: arrivals per second")
    p.add_argument("--concurrency", type=int, default=0, help="closed loop: workers")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--stream", action="store_true")
    args = p.parse_args(argv)
    body = {"model": "default", "prompt": "Hello, my name is", "max_tokens": args.max_tokens,
            "stream": args.stream, "ignore_eos": True, "temperature": 0}
    res = asyncio.run(run_load(args.url, body, args.duration, args.concurrency, args.rate))
    print(f"{res.rps:.1f} req/s  p50 {res.percentile(50):.2f} ms  p99 {res.percentile(99):.2f} ms"
          f"  errors {res.errors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
