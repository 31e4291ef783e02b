"""`switchyard trace`: read SWITCHYARD_TRACE_FILE and show one request's timeline.

  switchyard trace                 # the last 20 requests: id, route, TTFT, total
  switchyard trace REQUEST_ID      # that request's spans (router and, if they log, engines)
  switchyard trace REQUEST_ID --file F   # another trace file (after the id: the shared CLI
                                         # passes everything after `trace` through)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Any


def _load(path: str) -> dict[str, list[dict[str, Any]]]:
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                span = json.loads(line)
                by_trace[str(span["trace_id"])].append(span)
            except (json.JSONDecodeError, KeyError, TypeError):
                print(f"{path}:{n}: skipping a malformed span", file=sys.stderr)
    return by_trace


def _timeline(spans: list[dict[str, Any]]) -> str:
    spans = sorted(spans, key=lambda s: (s["start_ms"], s["name"] != "router.request"))
    t0 = spans[0]["start_ms"]
    rows = []
    for s in spans:
        attrs = " ".join(f"{k}={v}" for k, v in (s.get("attrs") or {}).items())
        rows.append(f"{s['start_ms'] - t0:9.2f} ms +{s['end_ms'] - s['start_ms']:9.2f} ms  "
                    f"{s.get('service', '?'):<8} {s['name']:<22} {attrs}")
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    p = argparse.ArgumentParser(prog="switchyard trace", description=__doc__)
    p.add_argument("request_id", nargs="?")
    p.add_argument("--file", default=os.environ.get("SWITCHYARD_TRACE_FILE", ""))
    p.add_argument("--last", type=int, default=20)
    a = p.parse_args(getattr(args, "rest", None) or [])
    if not a.file or not os.path.exists(a.file):
        print("no trace file: set SWITCHYARD_TRACE_FILE for the router (or pass --file)",
              file=sys.stderr)
        return 2
    traces = _load(a.file)
    if a.request_id:
        matches = [t for t in traces if t == a.request_id or t.startswith(a.request_id)]
        if not matches:
            print(f"no trace for {a.request_id!r} in {a.file}", file=sys.stderr)
            return 1
        for t in matches:
            print(f"trace {t}\n{_timeline(traces[t])}")
        return 0
    requests = [s for spans in traces.values() for s in spans if s["name"] == "router.request"]
    for s in sorted(requests, key=lambda s: s["start_ms"])[-a.last:]:
        attrs = s.get("attrs") or {}
        print(f"{s['trace_id']}  {attrs.get('status', '?'):<5} ttft {attrs.get('ttft_ms')} ms  "
              f"total {s['end_ms'] - s['start_ms']:.2f} ms  {attrs.get('route', '')}")
    return 0
