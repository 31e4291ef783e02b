"""Container health checks: `python -m pyrouter.probe http URL` or `... grpc HOST:PORT`.

Exit 0 when the target is healthy, 1 when not (Docker's HEALTHCHECK contract). `http` wants a
200 from the router's `/health`; `grpc` asks an engine's standard grpc.health.v1 service for
the overall status ("") and wants SERVING, through the router's own engine client (Rust,
pyrouter/engines/rust_client.py: the deployment's TLS settings apply). Kubernetes needs neither: its probes speak HTTP and
gRPC health natively (deploy/k8s/).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import urllib.error
import urllib.request


def http_healthy(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def grpc_healthy(address: str, timeout_s: float) -> bool:
    from pyrouter.engines.rust_client import dial

    async def check() -> bool:
        return await dial(address, timeout_s).healthy(timeout_s)

    return asyncio.run(check())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyrouter.probe", description=__doc__)
    parser.add_argument("kind", choices=["http", "grpc"])
    parser.add_argument("target", help="http: a URL; grpc: HOST:PORT")
    parser.add_argument("--timeout-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    check = http_healthy if args.kind == "http" else grpc_healthy
    healthy = check(args.target, args.timeout_s)
    print("healthy" if healthy else f"UNHEALTHY: {args.kind} {args.target}", flush=True)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
