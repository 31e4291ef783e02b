"""The `switchyard` command line (INTERFACES.md).

Each subcommand lives in the module that owns it; this file only parses arguments and dispatches,
importing lazily so `switchyard router` never imports torch and `switchyard engine` never imports
the router.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

# subcommand -> "module:function"; the function takes the parsed argparse.Namespace and returns
# an exit code.
_DISPATCH: dict[str, str] = {
    "serve": "pyrouter.serve:run",
    "engine": "engine.server.main:run",
    "router": "pyrouter.server:run",
    "trace": "pyrouter.trace_cli:run",
}
_BENCH_DISPATCH: dict[str, str] = {
    "engine": "engine.bench.engine_bench:run",
    "transfer": "engine.bench.transfer_bench:run",
    "router-core": "pyrouter.bench.router_core_bench:run",
    "router": "pyrouter.bench.router_bench:run",
}


def _load(target: str) -> Callable[[argparse.Namespace], int]:
    module_name, func_name = target.split(":")
    func: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(module_name), func_name
    )
    return func


_MODE_HELP = ('"fast" (default on CPU): block-quantised weights, int8 activations and batch-invariant kernels, identical tokens across patterns; "exact": float32 reference numerics (or --dtype)')
_KV_MEMORY_HELP = "KV cache budget per engine, e.g. 512MiB or 2G (default 512MiB)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description="Switchyard LLM serving")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start N engines and the router on this machine")
    serve.add_argument("--engines", type=int, default=2)
    serve.add_argument("--policy", default="round_robin")
    serve.add_argument("--policy-file", default=None)
    serve.add_argument("--model", default=None, help="GGUF file or HF directory (default SmolLM2)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--device", default="cpu")
    serve.add_argument("--dtype", default=None, help="exact mode's dtype (implies --mode exact)")
    serve.add_argument("--mode", default=None, choices=["fast", "exact"], help=_MODE_HELP)
    serve.add_argument("--kv-memory", default=None, help=_KV_MEMORY_HELP)
    serve.add_argument("--mock-engines", action="store_true",
                       help="start mock engines (synthetic tokens, no model): router tests and "
                       "overhead benchmarks only")

    eng = sub.add_parser("engine", help="one engine process serving the verbs over gRPC")
    eng.add_argument("--port", type=int, required=True)
    eng.add_argument("--host", default="127.0.0.1")
    eng.add_argument("--model", default=None, help="GGUF file or HF directory (default SmolLM2)")
    eng.add_argument("--device", default="cpu", help="cpu | cuda:K")
    eng.add_argument("--role", default="any", choices=["any", "prefill", "decode"])
    eng.add_argument("--engine-id", default=None)
    eng.add_argument("--dtype", default=None,
                     help="float32 | bfloat16: the exact mode's dtype (implies --mode exact)")
    eng.add_argument("--mode", default=None, choices=["fast", "exact"], help=_MODE_HELP)
    eng.add_argument("--kv-memory", default=None, help=_KV_MEMORY_HELP)
    eng.add_argument("--num-pages", type=int, default=None, help="KV pages (overrides --kv-memory)")
    eng.add_argument("--page-size", type=int, default=16)
    eng.add_argument("--chunk-size", type=int, default=None, help="prefill tokens per step")
    eng.add_argument(
        "--mock",
        action="store_true",
        help="serve the verbs with synthetic tokens and NO model: only for router-overhead "
        "benchmarks and fault-injection tests",
    )

    rtr = sub.add_parser("router", help="the router alone, in front of running engines")
    rtr.add_argument("--engine", action="append", default=[], metavar="HOST:PORT")
    rtr.add_argument("--policy", default="round_robin")
    rtr.add_argument("--policy-file", default=None,
                     help="a .py file or a module name whose @policy functions to register")
    rtr.add_argument("--port", type=int, default=8000)
    rtr.add_argument("--host", default="127.0.0.1")
    rtr.add_argument("--model", default=None, help="model whose tokenizer the router uses")
    rtr.add_argument("--max-inflight", type=int, default=4096,
                     help="requests in flight before answering 429")
    rtr.add_argument("--max-context", type=int, default=8192,
                     help="prompt + max_tokens limit (400 beyond it)")
    rtr.add_argument("--poll-s", type=float, default=0.5,
                     help="seconds between engine health/Stats polls")
    rtr.add_argument("--policy-timeout-s", type=float, default=300.0,
                     help="a policy must hand back a stream within this time (else 500)")
    rtr.add_argument("--default-temperature", type=float, default=None,
                     help="temperature when a request omits it (default: 0.2 for the default "
                     "SmolLM2 model, its recommended setting; 1.0 otherwise)")
    rtr.add_argument("--default-top-p", type=float, default=None,
                     help="top_p when a request omits it (default: 0.9 for SmolLM2, else 1.0)")

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
