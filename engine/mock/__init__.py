"""Mock engine: serves the Engine gRPC contract with synthetic tokens and NO model.

Only for router-overhead benchmarks and fault-injection tests — it computes nothing, so its
output is meaningless text. The server is Rust (router_core/src/mock_engine/, tonic on a tokio
runtime, the GIL released), so a request costs microseconds and a benchmark measures the router,
not the backend. Start it with `switchyard engine --mock --port P` or `python -m engine.mock --port P
[--tokens-per-chunk N --chunk-delay-ms MS --no-coalesce --fail-rate F ...]`.
"""
from __future__ import annotations

import argparse

__all__ = ["require_mocks", "serve"]


def require_mocks() -> None:
    """Raises a clear RuntimeError where router_core was built without its mocks: the wheel users
    install and the deployment images leave them out (the `mocks` Cargo feature); `make install`
    builds them in for the benchmarks and the tests."""
    import router_core

    if not hasattr(router_core, "MockEngineServer"):
        raise RuntimeError("this router_core was built without the mock engine and worker (the "
                           "`mocks` feature); they are for benchmarks and tests: build the "
                           "extension from a checkout with `make install`")


def serve(args: argparse.Namespace) -> int:
    """Run the mock engine until SIGINT/SIGTERM; returns the exit code."""
    require_mocks()
    from engine.mock.config import MockConfig
    from engine.mock.signals import serve_until_signal
    from router_core import MockEngineServer

    config = MockConfig.from_args(args)
    return serve_until_signal(
        lambda: MockEngineServer(**config.server_kwargs()),
        f"mock engine (synthetic tokens, no model; benchmarks and fault tests only) listening "
        f"on {config.host}:{{port}}")
