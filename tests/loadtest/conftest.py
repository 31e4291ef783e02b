"""Load-test tooling tests: the served default model's tokenizer, loaded once (no torch)."""
from __future__ import annotations

import pytest

from pyrouter.bench.workloads import RealVocabulary
from pyrouter.tokenizer import load_router_tokenizer


@pytest.fixture(scope="session")
def vocab() -> RealVocabulary:
    return RealVocabulary(load_router_tokenizer(None))
