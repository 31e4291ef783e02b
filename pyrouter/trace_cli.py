"""`switchyard trace`: follow requests through the spans in SWITCHYARD_TRACE_FILE.

  switchyard trace list [--last N]          recent requests: id, status, pattern, engines, TTFT,
                                            latency
  switchyard trace show ID [--png FILE]     one request by the X-Request-Id its client saw: a
                                            timeline across router and engines with each span's
                                            duration and the route explanation (--png: as a
                                            picture)

--file F (repeatable) reads other span files; default: $SWITCHYARD_TRACE_FILE. Every process of
a deployment on one host appends to the same file. With OTLP export on too, the same spans also
reach the collector.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from switchyard_telemetry import attributes as A
from switchyard_telemetry.jsonl import read_spans
from switchyard_telemetry.timeline import (
    explanations,
    find_request,
    gantt,
    plot,
    request_spans,
    subtree,
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="switchyard trace", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    files = argparse.ArgumentParser(add_help=False)
    files.add_argument("--file", action="append", default=None,
                       help="span file (repeatable; default $SWITCHYARD_TRACE_FILE)")
    sub = p.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", parents=[files], help="recent requests")
    listing.add_argument("--last", type=int, default=20)
    show = sub.add_parser("show", parents=[files], help="one request's timeline")
    show.add_argument("request_id", help="the X-Request-Id the client saw (or a unique prefix)")
    show.add_argument("--png", default="", help="also draw the timeline into this PNG file")
    return p


def _list(spans: list[dict[str, Any]], last: int) -> None:
    print(f"{'request id':<44} {'status':<9} {'pattern':<12} {'ttft ms':>9} {'total ms':>9}  "
          f"engines / route")
    for s in request_spans(spans)[-last:]:
        attrs = s.get("attrs") or {}
        ttft = attrs.get(A.TTFT_MS)
        engines = attrs.get(A.ENGINES) or ""
        print(f"{attrs.get(A.REQUEST_ID, '?'):<44} {attrs.get(A.STATUS, '?'):<9} "
              f"{attrs.get(A.PATTERN, '?'):<12} {'-' if ttft is None else f'{ttft:.2f}':>9} "
              f"{float(s['end_ms']) - float(s['start_ms']):9.2f}  {engines}  "
              f"[{attrs.get(A.ROUTE, '')}]")


def _show(spans: list[dict[str, Any]], request_id: str, png: str) -> int:
    root = find_request(spans, request_id)
    if root is None:
        print(f"no trace for request {request_id!r}", file=sys.stderr)
        return 1
    rows = subtree(spans, root)
    attrs = root.get("attrs") or {}
    title = (f"request {attrs.get(A.REQUEST_ID)}  trace {root['trace_id']}  "
             f"policy {attrs.get(A.POLICY, '?')}  route [{attrs.get(A.ROUTE, '')}]")
    print(title)
    for line in explanations(rows):
        print(f"  {line}")
    print(gantt(rows))
    if png:
        plot(rows, title, png)
        print(f"timeline drawn into {png}")
    return 0


def run(args: argparse.Namespace) -> int:
    rest = list(getattr(args, "rest", None) or [])
    if not rest or rest[0].startswith("-"):
        rest = ["list", *rest]           # `switchyard trace` alone lists
    elif rest[0] not in ("list", "show", "-h", "--help"):
        rest = ["show", *rest]           # `switchyard trace ID` shows
    a = _parser().parse_args(rest)
    files = a.file or ([os.environ["SWITCHYARD_TRACE_FILE"]]
                       if os.environ.get("SWITCHYARD_TRACE_FILE") else [])
    missing = [f for f in files if not os.path.exists(f)]
    if not files or missing:
        print("no span file: set SWITCHYARD_TRACE_FILE for the router and engines (or pass "
              f"--file){f'; not found: {missing}' if missing else ''}", file=sys.stderr)
        return 2
    spans = read_spans(files)
    if a.command == "list":
        _list(spans, a.last)
        return 0
    return _show(spans, a.request_id, a.png)
