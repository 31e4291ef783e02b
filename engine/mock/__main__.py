"""`python -m engine.mock`: the mock engine (`switchyard engine --mock`, the same flags)."""
from __future__ import annotations

import sys

from engine.mock import serve
from engine.server.args import engine_parser


def main(argv: list[str] | None = None) -> int:
    parser = engine_parser(prog="python -m engine.mock")
    parser.description = ("Mock engine: synthetic tokens over the real engine proto, NO model. "
                          "Only for router-overhead benchmarks and fault-injection tests. Mock "
                          "flags left out fall back to SWITCHYARD_MOCK_<NAME> environment "
                          "variables, then to the defaults.")
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
