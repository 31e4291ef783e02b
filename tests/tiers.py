"""The test tiers and the guard that keeps their markers honest.

`make test-fast` runs the tests that carry none of TIER_MARKERS: no child process, no model
weights, no Docker, no GPU (reading the model file's tokenizer is allowed: it takes milliseconds).
Every test runs under `guard_unmarked`, so a test (or a fixture it pulls in) that starts a process
or loads the weights without the marker for it fails with a message that names the marker, in
`make test` as in `make test-fast`: the fast tier cannot quietly grow slow.
"""
from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

# marker -> what a test that carries it needs (pyproject.toml registers the same names)
TIER_MARKERS = {
    "procs": "starts child processes (engines, routers, mock engines, cargo, locust)",
    "model": "loads the model's weights in the test process (its tokenizer alone is fast)",
    "docker": "needs a Docker daemon",
    "cuda": "needs a CUDA GPU",
}

# programs a test may run without the `procs` marker: matplotlib asks fontconfig for the system's
# fonts (`fc-list`) the first time it is imported on a machine, to build its font cache; that
# takes milliseconds and starts no engine or service, yet depends on the machine's cache state.
QUICK_HELPERS = frozenset({"fc-list"})

# fixtures that load the weights where the guard cannot see it (transformers' reference model)
MODEL_FIXTURES = frozenset({"hf_smollm2_fp32", "loaded_model_fp32", "loaded_model_fast"})


class TierMarkerMissing(RuntimeError):
    """A test did something its markers do not declare."""


def _refuse(item: pytest.Item, marker: str, what: str) -> TierMarkerMissing:
    return TierMarkerMissing(
        f"{item.nodeid} {what} but is not marked `{marker}` "
        f"({TIER_MARKERS[marker]}): add @pytest.mark.{marker} (tests/tiers.py)")


def check_fixtures(item: pytest.Item) -> None:
    """Refuse, before set-up, a test that pulls in a model fixture without the `model` marker."""
    used = MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if used and item.get_closest_marker("model") is None:
        raise _refuse(item, "model", f"uses {sorted(used)}")


@contextlib.contextmanager
def guard_unmarked(item: pytest.Item) -> Iterator[None]:
    """While `item` is set up, run and torn down, refuse what its markers do not declare."""
    patches: list[tuple[Any, str, Any]] = []
    if item.get_closest_marker("procs") is None:
        execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

        def no_popen(self: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> None:
            program = args[0] if isinstance(args, list | tuple) and args else args
            if isinstance(program, str) and os.path.basename(program) in QUICK_HELPERS:
                return execute_child(self, args, *rest, **kw)  # type: ignore[no-any-return]
            raise _refuse(item, "procs", f"starts a child process ({args!r:.80})")

        def no_process(self: multiprocessing.process.BaseProcess) -> None:
            raise _refuse(item, "procs", "starts a multiprocessing child")

        patches += [(subprocess.Popen, "_execute_child", no_popen),
                    (multiprocessing.process.BaseProcess, "start", no_process)]
    if item.get_closest_marker("model") is None:
        from engine.model import loader

        def no_weights(source: Any, *rest: Any, **kw: Any) -> None:
            raise _refuse(item, "model", f"loads the model's weights ({source})")

        # load_model gets weights through these: the file, the fast mode, the on-disk cache
        patches += [(loader, name, no_weights)
                    for name in ("_read_source", "_load_fast", "load_cached")]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
