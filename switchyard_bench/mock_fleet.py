"""`python -m switchyard_bench.mock_fleet --count N --ports-file F`: N mock engines in one process
(router_core.MockEngineServer, each on its own free port; synthetic tokens, NO model), for the
router fleet benchmark, where a process per engine would cost the 2-core machine more than the
router it measures. Writes the ports as a JSON list to F once all serve; stops on SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from engine.mock import require_mocks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m switchyard_bench.mock_fleet",
                                description=__doc__)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--ports-file", required=True)
    p.add_argument("--cache-blocks", type=int, default=0,
                   help="each engine's prefix cache evicts the blocks it stored first beyond "
                        "this many (KV churn; 0: never evicts)")
    a = p.parse_args(argv)
    if a.count < 1:
        p.error("--count must be >= 1")
    if a.cache_blocks < 0:
        p.error("--cache-blocks must be >= 0")
    require_mocks()
    from router_core import MockEngineServer

    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the servers' threads inherit the mask
    servers = [MockEngineServer(0, cache_blocks=a.cache_blocks) for _ in range(a.count)]
    try:
        partial = a.ports_file + ".partial"
        with open(partial, "w") as f:
            json.dump([s.port for s in servers], f)
        os.replace(partial, a.ports_file)  # the reader sees all ports or none
        signal.sigwait(stop)
    finally:
        for s in servers:
            s.shutdown(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
