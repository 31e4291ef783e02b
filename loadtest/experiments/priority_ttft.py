"""Issue 26's priority target, as a benchmark for a quiet machine (docs/benchmarking.md "Quiet
runs"): one engine saturated by N long prompts at priority 10 (all sent at once, streaming), then one
priority-0 request; each request's TTFT (send -> first token chunk). Target: the priority-0
TTFT <= 0.5x the median of the priority-10 ones. Repeat with --reps and report every run.

Against `switchyard serve --engines 1` (or `switchyard router` over one engine) on --base:

  python loadtest/experiments/priority_ttft.py --base http://127.0.0.1:8000 --queued 24 \\
      --prompt-words 1200 --reps 3 [--control]

--control sends the late request at priority 10 too: the baseline the ratio is compared with.
Prints one JSON line per run (ttfts, ratio, load average before and after).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

import aiohttp

TARGET_RATIO = 0.5


async def _ttft(session: aiohttp.ClientSession, base: str, prompt: str, priority: int,
                max_tokens: int) -> float:
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "priority": priority,
            "ignore_eos": True}
    start = time.perf_counter()
    async with session.post(f"{base}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            if line.startswith(b"data: ") and b'"text"' in line:
                ttft = time.perf_counter() - start
                async for _ in resp.content:  # let it finish: the engine stays saturated
                    pass
                return ttft
    raise RuntimeError("the stream ended without a token")


async def one_run(base: str, queued: int, prompt_words: int, late_priority: int,
                  max_tokens: int, settle_s: float, salt: int) -> dict[str, object]:
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        # Distinct prompts, in every run (`salt`): no prefix cache hit shortens one of them.
        long = [f"Report {salt}-{i}: " + " ".join(
            f"wagon{(i * 7919 + w + salt * 104729) % 10007}" for w in range(prompt_words))
            for i in range(queued)]
        background = [asyncio.create_task(_ttft(session, base, p, 10, max_tokens)) for p in long]
        await asyncio.sleep(settle_s)  # every long prompt queued on the engine first
        late = await _ttft(session, base, "The capital of France is", late_priority, max_tokens)
        ttfts = await asyncio.gather(*background)
    median = statistics.median(ttfts)
    return {"late_priority": late_priority, "late_ttft_s": round(late, 4),
            "queued_median_ttft_s": round(median, 4), "ratio": round(late / median, 4),
            "target_met": late / median <= TARGET_RATIO,
            "queued_ttfts_s": [round(t, 4) for t in sorted(ttfts)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--queued", type=int, default=24, help="long prompts at priority 10")
    parser.add_argument("--prompt-words", type=int, default=1200)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--settle-s", type=float, default=1.0,
                        help="wait after sending the long prompts before the late request")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--control", action="store_true",
                        help="the late request at priority 10 too (the baseline)")
    parser.add_argument("--salt", type=int, default=int(time.time()),
                        help="varies the prompts between invocations (default: the time)")
    args = parser.parse_args()
    for rep in range(args.reps):
        load_before = os.getloadavg()[0]
        run = asyncio.run(one_run(args.base, args.queued, args.prompt_words,
                                  10 if args.control else 0, args.max_tokens, args.settle_s,
                                  args.salt * 1000 + rep))
        print(json.dumps({"rep": rep, **run, "load_before": round(load_before, 2),
                          "load_after": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
