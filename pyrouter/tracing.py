"""Per-request traces: why the router routed a request the way it did, and where time went.

When SWITCHYARD_TRACE_FILE is set, each finished request appends JSON lines (one per span) to
it: the request span (policy, route, prompt/completion tokens, TTFT, status) and one child span
per verb (engine, start/end). `switchyard trace` reads the file back. Unset = no cost.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from pyrouter.request import RouterRequest

_EPOCH_OFFSET = time.time() - time.perf_counter()  # perf_counter -> wall clock


def wall_ms(perf_s: float) -> float:
    return (perf_s + _EPOCH_OFFSET) * 1000.0


class TraceWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the router

    def write_request(self, req: RouterRequest, policy: str, started_s: float,
                      first_token_s: float | None, ended_s: float, status: str) -> None:
        spans: list[dict[str, Any]] = [{
            "trace_id": req.request_id, "name": "router.request", "service": "router",
            "start_ms": wall_ms(started_s), "end_ms": wall_ms(ended_s),
            "attrs": {"policy": policy, "route": req.route.header(), "kind": req.kind,
                      "prompt_tokens": req.prompt_len, "completion_tokens": req.completion_tokens,
                      "ttft_ms": None if first_token_s is None
                      else round((first_token_s - started_s) * 1000, 3),
                      "matched": req.matched_by_engine or {}, "status": status}}]
        for verb, engine_id, t0, t1 in req.scope.verb_times:
            spans.append({"trace_id": req.request_id, "name": f"verb.{verb}",
                          "service": "router", "start_ms": wall_ms(t0),
                          "end_ms": wall_ms(t1 if t1 else ended_s),
                          "attrs": {"engine": engine_id}})
        lines = "".join(json.dumps(s, separators=(",", ":")) + "\n" for s in spans)
        with self._lock:
            self._file.write(lines)
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def trace_writer_from_env() -> TraceWriter | None:
    path = os.environ.get("SWITCHYARD_TRACE_FILE")
    return TraceWriter(path) if path else None
