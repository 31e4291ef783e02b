"""The `switchyard` command line (README.md; every option: `switchyard <command> --help`).

Each subcommand lives in the module that owns it; this file only parses arguments and dispatches,
importing lazily so `switchyard router` never imports torch and `switchyard engine` never imports
the router.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from engine.server.args import add_engine_arguments, add_runtime_arguments

# subcommand -> "module:function"; the function takes the parsed argparse.Namespace and returns
# an exit code.
_DISPATCH: dict[str, str] = {
    "serve": "pyrouter.serve:run",
    "engine": "engine.server.main:run",
    "router": "pyrouter.router_command:run",
    "trace": "pyrouter.trace_cli:run",
}
_BENCH_DISPATCH: dict[str, str] = {
    "engine": "switchyard_bench.engine.engine_bench:run",
    "transfer": "switchyard_bench.engine.transfer_bench:run",
    "router-core": "switchyard_bench.router_core_bench:run",
    "router": "switchyard_bench.router_bench:run",
    "serve": "switchyard_bench.serve.main:run",
    "simulate": "switchyard_bench.simulate.main:run",
    "tournament": "switchyard_bench.tournament.main:run",
    "plot": "switchyard_bench.plot:run",
    "soak": "switchyard_bench.soak.main:run",
}


def _load(target: str) -> Callable[[argparse.Namespace], int]:
    module_name, func_name = target.split(":")
    func: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(module_name), func_name
    )
    return func


def add_admission_arguments(parser: argparse.ArgumentParser) -> None:
    """The admission queue (pyrouter/admission.py); `serve` passes them through."""
    g = parser.add_argument_group("admission (docs/api.md \"Admission by predicted outcome\")")
    g.add_argument("--admit-max-inflight-per-engine", type=int, default=0, metavar="N",
                   help="N unfinished requests of this router per open engine saturate the "
                   "engines; while they are, requests queue by priority and fair share (0 = off)")
    g.add_argument("--admit-max-queued-prefill-tokens", type=int, default=0, metavar="T",
                   help="an engine with T prefill tokens queued is not open (0 = off)")
    g.add_argument("--admit-queue-size", type=int, default=1024, metavar="N",
                   help="requests the admission queue holds; beyond, 429 queue_full")
    g.add_argument("--admit-queue-timeout-s", type=float, default=30.0, metavar="S",
                   help="the longest a request waits (its slo.ttft_ms may shorten it); then 503 "
                   "queue_timeout with Retry-After")
    g.add_argument("--admit-weight", action="append", default=None, metavar="KEY=W",
                   help="fair-share weight of an API key (repeatable; others weigh 1)")
    g.add_argument("--slo-ttft-ms", type=float, default=None, metavar="MS",
                   help="the TTFT objective of requests that bring no slo.ttft_ms: they are "
                   "admitted by predicted outcome too")
    g.add_argument("--slo-tpot-ms", type=float, default=None, metavar="MS",
                   help="the TPOT objective of requests that bring no slo.tpot_ms")
    g.add_argument("--admit-predicted", choices=("on", "off"), default=None,
                   help="admit requests with a TTFT objective by their predicted outcome, "
                   "refusing at once those that cannot make it (503 slo_unattainable; default on)")
    g.add_argument("--admit-margin", type=float, default=None, metavar="M",
                   help="how far past its TTFT budget a prediction may go and still count as in "
                   "time (0.1 = 10%%, the default)")


def add_router_guard_arguments(parser: argparse.ArgumentParser) -> None:
    """What bounds the router's exposure (docs/reliability.md); `serve` passes them through."""
    g = parser.add_argument_group("protection (docs/reliability.md)")
    g.add_argument("--admin-port", type=int, default=None,
                   help="serve the /admin routes only on this port (not on --port)")
    g.add_argument("--admin-host", default="127.0.0.1",
                   help="address of the admin port (default loopback)")
    g.add_argument("--engine-allow", action="append", default=[], metavar="CIDR|HOST[:PORT]",
                   help="addresses POST /admin/engines may add, beyond loopback and the --engine "
                   "hosts (repeatable; env SWITCHYARD_ENGINE_ALLOW, comma-separated)")
    g.add_argument("--max-body-bytes", type=int, default=4 << 20,
                   help="largest request body (413 beyond it)")
    g.add_argument("--body-timeout-s", type=float, default=30.0,
                   help="time a request body may take to arrive (408 beyond it)")
    g.add_argument("--idle-timeout-s", type=float, default=30.0,
                   help="a connection without a complete request for this long is closed "
                   "(headers sent too slowly, or idle keep-alive)")
    g.add_argument("--drain-s", type=float, default=None,
                   help="on SIGTERM, how long requests in flight may finish (default "
                   "SWITCHYARD_DRAIN_S or 30)")
    g.add_argument("--rate-limit-rps", type=float, default=0.0,
                   help="requests per second per caller (API key, else client address); 0 = off")
    g.add_argument("--rate-limit-burst", type=int, default=0,
                   help="burst size of --rate-limit-rps (default: max(1, rps))")
    g.add_argument("--max-inflight-per-caller", type=int, default=0,
                   help="requests in flight per caller before 429; 0 = off")


def add_session_arguments(parser: argparse.ArgumentParser) -> None:
    """Session affinity (pyrouter/session_affinity.py); `serve` passes them through."""
    g = parser.add_argument_group("session affinity (docs/policies.md)")
    g.add_argument("--session-load-bound", type=float, default=None, metavar="C",
                   help="a session (X-Session-Id) stays on its engine while that engine's "
                   "requests in flight stay within C x the mean (C >= 1, default 1.25; PUT "
                   "/admin/session-affinity changes it while the router runs)")
    g.add_argument("--session-from-user", action="store_true",
                   help="the body's `user` names the session when no X-Session-Id header does")


def add_upkeep_arguments(parser: argparse.ArgumentParser, poll_s: float | None = None) -> None:
    """How the router keeps up with its engines (router_core/src/engine_upkeep/); `serve`
    passes them through, None where not given (the router's own defaults then apply)."""
    g = parser.add_argument_group("engine upkeep (docs/deploy.md)")
    g.add_argument("--poll-s", type=float, default=poll_s,
                   help="seconds between health/Stats polls of an engine that does not push "
                   "its load (an older engine, or one whose KV event stream is down; default "
                   "0.5)")
    g.add_argument("--liveness-s", type=float, default=None,
                   help="seconds between health/Stats polls of an engine that pushes its load "
                   "on its KV event stream: only to find it dead if it hangs (default 10)")
    g.add_argument("--upkeep-polls-per-s", type=float, default=None,
                   help="every engine's health/Stats polls together at most this many per "
                   "second: past that, every engine is polled less often, all alike "
                   "(default 256; 0: no bound)")
    g.add_argument("--prefix-index-max-blocks", type=int, default=None,
                   help="distinct KV blocks the router's prefix index holds at most, over "
                   "every engine (about 30 bytes each, more for blocks many engines hold); "
                   "past it new blocks are not indexed, so prefix matches can only be "
                   "under-reported (default 16777216)")


# A router replica takes its peers' dispatch deltas (RouterPeer gRPC; pyrouter/replicas/peer_exchange.py)
# on --port plus this unless --peer-port says.
DEFAULT_PEER_PORT_OFFSET = 1000


def add_peer_arguments(parser: argparse.ArgumentParser) -> None:
    """The other router replicas (pyrouter/replicas/peers.py; docs/deploy.md)."""
    g = parser.add_argument_group("router replicas (docs/deploy.md)")
    g.add_argument("--peer", action="append", default=None, metavar="HOST:PORT",
                   help="another router replica in front of the same engines (repeatable)")
    g.add_argument("--peers-dns", default=None, metavar="NAME:PORT",
                   help="a DNS name whose records are the router replicas (a Kubernetes "
                   "headless Service), each on PORT")
    g.add_argument("--peer-sync-s", type=float, default=2.0,
                   help="seconds between reading the peers' admin changes (policy, engines, "
                   "settings) to catch up with any this replica missed; changes are also "
                   "pushed to the peers as they are made")
    g.add_argument("--peer-port", type=int, default=None, metavar="PORT",
                   help=f"the port (on --host) where this replica takes its peers' dispatch "
                   f"deltas (default --port + {DEFAULT_PEER_PORT_OFFSET}); every replica's is "
                   f"its --port plus the same offset, so --peer and --peers-dns name the peers' "
                   f"--port only; unused when the router runs alone")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description="Switchyard LLM serving")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start N engines and the router on this machine")
    serve.add_argument("--engines", type=int, default=2)
    serve.add_argument("--policy", default="round_robin")
    serve.add_argument("--policy-file", default=None)
    serve.add_argument("--policy-dir", default=None, metavar="DIR",
                       help="policy files the router loads at start and PUT /admin/policy "
                       "may load by name")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--routers", type=int, default=1, metavar="N",
                       help="router replicas over the same engines, on --port, --port+1, ... "
                       "(each its own process; docs/deploy.md)")
    serve.add_argument("--max-restarts", type=int, default=5,
                       help="times in a row a dead engine or router replica is restarted "
                       "(with backoff) before it is left down")
    serve.add_argument("--cpu-affinity", choices=("auto", "on", "off"), default="auto",
                       help="pin each engine to its own cores, as GPU engines own their devices "
                       "(the usable cores split into equal contiguous groups, one per engine; "
                       "each engine's torch threads = its group's size). auto: on when there "
                       "are at least as many cores as engines. The router is never pinned: its "
                       "CPU per request is a fraction of a millisecond, it runs in the gaps the "
                       "engines leave, and a core of its own would take 1/N of the engines' "
                       "compute (docs/benchmarking.md, \"Quiet runs\")")
    add_router_guard_arguments(serve)
    add_admission_arguments(serve)
    add_runtime_arguments(serve, several_models=True)  # passed to every engine
    serve.add_argument("--mock-engines", action="store_true",
                       help="start mock engines (synthetic tokens, no model): router tests and "
                       "overhead benchmarks only")
    add_session_arguments(serve)
    add_upkeep_arguments(serve)

    add_engine_arguments(sub.add_parser("engine", help="one engine process serving the verbs "
                                        "over gRPC"))

    rtr = sub.add_parser("router", help="the router alone, in front of running engines")
    rtr.add_argument("--engine", action="append", default=[], metavar="HOST:PORT")
    rtr.add_argument("--policy", default="round_robin")
    rtr.add_argument("--policy-file", default=None,
                     help="a .py file or a module name whose @policy functions to register")
    rtr.add_argument("--engine-dns", action="append", default=[], metavar="NAME:PORT[@ROLE]",
                     help="engines behind a DNS name (a Kubernetes headless Service: one record "
                     "per pod), re-resolved every --engine-dns-interval-s; repeatable")
    rtr.add_argument("--engine-dns-interval-s", type=float, default=5.0,
                     help="seconds between re-resolving each --engine-dns name")
    rtr.add_argument("--policy-dir", default=None, metavar="DIR",
                     help="load every *.py policy file in DIR at start and reload one when it "
                     "changes (a mounted ConfigMap)")
    rtr.add_argument("--policy-dir-poll-s", type=float, default=2.0,
                     help="seconds between checks of --policy-dir for changed files")
    rtr.add_argument("--port", type=int, default=8000)
    rtr.add_argument("--host", default="127.0.0.1")
    add_peer_arguments(rtr)
    rtr.add_argument("--model", action="append", default=None, metavar="[NAME=]PATH",
                     help="model whose tokenizer the router uses; repeated as NAME=PATH "
                     "(PATH may be 'default'), several models: a request's model picks the "
                     "engines whose ModelInfo names it (switchyard engine "
                     "--served-model-name NAME)")
    rtr.add_argument("--max-inflight", type=int, default=4096,
                     help="requests in flight before answering 429")
    rtr.add_argument("--max-context", type=int, default=8192,
                     help="prompt + max_tokens limit (400 beyond it)")
    add_upkeep_arguments(rtr, poll_s=0.5)  # the simulator's POLL_S matches it
    rtr.add_argument("--policy-timeout-s", type=float, default=300.0,
                     help="a policy must hand back a stream within this time (else 500)")
    rtr.add_argument("--default-temperature", type=float, default=None,
                     help="temperature when a request omits it (default: 0.2 for the default "
                     "SmolLM2 model, its recommended setting; 1.0 otherwise)")
    rtr.add_argument("--default-top-p", type=float, default=None,
                     help="top_p when a request omits it (default: 0.9 for SmolLM2, else 1.0)")
    add_router_guard_arguments(rtr)
    add_admission_arguments(rtr)
    add_session_arguments(rtr)

    bench = sub.add_parser("bench", help="benchmark runners")
    bench.add_argument("what", choices=sorted(_BENCH_DISPATCH))
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="options for that benchmark")

    trace = sub.add_parser("trace", help="inspect recorded traces")
    trace.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        return _load(_BENCH_DISPATCH[args.what])(args)
    return _load(_DISPATCH[args.command])(args)


if __name__ == "__main__":
    sys.exit(main())
