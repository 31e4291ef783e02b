"""The anchor routers `switchyard bench router` compares against, pinned to the versions issue 11
measured: vllm-router and SGLang's router (`smg`, from the sglang-router package). The benchmark's
set-up installs them into their own venv (never into Switchyard's), so their dependencies cannot
disturb ours; each gets its own Prometheus port (both default to 29000)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

# binary name -> the pip requirement that provides it
ANCHORS: dict[str, str] = {"vllm-router": "vllm-router==0.1.17", "smg": "sglang-router==0.3.2"}


def anchor_binary(name: str, anchor_bin: str) -> str | None:
    path = os.path.join(anchor_bin, name)
    return path if os.path.exists(path) else shutil.which(name)


def ensure_anchors(anchor_bin: str) -> dict[str, str]:
    """name -> binary for every anchor, installing the missing ones into the venv whose bin/ is
    `anchor_bin`. An anchor that cannot be installed is reported and left out, never faked."""
    missing = [name for name in ANCHORS if anchor_binary(name, anchor_bin) is None]
    if missing:
        venv = os.path.dirname(os.path.abspath(anchor_bin))
        print(f"installing {', '.join(ANCHORS[n] for n in missing)} into {venv}", flush=True)
        python = os.path.join(venv, "bin", "python")
        steps = [] if os.path.exists(python) else [[sys.executable, "-m", "venv", venv]]
        steps.append([python, "-m", "pip", "install", "-q", *(ANCHORS[n] for n in missing)])
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
            if done.returncode != 0:
                print(f"anchor set-up failed ({' '.join(argv[:4])} ...):\n{done.stderr[-2000:]}",
                      flush=True)
                break
    found = {name: anchor_binary(name, anchor_bin) for name in ANCHORS}
    for name, binary in found.items():
        if binary is None:
            print(f"anchor {name}: not installed; left out of the table", flush=True)
    return {name: binary for name, binary in found.items() if binary is not None}


def anchor_argv(name: str, binary: str, port: int, workers: list[str],
                prometheus_port: int) -> list[str]:
    common = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
              "--policy", "round_robin", "--prometheus-port", str(prometheus_port)]
    return [binary, "launch", *common] if name == "smg" else [binary, *common]
