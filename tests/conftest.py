"""Settings and rules for every test session.

Engine processes that tests start skip the start-up latency profile (about a minute of CPU the
first time on a machine, then cached): most tests need no step-time model, and several engines
profiling at once on a small shared machine would measure each other. Tests of the profile (and
of the policies that predict with it) set SWITCHYARD_LATENCY_PROFILE themselves.

Tests marked `cuda` are skipped only when CUDA is absent. The tiers (`make test-fast` runs what
carries none of the tier markers) and the guard that keeps each test's markers true: tests/tiers.py.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.tiers import check_fixtures, guard_unmarked

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # around set-up, call and teardown: a module or session fixture a test pulls in counts too
    with guard_unmarked(item):
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    check_fixtures(item)
