"""`python -m tests.gpu.summary WORK_DIR SUMMARY_JSON`: the short table check.sh prints last.

Reads the JSON files the checks wrote into WORK_DIR, merges them into SUMMARY_JSON and prints one
line per figure: measured, floor, ratio, and the transformers baseline beside ours.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _load(directory: Path) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in sorted(directory.glob("*.json")):
        if path.name != "summary.json":
            merged[path.stem] = json.loads(path.read_text())
    return merged


def _fmt(value: Any, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, int | float) else "-"


def table(results: dict[str, Any]) -> list[str]:
    lines = []
    bench = results.get("bench", {})
    ceil = bench.get("ceilings", {})
    if "error" in ceil:
        lines.append(f"ceilings FAILED: {ceil['error'][:200]}")
    elif ceil:
        lines.append(f"device {ceil.get('gpu')}: copy {_fmt(ceil.get('copy_GBps'))} GB/s "
                     f"(read+write), bf16 matmul {_fmt(ceil.get('bf16_TFLOPs'))} TFLOP/s")
    jit = results.get("jit", {})
    if jit:
        lines.append(f"flashinfer JIT build: {_fmt(jit.get('total_s'))} s {jit.get('flashinfer_build_s')}")
    ours, eager, hf = (bench.get(k, {}) for k in ("ours_graphs", "ours_eager", "transformers"))
    lines.append(f"{'8B bf16 (random weights)':<28}{'ours':>10}{'eager':>10}{'transf.':>10}"
                 f"{'floor':>10}{'ours/floor':>11}{'ours/transf.':>13}")
    for key, label in (("decode_b1", "decode tok/s b=1"), ("decode_b32", "decode tok/s b=32"),
                       ("decode_b128", "decode tok/s b=128"), ("prefill_2048", "prefill tok/s 2048")):
        o, e, h = (d.get(key, {}) for d in (ours, eager, hf))
        mine, floor, base = o.get("tok_s"), o.get("floor_tok_s"), h.get("tok_s")
        lines.append(
            f"{label:<28}{_fmt(mine):>10}{_fmt(e.get('tok_s')):>10}{_fmt(base):>10}"
            f"{_fmt(floor):>10}{_fmt(mine / floor if mine and floor else None, 2):>11}"
            f"{_fmt(mine / base if mine and base else None, 2):>13}")
    transfer = bench.get("transfer", {})
    if transfer:
        lines.append(f"KV transfer 2048 tok (8B layout, {_fmt(transfer.get('bytes', 0) / 2**20)} "
                     f"MiB): cuda_ipc {_fmt(transfer.get('cuda_ipc_GBps'), 1)} GB/s vs D2D copy "
                     f"{_fmt(transfer.get('d2d_copy_GBps'), 1)} GB/s, bit-exact "
                     f"{transfer.get('bit_exact')}")
    for name in ("ours_graphs", "ours_eager", "transfer", "transformers"):
        if "error" in bench.get(name, {}):
            lines.append(f"bench {name} FAILED: {bench[name]['error'][:200]}")
    identity = results.get("identity", {})
    for key, value in identity.items():
        lines.append(f"identity {key}: {value}")
    graphs = results.get("graphs", {})
    for key, value in graphs.items():
        lines.append(f"graphs {key}: mismatches {value.get('mismatches')} replays "
                     f"{value.get('replays')} max logit diff {_fmt(value.get('max_logit_diff'), 4)}")
    for key, value in results.get("attention", {}).items():
        errs = value.get("relative_error", {})
        lines.append(f"attention {key}: flashinfer max rel err "
                     f"{_fmt(max(errs.get('flashinfer', [0])), 5)}, torch "
                     f"{_fmt(max(errs.get('torch', [0])), 5)} (threshold {value.get('threshold')})")
    ipc = results.get("ipc", {}).get("patterns_fp32", {})
    if ipc:
        lines.append(f"cuda_ipc patterns identical: {sorted(ipc)}")
    for stage, status in results.get("stages", {}).items():
        lines.append(f"stage {stage}: {status}")
    return lines


def main(argv: list[str]) -> int:
    results = _load(Path(argv[0]))
    Path(argv[1]).write_text(json.dumps(results, indent=2, sort_keys=True))
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
