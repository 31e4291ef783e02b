"""An OpenAI-style HTTP worker that streams synthetic tokens at (almost) no cost.

Only for the router-overhead benchmark: it stands behind vllm-router / SGLang's router (which
speak HTTP to workers) the way `switchyard engine --mock` stands behind Switchyard's router. Both
are Rust servers in router_core (axum here, tonic there), so the two sides' backends cost alike.
Run: python -m switchyard_bench.mock_openai_worker --port P
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="OpenAI-style mock worker: synthetic tokens, no "
                                "model (router benchmarks only)")
    p.add_argument("--port", type=int, required=True, help="0 = any free port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--threads", type=int, default=1, help="runtime threads")
    args = p.parse_args(argv)

    from engine.mock import require_mocks
    from engine.mock.signals import serve_until_signal

    require_mocks()
    from router_core import MockOpenAIWorker

    return serve_until_signal(
        lambda: MockOpenAIWorker(args.port, args.host, threads=args.threads),
        f"mock OpenAI worker (synthetic tokens; benchmarks only) listening on "
        f"{args.host}:{{port}}")


if __name__ == "__main__":
    sys.exit(main())
