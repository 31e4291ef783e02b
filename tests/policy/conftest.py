"""Policy unit tests: every policy runs in-process on FakeCluster (no engine processes).

docs/policies.md's example policy (`lead_follow`) is loaded once, from the page itself, so the
tests exercise exactly what a user copies.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from pyrouter.policy_registry import load_policy_file

DOCS = Path(__file__).resolve().parents[2] / "docs" / "policies.md"


def docs_example_source() -> str:
    """The complete example policy of docs/policies.md, exactly as a user copies it."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    return next(b for b in blocks if '@policy("lead_follow"' in b)


def _register_docs_example() -> str:
    with tempfile.NamedTemporaryFile("w", suffix="_lead_follow.py", delete=False) as f:
        f.write(docs_example_source())
    assert load_policy_file(f.name) == ["lead_follow"]
    return "lead_follow"


LEAD_FOLLOW = _register_docs_example()  # at import: test parameters are built from it


@pytest.fixture(scope="session")
def lead_follow() -> str:
    return LEAD_FOLLOW
