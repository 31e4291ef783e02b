"""The engine's command-line flags, defined once: `switchyard engine` uses all of them,
`switchyard serve` the model/runtime ones (passed to every engine it starts), and the launcher
(engine/server/launcher.py) turns an EngineSpec back into exactly these flags.

Import-light on purpose (argparse only): the router's CLI builds its parser from this.
"""
from __future__ import annotations

import argparse

ROLES = ("any", "prefill", "decode")


def add_runtime_arguments(parser: argparse.ArgumentParser, several_models: bool = False) -> None:
    """What every engine of a deployment shares: model, device, numerics, KV pool, batching.
    `several_models` (`switchyard serve`): --model repeats as NAME=PATH, one model each."""
    if several_models:
        parser.add_argument("--model", action="append", default=None, metavar="[NAME=]PATH",
                            help="GGUF file or HF directory (default: SmolLM2-135M-Instruct); "
                            "repeated as NAME=PATH (PATH may be 'default'), several models "
                            "behind one router, --engines divided among them")
    else:
        parser.add_argument("--model", default=None,
                            help="GGUF file or HF directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda:K")
    parser.add_argument("--mode", default=None, choices=["fast", "exact"],
                        help='"fast" (default on CPU): block-quantised weights, int8 activations '
                        'and batch-invariant kernels, identical tokens across patterns; "exact": '
                        "the reference numerics in --dtype (float32 by default)")
    parser.add_argument("--dtype", default=None,
                        help="float32 | bfloat16 | float16: the exact mode's dtype (implies "
                        "--mode exact)")
    parser.add_argument("--kv-memory", default=None,
                        help="KV cache budget per engine, e.g. 512MiB or 2G (default 512MiB)")
    parser.add_argument("--num-pages", type=int, default=None,
                        help="KV pages in the pool (overrides --kv-memory)")
    parser.add_argument("--page-size", type=int, default=16, help="tokens per KV page")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="prefill tokens per step (the router may change it at run time)")
    parser.add_argument("--latency-profile", default=None, choices=["off", "auto", "force"],
                        help="step-time profile at start: auto = cached or measured once "
                        "(default; env SWITCHYARD_LATENCY_PROFILE), force = measure again, "
                        "off = none: the model is then fitted on live steps alone, and its first "
                        "fits can be far off (adaptive, slo_mux and tandem place and admit by it)")


def add_mock_arguments(parser: argparse.ArgumentParser) -> None:
    """The mock engine's knobs: synthetic tokens and fault injection, NO model."""
    mock = parser.add_argument_group(
        "mock engine (--mock): only for router-overhead benchmarks and fault-injection tests")
    mock.add_argument("--threads", type=int, default=None,
                      help="the mock's runtime threads (default 1)")
    mock.add_argument("--vocab-size", type=int, default=None)
    mock.add_argument("--seed", type=int, default=None, help="block hash seed and failure draws")
    mock.add_argument("--tokens-per-chunk", type=int, default=None)
    mock.add_argument("--chunk-delay-ms", type=float, default=None)
    mock.add_argument("--no-coalesce", dest="coalesce", action="store_const", const="0",
                      default=None, help="one decode step's tokens per message, never more")
    mock.add_argument("--fail-rate", type=float, default=None,
                      help="fraction of StartGenerate calls failing with UNAVAILABLE")
    mock.add_argument("--fail-after-tokens", type=int, default=None,
                      help="every StartGenerate fails with INTERNAL after this many tokens")
    mock.add_argument("--abort-after-tokens", type=int, default=None,
                      help="every StartGenerate ends with finish_reason 'abort' after this many "
                      "tokens (an engine giving up on a request itself)")
    mock.add_argument("--fail-remote-send", action="store_const", const="1", default=None,
                      help="every RemoteSend fails (a broken KV transfer)")
    mock.add_argument("--unhealthy-file", default=None,
                      help="report NOT_SERVING while this file exists")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Every flag of `switchyard engine`."""
    parser.add_argument("--port", type=int, required=True, help="gRPC port (0 = any free port)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--role", default="any", choices=ROLES)
    parser.add_argument("--engine-id", default=None)
    parser.add_argument("--served-model-name", default=None, metavar="NAME",
                        help="the model name a router serves this engine under (ModelInfo; a "
                        "router serving several models sends NAME's requests here)")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve Prometheus metrics on http://HOST:PORT/metrics (default: "
                        "env SWITCHYARD_METRICS_PORT, else none)")
    add_runtime_arguments(parser)
    parser.add_argument(
        "--mock", action="store_true",
        help="serve the verbs with synthetic tokens and NO model: only for router-overhead "
        "benchmarks and fault-injection tests")
    add_mock_arguments(parser)


def engine_parser(prog: str = "switchyard engine") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="one engine process serving the "
                                     "verbs over gRPC")
    add_engine_arguments(parser)
    return parser
