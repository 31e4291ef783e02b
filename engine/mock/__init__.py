"""Mock engine: serves the Engine gRPC contract with synthetic tokens and NO model.

Only for router-overhead benchmarks and fault-injection tests — it computes nothing, so its
output is meaningless text. Start it with `switchyard engine --mock --port P` or
`python -m engine.mock --port P [--tokens-per-chunk N --chunk-delay-ms MS --no-coalesce
--fail-rate F ...]`.
"""
from __future__ import annotations

import argparse

__all__ = ["serve"]


def serve(args: argparse.Namespace) -> int:
    """Run the mock engine until SIGINT/SIGTERM; returns the exit code."""
    import asyncio

    from engine.mock.config import MockConfig
    from engine.mock.server import serve_async

    config = MockConfig.from_args(args)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is a dependency; plain asyncio still works without it
        pass
    asyncio.run(serve_async(config))
    return 0

