"""The workload command-line options, shared by `switchyard bench serve` and the Locust file
(whose parser also reads each option from a SWITCHYARD_* environment variable), and the one
function that builds a workload from them."""
from __future__ import annotations

import argparse
from typing import Any

from switchyard_bench.workloads.azure import AzureCodeWorkload
from switchyard_bench.workloads.base import Workload, WorkloadError
from switchyard_bench.workloads.data_files import AZURE_CODE, MOONCAKE_CONVERSATION
from switchyard_bench.workloads.mooncake import MooncakeWorkload
from switchyard_bench.workloads.shifting import ShiftingConfig, ShiftingWorkload
from switchyard_bench.workloads.sonnet import SonnetConfig, SonnetWorkload
from switchyard_bench.workloads.trace_replay import TraceConfig
from switchyard_bench.workloads.vocabulary import RealVocabulary

WORKLOADS = ("sonnet", "mooncake", "azure-code", "shifting")


def _pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected IN,OUT token counts, got {text!r}") from exc
    return a, b


def add_workload_arguments(parser: Any, env_prefix: str | None = None) -> None:
    """Add the options to an argparse parser, or to Locust's (configargparse) parser with
    `env_prefix`, so each option also reads `<env_prefix><OPTION_NAME>`."""

    def add(flag: str, **kw: Any) -> None:
        if env_prefix is not None:
            kw["env_var"] = env_prefix + flag.lstrip("-").replace("-", "_").upper()
        parser.add_argument(flag, **kw)

    add("--workload", choices=WORKLOADS, default="sonnet",
        help="sonnet (LLMPerf prompts), mooncake (trace with shared prefixes), azure-code "
        "(trace), shifting (prefill-heavy / decode-heavy phases)")
    add("--model", default=None,
        help="model whose tokenizer counts and builds prompts (default: the served default)")
    add("--seed", type=int, default=0, help="seed of lengths and arrival times")
    add("--trace", default=None, help="trace file for mooncake / azure-code (default: the "
        "bundled one in switchyard_bench/data/)")
    add("--trace-start", type=int, default=0, help="first trace request replayed")
    add("--length-scale", type=float, default=1.0,
        help="trace prompt lengths (and Mooncake's 512-token block) times this")
    add("--output-scale", type=float, default=None,
        help="trace output lengths times this (default: --length-scale)")
    add("--input-mean", type=float, default=550.0, help="sonnet: mean prompt tokens")
    add("--input-std", type=float, default=150.0, help="sonnet: prompt tokens stddev")
    add("--output-mean", type=float, default=150.0, help="sonnet: mean output tokens")
    add("--output-std", type=float, default=80.0, help="sonnet: output tokens stddev")
    add("--phase-requests", type=int, default=20,
        help="shifting: requests per phase before switching")
    add("--prefill-heavy", type=_pair, default=(512, 8), metavar="IN,OUT",
        help="shifting: prompt and output tokens in prefill-heavy phases")
    add("--decode-heavy", type=_pair, default=(32, 128), metavar="IN,OUT",
        help="shifting: prompt and output tokens in decode-heavy phases")


def build_workload(opts: argparse.Namespace, vocab: RealVocabulary | None = None) -> Workload:
    """The workload the options describe (loads the model's tokenizer unless given `vocab`)."""
    if vocab is None:
        from pyrouter.tokenizer import load_router_tokenizer

        vocab = RealVocabulary(load_router_tokenizer(opts.model))
    output_scale = opts.length_scale if opts.output_scale is None else opts.output_scale
    if opts.workload == "sonnet":
        return SonnetWorkload(vocab, SonnetConfig(opts.input_mean, opts.input_std,
                                                  opts.output_mean, opts.output_std, opts.seed))
    if opts.workload == "mooncake":
        return MooncakeWorkload(vocab, TraceConfig(opts.trace or MOONCAKE_CONVERSATION,
                                                   opts.length_scale, output_scale,
                                                   opts.trace_start))
    if opts.workload == "azure-code":
        return AzureCodeWorkload(vocab, TraceConfig(opts.trace or AZURE_CODE, opts.length_scale,
                                                    output_scale, opts.trace_start))
    if opts.workload == "shifting":
        return ShiftingWorkload(vocab, ShiftingConfig(opts.phase_requests, *opts.prefill_heavy,
                                                      *opts.decode_heavy))
    raise WorkloadError(f"unknown workload {opts.workload!r}; choose from {WORKLOADS}")
