"""Policy unit tests: every policy runs in-process on FakeCluster (no engine processes)."""
from __future__ import annotations

import pytest
from docs_example import LEAD_FOLLOW


@pytest.fixture(scope="session")
def lead_follow() -> str:
    return LEAD_FOLLOW
