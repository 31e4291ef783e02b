"""Settings and rules for every test session.

Engine processes that tests start skip the start-up latency profile (about a minute of CPU the
first time on a machine, then cached): most tests need no step-time model, and several engines
profiling at once on a small shared machine would measure each other. Tests of the profile (and
of the policies that predict with it) set SWITCHYARD_LATENCY_PROFILE themselves.

Tests marked `cuda` are skipped only when CUDA is absent.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("SWITCHYARD_LATENCY_PROFILE", "off")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cuda_items = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not cuda_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none present)")
    for item in cuda_items:
        item.add_marker(skip)
