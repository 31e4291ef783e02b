"""`switchyard bench router`: what the router adds on top of engines that cost nothing.

Switchyard's router stands in front of two `switchyard engine --mock` processes; the anchors,
vllm-router and SGLang's router (`smg`), stand in front of two equally cheap OpenAI-style HTTP
mock workers. Each is driven by the same HTTP load generator (wrk when installed) with streaming
16-token completions at concurrency 1 and 32; "direct" is the same load sent to one HTTP mock
worker with no router, "direct-grpc" the same requests streamed from one mock engine over gRPC.
Anchors are looked up in --anchor-bin (pip install vllm-router sglang-router into a separate
venv); missing ones are reported as such, not faked.

Switchyard runs twice. "switchyard": its mock engines send, in each StartGenerate message, every
token already produced (as engine/server/servicer.py does); they cost nothing, so one message
carries all 16 tokens. "switchyard-16msg": the mock engines send one message per token
(`--no-coalesce`). In both, the router sends one SSE event per token, as the anchors' workers
do; the table says how many events and gRPC messages each response carried (counted, not
assumed).

--tracing measures what tracing costs the router instead (switchyard routers only):
"switchyard" (tracing off) against the same router with the JSONL span exporter on, every
request traced ("switchyard-trace100", OTEL_TRACES_SAMPLER=always_on), one in ten
("switchyard-trace10", parentbased_traceidratio 0.1) and one in a hundred ("switchyard-trace1"). --repeat N measures every target N times, interleaved, and reports the medians, so a
neighbour's load on a shared machine hits all targets alike.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import requests

from pyrouter.bench.grpc_direct import count_messages, measure_grpc
from pyrouter.bench.wrk_runner import Measure, measure_http

_PY = sys.executable


@dataclass(slots=True)
class RouterBenchConfig:
    duration_s: float = 10.0
    concurrencies: list[int] = field(default_factory=lambda: [1, 32])
    max_tokens: int = 16
    anchor_bin: str = "/tmp/anchors/bin"
    skip_anchors: bool = False
    non_streaming: bool = True
    json_out: str = ""
    tracing: bool = False
    repeat: int = 1

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.max_tokens < 1 or not self.concurrencies or min(
                self.concurrencies) < 1 or self.repeat < 1:
            raise ValueError("duration > 0, max_tokens >= 1, concurrencies >= 1 and repeat >= 1 "
                             "required")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for p in started:
            p.terminate()
        for p in started:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def _spawn(started: list[subprocess.Popen[bytes]], argv: list[str],
           env: dict[str, str] | None = None) -> None:
    started.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env={**os.environ, "SWITCHYARD_LOG_LEVEL": "WARNING",
                                         **(env or {})}))


def _wait_serving(url: str, body: dict[str, object], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.post(url, data=json.dumps(body), timeout=2,
                             headers={"Content-Type": "application/json"}).status_code == 200:
                return True
        time.sleep(0.2)
    return False


def _anchor_argv(name: str, binary: str, port: int, workers: list[str]) -> list[str]:
    # Each anchor gets its own metrics port: both default to 29000 and would collide.
    common = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
              "--policy", "round_robin", "--prometheus-port", str(_free_port())]
    return [binary, "launch", *common] if name == "smg" else [binary, *common]


def _body(cfg: RouterBenchConfig, stream: bool) -> dict[str, object]:
    return {"model": "default", "prompt": "Hello, my name is", "max_tokens": cfg.max_tokens,
            "stream": stream, "ignore_eos": True, "temperature": 0}


@dataclass(slots=True)
class Row:
    target: str
    stream: bool
    concurrency: int
    measure: Measure


def count_sse_events(url: str, body: dict[str, object]) -> int:
    """`data:` events in one streamed response, [DONE] excluded."""
    with requests.post(url, data=json.dumps(body), stream=True, timeout=10,
                       headers={"Content-Type": "application/json"}) as r:
        return sum(1 for line in r.iter_lines() if line.startswith(b"data:")
                   and line.strip() != b"data: [DONE]")


# Switchyard variants: (row suffix, extra mock-engine flags, router environment).
_NO_TRACING = {"SWITCHYARD_TRACE_FILE": "", "OTEL_EXPORTER_OTLP_ENDPOINT": "",
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_TRACES_EXPORTER": ""}
_VARIANTS: tuple[tuple[str, list[str], dict[str, str]], ...] = (
    ("", [], _NO_TRACING), ("-16msg", ["--no-coalesce"], _NO_TRACING))


def _tracing_variants(span_dir: str) -> tuple[tuple[str, list[str], dict[str, str]], ...]:
    def traced(name: str, sampler: str, arg: str) -> dict[str, str]:
        return {**_NO_TRACING, "SWITCHYARD_TRACE_FILE": os.path.join(span_dir, f"{name}.jsonl"),
                "OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": arg}

    return (("", [], _NO_TRACING),
            ("-trace100", [], traced("trace100", "always_on", "")),
            ("-trace10", [], traced("trace10", "parentbased_traceidratio", "0.1")),
            ("-trace1", [], traced("trace1", "parentbased_traceidratio", "0.01")))


def run_bench(cfg: RouterBenchConfig) -> tuple[list[Row], dict[str, str]]:
    """The measured rows, and per target how many SSE events (or gRPC messages) a response has."""
    results: list[Row] = []
    shape: dict[str, str] = {}
    with _procs() as started:
        workers = [] if cfg.tracing else [_free_port(), _free_port()]
        for p in workers:
            _spawn(started, [_PY, "-m", "pyrouter.bench.mock_openai_worker", "--port", str(p)])
        # --tracing compares routers with each other only: no direct rows, no anchors.
        targets = {} if cfg.tracing else {
            "direct": f"http://127.0.0.1:{workers[0]}/v1/completions"}
        grpc_targets: dict[str, str] = {}
        span_dir = tempfile.mkdtemp(prefix="switchyard-bench-spans-")
        for suffix, flags, env in (_tracing_variants(span_dir) if cfg.tracing else _VARIANTS):
            engines = [_free_port(), _free_port()]
            for p in engines:
                _spawn(started, [_PY, "-m", "engine.mock", "--port", str(p), *flags])
            router_port = _free_port()
            _spawn(started, [_PY, "-m", "pyrouter.cli", "router", "--port", str(router_port),
                             "--policy", "round_robin",
                             *[a for p in engines for a in ("--engine", f"127.0.0.1:{p}")]],
                   env)
            targets[f"switchyard{suffix}"] = f"http://127.0.0.1:{router_port}/v1/completions"
            if not cfg.tracing:
                grpc_targets[f"direct-grpc{suffix}"] = f"127.0.0.1:{engines[0]}"
        worker_urls = [f"http://127.0.0.1:{p}" for p in workers]
        for name in ([] if cfg.skip_anchors or cfg.tracing else ["vllm-router", "smg"]):
            binary = os.path.join(cfg.anchor_bin, name)
            binary = binary if os.path.exists(binary) else (shutil.which(name) or "")
            if not binary:
                print(f"anchor {name}: not installed (pip install vllm-router sglang-router "
                      f"into {os.path.dirname(cfg.anchor_bin)}); skipped", flush=True)
                continue
            port = _free_port()
            _spawn(started, _anchor_argv(name, binary, port, worker_urls))
            targets[name] = f"http://127.0.0.1:{port}/v1/completions"
        for name, url in list(targets.items()):
            if not _wait_serving(url, _body(cfg, False)):
                print(f"{name}: never answered; skipped", flush=True)
                del targets[name]
                continue
            shape[name] = f"{count_sse_events(url, _body(cfg, True))} SSE events"
        for name, address in grpc_targets.items():
            n = count_messages(address, cfg.max_tokens)
            shape[name] = f"{n} gRPC msg{'' if n == 1 else 's'}"
        for name in targets:
            if name.startswith("switchyard"):
                msgs = shape.get(_grpc_twin(name), "?")
                shape[name] += f" ({msgs} from the engine)"
        print("per response: " + ", ".join(f"{k}: {v}" for k, v in shape.items()), flush=True)
        modes = [True, False] if cfg.non_streaming else [True]
        for _ in range(cfg.repeat):
            for stream in modes:
                for c in cfg.concurrencies:
                    if not stream and c == 1:
                        continue  # the non-streaming comparison is a throughput one (c=32)
                    if stream:
                        for name, address in grpc_targets.items():
                            m = measure_grpc(address, c, cfg.duration_s, cfg.max_tokens)
                            results.append(Row(name, stream, c, m))
                            _print_row(name, stream, c, m)
                    for name, url in targets.items():
                        m = measure_http(url, _body(cfg, stream), c, cfg.duration_s)
                        results.append(Row(name, stream, c, m))
                        _print_row(name, stream, c, m)
        shutil.rmtree(span_dir, ignore_errors=True)
    return results, shape


def _grpc_twin(name: str) -> str:
    """The direct-grpc row of a switchyard row (traced routers share the untraced engines')."""
    twin = name.replace("switchyard", "direct-grpc")
    return "direct-grpc" if "-trace" in twin else twin


def _median(measures: list[Measure]) -> Measure:
    def mid(values: list[float]) -> float:
        return statistics.median(values)

    return Measure(mid([m.rps for m in measures]), mid([m.p50_ms for m in measures]),
                   mid([m.p99_ms for m in measures]), sum(m.errors for m in measures),
                   measures[0].tool)


def _print_row(name: str, stream: bool, c: int, m: Measure) -> None:
    print(f"  {name:<16} stream={stream!s:<5} c={c:<3} {m.rps:9.0f} req/s  p50 {m.p50_ms:7.2f} "
          f"ms  p99 {m.p99_ms:7.2f} ms  errors {m.errors}  ({m.tool})", flush=True)


def summarize(results: list[Row], shape: dict[str, str]) -> str:
    lines = ["| stream | c | target | per streamed response | req/s | p50 ms | p99 ms | added p50 "
             "vs direct HTTP worker (ms) | added p50 vs direct gRPC engine (ms) | req/s vs best "
             "anchor |", "|---|---|---|---|---|---|---|---|---|---|"]
    groups = sorted({(r.stream, r.concurrency) for r in results}, key=lambda g: (not g[0], g[1]))
    for stream, c in groups:
        repeats: dict[str, list[Measure]] = {}
        for r in results:
            if (r.stream, r.concurrency) == (stream, c):
                repeats.setdefault(r.target, []).append(r.measure)
        rows = {name: _median(ms) for name, ms in repeats.items()}
        direct = rows.get("direct")
        best_anchor = max((rows[a].rps for a in ("vllm-router", "smg") if a in rows), default=0.0)
        for name, m in rows.items():
            is_direct = name.startswith("direct")
            added = f"{m.p50_ms - direct.p50_ms:+.2f}" if direct and not is_direct else "-"
            direct_grpc = rows.get(_grpc_twin(name))
            added_grpc = (f"{m.p50_ms - direct_grpc.p50_ms:+.2f}"
                          if direct_grpc and name.startswith("switchyard") else "-")
            ratio = f"{m.rps / best_anchor:.2f}x" if best_anchor and not is_direct else "-"
            per = shape.get(name, "-") if stream else "-"
            lines.append(f"| {'yes' if stream else 'no'} | {c} | {name} | {per} | {m.rps:.0f} | "
                         f"{m.p50_ms:.2f} | {m.p99_ms:.2f} | {added} | {added_grpc} | {ratio} |")
        lines += _tracing_cost(repeats, stream, c)
    return "\n".join(lines)


def _tracing_cost(repeats: dict[str, list[Measure]], stream: bool, c: int) -> list[str]:
    """One line per traced router: throughput and p50 against the untraced router, as the
    median over rounds of each round's ratio (a round measures every target back to back)."""
    base = repeats.get("switchyard", [])
    out = []
    for name, measures in repeats.items():
        if not name.startswith("switchyard-trace") or len(measures) != len(base):
            continue
        ratios = [m.rps / b.rps - 1 for m, b in zip(measures, base, strict=True) if b.rps]
        p50s = [m.p50_ms - b.p50_ms for m, b in zip(measures, base, strict=True)]
        if ratios:
            out.append(f"tracing cost ({'streaming' if stream else 'non-streaming'}, c={c}): "
                       f"{name} {statistics.median(ratios) * 100:+.1f}% throughput vs off "
                       f"(median of {len(ratios)} rounds; rounds "
                       f"{', '.join(f'{r * 100:+.0f}%' for r in ratios)}), p50 "
                       f"{statistics.median(p50s):+.2f} ms")
    return out


def run(args: argparse.Namespace) -> int:
    p = argparse.ArgumentParser(prog="switchyard bench router", description=__doc__)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--anchor-bin", default="/tmp/anchors/bin")
    p.add_argument("--skip-anchors", action="store_true")
    p.add_argument("--streaming-only", action="store_true")
    p.add_argument("--json", default="", help="also write the raw rows here")
    p.add_argument("--tracing", action="store_true",
                   help="compare the router with tracing off, on (100%%) and sampled (10%%)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure every target this many times, interleaved; report medians")
    a = p.parse_args(getattr(args, "rest", None) or [])
    cfg = RouterBenchConfig(a.duration, a.concurrency, a.max_tokens, a.anchor_bin,
                            a.skip_anchors, not a.streaming_only, a.json, a.tracing, a.repeat)
    results, shape = run_bench(cfg)
    print(summarize(results, shape), flush=True)
    if cfg.json_out:
        with open(cfg.json_out, "w", encoding="utf-8") as f:
            json.dump({"rows": [asdict(r) for r in results], "per_response": shape}, f, indent=1)
    return 0
