"""Structured output's cost in the engine: decode tokens/s with a JSON-schema grammar vs the same
requests free, fast mode, one process.

Each round runs a batch of chat prompts twice — constrained to a small JSON schema (the tests'
PERSON in switchyard_bench/json_schemas.py), then free with `ignore_eos` and each request's max_tokens set to what its constrained
run produced, so both sides decode the same number of tokens at the same batch size. Rounds
alternate the two sides; the figure per side is the median of the rounds, with the spread.
Only decode steps are timed (prefills and first tokens are not grammar work).

    python -m switchyard_bench.engine.grammar_bench --batches 1,8 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

from switchyard_bench.json_schemas import PERSON

_ASKS = ["Invent a person: name, age and city.", "Describe a traveller as JSON.",
         "Give me a made-up customer record.", "Who lives in Rome? Answer in JSON.",
         "A fictional pilot's profile, please.", "Make up a chess player.",
         "Name someone from Berlin and their age.", "A character for a novel, as data."]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m switchyard_bench.engine.grammar_bench",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", default=None, help="GGUF file or HF dir (default SmolLM2)")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    args.batch_sizes = [int(x) for x in args.batches.split(",") if x]
    if args.rounds <= 0 or args.max_tokens <= 1 or not args.batch_sizes or min(
            args.batch_sizes) <= 0:
        parser.error("rounds, batch sizes > 0; max-tokens > 1")
    return args


class _Side:
    """One engine and the decode loop both sides share."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        from engine.config import EngineConfig
        from engine.core.engine_core import EngineCore
        from engine.model.loader import load_model
        from switchyard_tokenizer.default_model import default_model_path

        torch.set_num_threads(args.threads)
        self.loaded = load_model(args.model or default_model_path(), torch.float32, "cpu",
                                 mode="fast")
        self.core = EngineCore(EngineConfig(mode="fast", max_running=max(args.batch_sizes)),
                               loaded=self.loaded)
        self.ids = iter(range(1_000_000_000))

    def prompt(self, i: int) -> list[int]:
        tok = self.loaded.tokenizer
        return list(tok.encode(tok.apply_chat_template(
            [{"role": "user", "content": _ASKS[i % len(_ASKS)]}])))

    def decode(self, batch: list[tuple[list[int], Any]]) -> tuple[float, dict[str, int]]:
        """Decode tokens/s over the steps after every request's first token; tokens per id."""
        names = [f"r{next(self.ids)}" for _ in batch]
        for name, (prompt, params) in zip(names, batch, strict=True):
            self.core.add_request(name, prompt, params)
        produced = dict.fromkeys(names, 0)
        while not all(produced.values()):
            for out in self.core.step():
                produced[out.request_id] += len(out.new_token_ids)
        timed, start = 0, time.perf_counter()
        while self.core.has_work():
            for out in self.core.step():
                produced[out.request_id] += len(out.new_token_ids)
                timed += len(out.new_token_ids)
        elapsed = time.perf_counter() - start
        return (timed / elapsed if elapsed > 0 else 0.0), produced


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    from switchyard_engine_api.sampling_params import ResponseFormat, SamplingParams

    side = _Side(args)
    schema = ResponseFormat("json_schema", json.dumps(PERSON))
    side.decode([(side.prompt(0), SamplingParams(temperature=0.0, max_tokens=4))])  # warm up
    print(f"load average before: {os.getloadavg()[0]:.2f}; threads {args.threads}")
    print("batch | free tok/s (median, spread) | json_schema tok/s | ratio | tokens/request")
    for batch in args.batch_sizes:
        free, constrained, lengths = [], [], []
        for _ in range(args.rounds):
            asks = [side.prompt(i) for i in range(batch)]
            rate, got = side.decode([(p, SamplingParams(temperature=0.0,
                                                        max_tokens=args.max_tokens,
                                                        response_format=schema)) for p in asks])
            constrained.append(rate)
            counts = list(got.values())
            lengths.extend(counts)
            free_rate, _ = side.decode([(p, SamplingParams(temperature=0.0, max_tokens=n,
                                                           ignore_eos=True))
                                        for p, n in zip(asks, counts, strict=True)])
            free.append(free_rate)
        f, c = statistics.median(free), statistics.median(constrained)
        print(f"{batch:5d} | {f:8.1f} ({min(free):.1f}-{max(free):.1f}) | {c:8.1f} "
              f"({min(constrained):.1f}-{max(constrained):.1f}) | {c / f:.2f}x | "
              f"{statistics.median(lengths):.0f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
