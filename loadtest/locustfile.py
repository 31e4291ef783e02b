"""Locust load test against Switchyard: streamed /v1/completions with prompts from any
`switchyard bench serve` workload, and the latencies users judge a server by as their own rows.

  .venv/bin/locust -f loadtest/locustfile.py --host http://127.0.0.1:8000 --headless \\
      -u 2 -r 1 -t 60s --csv locust --workload sonnet --input-mean 128 --input-std 16 \\
      --output-mean 16 --output-std 4 --slo-ttft-ms 2000 --slo-tpot-ms 300

Rows (all milliseconds, request type LATENCY): "TTFT" (send -> first token), "TPOT" ((JCT -
TTFT) / (output tokens - 1)), "ITL" (one row entry per gap between tokens), "JCT" (send -> end
of stream). With an SLO, the "SLO" row counts every checked request, and a request that misses
its SLO (or fails) is one of its failures. The streamed request itself is the "completion
(stream)" row; its response time is Locust's time to the response headers.

Workload options are those of `switchyard bench serve` (`--workload`, `--length-scale`,
`--input-mean`, ...); each also reads SWITCHYARD_<OPTION>, e.g. SWITCHYARD_WORKLOAD=mooncake
SWITCHYARD_LENGTH_SCALE=0.03125. Locust users are a closed loop: they cycle through the
workload's requests in order and a trace's timestamps are not used (use `bench serve` for
open-loop replay). SWITCHYARD_API_KEY is sent as a bearer token.
"""
from __future__ import annotations

import itertools
import os
import random
import threading
import time
from typing import Any

from locust import HttpUser, between, events, task

from switchyard_bench.serve.request_body import Slo, completion_body
from switchyard_bench.serve.stream_record import RequestRecord, StreamObserver
from switchyard_bench.workloads import (
    RequestShape,
    Workload,
    add_workload_arguments,
    build_workload,
)


class SloMissed(Exception):
    """A request missed its SLO (TTFT or TPOT above the objective) or failed."""


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    add_workload_arguments(parser, env_prefix="SWITCHYARD_")
    parser.add_argument("--slo-ttft-ms", type=float, default=None,
                        env_var="SWITCHYARD_SLO_TTFT_MS", help="TTFT objective (ms)")
    parser.add_argument("--slo-tpot-ms", type=float, default=None,
                        env_var="SWITCHYARD_SLO_TPOT_MS", help="TPOT objective (ms)")
    parser.add_argument("--salt", type=int, default=None, env_var="SWITCHYARD_SALT",
                        help="prompt-content salt (default: random, so no earlier test's "
                        "prefix cache is reused)")


class _Requests:
    """The process's workload, built once when the test starts; users take requests in turn."""

    def __init__(self, workload: Workload, salt: int, slo: Slo) -> None:
        self.workload, self.salt, self.slo = workload, salt, slo
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> RequestShape:
        with self._lock:
            index = next(self._counter)
        size = self.workload.size()
        return self.workload.shape(index % size if size else index, self.salt)


_REQUESTS: _Requests | None = None


@events.test_start.add_listener
def _build_workload(environment: Any, **_: Any) -> None:
    global _REQUESTS
    opts = environment.parsed_options
    salt = opts.salt if opts.salt is not None else random.randrange(2**31)
    _REQUESTS = _Requests(build_workload(opts), salt, Slo(opts.slo_ttft_ms, opts.slo_tpot_ms))


class OpenAIUser(HttpUser):
    wait_time = between(0.0, 0.5)

    def on_start(self) -> None:
        key = os.environ.get("SWITCHYARD_API_KEY")
        if key:
            self.client.headers["Authorization"] = f"Bearer {key}"

    def _row(self, name: str, ms: float, exception: Exception | None = None,
             request_type: str = "LATENCY") -> None:
        self.environment.events.request.fire(request_type=request_type, name=name,
                                             response_time=ms, response_length=0,
                                             exception=exception, context={})

    @task
    def completion_stream(self) -> None:
        assert _REQUESTS is not None, "the test_start listener builds the workload"
        shape = _REQUESTS.next()
        body = completion_body(shape.prompt, shape.max_tokens, slo=_REQUESTS.slo)
        record = RequestRecord(index=0, prompt_len=len(shape.prompt),
                               max_tokens=shape.max_tokens)
        observer = StreamObserver(time.perf_counter())
        with self.client.post("/v1/completions", json=body, stream=True, catch_response=True,
                              name="completion (stream)") as r:
            if r.status_code != 200:
                record.error = f"HTTP {r.status_code}: {r.text[:200]}"
                r.failure(record.error)
            else:
                for data in r.iter_content(chunk_size=None):
                    observer.feed(data, time.perf_counter())
                observer.finish(record, r.status_code, time.perf_counter())
                if not record.ok:
                    r.failure(record.error)
        if record.ok:
            self._report(record)
        if _REQUESTS.slo:
            miss = _REQUESTS.slo.miss(record)
            self._row("SLO", 0.0, SloMissed(miss) if miss else None, request_type="SLO")

    def _report(self, record: RequestRecord) -> None:
        assert record.ttft_ms is not None and record.jct_ms is not None
        self._row("TTFT", record.ttft_ms)
        if record.tpot_ms is not None:
            self._row("TPOT", record.tpot_ms)
        for gap in record.itl_ms:
            self._row("ITL", gap)
        self._row("JCT", record.jct_ms)
