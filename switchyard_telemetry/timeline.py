"""One request's spans as a tree and a timeline: what `switchyard trace show` prints and plots.

Spans come from the JSONL file (jsonl.py); a request is found by the X-Request-Id its client saw
(the `switchyard.request_id` attribute of its `router.request` span), and shown with everything
beneath it — router segments, decisions and verbs, and the engines' spans under those.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from switchyard_telemetry import attributes as A

REQUEST_SPAN = "router.request"
_BAR_WIDTH = 40
# Attributes worth a column in the text chart, by span name (the rest are in the JSON).
_SHOWN = {
    "router.request": (A.STATUS, A.TTFT_MS, A.GENAI_INPUT_TOKENS, A.GENAI_OUTPUT_TOKENS),
    "router.segment": (A.ENGINE, A.SEGMENT_TOKENS, A.SEGMENT_END),
    "router.decision": (A.DECIDED_BY, A.PATTERN),
    "engine.generate": (A.GENAI_INPUT_TOKENS, A.CACHED_TOKENS, A.GENAI_OUTPUT_TOKENS),
    "engine.prefill_chunk": (A.CHUNK_START, A.CHUNK_TOKENS, A.BATCH_SEQS, A.BATCH_DECODE_SEQS),
    "engine.decode": (A.DECODE_TOKENS, A.DECODE_STEPS, A.PREEMPTIONS, A.BATCH_SEQS),
    "engine.kv_send": (A.KV_BYTES, A.KV_TRANSPORT, A.KV_LAYERS, A.KV_HIDDEN_FRACTION),
    "engine.kv_receive": (A.KV_BYTES, A.KV_LAYERS),
    "engine.prep_recv": (A.KV_MATCHED, A.KV_END),
}
_SHORT = {A.GENAI_INPUT_TOKENS: "in", A.GENAI_OUTPUT_TOKENS: "out"}


@dataclass(slots=True)
class Row:
    span: dict[str, Any]
    depth: int

    @property
    def who(self) -> str:
        s = self.span
        return str(s.get("instance") or s.get("service") or "?")


def request_spans(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted((s for s in spans if s.get("name") == REQUEST_SPAN),
                  key=lambda s: float(s["start_ms"]))


def find_request(spans: list[dict[str, Any]], request_id: str) -> dict[str, Any] | None:
    """The router.request span of `request_id` (an exact id, else a unique prefix)."""
    requests = request_spans(spans)
    exact = [s for s in requests if (s.get("attrs") or {}).get(A.REQUEST_ID) == request_id]
    if exact:
        return exact[-1]
    prefixed = [s for s in requests
                if str((s.get("attrs") or {}).get(A.REQUEST_ID, "")).startswith(request_id)]
    return prefixed[-1] if len(prefixed) == 1 else None


def subtree(spans: list[dict[str, Any]], root: dict[str, Any]) -> list[Row]:
    """`root` and its descendants, depth-first, children in start order."""
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in spans:
        if s.get("trace_id") == root["trace_id"] and s.get("parent_id"):
            children[str(s["parent_id"])].append(s)
    rows: list[Row] = []
    stack = [(root, 0)]
    seen: set[str] = set()
    while stack:
        span, depth = stack.pop()
        if span["span_id"] in seen:
            continue
        seen.add(span["span_id"])
        rows.append(Row(span, depth))
        for child in sorted(children.get(str(span["span_id"]), []),
                            key=lambda c: (float(c["start_ms"]), c["name"]), reverse=True):
            stack.append((child, depth + 1))
    return rows


def _attrs(span: dict[str, Any]) -> str:
    attrs = span.get("attrs") or {}
    shown = []
    for key in _SHOWN.get(str(span["name"]), ()):
        if key in attrs:
            name = _SHORT.get(key, key.rsplit(".", 1)[-1])
            shown.append(f"{name}={attrs[key]}")
    if span.get("status") == "error":
        shown.append("ERROR")
    return " ".join(shown)


def gantt(rows: list[Row], width: int = _BAR_WIDTH) -> str:
    """The text chart: one line per span — who, name, start offset, duration, a bar."""
    t0 = float(rows[0].span["start_ms"])
    total = max(max(float(r.span["end_ms"]) for r in rows) - t0, 1e-9)
    who_w = max(len(r.who) for r in rows)
    name_w = max(len(r.span["name"]) + 2 * r.depth for r in rows)
    lines = [f"{'':<{who_w}}  {'span':<{name_w}}  {'start ms':>9} {'ms':>9}  "
             f"|0{'':<{width - 2}}{total:.0f} ms|"]
    for r in rows:
        start, end = float(r.span["start_ms"]) - t0, float(r.span["end_ms"]) - t0
        a = min(width - 1, int(start / total * width))
        b = max(a + 1, min(width, round(end / total * width)))
        bar = " " * a + "#" * (b - a) + " " * (width - b)
        name = "  " * r.depth + str(r.span["name"])
        lines.append(f"{r.who:<{who_w}}  {name:<{name_w}}  {start:9.2f} {end - start:9.2f}  "
                     f"|{bar}|  {_attrs(r.span)}")
    return "\n".join(lines)


def explanations(rows: list[Row]) -> list[str]:
    """Each decision's explanation, in order."""
    out = []
    for r in rows:
        attrs = r.span.get("attrs") or {}
        if r.span["name"] == "router.decision" and attrs.get(A.EXPLANATION):
            out.append(f"segment {attrs.get(A.SEGMENT_INDEX, '?')} "
                       f"({attrs.get(A.DECIDED_BY, 'policy')}): {attrs[A.EXPLANATION]}")
    return out


def plot(rows: list[Row], title: str, path: str) -> None:
    """The same timeline as a picture (matplotlib, no display needed)."""
    try:
        import matplotlib
    except ImportError as err:  # serving images leave the plotting extra out
        raise SystemExit("PNG output needs matplotlib: pip install 'switchyard[plot]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = float(rows[0].span["start_ms"])
    whos = sorted({r.who for r in rows})
    colors = {w: plt.get_cmap("tab10")(i % 10) for i, w in enumerate(whos)}
    fig, ax = plt.subplots(figsize=(12, 0.32 * len(rows) + 1.6))
    for i, r in enumerate(rows):
        start = float(r.span["start_ms"]) - t0
        dur = max(float(r.span["end_ms"]) - float(r.span["start_ms"]), 0.0)
        ax.barh(i, dur, left=start, color=colors[r.who],
                edgecolor="red" if r.span.get("status") == "error" else "none")
        ax.text(start, i, f" {dur:.1f} ms", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r.who}: {'  ' * r.depth}{r.span['name']}" for r in rows],
                       fontsize=8, family="monospace")
    ax.invert_yaxis()
    ax.set_xlabel("ms since the request arrived")
    ax.set_title(title.replace("  route", "\nroute"), fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[w]) for w in whos]
    ax.legend(handles, whos, fontsize=8, loc="upper center", ncol=len(whos),
              bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
