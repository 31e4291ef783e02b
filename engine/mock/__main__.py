"""`python -m engine.mock`: the mock engine with all of its fault-injection knobs as flags."""
from __future__ import annotations

import argparse
import sys

from engine.mock import serve


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m engine.mock",
        description="Mock engine: synthetic tokens over the real engine proto, NO model. Only for "
        "router-overhead benchmarks and fault-injection tests. Flags left out fall back to "
        "SWITCHYARD_MOCK_<NAME> environment variables, then to the defaults.")
    p.add_argument("--port", type=int, required=True, help="0 = any free port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--threads", type=int, default=None, help="runtime threads (default 1)")
    p.add_argument("--engine-id", default=None)
    p.add_argument("--role", default="any", choices=["any", "prefill", "decode"])
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--vocab-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=None, help="block hash seed and failure draws")
    p.add_argument("--tokens-per-chunk", type=int, default=None)
    p.add_argument("--chunk-delay-ms", type=float, default=None)
    p.add_argument("--no-coalesce", dest="coalesce", action="store_const", const="0",
                   default=None, help="one decode step's tokens per message, never more")
    p.add_argument("--fail-rate", type=float, default=None,
                   help="fraction of StartGenerate calls failing with UNAVAILABLE")
    p.add_argument("--fail-after-tokens", type=int, default=None,
                   help="every StartGenerate fails with INTERNAL after this many tokens")
    p.add_argument("--fail-remote-send", action="store_const", const="1", default=None,
                   help="every RemoteSend fails (a broken KV transfer)")
    p.add_argument("--unhealthy-file", default=None,
                   help="report NOT_SERVING while this file exists")
    return serve(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
