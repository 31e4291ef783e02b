"""Load-test tooling tests: the served default model's tokenizer, loaded once (no torch)."""
from __future__ import annotations

import pytest

from pyrouter.tokenizer import load_router_tokenizer
from switchyard_bench.workloads import RealVocabulary


@pytest.fixture(scope="session")
def vocab() -> RealVocabulary:
    return RealVocabulary(load_router_tokenizer(None))
