"""Draws docs/diagrams/request_path.svg: one chat completion's path through the processes.

Run `.venv/bin/python docs/diagrams/request_path.py` after changing the path; the SVG is committed
beside this file (docs/structures.md shows it) and tests/repo/test_structures_page.py checks that
every path named here exists (named_paths).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

OUT = Path(__file__).with_suffix(".svg")

# lane -> (x of its centre, width, colour, the folder its boxes' paths are in)
LANES = {
    "client": (1.0, 2.1, "#eeeeee", ""),
    "router_core (Rust, tokio threads)": (4.75, 5.2, "#dbe9f6", "router_core/src/"),
    "pyrouter (Python, asyncio loop)": (9.3, 3.6, "#fde9c9", "pyrouter/"),
    "engines (a Python process each)": (13.2, 3.6, "#dcefd9", "engine/"),
}
RUST, PY, ENGINE = (lane for lane in LANES if lane != "client")
# name -> (lane, x, y, box width, text: paths first, relative to the lane's folder)
NODES = {
    "client": ("client", 1.0, 0.0, 1.9, "HTTP client\nPOST /v1/chat/\ncompletions"),
    "http": (RUST, 4.75, 0.0, 3.4, "front/http.rs\nkeys, envelope, routes"),
    "parse": (RUST, 4.75, -1.1, 3.4, "front/openai_request.rs\nparse, chat template, tokenise"),
    "task": (RUST, 4.75, -2.2, 3.4,
             "front/generation.rs\nthe request's task: decide,\ncarry out, retry, close"),
    "fast": (RUST, 3.45, -3.5, 2.5,
             "front/fast_path.rs\nround_robin, least_load,\ncache_aware in Rust"),
    "bridge": (RUST, 6.05, -3.5, 2.5, "front/bridge.rs\npython/bridge_jobs.rs\nDecideSpec -> Decision"),
    "runtime": (PY, 9.3, -3.5, 3.3, "runtime/bridge.py\ndecide, next_segment"),
    "dispatch": (PY, 9.3, -4.6, 3.3, "runtime/dispatch.py\npolicies/\nDp, Pd, Split placements"),
    "handle": (PY, 9.3, -5.7, 3.3, "engines/handle.py\nthe verb API (optional)"),
    "executor": (RUST, 4.75, -5.7, 3.4,
                 "executor/\nplacements carried out:\nthe verbs, holds, failures"),
    "rpc": (RUST, 4.75, -6.8, 3.4, "engine_rpc/\none gRPC client per engine"),
    "body": (RUST, 4.75, -8.1, 3.4,
             "front/response_body.rs\ndetokenise, stop strings,\nSSE or JSON"),
    "client_out": ("client", 1.0, -8.1, 1.9, "HTTP client\n(the stream)"),
    "servicer": (ENGINE, 13.2, -6.8, 3.3, "server/servicer.py\nthe verbs over gRPC"),
    "core": (ENGINE, 13.2, -8.1, 3.3,
             "server/step_loop.py\ncore/engine_core.py\nmodel/"),
    "transfer": (ENGINE, 13.2, -9.4, 3.3, "transfer/\nKV to another engine,\nlayer by layer"),
}
# (from, to, label)
EDGES = [
    ("client", "http", "request"),
    ("http", "parse", ""),
    ("parse", "task", "tokens, sampling"),
    ("task", "fast", "built-in pick"),
    ("task", "bridge", "Python policies"),
    ("bridge", "runtime", ""),
    ("runtime", "dispatch", ""),
    ("dispatch", "handle", "verbs"),
    ("handle", "executor", "awaitable verbs"),
    ("fast", "executor", "Segment"),
    ("bridge", "executor", "placement"),
    ("executor", "rpc", ""),
    ("rpc", "servicer", "gRPC"),
    ("servicer", "core", ""),
    ("core", "transfer", "RemoteSend"),
    ("rpc", "body", "token chunks"),
    ("body", "client_out", "SSE / JSON"),
]
BOX_H = 0.8


def named_paths() -> list[str]:
    """The repository paths the boxes name (tests/repo/test_structures_page.py checks them)."""
    paths = []
    for lane, *_, text in NODES.values():
        folder = LANES[lane][3]
        paths += [folder + word for word in text.split("\n") if folder and
                  (word.endswith((".py", ".rs", "/")))]
    return paths


def _edge_points(start: str, end: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """Where an arrow leaves one box and enters the other: their facing sides."""
    _, x0, y0, w0, _ = NODES[start]
    _, x1, y1, w1, _ = NODES[end]
    if abs(y1 - y0) < 0.01:  # side by side
        sign = 1 if x1 > x0 else -1
        return (x0 + sign * w0 / 2, y0), (x1 - sign * w1 / 2, y1)
    sign = 1 if y1 > y0 else -1
    return (x0, y0 + sign * BOX_H / 2), (x1, y1 - sign * BOX_H / 2)


def main() -> None:
    plt.rcParams["svg.hashsalt"] = "switchyard"  # the same SVG from the same source
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable
    fig, ax = plt.subplots(figsize=(14.5, 10.5))
    ax.set_xlim(-0.2, 15.2)
    ax.set_ylim(-10.1, 1.1)
    ax.axis("off")
    for lane, (x, width, colour, _) in LANES.items():
        ax.add_patch(FancyBboxPatch((x - width / 2, -10.0), width, 10.6, boxstyle="round,pad=0.02",
                                    facecolor=colour, edgecolor="none", alpha=0.6))
        ax.text(x, 0.85, lane, ha="center", va="center", fontsize=9, weight="bold")
    for _, x, y, width, text in NODES.values():
        ax.add_patch(FancyBboxPatch((x - width / 2, y - BOX_H / 2), width, BOX_H,
                                    boxstyle="round,pad=0.03", facecolor="white",
                                    edgecolor="#555555"))
        ax.text(x, y, text, ha="center", va="center", fontsize=7.5, family="monospace")
    for start, end, label in EDGES:
        (x0, y0), (x1, y1) = _edge_points(start, end)
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops={"arrowstyle": "->", "color": "#333333", "shrinkA": 2,
                                "shrinkB": 2})
        if label:
            ax.text((x0 + x1) / 2 + 0.08, (y0 + y1) / 2 + 0.05, label, ha="left", fontsize=7,
                    color="#7a1f1f", style="italic")
    fig.savefig(OUT, format="svg", bbox_inches="tight", metadata={"Date": None})


if __name__ == "__main__":
    main()
